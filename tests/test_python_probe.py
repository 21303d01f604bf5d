"""A ``--python`` that hangs fails fast, says so in one line, and leaves nothing running (issue 42, finding 10).

Failed before: 60 s to fail, the error dumped the whole probe script (``subprocess.TimeoutExpired``'s text),
and what the interpreter started was left running.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from patchkit.errors import InterpreterError
from patchkit import interpreter
from patchkit.vllm.release import install


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_hanging_interpreter_is_stopped_with_what_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(interpreter, "PROBE_TIMEOUT", 1.0)
    pids = tmp_path / "pids"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pids}\nsleep 300\n")
    python.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(InterpreterError) as caught:
        install.from_python(python)
    assert time.monotonic() - started < 10
    assert caught.value.message == f"--python {python} did not answer within 1 s (it was stopped)"
    assert "sys.path" not in caught.value.message + caught.value.hint  # the probe script is not shown
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(grandchild)
    finally:
        if _alive(grandchild):  # the test leaves nothing running either
            os.kill(grandchild, 9)


def test_the_probe_timeout_is_well_under_a_minute():
    assert interpreter.PROBE_TIMEOUT <= 20
