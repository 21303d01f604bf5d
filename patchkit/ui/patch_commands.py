"""``apply``, ``verify``, ``revert`` and ``status``: the commands on an install's patches.

Each is a Typer command function (registered by :mod:`patchkit.ui.cli`): its options, a call into
:mod:`patchkit.api` (or, with ``--ray``, :mod:`patchkit.ui.cluster_view`), the report rendered as
text or JSON, and the report's own exit code (``exit_code`` of the :mod:`patchkit.results` value).
The API, the result types and the cluster view are imported when a command runs (start-up, issue 11).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from patchkit.advice import reinstall
from patchkit.errors import ExitCode, PatchkitError, UsageError
from patchkit.ui import hints
from patchkit.ui.console import (emit_json, error, failing_lines, guard_line, header, next_lines,
                                 out, print_checks, waiting, watch_line, working)
from patchkit.ui.options import (ArchOpt, JsonOpt, ModelOpt, PythonOpt, RayOpt, ReadTargetOpt, SitePackagesOpt,
                                 TargetOpt, find_install, request)
from patchkit.ui.render import MARKS
from patchkit.ui.runner import run


def apply(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff; write nothing."),
    patch: Optional[list[str]] = typer.Option(None, "--patch", help="Only this patch (and what it needs); repeatable."),
    force: bool = typer.Option(False, "--force", help="Patch files that differ from the distribution's RECORD, and hybrids whose mixers lose losslessness under speculation on this release (docs/hybrids.md)."),
    arch: Optional[list[str]] = ArchOpt,
    model: Optional[Path] = ModelOpt,
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
    guard: bool = typer.Option(False, "--guard", help="Also install patchkit's guard: a vLLM plugin that checks, in "
                               "every vLLM process, that the patched files still hold patchkit's bytes."),
    watch: bool = typer.Option(False, "--watch", help="Also install the acceptance watch: a vLLM stat-logger plugin that "
                               "logs one line naming the likeliest cause when EAGLE-3 acceptance collapses (docs/watch.md)."),
    watch_drafts: Optional[int] = typer.Option(None, "--watch-drafts", help="With --watch: drafts to count before judging "
                                               "(default 200)."),
    watch_threshold: Optional[float] = typer.Option(None, "--watch-threshold", help="With --watch: first-position "
                                                    "acceptance below which it speaks (default 0.2)."),
) -> None:
    """Apply every patch this vLLM release needs, all or nothing: for DeepSeek-V2/V3 and Kimi-K2.5 by default,
    for any registered architecture with --arch/--model."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)
        from patchkit.plan.spec import check_patch_ids  # lazy: as above

        check_patch_ids(patch, target)
        if (watch_drafts is not None or watch_threshold is not None) and not watch:
            raise UsageError("--watch-drafts and --watch-threshold set the acceptance watch", "add --watch")
        watching = {"watch": True, "watch_drafts": watch_drafts, "watch_threshold": watch_threshold} if watch else {}
        if ray is not None:
            if patch and (arch or model):
                raise UsageError("give --patch or --arch/--model, not both", "--arch plans every patch that architecture needs")
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray

            return cluster_view.apply(ray, target=target, site_packages=site_packages, python=python,
                                      dry_run=dry_run, patch=patch, force=force, arch=arch, model=model,
                                      as_json=as_json, **({"guard": True} if guard else {}), **watching)
        install = find_install(target, site_packages, python)
        with working("planning and checking the patches...", as_json):
            if patch and (arch or model):
                raise UsageError("give --patch or --arch/--model, not both", "--arch plans every patch that architecture needs")
            report = api.apply(install, dry_run=dry_run, patch_ids=patch, target=target, force=force,
                               request=request(arch, model), on_wait=waiting(as_json), guard=guard,
                               command_options=hints.command_options(site_packages, python), **watching)
        report = _completed(report)
        if as_json:
            emit_json(report.to_dict())
            return _apply_code(report, dry_run, as_json)
        _show_apply(report, dry_run)
        return _apply_code(report, dry_run, as_json)

    run(as_json, body, site_packages, python, arch=arch, model=model, guard=guard)


def _show_apply(report, dry_run: bool) -> None:
    """``apply``'s text output: the recovered files, one row per patch, the diff, the checks and the next step."""
    w = out()
    header(w, report.install)
    if report.unfinished is not None and dry_run:
        w.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
    elif report.unfinished is not None and report.unfinished.leftovers:
        w.line(("removed", "yellow"), f" {len(report.unfinished.leftovers)} leftover file(s) of an interrupted run")
    for path in report.recovered:
        if dry_run:
            w.line(("would roll back", "yellow"), f" {path} first ",
                   ("(the plan below starts from its bytes before that run)", "dim"))
        else:
            w.line(("rolled back", "yellow"), f" {path} ", ("(an earlier run did not finish)", "dim"))
    w.table(["patch", "outcome", "where / why"], _patch_rows(report, dry_run))
    if dry_run and report.diff:
        w.raw(report.diff)
    if report.verify is not None and not report.verify.ok:
        print_checks(w, report.verify.checks)
    if report.guard is not None:
        guard_line(w, report.guard)
    if report.watch is not None:
        watch_line(w, report.watch)
    if report.refused:
        w.line(("refused:", "red"), " nothing was written")
        next_lines(w, report.next_steps)
    elif report.written:
        verify_, revert_ = report.next_steps[:2]
        w.line(f"wrote {len(report.files)} file(s); '{verify_.command}' shows the chain, "
               f"'{revert_.command}' {revert_.why}")
    elif dry_run:
        w.line("dry run: nothing was written")
    else:
        w.line("nothing to write")


def _patch_rows(report, dry_run: bool) -> list:
    """One table row per patch: id, outcome (``would apply`` on a dry run) and where or why."""
    from patchkit.results import Outcome  # lazy: the result types cost start-up time (list needs none)
    from patchkit.ui.outcome_style import OUTCOME_STYLE  # lazy: as above

    rows = []
    for p in report.patches:
        style = OUTCOME_STYLE[p.outcome]
        label = p.outcome.value
        if p.outcome is Outcome.APPLIED and dry_run:
            label, style = "would apply", "yellow"
        detail = p.target or "" if p.outcome.landed else p.reason
        if p.note:
            detail = f"{detail} (note: {p.note})"
        rows.append([p.id, (label, style), detail])
    return rows


def _completed(report):
    """``report`` with its next steps completed with the run's options (:func:`patchkit.ui.hints.steps`)."""
    from dataclasses import replace  # lazy: only when a report is rendered

    return replace(report, next_steps=tuple(hints.steps(report.next_steps))) if report.next_steps else report


def _apply_code(report, dry_run: bool, as_json: bool) -> int:
    """``apply``'s exit code (:attr:`ApplyReport.exit_code`); missing target files are named on stderr unless --json."""
    if report.missing_files and not report.refused and not as_json:
        deleted = [f for f in report.missing_files if f not in report.not_shipped]
        others = (", the others were" + (" planned" if dry_run else " applied")) if report.any_landed else ""
        them = "it" if len(report.missing_files) == 1 else "them"
        if deleted:  # the release's own RECORD lists them: a reinstall brings them back
            note = (f"vLLM {report.install.version} does not ship {', '.join(report.not_shipped)}: no reinstall brings it"
                    if report.not_shipped else "")
            message = f"{', '.join(report.missing_files)} missing from this install; the patches that need {them} were not run{others}"
            error(PatchkitError(message, note, reinstall(report.install.distribution, report.install.version,
                                                         "the release's own files back, then apply again")), False)
        else:
            hint = ("this release has no such file, so the patches that need it cannot run on it and a reinstall "
                    "would not change that; run the others with --patch ID, or use a release those patches are for "
                    "(patchkit explain ID)")
            message = (f"vLLM {report.install.version} does not ship {', '.join(report.not_shipped)} (not in its RECORD, "
                       f"or no RECORD to tell); the patches that need {them} were not run{others}")
            error(PatchkitError(message, hint), False)
    return int(report.exit_code)


def verify(
    target: str = ReadTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    runtime: bool = typer.Option(
        False, "--runtime", help="Also ask vLLM's own code, in a fresh subprocess of the target interpreter."
    ),
    arch: Optional[list[str]] = ArchOpt,
    model: Optional[Path] = ModelOpt,
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Exit 0 only when EAGLE-3 is in effect (patched or native): for DeepSeek-V2/V3 and Kimi-K2.5 (and what
    patchkit patched) by default, for any registered architecture with --arch/--model."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)

        if ray is not None:
            if runtime:
                raise UsageError("--runtime is not available with --ray", "run 'patchkit verify --runtime' on each node")
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray
            from patchkit.ui.cluster_report import ClusterCommand  # lazy: as above

            return cluster_view.run(ClusterCommand.VERIFY, ray, target=target, site_packages=site_packages, python=python,
                                    arch=arch, model=model, as_json=as_json)
        install = find_install(target, site_packages, python)
        runtime_python = None
        if runtime:
            if python is None and site_packages is not None:
                raise UsageError("--runtime runs vLLM's own code and needs its interpreter",
                                 "give --python /path/to/venv/bin/python instead of --site-packages")
            runtime_python = install.python or Path(sys.executable)
        message = f"running vLLM's own checks with {runtime_python} (imports vLLM and torch)..." if runtime else "checking..."
        with working(message, as_json):
            report = api.verify(install, runtime_python=runtime_python, request=request(arch, model))
        failed = report.runtime_error
        code = int(report.exit_code)
        report.next_steps = tuple(hints.steps(report.next_steps))
        if as_json:
            emit_json(report.to_dict())
            return code
        w = out()
        header(w, report.install)
        print_checks(w, report.checks)
        if report.ok:
            w.line(("EAGLE-3 is in effect", "green"), " for the resolved classes"
                   + (" (static checks; the runtime checks could not run)" if failed else ""))
            _scope_line(w, report)
        else:
            w.line(("EAGLE-3 is not in effect:", "red"))
            for line in failing_lines(report.checks):
                w.line(line, indent="  ")
            _scope_line(w, report)
            next_lines(w, report.next_steps)
        if failed:
            error(PatchkitError(failed.message, failed.hint), False)
        return code

    run(as_json, body, site_packages, python, arch=arch, model=model)


def _scope_line(w, report) -> None:
    """Plain ``verify``: which architectures it checked (the default set, and what the journal shows
    patched), and that any other is checked with ``--arch``/``--model``; nothing with ``--arch``/``--model``,
    nor on a release without the ``SupportsEagle3`` Protocol (era A0: no architecture can be patched there)."""
    from patchkit.advice import NextStep, patchkit_argv  # lazy: only when a report is rendered
    from patchkit.vllm.release.contract import Era  # lazy: as above

    if report.requested or Era(report.install.era) is Era.A0:
        return

    scan = hints.command(NextStep(patchkit_argv("scan"), "lists every registered architecture"))
    whose = "patchkit's default set" + (" and what the journal shows patched" if report.journaled else "")
    w.line(f"checked: {', '.join(report.architectures)} ({whose}); for any other registered architecture add "
           f"--arch ARCH or --model DIR ('{scan}' lists them)")


def revert(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    force: bool = typer.Option(False, "--force", help="Also restore files edited by hand since, and delete "
                               "patchkit's guard with edits to it (the edits are lost)."),
    arch: Optional[list[str]] = typer.Option(None, "--arch", help="Revert only what this architecture needs and "
                                             "no other patched one does (repeatable)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Revert only the architectures in this checkpoint's config.json."),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Restore every file patchkit changed to the exact bytes it had before."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)

        if ray is not None:
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray
            from patchkit.ui.cluster_report import ClusterCommand  # lazy: as above

            return cluster_view.run(ClusterCommand.REVERT, ray, target=target, site_packages=site_packages, python=python,
                                    force=force, arch=arch, model=model, as_json=as_json)
        install = find_install(target, site_packages, python)
        report = _completed(api.revert(install, target=target, force=force, on_wait=waiting(as_json),
                                       request=request(arch, model)))
        if as_json:
            emit_json(report.to_dict())
            return int(report.exit_code)
        w = out()
        header(w, report.install)
        if not report.files:
            w.line("nothing to revert: patchkit has not changed this install")
        for f in report.files:
            mark = MARKS[True if f.restored else (False if f.blocking else None)]
            w.line(mark, " ", f.path, "  ", (f.reason, "dim"))
        if report.guard is not None:
            guard_line(w, report.guard)
        if report.watch is not None:
            watch_line(w, report.watch)
        if report.refused:
            w.line(("refused:", "red"), " nothing was reverted")
            next_lines(w, report.next_steps)
        return int(report.exit_code)

    run(as_json, body, site_packages, python, arch=arch, model=model)


def status(
    target: str = ReadTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    arch: Optional[list[str]] = typer.Option(None, "--arch", help="Only what this architecture needs (repeatable)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Only the architectures in this checkpoint's config.json."),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """What patchkit has applied to this install: files, patches, vLLM version, state."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)
        from patchkit.advice import NextStep, patchkit_argv  # lazy: as above
        from patchkit.results import Coverage  # lazy: as above
        from patchkit.plan.file_states import FILE_STATES, FileState  # lazy: as above

        if ray is not None:
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray
            from patchkit.ui.cluster_report import ClusterCommand  # lazy: as above

            return cluster_view.run(ClusterCommand.STATUS, ray, target=target, site_packages=site_packages, python=python,
                                    arch=arch, model=model, as_json=as_json)
        install = find_install(target, site_packages, python)
        report = api.status(install, target=target, request=request(arch, model))
        report.next_steps = tuple(hints.steps(report.next_steps))
        if as_json:
            emit_json(report.to_dict())
            return int(ExitCode.OK)
        w = out()
        header(w, report.install)
        if report.unfinished is not None:
            w.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
        if report.record_missing:
            w.line(("no RECORD:", "yellow"), " this vLLM has no RECORD file, so edits by others cannot be detected; "
                   "'patchkit apply' refuses such files unless --force")
        scan_command = hints.command(NextStep(patchkit_argv("scan"), "why"))
        coverage_style = {Coverage.PATCHED: "green", Coverage.PARTLY: "yellow", Coverage.NOT_PATCHED: "yellow",
                          Coverage.NOTHING_TO_PATCH: "dim"}
        for a in report.architectures:
            detail = (f"missing {', '.join(a.missing)}" if a.missing and a.journaled else
                      ", ".join(a.journaled) if a.journaled else
                      f"apply writes nothing for it ('{scan_command}' says why)" if a.state is Coverage.NOTHING_TO_PATCH
                      else f"needs {', '.join(a.missing)}")
            w.line((a.state.value, coverage_style[a.state]), " ", a.architecture, "  ", (detail, "dim"))
        if report.guard is not None:
            guard_line(w, report.guard)
        if report.watch is not None:
            watch_line(w, report.watch)
        if not report.entries and not report.pending:
            w.line("no patchkit changes in this install" if not report.architectures else
                   "no patchkit changes for these architectures")
        if report.entries:
            w.table(["file", "state", "vLLM", "applied at", "patches"],
                    [[e.path, (e.state, None if FileState(e.state) is FileState.PATCHED else "yellow"), e.vllm_version,
                      e.applied_at, ", ".join(e.patches)] for e in report.entries])
            for state in sorted({FileState(e.state) for e in report.entries} - {FileState.PATCHED}):
                w.line((f"{state.value}:", "yellow"), f" {FILE_STATES[state]}")
            next_lines(w, report.next_steps)
        return int(ExitCode.OK)

    run(as_json, body, site_packages, python, arch=arch, model=model)
