"""The CLI's own surface: list, help and completion, plain output, python -m."""

from __future__ import annotations

import os
import subprocess
import sys

from patchkit.plan.spec import load_patches


def test_list_text_and_json(cli):
    result = cli("list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["patch", "vLLM", "target", "summary"]
    assert any(line.startswith("eagle3-kimi-k25-proposer ") and ">=0.15.1" in line for line in lines)
    assert all(line == line.rstrip() for line in lines), "no trailing padding"
    code, listed = cli.json("list")
    assert code == 0
    assert [p["id"] for p in listed["patches"]] == [p.id for p in load_patches()]
    assert listed["patches"][0]["vllm"] and listed["patches"][0]["reference"]


def test_help_offers_shell_completion_and_every_command(cli):
    result = cli("--help")
    assert result.exit_code == 0
    for word in ("--install-completion", "apply", "verify", "revert", "status", "resolve", "list", "explain", "doctor"):
        assert word in result.stdout


def test_python_dash_m_and_no_color(tmp_path):
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "patchkit", "verify", "--site-packages", str(tmp_path)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 4
    assert proc.stderr.startswith("error: no vLLM distribution found")
    assert "\x1b[" not in proc.stderr + proc.stdout
