"""``--help`` at 80 columns (issue 25): doctor's ``--pipeline-parallel-size`` was cut ("--pipeline-parallel…"),
and rehearse's description broke mid-sentence where its docstring's lines ended. Both seen failing before."""

from __future__ import annotations

import os
import subprocess
import sys


def help_text(command: str) -> list[str]:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", command, "--help"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_doctor_help_shows_the_pipeline_option_whole():
    lines = help_text("doctor")
    assert any("--pipeline-parallel-size " in line for line in lines), "\n".join(lines)
    assert not any("…" in line for line in lines), "\n".join(lines)


def test_rehearse_help_wraps_only_at_the_width():
    lines = [line.strip() for line in help_text("rehearse")]
    start = next(i for i, line in enumerate(lines) if line.startswith("Exit 0"))
    end = next(i for i in range(start, len(lines)) if lines[i].endswith("only read."))
    assert all(len(line) > 60 for line in lines[start:end]), "\n".join(lines[start : end + 1])
