"""Plan an ``apply`` run, pass its gates, decide its outcomes and (unless dry) write it: the one
planner ``apply``, ``apply --dry-run``, ``doctor`` and ``verify`` share (issue 25: doctor planned
through a child ``python -m patchkit`` before).

:func:`plan_run` is the run itself (the API calls it under the install's lock); :func:`dry_run`
plans what ``patchkit apply --dry-run`` with the same options would, from the bytes an unfinished
run's rollback will leave, and writes nothing. Both import libcst (through :mod:`patchkit.plan.engine`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from patchkit.plan import arch_scope, missing, outcomes
from patchkit.plan.arch_patches import interface_id
from patchkit.plan.engine import Plan
from patchkit.plan.engine import plan as make_plan
from patchkit.plan.gates import ChainCheck, gates
from patchkit.plan.request import Request, check_requested
from patchkit.plan.selection import arch_selection
from patchkit.plan.spec import load_patches, select, unknown_patch_ids
from patchkit.results import ApplyReport, FileChange, Outcome, PatchResult
from patchkit.store.files import sha256
from patchkit.store.journal import Journal, journal_for
from patchkit.store.records import PlannedWrite
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.stream import hybrids
from patchkit.vllm.release.contract import Contract, install_info
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree


@dataclass(frozen=True)
class Decided:
    """A run planned and through its gates, nothing written (:func:`decide`).

    Attributes:
        planned: the engine's plan: each file's original and planned bytes.
        final: every patch's final outcome (:func:`patchkit.plan.outcomes.decide`).
        checked: the chain check of the planned bytes (None when the gates stopped before it).
        contract: the release's EAGLE-3 contract.
        missing_files, not_shipped: target files missing from the install (:mod:`patchkit.plan.missing`).
        archs: the architectures the request covers (empty without one, or on a release with no protocol).
    """

    planned: Plan
    final: list[PatchResult]
    checked: object
    contract: Contract
    missing_files: list[str]
    not_shipped: object
    archs: tuple[str, ...] = ()


def decide(
    install: Install,
    journal: Journal,
    patches,
    *,
    requested: set[str],
    force: bool,
    request: Request,
    chain_check: ChainCheck,
    overrides: dict[str, bytes] | None = None,
    record_gate: bool = True,
) -> Decided:
    """Plan, run the gates (requested patches, symlinks, RECORD drift and absence, the chain on the
    planned bytes) and decide every outcome once (:func:`patchkit.plan.outcomes.decide`); write nothing.

    Args:
        patches: the patches to plan (None with ``request``: :func:`patchkit.plan.selection.arch_selection` picks them).
        requested: ``--patch`` ids asked for; request: ``--arch``/``--model``.
        chain_check: the chain check the last gate runs (:func:`patchkit.checks.verify.verify`).
        overrides: bytes to plan from instead of the disk's (a dry run's view after rollback).
        record_gate: run the RECORD gates (False: ``export --source``, a checkout whose files are the base
            themselves and have no RECORD).
    Returns:
        The :class:`Decided` run.
    Raises:
        UsageError: an ``--arch`` the registry does not hold. SourceError: a file does not parse.
    """
    overrides = dict(overrides or {})
    tree = SourceTree(install.site_packages, overrides=overrides)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    check_requested(registry, request, str(install.version))
    patches, decided, archs, types, pristine = _selected(
        install, journal, tree, registry, contract, patches, request=request, force=force, overrides=overrides
    )
    order = {p.id: i for i, p in enumerate(patches)}
    patches, gone, absent = missing.split(list(patches), tree, registry, install)
    missing_files = list(absent.files)
    planned = make_plan(install, tree, contract, registry, journal, patches, decided)
    results = sorted([*planned.results, *gone], key=lambda r: order.get(r.id, len(order))) if gone else planned.results
    vetoes, checked = gates(
        install,
        journal,
        planned,
        results,
        install_info(install, contract),
        requested=requested,
        force=force,
        overrides=overrides,
        archs=archs,
        types=types,
        missing_files=missing_files,
        chain_check=chain_check,
        record_gate=record_gate,
    )
    final = outcomes.decide(results, vetoes)
    if request and force and archs:
        final = _accepted_hybrids(pristine, archs, final)
    return Decided(planned, list(final), checked, contract, missing_files, absent.not_shipped, tuple(archs or ()))


def plan_run(
    install: Install,
    journal: Journal,
    patches,
    *,
    dry_run: bool,
    requested: set[str],
    force: bool,
    request: Request,
    chain_check: ChainCheck,
    overrides: dict[str, bytes] | None = None,
    recovered: Sequence[str] = (),
    unfinished=None,
) -> ApplyReport:
    """The run :func:`decide` plans, then written unless dry (or refused).

    Args: as :func:`decide`'s; ``dry_run``: write nothing; ``recovered``, ``unfinished``: what the report says of
        an unfinished earlier run.
    Returns:
        The :class:`ApplyReport`; ``written`` is True only when files were committed.
    Raises:
        What :func:`decide` raises, and what :meth:`patchkit.store.journal.Journal.commit` raises.
    """
    done = decide(
        install,
        journal,
        patches,
        requested=requested,
        force=force,
        request=request,
        chain_check=chain_check,
        overrides=overrides,
    )
    files, write = _write(install, journal, done.planned, done.final, dry_run=dry_run)
    return ApplyReport(
        install_info(install, done.contract),
        dry_run,
        done.final,
        files,
        written=write,
        diff=done.planned.diff(),
        verify=done.checked,
        recovered=recovered,
        unfinished=unfinished,
        missing_files=done.missing_files,
        not_shipped=done.not_shipped,
    )


def _selected(
    install: Install,
    journal: Journal,
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    patches,
    *,
    request: Request,
    force: bool,
    overrides: dict[str, bytes],
):
    """The patches to plan: ``patches`` as given, or those an ``--arch``/``--model`` request needs.

    Args:
        install, journal: the install and its journal (the journal's originals give the pristine tree).
        tree, registry, contract: the release as planned from (``overrides`` applied).
        patches: the patches given (used as they are without ``request``).
        request, force, overrides: as :func:`plan_run`'s.
    Returns:
        ``(patches, decided, archs, types, pristine)``: the patches to plan; results decided already (a
        release with no EAGLE-3 protocol refuses the request); the architectures and model types the
        request covers (None without a request the protocol can serve); the tree the shapes were read from
        (None then).
    Raises:
        SourceError: a file does not parse. ConfigError: ``--model`` without a readable ``config.json``.
    """
    decided: tuple[PatchResult, ...] = ()
    archs: tuple[str, ...] | None = None
    types: tuple[str, ...] | None = None
    pristine = None
    if request and contract.protocol is not None:
        # shapes are read from the files as they were before patchkit: an architecture patched
        # already gets the same patches planned again (and they are "already applied")
        pristine = arch_scope.pristine_tree(install, journal, overrides) if journal.entries else tree
        patches, decided, archs, types = arch_selection(
            pristine, Registry(pristine) if pristine is not tree else registry, contract, request, force
        )
    elif request:
        patches = []
        decided = (PatchResult("eagle3", Outcome.REFUSED, contract_mod.no_protocol(install.version)),)
    return patches, decided, archs, types, pristine


def _write(
    install: Install, journal: Journal, planned: Plan, final: Sequence[PatchResult], *, dry_run: bool
) -> tuple[list[FileChange], bool]:
    """Commit the planned bytes through the journal, unless dry, nothing changes, or a result is refused.

    Args:
        install, journal: the install and its journal (held under the lock for a real run).
        planned: the engine's plan (:func:`patchkit.plan.engine.plan`).
        final: every patch's final outcome (:func:`patchkit.plan.outcomes.decide`).
        dry_run: write nothing.
    Returns:
        ``(files, written)``: each changed file's before and after digests, and whether they were committed.
    Raises:
        What :meth:`patchkit.store.journal.Journal.commit` raises.
    """
    files = [
        FileChange(path, sha256(planned.originals[path]), sha256(new), planned.patches_by_file.get(path, []))
        for path, new in sorted(planned.changed.items())
    ]
    write = not dry_run and bool(planned.changed) and not any(r.outcome is Outcome.REFUSED for r in final)
    if write:
        journal.commit(
            [
                PlannedWrite(path, planned.originals[path], new, planned.patches_by_file.get(path, []))
                for path, new in sorted(planned.changed.items())
            ],
            str(install.version),
        )
    return files, write


def dry_run(
    install: Install,
    *,
    chain_check: ChainCheck,
    target: str = "vllm",
    patch_ids: Sequence[str] | None = None,
    request: Request = Request(),
    force: bool = False,
) -> ApplyReport:
    """What ``patchkit apply --dry-run`` with these options reports, planned in this process; writes nothing.

    Args:
        install: the vLLM install.
        chain_check: verify's chain check (:func:`patchkit.checks.verify.verify`).
        target, patch_ids, request, force: as ``apply``'s ``--target``, ``--patch``, ``--arch``/``--model``,
            ``--force``.
    Returns:
        The dry run's :class:`ApplyReport` (planned from the bytes an unfinished run's rollback leaves).
    Raises:
        UsageError: an unknown ``--patch`` or ``--arch``. ConfigError: ``--model`` without a readable
        ``config.json``. SourceError: a file does not parse. StateError: the journal cannot be read.
    """
    everything = load_patches(target)
    unknown_patch_ids(list(patch_ids) if patch_ids else None, [p.id for p in everything])
    patches = select(everything, list(patch_ids) if patch_ids else None) if not request else None
    journal = journal_for(install, target)
    overrides, rolled = journal.rolled_back_view()
    return plan_run(
        install,
        journal.without_pending(),
        patches,
        dry_run=True,
        requested=set(patch_ids or ()),
        force=force,
        request=request,
        chain_check=chain_check,
        overrides=overrides,
        recovered=rolled,
        unfinished=journal.unfinished(),
    )


__all__ = ["Decided", "decide", "dry_run", "plan_run"]


def _accepted_hybrids(tree: SourceTree, archs: Sequence[str], results: Sequence[PatchResult]) -> list[PatchResult]:
    """With ``--force``: each planned interface patch of a hybrid that is not lossless on this release
    (:func:`patchkit.vllm.stream.hybrids.read_architecture`) gets a note saying what the user accepts."""
    registry = Registry(tree)
    notes = {}
    for arch in archs:
        resolution = registry.resolve(arch)
        reading = hybrids.read_architecture(tree, registry, arch)
        if (
            resolution is not None
            and resolution.cls is not None
            and reading is not None
            and reading.lossless is not True
        ):
            notes[interface_id(resolution.cls.name)] = hybrids.accepted(reading)
    return [replace(r, note=notes[r.id]) if r.id in notes and r.outcome.landed else r for r in results]
