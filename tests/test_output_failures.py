"""A standard output that is closed (>&-) or full (> /dev/full) is said like a pipe closed early: exit 141, one line.

Failed before the fix: ``>&-`` gave ``AttributeError: 'NoneType' object has no attribute 'write'``
and ``> /dev/full`` ``OSError: [Errno 28]``, both tracebacks with exit 1 (for ``verify``: "not in effect").
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from test_releases import snapshot

pytestmark = pytest.mark.release
ENDED = f"; exit 141. The command itself ran to its end: '{sys.executable} -m patchkit status --site-packages "
"""Run as ``python -m patchkit``, the command it names is run the same way (issue 32: a printed command
names the executable the user ran, ``ui/hints.program``)."""


def _patchkit(args: list[str], stdout) -> subprocess.CompletedProcess:
    closed = stdout == "closed"
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args],
        stderr=subprocess.PIPE,
        text=True,
        stdout=None if closed else stdout,
        preexec_fn=(lambda: os.close(1)) if closed else None,
    )


@pytest.mark.parametrize("command", ["verify", "apply", "revert"])
@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("where", ["closed", "full"])
def test_stdout_that_cannot_be_written_is_exit_141_and_one_line(release, command, as_json, where):
    sp = release("0.17.1")
    if command == "revert":
        assert (
            subprocess.run(
                [sys.executable, "-m", "patchkit", "apply", "--site-packages", str(sp)], capture_output=True
            ).returncode
            == 0
        )
    before = snapshot(sp)
    args = [command, "--site-packages", str(sp), *(["--json"] if as_json else [])]
    with open(os.devnull if where == "closed" else "/dev/full", "w") as sink:
        proc = _patchkit(args, "closed" if where == "closed" else sink)
    said = {
        "closed": "error: standard output is closed (>&-), so the report could not be written",
        "full": "error: standard output could not be written (No space left on device), so the report is incomplete",
    }
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == f"{said[where]}{ENDED}{sp}' shows the install\n", proc.stderr
    if command != "verify":  # the command ran to its end, as said: apply wrote, revert put back
        assert snapshot(sp) != before
        status = subprocess.run(
            [sys.executable, "-m", "patchkit", "status", "--site-packages", str(sp)], capture_output=True, text=True
        )
        assert ("no patchkit changes" in status.stdout) == (command == "revert"), status.stdout


def test_an_sglang_scan_whose_output_is_closed_names_no_vllm_command(tmp_path):
    """A fresh user's finding: ``scan --target sglang | head -1`` advised ``status --site-packages DIR``, which
    looks for vLLM there and fails (exit 4); 'status' is not written for SGLang."""
    from test_sglang import fake_sglang

    site = fake_sglang(tmp_path)
    with open("/dev/full", "w") as sink:
        proc = _patchkit(["scan", "--target", "sglang", "--site-packages", str(site)], sink)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr.endswith(
        "; exit 141. The command itself ran to its end: run it again with its output to a file to read the report\n"
    ), proc.stderr
    assert "status" not in proc.stderr
