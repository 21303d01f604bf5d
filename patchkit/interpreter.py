"""The interpreter ``--python`` names: found (:func:`interpreter_path`) and asked, once, for its import path
(:func:`run_probe`), in a session of its own and within :data:`PROBE_TIMEOUT`. Standard library only, and
target-neutral: the import package asked about is an argument (``vllm``, ``sglang``); each target's wing
(:mod:`patchkit.vllm.release.install`, :mod:`patchkit.sglang.install`) reads the answer with
:func:`patchkit.distributions.read_probe`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from patchkit.errors import InterpreterError

# Printed by the target interpreter: its import path, in import order. Standard library only.
SENTINEL = "PATCHKIT-SYS-PATH "
PREFIX = "PATCHKIT-PYCACHE-PREFIX "
IMPORTS = "PATCHKIT-IMPORTS-FROM "
# ... and where it would import the target package from: importlib.util.find_spec locates the package without
# running it (a top-level name: no parent package is imported either); None when it cannot be imported.
_PROBE = (
    f"import json, sys; print({SENTINEL!r} + json.dumps(sys.path)); "
    f"print({PREFIX!r} + json.dumps(sys.pycache_prefix))\n"
    "try:\n import importlib.util; s = importlib.util.find_spec(%r)\n"
    " f = None if s is None else list(s.submodule_search_locations or [s.origin])\n"
    "except Exception:\n f = None\n"
    f"print({IMPORTS!r} + json.dumps(f))"
)


def probe(package: str) -> str:
    """The probe script for the top-level import package ``package`` (``"vllm"``): it prints the import path,
    the pycache prefix and where ``package`` would be imported from, and imports nothing but the standard library.

    Raises:
        ValueError: ``package`` is not a plain top-level name.
    """
    if not package.isidentifier():
        raise ValueError(f"not a top-level package name: {package!r}")
    return _PROBE % package


def interpreter_path(given: Path | str) -> Path:
    """The Python executable ``--python`` names: a path, a command on ``PATH``, or a venv folder.

    ``python3`` (no slash, not a folder here) is looked up on ``PATH`` as a shell would; a folder
    holding ``bin/python`` (a venv or conda environment) stands for that interpreter.

    Raises:
        InterpreterError: nothing executable is found.
    """
    text = str(given)
    path = Path(text).expanduser()
    if "/" not in text and not path.is_dir():
        found = shutil.which(text)  # a bare name means a command, as in a shell
        if found is not None:
            return Path(found)
        if not path.exists():
            raise InterpreterError(
                f"--python {text}: no such file, and no command {text!r} on PATH",
                "give the python of the environment that serves the model, e.g. /opt/venv/bin/python",
            )
    if not path.exists():
        raise InterpreterError(
            f"--python {path} does not exist",
            "give the python of the environment that serves the model, e.g. /opt/venv/bin/python",
        )
    if path.is_dir():
        for name in ("bin/python", "bin/python3"):
            if (path / name).is_file() and os.access(path / name, os.X_OK):
                return path / name
        raise InterpreterError(
            f"--python {path} is a folder without bin/python",
            "give the python executable itself, or the venv folder that holds bin/python",
        )
    if not os.access(path, os.X_OK):
        raise InterpreterError(
            f"--python {path} is not an executable file",
            "give the python executable itself, e.g. /opt/venv/bin/python",
        )
    return path


PROBE_TIMEOUT = 15.0
"""Seconds the interpreter probe may take: it prints its import path and starts nothing (a Python starts in well
under a second, a loaded one in a few); a stuck interpreter fails after this, not after a minute."""


def run_probe(interpreter: Path, package: str) -> subprocess.CompletedProcess:
    """Run :func:`probe` for ``package`` in ``interpreter``, in a session of its own (nothing it starts outlives it).

    Raises:
        InterpreterError: it cannot be started, or it does not finish within :data:`PROBE_TIMEOUT`
            (its whole process group is killed; the message names neither the script nor its output:
            issue 42, finding 10).
    """
    try:
        child = subprocess.Popen(
            [str(interpreter), "-c", probe(package)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        raise InterpreterError(
            f"--python {interpreter} could not be run: {getattr(exc, 'strerror', None) or exc}",
            "give the python executable of the serving environment",
        ) from exc
    try:
        out, err = child.communicate(timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        raise InterpreterError(
            f"--python {interpreter} did not answer within {PROBE_TIMEOUT:g} s (it was stopped)",
            "check that it starts: run it with -c pass (a sitecustomize or .pth file that waits, "
            "or a wrapper script that is not Python?)",
        ) from None
    finally:
        if child.poll() is None:  # an interrupt while waiting: nothing is left running
            _kill_group(child)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def _kill_group(child: subprocess.Popen) -> None:
    """Kill ``child``'s process group (its own session: only what it started) and reap ``child``."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()
    child.wait()
    for stream in (child.stdout, child.stderr):  # not read: a process that left the group may hold them
        if stream is not None:
            stream.close()


__all__ = ["IMPORTS", "PREFIX", "PROBE_TIMEOUT", "SENTINEL", "interpreter_path", "probe", "run_probe"]
