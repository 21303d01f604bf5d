"""The gates ``apply`` passes between planning and writing: each may veto the run before a byte is written.

:func:`gates` runs them in order on the engine's plan; the vetoes it returns are settled into the
final outcomes by :func:`patchkit.plan.outcomes.decide`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from patchkit.plan import outcomes
from patchkit.plan.outcomes import Veto
from patchkit.results import Check, InstallInfo, Outcome, PatchResult, VerifyReport
from patchkit.store.files import sha256
from patchkit.store.preflight import link_on_the_way
from patchkit.store.records import JournalRecords
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.chain.kinds import UNPINNED
from patchkit.vllm.stream import hybrids
from patchkit.vllm.release.contract import Contract
from patchkit.vllm.release.install import Install, has_record, record_sha256
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree

if TYPE_CHECKING:
    from patchkit.plan.engine import Plan  # the engine imports libcst, which 'verify' and 'status' never load

ChainCheck = Callable[
    [SourceTree, Registry, Contract, "tuple[str, ...] | None", "tuple[str, ...] | None"], "list[Check]"
]
"""The chain check the last gate runs on the planned bytes (:func:`patchkit.checks.verify.verify`'s signature)."""


def gates(
    install: Install,
    journal: JournalRecords,
    planned: Plan,
    results: Sequence[PatchResult],
    info: InstallInfo,
    *,
    requested: set[str],
    force: bool,
    overrides: dict[str, bytes],
    archs: tuple[str, ...] | None,
    types: tuple[str, ...] | None,
    missing_files: list[str],
    chain_check: ChainCheck,
    record_gate: bool = True,
):
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
        record_gate: run the RECORD gates (False for ``export --source``: a checkout's files are their own base).

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
    vetoes = _link_gate(install, results, changed)
    if vetoes is None and record_gate:
        vetoes = _record_gates(install, journal, planned, results, changed, force)
    if vetoes is not None:
        return vetoes, None
    if not changed:
        return (), None
    return _chain_gate(
        install,
        planned,
        results,
        info,
        requested=requested,
        overrides=overrides,
        archs=archs,
        types=types,
        missing_files=missing_files,
        chain_check=chain_check,
        force=force,
    )


def _link_gate(install: Install, results: Sequence[PatchResult], changed: list[str]) -> tuple[Veto, ...] | None:
    """The vetoes for the files about to change that lie behind a symbolic link (empty when none does).

    Args:
        install: the install whose ``site_packages`` the paths are relative to.
        results: every patch's planned result.
        changed: the paths about to change.

    Returns:
        The :func:`patchkit.plan.outcomes.file_gate` vetoes, or None when no path runs through a link
        (the gate passes).
    """
    links = {p: link for p in changed for link in [link_on_the_way(install.site_packages, p)] if link is not None}
    if not links:
        return None

    def through(hit: str) -> str:
        link = links[hit.split(", ")[0]]
        return (
            f"{link.relative_to(install.site_packages)} is a symbolic link to {link.resolve()}: the bytes live "
            "in another folder, which other installs (a uv cache, --link-mode symlink) may share, and patchkit "
            "does not write through links; reinstall vLLM into this environment with its own files "
            f"(uv: --link-mode copy; pip install --force-reinstall --no-deps vllm=={install.version}), then apply"
        )

    return outcomes.file_gate(results, sorted(links), through)


def _record_gates(
    install: Install,
    journal: JournalRecords,
    planned: Plan,
    results: Sequence[PatchResult],
    changed: list[str],
    force: bool,
) -> tuple[Veto, ...] | None:
    """The RECORD gates: drift from RECORD (:func:`drifted`), then no RECORD at all (:func:`unchecked`).

    Args:
        install, journal: the install and its journal.
        planned: the engine's plan, whose ``originals`` are the bytes checked.
        results: every patch's planned result.
        changed: the paths about to change.
        force: skip both gates (returns None).

    Returns:
        The :func:`patchkit.plan.outcomes.file_gate` vetoes of the first gate that finds a file, else None
        (the gates pass).
    """
    differ = [] if force else drifted(install, journal, planned.originals, changed)
    if differ:
        return outcomes.file_gate(
            results,
            differ,
            lambda hit: (
                f"{hit} differs from what {install.distribution} {install.version}'s RECORD lists "
                "(changed by someone else?); reinstall vLLM, or pass --force to patch it as it is"
            ),
        )
    unvouched = [] if force else unchecked(install, journal, planned.originals, changed)
    if unvouched:
        return outcomes.file_gate(
            results,
            unvouched,
            lambda hit: (
                f"vLLM {install.version} has no RECORD ({install.dist_info.name}/RECORD), "
                f"so patchkit cannot check that {hit} is the release's file (a hand edit "
                "would go unnoticed); reinstall vLLM, or pass --force to patch it as it is"
            ),
        )
    return None


def _chain_gate(
    install: Install,
    planned: Plan,
    results: Sequence[PatchResult],
    info: InstallInfo,
    *,
    requested: set[str],
    overrides: dict[str, bytes],
    archs: tuple[str, ...] | None,
    types: tuple[str, ...] | None,
    missing_files: list[str],
    chain_check: ChainCheck,
    force: bool = False,
):
    """The last gate: the chain check on the planned bytes, before anything is written.

    Args: as :func:`gates`'s. With ``force``, a verdict resting on vLLM code changed since the qualified
    releases (:data:`patchkit.vllm.chain.kinds.UNPINNED`) does not veto: ``verify --runtime`` decides then.

    Returns:
        ``(vetoes, verify_report)``: a whole-run veto when the whole set's planned result would not pass
        verify (never for a ``--patch`` subset, nor with files missing), and the chain check's report.
    """
    after = SourceTree(install.site_packages, overrides={**overrides, **planned.changed})
    checked = VerifyReport(info, chain_check(after, Registry(after), contract_mod.detect(after), archs, types))
    # The whole set must leave EAGLE-3 in effect; a --patch subset is partial by request, and
    # the chain through a missing file cannot hold.
    # a hybrid's lossless check is not the chain: the selection refused such a hybrid already, or --force accepted it
    waived = {hybrids.HYBRID_CHECK, UNPINNED} if force else {hybrids.HYBRID_CHECK}
    failing = [c for top in checked.checks for c in top.failures() if c.kind not in waived]
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
    return sorted(
        p for p in paths if not (p in journal.entries and sha256(originals[p]) == journal.entries[p].sha256_after)
    )
