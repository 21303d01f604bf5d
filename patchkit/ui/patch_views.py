"""The text output of ``apply``, ``verify``, ``revert`` and ``status``: one function per command that
prints its report, and ``apply``'s exit code with the missing files it names on stderr.

Each takes the report a :mod:`patchkit.api` call returned (next steps already completed) and writes
to the console (:mod:`patchkit.ui.console`); the result types are imported when a report is rendered
(start-up, issue 11).
"""

from __future__ import annotations

from patchkit.advice import Effect
from patchkit.errors import PatchkitError
from patchkit.ui import hints
from patchkit.ui.console import error, failing_lines, header, next_lines, out, plugin_lines, print_checks
from patchkit.ui.render import MARKS


def show_apply(report, dry_run: bool) -> None:
    """``apply``'s text output: the recovered files, one row per patch, the diff, the checks and the next step."""
    w = out()
    header(w, report.install)
    if report.unfinished is not None and dry_run:
        w.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
    elif report.unfinished is not None and report.unfinished.leftovers:
        w.line(("removed", "yellow"), f" {len(report.unfinished.leftovers)} leftover file(s) of an interrupted run")
    for path in report.recovered:
        if dry_run:
            w.line(
                ("would roll back", "yellow"),
                f" {path} first ",
                ("(the plan below starts from its bytes before that run)", "dim"),
            )
        else:
            w.line(("rolled back", "yellow"), f" {path} ", ("(an earlier run did not finish)", "dim"))
    w.table(["patch", "outcome", "where / why"], _patch_rows(report, dry_run))
    if dry_run and report.diff:
        w.raw(report.diff)
    if report.verify is not None and not report.verify.ok:
        print_checks(w, report.verify.checks)
    plugin_lines(w, report)
    if report.refused:
        w.line(("refused:", "red"), " nothing was written")
        next_lines(w, report.next_steps)
    elif report.written:
        verify_, revert_ = report.next_steps[:2]
        w.line(
            f"wrote {len(report.files)} file(s); '{verify_.command}' shows the chain, '{revert_.command}' {revert_.why}"
        )
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


def apply_code(report, dry_run: bool, as_json: bool) -> int:
    """``apply``'s exit code (:attr:`ApplyReport.exit_code`); missing target files are named on stderr unless --json."""
    if report.missing_files and not report.refused and not as_json:
        deleted = [f for f in report.missing_files if f not in report.not_shipped]
        others = (", the others were" + (" planned" if dry_run else " applied")) if report.any_landed else ""
        them = "it" if len(report.missing_files) == 1 else "them"
        if deleted:  # the release's own RECORD lists them: a reinstall brings them back
            note = (
                f"vLLM {report.install.version} does not ship {', '.join(report.not_shipped)}: no reinstall brings it"
                if report.not_shipped
                else ""
            )
            message = (
                f"{', '.join(report.missing_files)} missing from this install; "
                f"the patches that need {them} were not run{others}"
            )
            error(
                PatchkitError(
                    message,
                    note,
                    next((s for s in report.next_steps if s.effect is Effect.REINSTALLS), None),
                ),
                False,
            )
        else:
            hint = (
                "this release has no such file, so the patches that need it cannot run on it and a reinstall "
                "would not change that; run the others with --patch ID, or use a release those patches are for "
                "(patchkit explain ID)"
            )
            message = (
                f"vLLM {report.install.version} does not ship {', '.join(report.not_shipped)} (not in its RECORD, "
                f"or no RECORD to tell); the patches that need {them} were not run{others}"
            )
            error(PatchkitError(message, hint), False)
    return int(report.exit_code)


def show_verify(report) -> None:
    """``verify``'s text output of ``report`` (an :class:`patchkit.results` verify report): the checks,
    whether EAGLE-3 is in effect, what was checked and, when it is not, the failing checks and next steps."""
    w = out()
    header(w, report.install)
    print_checks(w, report.checks)
    if report.ok:
        w.line(
            ("EAGLE-3 is in effect", "green"),
            " for the resolved classes"
            + (" (static checks; the runtime checks could not run)" if report.runtime_error else ""),
        )
        _scope_line(w, report)
    else:
        w.line(("EAGLE-3 is not in effect:", "red"))
        for line in failing_lines(report.checks):
            w.line(line, indent="  ")
        _scope_line(w, report)
        next_lines(w, report.next_steps)


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
    w.line(
        f"checked: {', '.join(report.architectures)} ({whose}); for any other registered architecture add "
        f"--arch ARCH or --model DIR ('{scan}' lists them)"
    )


def show_revert(report) -> None:
    """``revert``'s text output of ``report`` (a revert report): one line per file, the guard and the
    watch, and on a refusal the next steps."""
    w = out()
    header(w, report.install)
    if not report.files:
        w.line("nothing to revert: patchkit has not changed this install")
    for f in report.files:
        mark = MARKS[True if f.restored else (False if f.blocking else None)]
        w.line(mark, " ", f.path, "  ", (f.reason, "dim"))
    plugin_lines(w, report)
    if report.refused:
        w.line(("refused:", "red"), " nothing was reverted")
        next_lines(w, report.next_steps)


def show_status(report) -> None:
    """``status``'s text output of ``report`` (a status report): the unfinished run, the missing RECORD,
    one line per architecture, the guard and the watch, one row per journaled file and the next steps."""
    from patchkit.advice import NextStep, patchkit_argv  # lazy: only when a report is rendered
    from patchkit.plan.file_states import FILE_STATES, FileState  # lazy: as above
    from patchkit.results import FORCED, Coverage  # lazy: as above

    w = out()
    header(w, report.install)
    if report.unfinished is not None:
        w.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
    if report.record_missing:
        w.line(
            ("no RECORD:", "yellow"),
            " this vLLM has no RECORD file, so edits by others cannot be detected; "
            "'patchkit apply' refuses such files unless --force",
        )
    scan_command = hints.command(NextStep(patchkit_argv("scan"), "why"))
    coverage_style = {
        Coverage.PATCHED: "green",
        Coverage.PARTLY: "yellow",
        Coverage.NOT_PATCHED: "yellow",
        Coverage.NOTHING_TO_PATCH: "dim",
    }
    for a in report.architectures:
        detail = (
            f"missing {', '.join(a.missing)}"
            if a.missing and a.journaled
            else ", ".join(a.journaled)
            if a.journaled
            else f"apply writes nothing for it ('{scan_command}' says why)"
            if a.state is Coverage.NOTHING_TO_PATCH
            else f"needs {', '.join(a.missing)}"
        )
        if a.forced:  # as verify and doctor read it (issue 42, finding 1)
            detail = f"{FORCED}; {detail}"
        w.line((a.state.value, coverage_style[a.state]), " ", a.architecture, "  ", (detail, "dim"))
    plugin_lines(w, report)
    if not report.entries and not report.pending:
        w.line(
            "no patchkit changes in this install"
            if not report.architectures
            else "no patchkit changes for these architectures"
        )
    if report.entries:
        w.table(
            ["file", "state", "vLLM", "applied at", "patches"],
            [
                [
                    e.path,
                    (e.state, None if FileState(e.state) is FileState.PATCHED else "yellow"),
                    e.vllm_version,
                    e.applied_at,
                    ", ".join(e.patches),
                ]
                for e in report.entries
            ],
        )
        for state in sorted({FileState(e.state) for e in report.entries} - {FileState.PATCHED}):
            w.line((f"{state.value}:", "yellow"), f" {FILE_STATES[state]}")
        next_lines(w, report.next_steps)
