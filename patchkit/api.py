"""patchkit's API: each function takes an :class:`~patchkit.vllm.release.install.Install` and returns a result.

The CLI (:mod:`patchkit.ui.cli`) is a thin layer over these functions; other tools can call them
directly. Nothing here prints. Expected outcomes (refused, not applicable, not in effect) are in
the returned results; exceptions (:mod:`patchkit.errors`) are for commands that cannot run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from patchkit import api_steps, interrupt
from patchkit.advice import Effect, NextStep
from patchkit.errors import UsageError
from patchkit.guard import guard as guard_mod
from patchkit.plugin_results import PluginReport, PluginRun
from patchkit.plan import run_steps
from patchkit.plan.file_states import REPLACED, FileState, file_state, journal_check
from patchkit.plan.request import Request, check_requested
from patchkit.plan.revert_plan import plan_revert
from patchkit.vllm.chain.kinds import UNPINNED
from patchkit.vllm.runner.pins import exercised
from patchkit.results import (
    ApplyReport,
    Check,
    PatchResult,
    RevertedFile,
    RevertReport,
    StatusEntry,
    StatusReport,
    VerifyReport,
)
from patchkit.store import plugin_dist
from patchkit.store.plugin_dist import Plugin
from patchkit.store.journal import journal_for, unfinished_check
from patchkit.store.preflight import import_problem
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.contract import install_info
from patchkit.vllm.release.install import Install, has_record, record_sha256
from patchkit.vllm.release.source import SourceTree
from patchkit.watch import watch as watch_mod

PLUGINS: tuple[Plugin, ...] = (guard_mod, watch_mod)
"""patchkit's plugins (:class:`patchkit.store.plugin_dist.Plugin`), in the order their reports and checks come."""

if TYPE_CHECKING:
    from patchkit.sglang.scan import SglangScan
    from patchkit.plan.export import ExportReport
    from patchkit.checks.resolve import ResolveReport
    from patchkit.checks.scan import ScanReport

# Start-up: the engine (libcst) is imported by the one function that plans rewrites, so the read-only
# commands ('status', 'verify', 'list') start without libcst (tests/test_startup.py). The planning
# chain (plan.selection, plan.arch_scope: arch_patches, vllm.shapes, runner.draft_reads, stream,
# model_types) and the checks (chain check, scan, runtime probe, platform branches) are imported by the
# functions that use them, so 'status' and 'revert' start without them (about 50 ms of imports, half
# of what 'import patchkit.api' costs, measured with -X importtime).


def run_checks(
    tree: SourceTree,
    registry,
    contract: contract_mod.Contract,
    architectures: tuple[str, ...] | None = None,
    model_types: tuple[str, ...] | None = None,
    requested: tuple[str, ...] = (),
    pristine: SourceTree | None = None,
) -> list[Check]:
    """The chain check, :func:`patchkit.checks.verify.verify` (``apply``'s last gate runs it through this name)."""
    from patchkit.checks.verify import (
        verify as chain_check,
    )  # lazy: start-up, 'status' and 'revert' load no chain check

    return chain_check(tree, registry, contract, architectures, model_types, requested, pristine)


def plugin_named(name: str) -> Plugin:
    """The plugin of :data:`PLUGINS` called ``name`` (``guard``, ``watch``); KeyError for another name."""
    return {plugin.NAME: plugin for plugin in PLUGINS}[name]


def install_plugin(name: str, install: Install, run: PluginRun, *, on_wait=None) -> PluginReport:
    """``patchkit <name> install``: :func:`patchkit.store.plugin_dist.install_plugin` for the plugin ``name``."""
    return plugin_dist.install_plugin(plugin_named(name), install, run, on_wait=on_wait)


def remove_plugin(name: str, install: Install, *, target: str = "vllm", on_wait=None) -> PluginReport:
    """``patchkit <name> remove``: :func:`patchkit.store.plugin_dist.remove_plugin` for the plugin ``name``."""
    return plugin_dist.remove_plugin(plugin_named(name), install, target=target, on_wait=on_wait)


def apply(
    install: Install,
    *,
    dry_run: bool = False,
    patch_ids: list[str] | None = None,
    target: str = "vllm",
    force: bool = False,
    request: Request = Request(),
    on_wait: Callable[[Path, float], None] | None = None,
    guard: bool = False,
    command_options: Sequence[str] | None = None,
    watch: bool = False,
    watch_drafts: int | None = None,
    watch_threshold: float | None = None,
) -> ApplyReport:
    """Apply every patch that applies to this release, all or nothing.

    The run is planned in memory; the patched result is verified (the chain check) before any
    byte is written, and a full run whose result would not pass verify is refused; then every
    file is written atomically and journaled.

    Args:
        install: the vLLM install.
        dry_run: plan and verify only; write nothing.
        patch_ids: restrict to these patches (and what they require).
        target: the distribution (``"vllm"``).
        force: patch files whose bytes differ from the distribution's RECORD (someone else
            changed them) instead of refusing.
        request: ``--arch`` / ``--model``: patch these architectures, in the shape this release's
            own native classes use (:mod:`patchkit.plan.arch_patches`), instead of the default set.
        on_wait: called once, with the site-packages folder and the timeout in seconds, when
            another patchkit run holds the install's lock and this one starts waiting.
        guard: also install patchkit's guard (:mod:`patchkit.guard.guard`), journaled, in the same lock;
            an installed guard is refreshed by every apply either way (``report.guard``).
        command_options: the environment options given (``["--python", PATH]``), for the
            ``patchkit apply`` command the guard's line names.
        watch, watch_drafts, watch_threshold: also install the acceptance watch (:mod:`patchkit.watch.watch`)
            with these settings; an installed watch is refreshed by every apply either way (``report.watch``).

    An unfinished earlier apply or revert (a killed run) is rolled back first, under the lock;
    a dry run plans from the bytes that rollback will leave (``report.recovered`` names the
    files either way). Target files missing from the install are named in
    ``report.missing_files``; the patches that do not need them still run.

    Returns:
        An :class:`ApplyReport`; ``written`` is False when refused, on a dry run, or when there
        was nothing to write. A patch named in ``patch_ids`` that is not applicable to this
        release is refused (with the reason), so its prerequisites are not written either.
    Raises:
        UsageError: unknown target or patch id (the hint names the closest ids); an ``--arch``
            name the registry does not hold (:func:`check_requested`); a bad
            ``PATCHKIT_LOCK_TIMEOUT``.
        SourceError: a file on the way does not parse.
        StateError: the journal cannot be read, has another format, or a file or folder cannot be
            written keeping its owner (checked before the first write; nothing is left changed).
        RefusedError: the interpreter imports ``vllm`` from another folder (:func:`import_problem`);
            the install is inside a package cache (:func:`~patchkit.store.preflight.cache_problem`).
        Interrupted: SIGINT/SIGTERM while the lock was held; every written file was put back
            (or the message names what is left and how to finish).
    """
    from patchkit.plan.spec import load_patches, select, unknown_patch_ids  # lazy: 'status' reads no patch definitions

    everything = load_patches(target)
    unknown_patch_ids(patch_ids, [p.id for p in everything])
    runs = api_steps.plugin_runs(request, target, command_options, guard, watch, watch_drafts, watch_threshold)
    wanted = api_steps.wanted_plugins(PLUGINS, install, runs)
    journal = journal_for(install, target)
    if dry_run:
        report = api_steps.plan_apply(
            install, journal, wanted, runs, run_checks, target=target, patch_ids=patch_ids, request=request, force=force
        )
        return api_steps.with_steps(install, report, request, target, force, run_checks)
    options = api_steps.ApplyOptions(
        target, patch_ids, request, force, command_options, guard, watch, watch_drafts, watch_threshold
    )
    patches = select(everything, patch_ids) if not request else None
    report, before = api_steps.write_apply(PLUGINS, install, journal, patches, runs, run_checks, on_wait, options)
    return api_steps.with_steps(install, report, request, target, force, run_checks, before)


def verify(install: Install, *, runtime_python: Path | None = None, request: Request = Request()) -> VerifyReport:
    """Check, from the files on disk, that EAGLE-3 is in effect for the resolved classes.

    Args:
        install: the vLLM install.
        runtime_python: when given, also run :mod:`patchkit.checks.probe` with this interpreter
            (the serving environment's): vLLM's own code answers, in a fresh subprocess.
        request: ``--arch`` / ``--model``: check these architectures. Without it: the default
            set's architectures plus every architecture the journal shows patchkit patched.
    Returns:
        A :class:`VerifyReport`; ``ok`` is True only when no check fails. When the runtime probe
        cannot run (``runtime_python`` cannot be started, or cannot import vLLM and torch), the
        static checks are kept and ``runtime_error`` says why.
    Raises:
        UsageError: an ``--arch`` name the registry does not hold (:func:`check_requested`).
        SourceError: a file on the chain is missing or does not parse.
    """
    from patchkit.plan.selection import (
        verify_scope,
    )  # lazy: start-up, 'status' and 'revert' without --arch load no planning chain

    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    from patchkit.vllm.registry.table import Registry  # lazy: start-up, 'status' without --arch reads no registry

    registry = Registry(tree)
    check_requested(registry, request, str(install.version))
    journal = journal_for(install)
    archs, types, patched, requested = verify_scope(tree, registry, contract, request, journal)
    from patchkit.plan.arch_scope import (
        pristine_tree,
    )  # lazy: start-up; the shape patchkit wrote, on the bytes before it

    pristine = pristine_tree(install, journal) if journal.entries else tree
    probe, runtime_error, settled = None, None, []
    if runtime_python is not None:  # before the static checks, so the units it exercised settle theirs
        from patchkit.checks.runtime import verify_probe  # lazy: start-up, only 'verify --runtime' runs it

        probe, runtime_error, settled = verify_probe(runtime_python, tree, registry, contract, archs, types)
    with exercised(settled):  # a unit the serving environment ran as patchkit assumes is no longer "not checked"
        checks = run_checks(
            tree, registry, contract, archs, types, requested=tuple(archs) if request else (), pristine=pristine
        )
    by_arch = dict(zip(archs, checks[1:])) if contract.protocol is not None else {}  # one node per architecture
    pending = unfinished_check(journal)
    if pending is not None:
        checks.insert(1, pending)
    elsewhere = import_problem(install)
    if elsewhere is not None:
        checks.insert(1, Check("the interpreter imports this vLLM", False, elsewhere.message))
    if journal.entries:
        checks.insert(1, journal_check(install, journal))
    for plugin in PLUGINS:
        if plugin.installed(install):
            checks.insert(1, plugin.check(plugin.state(install, journal)))
    if probe is not None:
        checks.append(probe)
    info = install_info(install, contract)
    steps: tuple[NextStep, ...] = ()
    failures = [f for c in checks for f in c.failures()]
    if failures and not all(f.kind == UNPINNED for f in failures):  # no apply for code patchkit cannot vouch for
        from patchkit.plan import next_steps  # lazy: start-up, a verify that passes plans nothing

        forced = _forced_only(install, journal, by_arch, failures) if elsewhere is None else ()
        steps = (
            (NextStep((), elsewhere.hint, effect=Effect.EDIT),)
            if elsewhere is not None
            else (next_steps.for_forced(forced, request),)
            if forced
            else next_steps.for_verify(info, request, patched, "vllm")
        )
    return VerifyReport(
        info,
        checks,
        runtime_error,
        journaled=patched,
        next_steps=steps,
        architectures=tuple(archs),
        requested=requested,
    )


def _forced_only(install: Install, journal, by_arch: dict[str, Check], failures: list[Check]) -> tuple[str, ...]:
    """The architectures patched with ``apply --force`` when every failure of ``verify`` is theirs and one that
    ``--force`` accepted (the serve's runner, a hybrid's mixers), else ``()``: then the way forward is their
    scoped revert, not an apply (issue 42, finding 1; :func:`patchkit.plan.next_steps.for_forced`)."""
    from patchkit.checks.verify import RUNNER_SHOWN_CHECK  # lazy: as run_checks
    from patchkit.plan.arch_scope import scope  # lazy: only a failing verify of a journaled install
    from patchkit.vllm.stream.hybrids import HYBRID_CHECK  # lazy: as run_checks

    failing = {a: node.failures() for a, node in by_arch.items() if node.failures()}
    theirs = sum(len(f) for f in failing.values())
    accepted = all(f.kind in (RUNNER_SHOWN_CHECK, HYBRID_CHECK) for fs in failing.values() for f in fs)
    if not journal.entries or not failing or theirs != len(failures) or not accepted:
        return ()
    forced = scope(install, journal, Request(tuple(failing))).forced
    return tuple(failing) if set(failing) <= forced else ()


def scan(install: Install) -> ScanReport:
    """Every text-generation and multimodal architecture of ``install`` with its EAGLE-3 state.

    Returns:
        A :class:`patchkit.checks.scan.ScanReport` (frozen): per architecture its state (native, declared
        but broken, patchable, patched by patchkit, not patchable), shape and one-line reason.
    Raises:
        SourceError: the registry or ``interfaces.py`` is missing or does not parse.
    """
    from patchkit.checks.scan import scan as classify_all  # lazy: start-up, only 'scan' classifies every architecture

    return classify_all(install)


def scan_sglang(site_packages: Path | None = None, python: Path | None = None) -> SglangScan:
    """Every architecture SGLang's registry holds (SGLang found from ``site_packages`` or ``python``, at most one),
    as a frozen :class:`patchkit.sglang.scan.SglangScan`: each native, patched, missing, draft, pooling or unread.
    Raises InstallNotFound or InterpreterError where there is no SGLang (:func:`patchkit.sglang.install.locate`)."""
    from patchkit.sglang.install import locate  # lazy: start-up, only 'scan --target sglang' reads SGLang
    from patchkit.checks.sglang_verify import journaled  # lazy: as above (the classes patchkit patched)
    from patchkit.sglang.scan import scan as scan_all  # lazy: as above

    return journaled(scan_all(locate(site_packages, python)))


def revert(
    install: Install,
    *,
    target: str = "vllm",
    force: bool = False,
    on_wait: Callable[[Path, float], None] | None = None,
    request: Request = Request(),
) -> RevertReport:
    """Restore every file patchkit changed to its original bytes, all or nothing.

    A file edited by hand since patchkit wrote it (or deleted) makes the whole revert refuse,
    writing nothing, unless ``force``: then its original bytes are written back over the edit.
    So does a file of patchkit's installed guard changed since patchkit wrote it
    (:func:`patchkit.guard.guard.edited`), which every revert deletes or rewrites: with ``force`` it
    goes with the rest.
    A file a reinstall or an upgrade already replaced is only dropped from the journal.
    ``on_wait`` is called as in :func:`apply` when another run holds the lock.

    With ``request`` (``--arch``/``--model``) only the patches those architectures need and no
    other patched architecture needs are taken out (:mod:`patchkit.plan.arch_scope`): a file that holds
    only such patches gets its original bytes back; a file that also holds patches that stay (the
    allow-list, a shared backbone) is rewritten to exactly the bytes ``apply`` of what stays gives
    the original. Files of other architectures are not touched.

    An unfinished earlier apply or revert is rolled back first. The revert itself keeps a
    pending record like apply, so a killed revert is put back by the next command.

    Raises:
        UsageError: with ``request``: an ``--arch`` name the registry does not hold
            (:func:`check_requested`), or the journal holds patches but none of its architectures has
            one of its own (with nothing journaled at all, a scoped revert is "nothing to revert",
            exit 0, as the whole one is).
        StateError: the journal or an original copy is unreadable, a file or folder cannot be
            written keeping its owner (checked first), or a write failed (files already restored
            are put back).
        Interrupted: SIGINT/SIGTERM while the lock was held; every restored file was put back.
    """
    journal = journal_for(install, target)
    tree = SourceTree(install.site_packages)
    info = install_info(install, contract_mod.detect(tree))
    if request:
        from patchkit.vllm.registry.table import Registry  # lazy: start-up, 'status' without --arch reads no registry

        check_requested(Registry(tree), request, str(install.version))
    if not journal.entries and not journal.pending and not journal.leftovers():
        # nothing to revert, with or without --arch/--model: exit 0 alike (issue 32; --model was exit 2)
        return api_steps.revert_plugins_only(PLUGINS, install, journal, info, target, request, force, on_wait)
    with interrupt.deferred(), journal.lock(on_wait=on_wait):
        journal = journal_for(install, target)
        unfinished = journal.unfinished()
        rolled = journal.recover()
        what = f"an unfinished {unfinished.operation}" if unfinished else "an unfinished run"
        files: list[RevertedFile] = [RevertedFile(p, True, f"rolled back {what}", [], "rolled back") for p in rolled]
        narrow, rewrite = api_steps.revert_scope(install, journal, request)
        # every revert deletes or rewrites an installed guard's files: one edited by hand blocks it too
        edits = {} if force else api_steps.revert_blockers(PLUGINS, install)
        done = plan_revert(install, journal, force, narrow, rewrite, edits)
        files = [*files, *done.files]
        restore, rewrites, forget = done.restore, done.rewrites, done.forget
        if done.refused:
            return RevertReport(
                info, files, refused=True, next_steps=run_steps.revert_refused(info, target, request, done.files, edits)
            )
        api_steps.write_revert(
            install, journal, narrow, restore, rewrites, forget, target=target, request=request, force=force
        )
        # the guard and the watch go with a full revert; after a partial one they follow what stays patched
        refresh = narrow is not None and bool(journal.entries)
        followed = api_steps.follow_plugins(
            PLUGINS,
            install,
            journal,
            refresh,
            target,
            f"the patches were reverted and committed ({len(restore) + len(rewrites)} file(s) restored)",
        )
        journal.remove_if_empty()
    interrupt.late_signal(f"restored {len(restore) + len(rewrites)} file(s)")
    return RevertReport(info, files, refused=False, **followed)


def status(install: Install, *, target: str = "vllm", request: Request = Request()) -> StatusReport:
    """What patchkit has applied to this install: per journaled file, its patches and state.

    States (:data:`FILE_STATES`): patched, reinstalled, upgraded, edited, missing, interrupted.
    The report also names an unfinished run or its leftovers, and a missing ``RECORD``.

    With ``request`` (``--arch``/``--model``): only the files holding a patch those architectures
    need, and per architecture whether all, some or none of its patches are journaled
    (:func:`patchkit.plan.arch_scope.states`). No libcst is imported either way.

    Raises:
        ConfigError: ``--model`` folder without a readable ``config.json`` (exit 4).
        UsageError: an ``--arch`` name the registry does not hold (:func:`check_requested`).
        StateError: the journal (or, with ``request``, an original copy) cannot be read.
    """
    journal = journal_for(install, target)
    tree = SourceTree(install.site_packages)
    info = install_info(install, contract_mod.detect(tree))
    architectures = ()
    paths = sorted(journal.entries)
    if request:
        from patchkit.plan import (
            arch_scope,
        )  # lazy: start-up, 'status' and 'revert' without --arch load no planning chain

        from patchkit.vllm.registry.table import Registry  # lazy: start-up, 'status' without --arch reads no registry

        check_requested(Registry(tree), request, str(install.version))
        found = arch_scope.scope(install, journal, request)
        architectures = arch_scope.states(found, journal)
        paths = [p for p in paths if set(journal.entries[p].patches) & found.all_ids]
    record = record_sha256(install, paths) if paths else {}
    unfinished = journal.unfinished()
    interrupted = set(unfinished.to_roll_back) if unfinished else set()
    entries = [
        StatusEntry(
            path,
            journal.entries[path].patches,
            journal.entries[path].version,
            FileState.INTERRUPTED if path in interrupted else file_state(install, journal.entries[path], record),
            journal.entries[path].applied_at,
        )
        for path in paths
    ]
    shown = {plugin.NAME: plugin.state(install, journal) for plugin in PLUGINS if plugin.installed(install)}
    replaced = [journal.entries[e.path] for e in entries if e.state in REPLACED]
    reapply: tuple[tuple[str, ...], ...] = ()
    if replaced:
        from patchkit.plan.selection import (
            reapply_runs,
        )  # lazy: start-up, 'status' and 'revert' without --arch load no planning chain

        from patchkit.vllm.registry.table import Registry  # lazy: start-up, 'status' without --arch reads no registry

        reapply = reapply_runs(replaced, journal, Registry(tree))
    steps: tuple[NextStep, ...] = ()
    if reapply:
        from patchkit.plan import next_steps  # lazy: start-up, only after a reinstall or an upgrade

        # the --model the guard's manifest recorded: status names the command the guard's line names
        steps = next_steps.reapply(reapply, target=target, model=guard_mod.recorded_model(install))
    return StatusReport(
        info,
        entries,
        pending=sorted(item["path"] for item in journal.pending),
        unfinished=unfinished,
        record_missing=not has_record(install),
        architectures=architectures,
        reapply=reapply,
        next_steps=steps,
        **shown,
    )


def export(
    install: Install,
    *,
    request: Request,
    force: bool = False,
    source: bool = False,
    evidence: Path | None = None,
    reproduce: Sequence[str] = (),
) -> "ExportReport":
    """``patchkit export``: :func:`patchkit.plan.export.export` with verify's chain check as apply's last gate, and
    the pull-request description (:func:`patchkit.plan.pr_description.describe`).

    Plans exactly what ``apply`` with ``request`` and ``force`` would write, from the release's own bytes, and
    writes nothing anywhere; the result (frozen) holds the patch in upstream's style and its description, or why
    apply refuses (then no description).

    Args:
        evidence: a ``rehearse --json`` report whose figures the description carries (read before planning).
        reproduce: the commands the description's "how to reproduce" lists.
    Raises:
        UsageError: no ``--arch``/``--model`` (export is per architecture), one the registry does not hold, or an
            evidence report of another architecture or release, or no rehearse report at all.
        ConfigError: the evidence file is missing, unreadable or not JSON.
        SourceError, StateError: as :func:`patchkit.plan.export.export`.
    """
    if not request:
        raise UsageError("export needs the architectures to export", "give --arch ARCH (repeatable) or --model DIR")
    from patchkit.plan import export as export_mod  # lazy: start-up, only 'export' plans (libcst) here
    from patchkit.plan import pr_description  # lazy: as above

    report_in = pr_description.read_evidence(evidence) if evidence is not None else None
    report = export_mod.export(install, request=request, chain_check=run_checks, force=force, source=source)
    if report.refused:
        return report
    if report_in is not None:
        pr_description.check_evidence(report_in, report, evidence)
    return replace(report, description=pr_description.describe(report, report_in, list(reproduce)))


def resolve(install: Install, architecture: str) -> "ResolveReport":
    """``patchkit resolve``: :func:`patchkit.checks.resolve.resolve` (read statically; see there)."""
    from patchkit.checks import resolve as resolve_mod  # lazy: start-up, only 'resolve' reads platform branches

    return resolve_mod.resolve(install, architecture)


__all__ = ["apply", "verify", "revert", "status", "resolve", "scan", "export", "PatchResult"]
