"""How every command body runs: settings checked, signals handled, errors mapped to exit codes.

Exit codes (also in the README): 0 done / EAGLE-3 in effect; 1 ``verify`` found EAGLE-3 not in
effect; 2 bad command line or environment variable; 3 refused, nothing written; 4 no usable vLLM
install, bad ``--python``, files that cannot be read or written (checked before the first write),
a missing target file, a checkpoint's config.json that cannot be read; 5 ``rehearse`` not decided (no check
failed, and one could not tell right from wrong on the miniature); 130 / 143 interrupted by
SIGINT / SIGTERM (what was written was put back); 141 standard output closed early (``| head``),
closed (``>&-``) or full: the report could not be written. Each is a
:class:`~patchkit.errors.ExitCode`; a report's own code is its ``exit_code``.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

import typer

from patchkit import interrupt, settings
from patchkit.errors import ExitCode, Interrupted, PatchkitError, missing_requirement
from patchkit.ui import hints
from patchkit.ui.console import GuardedStdout, OutputFailed, error, output_closed


class _Terminated(BaseException):
    """SIGTERM outside a writing step (nothing written by this command)."""


def _on_signal(signum, frame) -> None:
    """SIGINT/SIGTERM during a command: stop it, unless its writing is over (then recorded, said after the report)."""
    if interrupt.after_writing():
        interrupt.note(signum)
        return
    if signum == signal.SIGTERM:
        raise _Terminated()
    raise KeyboardInterrupt


def run(
    as_json: bool,
    body: Callable[[], int],
    site_packages: Optional[Path] = None,
    python: Optional[Path] = None,
    *,
    arch: Optional[list[str]] = None,
    model: Optional[Path] = None,
    guard: bool = False,
) -> None:
    """Run a command body; map patchkit errors to their one-line message, hint and exit code.

    Every environment variable patchkit reads is validated first (:mod:`patchkit.settings`).
    SIGINT/SIGTERM while ``apply``/``revert`` write are handled by the API (the run puts back what
    it wrote and raises :class:`~patchkit.errors.Interrupted`); anywhere else nothing has been
    written, and the command says so and exits 130 (SIGINT) or 143 (SIGTERM). A report that
    cannot be written to standard output (closed, a pipe closed early, a full disk) exits 141
    with one line on stderr (:func:`patchkit.ui.console.output_closed`).

    ``site_packages``/``python`` (the environment), ``arch``/``model`` (the scope) and ``guard``
    are the command's options as given: :func:`patchkit.ui.hints.with_options` repeats them in
    every command a message of this run suggests.

    Raises:
        typer.Exit: always, with the command's exit code.
    """
    stdout = sys.stdout
    sys.stdout = GuardedStdout(stdout)
    try:
        _run_body(as_json, body, site_packages, python, arch=arch, model=model, guard=guard)
    except OutputFailed as exc:
        raise typer.Exit(output_closed(as_json, exc.cause, stdout))
    finally:
        sys.stdout = stdout


def _run_body(
    as_json: bool,
    body: Callable[[], int],
    site_packages: Optional[Path],
    python: Optional[Path],
    *,
    arch: Optional[list[str]],
    model: Optional[Path],
    guard: bool,
) -> None:
    """:func:`run` with standard output already guarded (see there)."""
    hints.begin(site_packages, python, arch, model, guard)
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
            error(
                Interrupted(
                    late,
                    f"interrupted by {interrupt.name(late)} after the run had finished; "
                    "the output above says what is on disk",
                ),
                False,
            )
    except BrokenPipeError as exc:
        raise OutputFailed(exc) from None
    except (KeyboardInterrupt, _Terminated) as exc:
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        stopped = Interrupted(
            signum, f"interrupted by {interrupt.name(signum)} before anything was written", "run the command again"
        )
        error(stopped, as_json)  # the one wording of an interrupted command: error, hint, exit code
        raise typer.Exit(int(stopped.exit_code))
    except PatchkitError as exc:
        error(exc, as_json)
        raise typer.Exit(int(exc.exit_code))
    except ModuleNotFoundError as exc:  # a requirement imported late (libcst when a command plans)
        problem = missing_requirement(exc)
        if problem is None:
            raise
        error(problem, as_json)
        raise typer.Exit(int(problem.exit_code))
    finally:
        for s, handler in previous.items():
            # the command has said what it did: in patchkit's own process a signal now changes nothing
            # (left at Python's default, the interpreter's shutdown would let it kill the process silently)
            signal.signal(s, signal.SIG_IGN if hints.given.get("process") else handler)
    raise typer.Exit(code)


def verdict(ok: bool) -> int:
    """The exit code of a check command (``verify``-like): 0 when ``ok``, 1 (not in effect, not ready) when not."""
    return int(ExitCode.OK if ok else ExitCode.NOT_IN_EFFECT)
