"""SIGINT/SIGTERM while the ``patchkit`` script starts up (importing Typer): one line, exit 130/143, no traceback.

The signal is sent by the process itself when it starts importing ``typer`` (an import hook), so
the test is exact, not timed. It runs the script's entry point as pyproject.toml declares it.
Failed before the fix (entry point ``patchkit.ui.cli:main``, whose module imports Typer before any
handler): SIGINT gave a ``KeyboardInterrupt`` traceback, SIGTERM killed the process silently.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from test_releases import snapshot

pytestmark = pytest.mark.release
ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import builtins, os, signal, sys
signum = int(sys.argv.pop(1))
module, function = sys.argv.pop(1).split(":")
real = builtins.__import__
def hook(name, *args, **kwargs):
    if name == "typer":
        builtins.__import__ = real
        os.kill(os.getpid(), signum)
    return real(name, *args, **kwargs)
builtins.__import__ = hook
sys.argv = ["patchkit", *sys.argv[1:]]
main = getattr(__import__(module, fromlist=[function]), function)
sys.exit(main())
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["status", "apply"])
@pytest.mark.parametrize("as_json", [False, True])
def test_signal_while_starting_up_is_said(release, signum, command, as_json):
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["patchkit"]
    sp = release("0.17.1")
    before = snapshot(sp)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(int(signum)),
            entry,
            command,
            "--site-packages",
            str(sp),
            *(["--json"] if as_json else []),
        ],
        capture_output=True,
        text=True,
    )
    # one wording for one Ctrl-C (issue 32): 'error: interrupted by SIGINT (Ctrl-C) ...' and a hint, as
    # every other interrupted command says it (it printed a bare line here)
    name = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else "SIGTERM"
    message = f"interrupted by {name} while starting up; nothing was written"
    assert proc.returncode == 128 + signum, (proc.returncode, proc.stdout, proc.stderr)
    if as_json:
        assert json.loads(proc.stdout) == {
            "error": message,
            "hint": "run the command again",
            "next_step": None,
            "exit_code": 128 + signum,
        }
        assert proc.stderr == ""
    else:
        assert proc.stderr == f"error: {message}\nhint: run the command again\n" and proc.stdout == ""
    assert snapshot(sp) == before
