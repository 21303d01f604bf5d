"""The gates ``apply`` passes between planning and writing: each may veto the run before a byte is written.

:func:`gates` runs them in order on the engine's plan; the vetoes it returns are settled into the
final outcomes by :func:`patchkit.plan.outcomes.decide`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from patchkit.plan import outcomes
from patchkit.results import Check, InstallInfo, Outcome, PatchResult, VerifyReport
from patchkit.store.files import sha256
from patchkit.store.preflight import link_on_the_way
from patchkit.store.records import JournalRecords
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.stream import hybrids
from patchkit.vllm.release.contract import Contract
from patchkit.vllm.release.install import Install, has_record, record_sha256
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree

if TYPE_CHECKING:
    from patchkit.plan.engine import Plan  # the engine imports libcst, which 'verify' and 'status' never load

ChainCheck = Callable[[SourceTree, Registry, Contract, "tuple[str, ...] | None", "tuple[str, ...] | None"], "list[Check]"]
"""The chain check the last gate runs on the planned bytes (:func:`patchkit.checks.verify.verify`'s signature)."""


def gates(install: Install, journal: JournalRecords, planned: Plan, results: Sequence[PatchResult], info: InstallInfo, *,
          requested: set[str], force: bool, overrides: dict[str, bytes], archs: tuple[str, ...] | None,
          types: tuple[str, ...] | None, missing_files: list[str], chain_check: ChainCheck):
    """The gates after planning, in order; the first that vetoes ends them.

    In order: a refused result ends the gates; a requested patch that is not applicable
    (:func:`patchkit.plan.outcomes.requested_not_applicable`); a file behind a symbolic link
    (:func:`patchkit.store.preflight.link_on_the_way`); RECORD drift (:func:`drifted`) and a missing
    RECORD (:func:`unchecked`), unless ``force``; then the chain check on the planned bytes
    (``chain_check``, the caller's: :func:`patchkit.checks.verify.verify` through
    :func:`patchkit.api.run_checks`), which vetoes a whole run whose result would not pass verify.

    Args:
        install, journal: the install and its journal (read under the lock for a real run).
        planned: the engine's plan (:func:`patchkit.plan.engine.plan`): ``changed`` and ``originals`` bytes.
        results: every patch's planned result (missing files' results included).
        info: the install's facts, for the verify report.
        requested: ``--patch`` ids asked for (empty: the whole set).
        force: skip the RECORD gates.
        overrides: bytes planned from instead of the disk's (a dry run's view after rollback).
        archs, types: the architectures and model types the chain check covers (None: the default set).
        missing_files: target files missing from the install (the chain through them cannot hold).
        chain_check: ``(tree, registry, contract, archs, types) -> list[Check]``.

    Returns:
        ``(vetoes, verify_report)``: the :class:`patchkit.plan.outcomes.Veto` values, and the chain
        check of the planned bytes when the gates got that far (else None).
    """
    if any(r.outcome is Outcome.REFUSED for r in results):
        return (), None
    vetoes = outcomes.requested_not_applicable(results, requested, str(install.version))
    if vetoes:
        return vetoes, None
    changed = list(planned.changed)
    links = {p: link for p in changed for link in [link_on_the_way(install.site_packages, p)] if link is not None}
    if links:
        def through(hit: str) -> str:
            link = links[hit.split(", ")[0]]
            return (f"{link.relative_to(install.site_packages)} is a symbolic link to {link.resolve()}: the bytes live "
                    "in another folder, which other installs (a uv cache, --link-mode symlink) may share, and patchkit "
                    "does not write through links; reinstall vLLM into this environment with its own files "
                    f"(uv: --link-mode copy; pip install --force-reinstall --no-deps vllm=={install.version}), then apply")

        return outcomes.file_gate(results, sorted(links), through), None
    differ = [] if force else drifted(install, journal, planned.originals, changed)
    if differ:
        return outcomes.file_gate(results, differ, lambda hit: (
            f"{hit} differs from what {install.distribution} {install.version}'s RECORD lists "
            "(changed by someone else?); reinstall vLLM, or pass --force to patch it as it is")), None
    unvouched = [] if force else unchecked(install, journal, planned.originals, changed)
    if unvouched:
        return outcomes.file_gate(results, unvouched, lambda hit: (
            f"vLLM {install.version} has no RECORD ({install.dist_info.name}/RECORD), "
            f"so patchkit cannot check that {hit} is the release's file (a hand edit "
            "would go unnoticed); reinstall vLLM, or pass --force to patch it as it is")), None
    if not changed:
        return (), None
    # Check the chain on the planned bytes before writing anything.
    after = SourceTree(install.site_packages, overrides={**overrides, **planned.changed})
    checked = VerifyReport(info, chain_check(after, Registry(after), contract_mod.detect(after), archs, types))
    # The whole set must leave EAGLE-3 in effect; a --patch subset is partial by request, and
    # the chain through a missing file cannot hold.
    # a hybrid's lossless check is not the chain: the selection refused such a hybrid already, or --force accepted it
    failing = [c for top in checked.checks for c in top.failures() if c.kind != hybrids.HYBRID_CHECK]
    if failing and not requested and not missing_files:
        failures = "; ".join(f"{c.label}: {c.detail}" for c in failing)
        return outcomes.whole_run(results, f"the patched result would not pass verify ({failures})"), checked
    return (), checked


def drifted(install: Install, journal: JournalRecords, originals: dict[str, bytes], paths: list[str]) -> list[str]:
    """Files about to be patched whose bytes are neither RECORD's nor what patchkit last wrote."""
    record = record_sha256(install, paths)
    out = []
    for path in paths:
        digest = sha256(originals[path])
        entry = journal.entries.get(path)
        if entry is not None and digest == entry.sha256_after:
            continue  # patchkit's own earlier change; the journal holds the original
        if path in record and digest != record[path]:
            out.append(path)
    return sorted(out)


def unchecked(install: Install, journal: JournalRecords, originals: dict[str, bytes], paths: list[str]) -> list[str]:
    """Files about to be patched that no RECORD vouches for (the distribution has none) nor the journal."""
    if has_record(install):
        return []
    return sorted(p for p in paths
                  if not (p in journal.entries and sha256(originals[p]) == journal.entries[p].sha256_after))
