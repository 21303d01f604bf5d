"""The options of the running command, which every next step it prints repeats.

A command run with ``--python``/``--site-packages``, ``--model``/``--arch`` or ``--guard``
records them here when it starts (:func:`begin`); :func:`run_options` gives them as a
:class:`~patchkit.advice.RunOptions`, and :func:`steps` renders each
:class:`~patchkit.advice.NextStep` of a report with them (:meth:`NextStep.for_run`, decided on the
step's argument tuple, not on text). The steps themselves are made where the decision is made
(the API, doctor, the planner, an error); this module only completes and renders them.

This module imports only the standard library and :mod:`patchkit.advice` (start-up, issue 11).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from patchkit.advice import NextStep, RunOptions

given: dict[str, Any] = {"environment": (), "scope": (), "guard": False}
"""The options of the running command (:func:`begin` sets them); ``process`` is set when patchkit
runs as its own process (:func:`patchkit.ui.cli.main`)."""


def begin(
    site_packages: Optional[Path], python: Optional[Path], arch: Optional[list[str]], model: Optional[Path], guard: bool
) -> None:
    """Record the options of the command that starts now (for :func:`run_options`)."""
    given.update(
        environment=tuple(options_as_given(site_packages, python) or ()),
        scope=scope_argv(arch, model),
        guard=guard,
        pip=pip_words(python),
    )


def run_options() -> RunOptions:
    """The running command's options, for :meth:`NextStep.for_run`."""
    return RunOptions(
        tuple(given["environment"]),
        tuple(given["scope"]),
        bool(given["guard"]),
        program(),
        tuple(given.get("pip") or ("pip",)),
    )


def pip_words(python: Optional[Path]) -> tuple[str, ...]:
    """``(PYTHON, "-m", "pip")`` for the interpreter ``--python`` names, absolute (a venv folder: its
    ``bin/python``; a name on ``PATH``: where ``PATH`` finds it); ``("pip",)`` without ``--python``."""
    if python is None:
        return ("pip",)
    path = Path(python)
    if path.is_dir():
        path = next((path / n for n in ("bin/python", "bin/python3") if (path / n).exists()), path / "bin/python")
    elif os.sep not in str(python):
        found = shutil.which(str(python))
        path = Path(found) if found else path
    return (os.path.abspath(path), "-m", "pip")


def program(argv0: str | None = None) -> tuple[str, ...]:
    """The words that run patchkit as this process was run, for the commands it prints.

    ``("patchkit",)`` when patchkit runs in-process (no ``given["process"]``) or when
    ``shutil.which("patchkit")`` is the file this process was started as; ``python -m patchkit``
    as ``(sys.executable, "-m", "patchkit")``; else the script as it was given, absolute
    (``/tmp/pk/bin/patchkit``, a venv's script that is not on ``PATH``: issue 32).

    Args:
        argv0: the script this process was started as (default ``sys.argv[0]``).
    """
    if not given.get("process"):
        return ("patchkit",)
    argv0 = sys.argv[0] if argv0 is None else argv0
    if not argv0:
        return ("patchkit",)
    if Path(argv0).name == "__main__.py":
        return (sys.executable, "-m", "patchkit")
    started = shutil.which(argv0) if os.sep not in argv0 else argv0
    on_path = shutil.which("patchkit")
    if started is None or (on_path is not None and os.path.realpath(on_path) == os.path.realpath(started)):
        return ("patchkit",)
    return (os.path.abspath(started),)


def steps(next_steps: Sequence[NextStep]) -> list[NextStep]:
    """``next_steps`` with the running command's options added (:meth:`NextStep.for_run`)."""
    options = run_options()
    return [s.for_run(options) for s in next_steps]


def command(step: NextStep) -> str:
    """The shell form of ``step`` with the running command's options (for a line that names it)."""
    return step.for_run(run_options()).command


def scope_argv(arch: Optional[list[str]], model: Optional[Path]) -> tuple[str, ...]:
    """``--model`` (absolute: a step may be run elsewhere) and each ``--arch``, as arguments."""
    out: list[str] = ["--model", os.path.abspath(model)] if model is not None else []
    for a in arch or ():
        out += ["--arch", a]
    return tuple(out)


def command_options(site_packages: Optional[Path], python: Optional[Path]) -> list[str]:
    """The environment options as given, as a list (for the commands patchkit's guard names)."""

    def spelled(path: Path) -> str:  # absolute: the guard's line is read in another folder
        return os.path.abspath(path) if os.sep in str(path) or path.exists() else str(path)

    return (
        ["--python", spelled(python)]
        if python is not None
        else ["--site-packages", spelled(site_packages)]
        if site_packages is not None
        else []
    )


def options_as_given(site_packages: Optional[Path], python: Optional[Path]) -> list[str] | None:
    """The environment options exactly as given (``doctor``'s advice repeats them), or None when neither was."""
    return (
        ["--python", str(python)]
        if python is not None
        else ["--site-packages", str(site_packages)]
        if site_packages is not None
        else None
    )
