"""The ``patchkit`` script and ``python -m patchkit``: signal handlers first, then the CLI.

Importing :mod:`patchkit.ui.cli` (Typer, Click) is most of a read-only command's start-up, and the
command's own handlers (:func:`patchkit.ui.runner.run`) are installed only once the command line is
parsed. Before that, Python's defaults would print a ``KeyboardInterrupt`` traceback for Ctrl-C
and let SIGTERM kill the process silently (exit 143). This module imports only the standard
library's ``signal`` and ``sys``, installs a handler for both signals, and then imports and runs
the CLI: an interrupt until the command starts says ``interrupted by SIGINT while starting up;
nothing was written`` on stderr (one JSON object on stdout with ``--json``) and exits 130 (SIGINT)
or 143 (SIGTERM), the codes of an interrupted command (README, Exit codes).
"""

from __future__ import annotations

import signal
import sys


class _Starting(BaseException):
    """A signal before the command started (not an Exception: Click and Typer let it through)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, _frame) -> None:
    raise _Starting(signum)


def main() -> None:
    """Install the start-up handlers, then run :func:`patchkit.ui.cli.main`; exits with the command's code.

    Raises:
        SystemExit: always (the command's exit code; 130/143 for an interrupt while starting up).
    """
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _on_signal)
    try:
        try:
            from patchkit.ui.cli import (
                main as cli_main,
            )  # lazy: the signal handlers go in before Typer and the CLI load
        except ModuleNotFoundError as exc:
            from patchkit.errors import missing_requirement  # lazy: only when a requirement of patchkit is missing

            problem = missing_requirement(exc)
            if problem is None:
                raise
            print(f"error: {problem.message}\nhint: {problem.hint}", file=sys.stderr)
            sys.exit(int(problem.exit_code))
        cli_main()
    except _Starting as exc:
        for s in (signal.SIGINT, signal.SIGTERM):  # a second signal now changes nothing
            signal.signal(s, signal.SIG_IGN)
        code = 128 + exc.signum
        from patchkit.interrupt import name  # lazy: only signal and sys load before the handlers are in

        # the one wording of an interrupted command (patchkit.ui.console.error's): error, hint, exit code
        message = f"interrupted by {name(exc.signum)} while starting up; nothing was written"
        try:
            if "--json" in sys.argv[1:]:
                import json  # lazy: as above; json only on this path

                print(
                    json.dumps(
                        {"error": message, "hint": "run the command again", "next_step": None, "exit_code": code}
                    )
                )
            else:
                print(f"error: {message}\nhint: run the command again", file=sys.stderr)
        except (OSError, AttributeError, ValueError):
            pass
        sys.exit(code)


if __name__ == "__main__":
    main()
