"""The named steps of :func:`patchkit.api.apply` and :func:`patchkit.api.revert` (the API's writing
commands): what each asks of the plugins, apply's plan, write and next steps, how a signal during a
write is reported, and the revert's scope and writes. The plugins are passed in (:data:`patchkit.api.PLUGINS`); nothing
here prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from patchkit import interrupt
from patchkit.advice import NextStep, patchkit_argv, reinstall
from patchkit.errors import Interrupted, StateError
from patchkit.guard import guard as guard_mod
from patchkit.plan import run_steps
from patchkit.plan.request import Request
from patchkit.plan.revert_plan import plan_revert
from patchkit.plugin_results import PluginReport, PluginRun
from patchkit.results import ApplyReport, InstallInfo, RevertReport
from patchkit.store.journal import Journal, journal_for
from patchkit.store.plugin_dist import Plugin
from patchkit.store.preflight import cache_problem, import_problem
from patchkit.vllm.release.install import Install
from patchkit.watch import watch as watch_mod


def revert_blockers(plugins: Sequence[Plugin], install: Install) -> dict[str, tuple[str, ...]]:
    """``{path: patch ids}`` of the installed plugins' files a revert must not delete without ``--force``."""
    return {
        path: ids
        for plugin in plugins
        if plugin.installed(install)
        for path, ids in plugin.revert_blockers(install).items()
    }


def plugin_interrupted(exc: Interrupted, done: str, step: str, then: NextStep, name: str = "guard") -> Interrupted:
    """The :class:`Interrupted` of a signal that stopped the guard's (``name``: or the watch's) step
    after the vLLM files were committed.

    The journal's own message (about the plugin's files only) would say "every file is as it was
    before this run", which is untrue of the run: ``done`` says what stands of the vLLM files,
    ``step`` is what the plugin was not (``installed``/``refreshed``/``removed``), ``then`` the
    step that finishes the job.
    """
    stands = {
        "installed": "",
        "refreshed": ": it watches what the previous run left patched",
        "removed": ": it is still installed",
    }[step]
    what = (
        f"patchkit's {name} was not {step} (its files were put back{stands})"
        if exc.put_back
        else f"patchkit's {name} was not {step} ({exc.message.split(': ', 1)[-1]})"
    )
    return Interrupted(
        exc.signum,
        f"interrupted by {interrupt.name(exc.signum)} during patchkit's {name} step: {done}; {what}",
        "",
        then,
    )


def plugin_runs(
    request: Request,
    target: str,
    command_options: Sequence[str] | None,
    guard: bool,
    watch: bool,
    watch_drafts: int | None,
    watch_threshold: float | None,
) -> dict[str, PluginRun]:
    """What ``apply`` asks of each plugin, by name."""
    # the model absolute: the guard's line is read from the server's working folder, not this one
    model = os.path.abspath(request.model) if request.model is not None else None
    return {
        guard_mod.NAME: PluginRun(guard, command_options, model, target),
        watch_mod.NAME: PluginRun(
            watch, command_options, target=target, settings={"drafts": watch_drafts, "threshold": watch_threshold}
        ),
    }


def wanted_plugins(plugins: Sequence[Plugin], install: Install, runs: dict[str, PluginRun]) -> list[Plugin]:
    """The plugins this apply installs, their settings checked.

    Raises:
        RefusedError: the install is imported from elsewhere or inside a package cache, or a wanted
            plugin refuses this install.
    """
    wanted = [plugin for plugin in plugins if runs[plugin.NAME].want]
    for plugin in wanted:
        plugin.check_run(runs[plugin.NAME])
    elsewhere = (
        import_problem(install)
        or cache_problem(install)
        or next((found for found in (plugin.refusal(install) for plugin in wanted) if found is not None), None)
    )
    if elsewhere is not None:
        raise elsewhere
    return wanted


def apply_interrupted(
    exc: Interrupted,
    target: str,
    request: Request,
    force: bool,
    command_options: Sequence[str] | None,
    patch_ids: list[str] | None,
    guard: bool,
    watch: bool,
    watch_drafts: int | None,
    watch_threshold: float | None,
) -> Interrupted:
    """The :class:`Interrupted` of a signal that stopped the write (every file put back), with the
    step that repeats this run."""
    # the journal's step is a bare 'patchkit apply': repeat this run's options, --guard included
    watching = [
        *(["--watch"] if watch else []),
        *(["--watch-drafts", str(watch_drafts)] if watch and watch_drafts is not None else []),
        *(["--watch-threshold", str(watch_threshold)] if watch and watch_threshold is not None else []),
    ]
    again = run_steps.again(
        "apply",
        target,
        request,
        force,
        command_options=command_options,
        patch_ids=patch_ids,
        guard=guard,
        watch=watching,
    )
    return Interrupted(exc.signum, exc.message, "", again, put_back=True)


def sync_plugins(
    plugins: Sequence[Plugin],
    install: Install,
    journal: Journal,
    report: ApplyReport,
    runs: dict[str, PluginRun],
    command_options: Sequence[str] | None,
) -> ApplyReport:
    """After the vLLM files are committed: install the wanted plugins and refresh the installed ones,
    each in the run's journal; ``report`` with what each did.

    Raises:
        Interrupted, StateError: a plugin's step failed; the message says the vLLM files stand.
    """
    done = (
        f"the patches were applied and committed ({len(report.files)} file(s) written)"
        if report.written
        else "the patches were applied already (nothing to write)"
    )
    for plugin in plugins:
        name, had = plugin.NAME, plugin.installed(install)
        if not (had or runs[name].want):
            continue
        try:
            found = plugin.sync(install, journal, runs[name])
        except Interrupted as exc:  # the vLLM files are written (committed) already: say so
            raise plugin_interrupted(
                exc,
                done,
                "refreshed" if had else "installed",
                run_steps.plugin_step(command_options, "refresh it" if had else "install it", plugin),
                name,
            ) from None
        except StateError as exc:  # the vLLM files are written (committed) already: say so
            raise StateError(
                f"the patches were applied, but patchkit's {name} was not written ({exc.cause})",
                exc.hint,
                run_steps.plugin_step(command_options, f"then, to write the {name}", plugin),
            ) from exc
        if found is not None:
            report = replace(report, **{name: found})
    return report


def revert_plugins_only(
    plugins: Sequence[Plugin],
    install: Install,
    journal: Journal,
    info: InstallInfo,
    target: str,
    request: Request,
    force: bool,
    on_wait: Callable[[Path, float], None] | None,
) -> RevertReport:
    """A revert with nothing journaled: a whole one still removes the installed plugins (they go with
    the rest), unless one of their files was edited by hand and ``force`` is not given."""
    if not request and any(plugin.installed(install) for plugin in plugins):  # they go with the rest
        with interrupt.deferred(), journal.lock(on_wait=on_wait):
            edits = {} if force else revert_blockers(plugins, install)
            if edits:
                done = plan_revert(install, journal, force, guard_edits=edits)
                return RevertReport(
                    info,
                    done.files,
                    refused=True,
                    next_steps=run_steps.revert_refused(info, target, request, done.files, edits),
                )
            removed = {plugin.NAME: plugin.remove(install) for plugin in plugins if plugin.installed(install)}
        return RevertReport(info, [], refused=False, **removed)
    return RevertReport(info, [], refused=False)


def revert_scope(install: Install, journal: Journal, request: Request):
    """``(narrow, rewrite)`` of a revert of ``--arch``/``--model`` (:mod:`patchkit.plan.arch_scope`);
    ``(None, None)`` for a whole revert."""
    if not request:
        return None, None
    from patchkit.plan import arch_scope  # lazy: start-up, 'status' and 'revert' without --arch load no planning chain

    narrow = arch_scope.narrowing(install, journal, request)
    return narrow, arch_scope.rewritten(install, journal, narrow)


def write_revert(
    install: Install, journal: Journal, narrow, restore, rewrites, forget, *, target: str, request: Request, force: bool
) -> None:
    """Restore (or, for a scoped revert, rewrite) the planned files through the journal.

    Raises:
        Interrupted: a signal stopped the write; every file was put back (for a scoped revert the
            step repeats its ``--arch``/``--model``).
    """
    try:
        if narrow is not None:
            keep = {p: sorted(set(journal.entries[p].patches) & narrow.keep) for p in rewrites}
            journal.narrow(restore, rewrites, keep, str(install.version), forget=forget)
        elif restore or forget:
            journal.restore(restore, forget=forget)
    except Interrupted as exc:
        if not request or not exc.put_back:
            raise
        # the journal's step is a bare 'patchkit revert', which would revert every patch: repeat --arch/--model
        raise Interrupted(
            exc.signum, exc.message, "", run_steps.again("revert", target, request, force), put_back=True
        ) from None


def follow_plugins(
    plugins: Sequence[Plugin], install: Install, journal: Journal, refresh: bool, target: str, done: str
) -> dict[str, PluginReport]:
    """The installed plugins after the revert's vLLM files are committed: refreshed (``refresh``: a
    partial revert left patches) or removed; by name.

    Raises:
        Interrupted: a plugin's step was stopped; the message says the vLLM files stand (``done``).
    """
    followed = {}
    for plugin in plugins:
        name = plugin.NAME
        if not plugin.installed(install):
            continue
        try:
            followed[name] = (
                plugin.sync(install, journal, PluginRun(target=target)) if refresh else plugin.remove(install)
            )
        except Interrupted as exc:  # the vLLM files are restored (committed) already: say so
            raise plugin_interrupted(
                exc,
                done,
                "refreshed" if refresh else "removed",
                run_steps.plugin_step((), "refresh it" if refresh else "remove it", plugin, remove=not refresh),
                name,
            ) from None
    return followed


__all__ = [
    "apply_interrupted",
    "follow_plugins",
    "plugin_interrupted",
    "plugin_runs",
    "revert_blockers",
    "revert_plugins_only",
    "revert_scope",
    "sync_plugins",
    "wanted_plugins",
    "write_revert",
]


@dataclass(frozen=True)
class ApplyOptions:
    """The options of one :func:`patchkit.api.apply` run that its write (:func:`write_apply`) reads: what
    it plans, and what the step that repeats it after a signal names (:func:`apply_interrupted`)."""

    target: str
    patch_ids: list[str] | None
    request: Request
    force: bool
    command_options: Sequence[str] | None
    guard: bool
    watch: bool
    watch_drafts: int | None
    watch_threshold: float | None


def write_apply(
    plugins: Sequence[Plugin],
    install: Install,
    journal: Journal,
    patches,
    runs: dict[str, PluginRun],
    chain_check: Callable,
    on_wait: Callable[[Path, float], None] | None,
    options: ApplyOptions,
) -> tuple[ApplyReport, frozenset[str]]:
    """:func:`patchkit.api.apply`'s write: under ``journal``'s lock (``on_wait``: called when another run
    holds it), roll back an unfinished run, plan ``patches`` (None: as ``options.request`` selects) with
    ``chain_check`` and write them, then sync the ``plugins`` (``runs``: what each is asked).

    Returns:
        The :class:`ApplyReport` (next steps not set yet) and the patch ids journaled before this run.
    Raises:
        Interrupted: a signal during the write, with the step that repeats this run when every file was put back.
    """
    # Plan and write under the lock, from the files as they are once the lock is held: a second,
    # concurrent run then sees the first one's result ("already applied").
    with interrupt.deferred(), journal.lock(on_wait=on_wait):
        journal = journal_for(install, options.target)
        unfinished = journal.unfinished()
        recovered = journal.recover()
        before = frozenset(pid for e in journal.entries.values() for pid in e.patches)
        try:
            report = plan_apply_run(
                install,
                journal,
                patches,
                chain_check,
                dry_run=False,
                requested=set(options.patch_ids or ()),
                force=options.force,
                request=options.request,
                recovered=recovered,
                unfinished=unfinished,
            )
        except Interrupted as exc:
            if not exc.put_back:
                raise
            raise apply_interrupted(
                exc,
                options.target,
                options.request,
                options.force,
                options.command_options,
                options.patch_ids,
                options.guard,
                options.watch,
                options.watch_drafts,
                options.watch_threshold,
            ) from None
        if not report.refused:
            report = sync_plugins(plugins, install, journal, report, runs, options.command_options)
        journal.remove_if_empty()
    interrupt.late_signal(f"wrote {len(report.files)} file(s)" if report.written else "it wrote nothing")
    return report, before


def plan_apply(
    install: Install,
    journal: Journal,
    wanted: list[Plugin],
    runs: dict[str, PluginRun],
    chain_check: Callable,
    *,
    target: str,
    patch_ids: list[str] | None,
    request: Request,
    force: bool,
) -> ApplyReport:
    """``apply --dry-run``: plan exactly what the real run will, from the files as its rollback will leave them
    (``chain_check``: verify's chain check; ``wanted``: the plugins to plan, ``runs``: what each is asked);
    next steps not set yet (:func:`with_steps`)."""
    from patchkit.plan.run import dry_run as plan_dry_run  # lazy: libcst, imported only by commands that plan

    report = plan_dry_run(
        install, chain_check=chain_check, target=target, patch_ids=patch_ids, request=request, force=force
    )
    for plugin in wanted if not report.refused else ():
        report = replace(report, **{plugin.NAME: plugin.would_install(install, report, journal, runs[plugin.NAME])})
    return report


def with_steps(
    install: Install,
    report: ApplyReport,
    request: Request,
    target: str,
    force: bool,
    chain_check: Callable,
    before: frozenset[str] = frozenset(),
) -> ApplyReport:
    """``report`` with its next steps: after a write, verify and the revert that undoes exactly this
    write (:func:`patchkit.plan.next_steps.undo`; ``before``: the patch ids journaled before it); after a
    refusal of one of several ``--arch``, the apply of the rest (:func:`patchkit.plan.next_steps.without_refused`,
    planned with ``chain_check``); with target files missing that the release ships, last, the reinstall
    that brings them back."""
    deleted = [f for f in report.missing_files if f not in report.not_shipped]
    fetch = (
        (reinstall(install.distribution, str(install.version), "the release's own files back, then apply again"),)
        if deleted and not report.refused
        else ()
    )
    if report.written:
        from patchkit.plan import next_steps  # lazy: only after a write

        undo = next_steps.undo(install, journal_for(install, target), request, before)
        return replace(report, next_steps=(NextStep(patchkit_argv("verify"), "shows the chain"), undo, *fetch))
    if fetch:  # missing files the release ships: the reinstall is a step, in --json too (issue 42, finding 5)
        return replace(report, next_steps=(*report.next_steps, *fetch))
    if report.refused and len(request.architectures) > 1 and request.model is None:
        from patchkit.plan import next_steps  # lazy: only after a refused apply of several --arch

        return replace(report, next_steps=next_steps.without_refused(install, request, target, chain_check, force))
    return report


def plan_apply_run(
    install: Install,
    journal: Journal,
    patches,
    chain_check: Callable,
    *,
    dry_run: bool,
    requested: set[str],
    force: bool,
    request: Request,
    overrides: dict[str, bytes] | None = None,
    recovered: list[str] = (),
    unfinished=None,
) -> ApplyReport:
    """:func:`patchkit.plan.run.plan_run` with verify's chain check ``chain_check`` (the one planner ``apply``,
    doctor and verify share)."""
    from patchkit.plan.run import plan_run  # lazy: start-up, 'status' loads no planning chain

    return plan_run(
        install,
        journal,
        patches,
        dry_run=dry_run,
        requested=requested,
        force=force,
        request=request,
        overrides=overrides,
        recovered=recovered,
        unfinished=unfinished,
        chain_check=chain_check,
    )
