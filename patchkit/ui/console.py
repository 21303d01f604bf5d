"""The output console every command and the ``--ray`` view share: writers, styles, JSON, errors,
and what happens when standard output cannot take the report.

- :func:`out` / :func:`err`: a :class:`~patchkit.ui.render.Writer` on standard output / error;
  :func:`next_lines` renders a report's next steps (:class:`~patchkit.advice.NextStep`) with the
  run's options.
- :func:`emit_json`, :func:`error`: how ``--json`` reports and a :class:`~patchkit.errors.PatchkitError`
  are shown (an outcome's style: :data:`patchkit.ui.outcome_style.OUTCOME_STYLE`).
- :class:`GuardedStdout`, :class:`OutputFailed`, :func:`output_closed`: a report that cannot be
  written (a pipe closed early, ``> /dev/full``, ``>&-``) exits 141 with one line on stderr.

This module imports only the standard library and the small :mod:`patchkit.errors`,
:mod:`patchkit.advice`, :mod:`patchkit.ui.render` and :mod:`patchkit.ui.hints` (start-up, issue 11).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import ExitCode, PatchkitError
from patchkit.sglang.contract import DISTRIBUTION as SGLANG
from patchkit.ui import hints
from patchkit.ui.render import Writer, check_nodes

if TYPE_CHECKING:
    from patchkit.plugin_results import PluginReport
    from patchkit.results import Check, InstallInfo


def out() -> Writer:
    """A writer on standard output (as it is now)."""
    return Writer.for_stream(sys.stdout)


def err() -> Writer:
    """A writer on standard error (as it is now)."""
    return Writer.for_stream(sys.stderr)


def emit_json(data: dict[str, Any]) -> None:
    """Print a ``--json`` report: one JSON object, indented by 2."""
    print(json.dumps(data, indent=2))


def error(exc: PatchkitError, as_json: bool) -> None:
    """Show a patchkit error: ``error: ...`` and ``hint: ...`` on stderr, or one JSON object on stdout."""
    hint = exc.hint_for(hints.run_options())
    if as_json:
        step = exc.step.for_run(hints.run_options()).to_dict() if exc.step is not None else None
        print(json.dumps({"error": exc.message, "hint": hint, "next_step": step, "exit_code": int(exc.exit_code)}))
        return
    writer = err()
    writer.line(("error:", "red"), " ", exc.message)
    if hint:
        writer.line(("hint:", "dim"), " ", hint)


def next_lines(writer: Writer, steps, label: str = "hint:") -> None:
    """One ``hint: run 'COMMAND' (why)`` line per next step, with the run's options
    (:func:`patchkit.ui.hints.steps`)."""
    for step in hints.steps(steps):
        writer.line((label, "dim"), " ", step.line())


def working(message: str, as_json: bool):
    """A spinner on stderr while something slow runs, only on a terminal and never with --json."""
    if as_json or not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console  # lazy: only on a terminal: rich costs start-up time

    return Console(stderr=True).status(message, spinner="dots")


def waiting(as_json: bool) -> Callable[[Path, float], None]:
    """What to print when another run holds the install's lock (stderr, so --json stays one object)."""

    def say(site_packages: Path, timeout: float) -> None:
        err().line(
            ("waiting", "yellow"),
            f" for another patchkit run on {site_packages} to finish (up to {timeout:g} s; PATCHKIT_LOCK_TIMEOUT)...",
        )

    return say


def header(writer: Writer, info: InstallInfo) -> None:
    """The first line of a report: the release, its distribution, its folder and its EAGLE-3 contract (and,
    on a release newer than any patchkit was qualified on, that note)."""
    named = "" if info.distribution == "vllm" else f" (distribution {info.distribution})"
    writer.line(
        f"vLLM {info.version}{named} at {info.site_packages}  ",
        (f"(EAGLE-3 contract {info.era})", "dim"),
        *qualified_note(info.newer_than_qualified),
    )


def qualified_note(note: str | None) -> tuple:
    """The header's note for a release newer than any patchkit was qualified on, as ``Writer.line`` parts."""
    return ("  ", (f"({note})", "yellow")) if note else ()


def print_checks(writer: Writer, checks: list[Check]) -> None:
    """The check trees, one per top check."""
    for node in check_nodes(checks):
        writer.tree(node.label, node.children)


def failing_lines(checks: list[Check], prefix: str = "missing: ") -> list[str]:
    """One line per distinct failing check (a class shared by several architectures counts once)."""
    lines: list[str] = []
    for top in checks:
        for c in top.failures():
            line = f"{prefix}{c.label}: {c.detail}" + (f" ({c.location})" if c.location else "")
            if line not in lines:
                lines.append(line)
    return lines


def guard_line(writer: Writer, guard: PluginReport) -> None:
    """One line about patchkit's guard after apply, revert or status (its
    :class:`~patchkit.plugin_results.PluginReport`)."""
    from patchkit.plugin_results import (
        PluginAction,
    )  # lazy: the result types cost start-up time (list needs none); loaded already when there is a report

    style = "red" if guard.problems else "green" if guard.installed else "yellow"
    if guard.action is PluginAction.NOTHING_TO_GUARD:
        detail = "patchkit has patched no file of this install, so there is nothing to watch; not installed"
    elif guard.action is PluginAction.REMOVED:
        detail = f"its {len(guard.files)} file(s) deleted"
    elif guard.action is PluginAction.NOT_INSTALLED:
        detail = "no guard in this install"
    else:
        archs = ", ".join(guard.architectures)
        detail = f"checks {len(guard.watched)} patched file(s) in every vLLM process" + (
            f"; stops {archs} served with EAGLE-3 when one lacks patchkit's bytes" if archs else ""
        )
    label = "installed" if guard.action is PluginAction.SHOWN else guard.action.value
    writer.line(("guard:", style), f" {label}  ", (detail, "dim"))
    for problem in guard.problems:
        writer.line(
            ("guard problem:", "red"), f" {problem}; run '{guard.install_command}'", indent="  "
        )  # its own options


class OutputFailed(Exception):
    """Standard output could not be written: ``cause`` is the OSError, or None when there is no stdout (``>&-``)."""

    def __init__(self, cause: OSError | None) -> None:
        super().__init__(cause)
        self.cause = cause


class GuardedStdout:
    """``sys.stdout`` while a command runs: a failed write or flush (or no stdout at all) raises :class:`OutputFailed`.

    So that the runner (:func:`patchkit.ui.runner.run`) tells a failure to write the report (a
    pipe closed early, ``> /dev/full``, ``>&-``) from the command's own errors, whatever
    ``OSError`` it is.
    """

    def __init__(self, stream) -> None:
        self._stream = stream

    def _do(self, name: str, *args):
        if self._stream is None:
            raise OutputFailed(None)
        try:
            return getattr(self._stream, name)(*args)
        except OSError as exc:
            raise OutputFailed(exc) from None

    def write(self, text: str) -> int:
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def watch_line(writer: Writer, watch: PluginReport) -> None:
    """One line about the acceptance watch after apply, revert, status or ``watch install``
    (:class:`~patchkit.plugin_results.PluginReport`)."""
    from patchkit.plugin_results import (
        PluginAction,
    )  # lazy: the result types cost start-up time (list needs none); loaded already when there is a report

    style = (
        "red"
        if watch.problems or watch.action is PluginAction.NO_PLUGIN_GROUP
        else ("green" if watch.installed else "yellow")
    )
    if watch.action is PluginAction.NO_PLUGIN_GROUP:
        detail = watch.missing or "this vLLM loads no stat-logger plugins"
    elif watch.action is PluginAction.REMOVED:
        detail = f"its {len(watch.files)} file(s) deleted"
    elif watch.action is PluginAction.NOT_INSTALLED:
        detail = "no acceptance watch in this install"
    else:
        detail = (
            f"after {watch.drafts} drafts, logs one line in the serve when first-position acceptance is below "
            f"{watch.threshold:.2f}"
        )
    label = "installed" if watch.action is PluginAction.SHOWN else watch.action.value
    writer.line(("watch:", style), f" {label}  ", (detail, "dim"))
    for problem in watch.problems:
        writer.line(("watch problem:", "red"), f" {problem}; run '{watch.install_command}'", indent="  ")


def plugin_lines(writer: Writer, report) -> None:
    """The guard's and the watch's lines after apply, revert or status: one per plugin the command
    touched (``report.guard`` / ``report.watch``, None when it did not)."""
    if report.guard is not None:
        guard_line(writer, report.guard)
    if report.watch is not None:
        watch_line(writer, report.watch)


def output_closed(as_json: bool, cause: OSError | None = None, stream=None) -> int:
    """Standard output could not take the report: Python's recipe, then one line on stderr; exit 141.

    ``cause``: the OSError of the failed write (``EPIPE``: ``patchkit verify | head``; ``ENOSPC``:
    ``> /dev/full``), None when the process has no standard output (``>&-``). ``stream``: the real
    standard output. The recipe (the ``signal`` module's "Note on SIGPIPE"): point stdout at
    ``os.devnull`` so the flush at exit does not fail a second time. The exit code is 141
    (128 + SIGPIPE, what a shell reports for a program a closed pipe stopped) for all of them,
    never 1: for ``verify`` 1 means "not in effect".
    """
    stream = sys.stdout if stream is None else stream
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (an in-process test runner), or none
        pass
    code = int(ExitCode.OUTPUT_CLOSED)
    if cause is None:
        what = "standard output is closed (>&-), so the report could not be written"
    elif cause.errno == errno.EPIPE:
        what = "standard output was closed before the report was complete (a pipe into head?)"
    else:
        what = f"standard output could not be written ({cause.strerror or cause}), so the report is incomplete"
    if hints.given.get("target") == SGLANG:  # 'status' is not written for SGLang (patchkit.ui.options)
        then = "run it again with its output to a file to read the report"
    else:
        then = f"'{hints.command(NextStep(patchkit_argv('status'), 'shows the install'))}' shows the install"
    try:
        err().line(("error:", "red"), f" {what}; exit {code}. The command itself ran to its end: {then}")
    except (OSError, AttributeError):
        pass
    return code
