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
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "verify", "--site-packages", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 4
    assert proc.stderr.startswith("error: no vLLM distribution found")
    assert "\x1b[" not in proc.stderr + proc.stdout


def test_every_option_is_in_its_synopsis_and_help_says_what_it_does():
    """Issue 32: docs/commands.md lacked --watch, --dtype and --eager; rehearse --help omitted exit 4;
    --target read "Distribution to patch" on the commands that only read."""
    import re
    from pathlib import Path

    import typer.main
    from typer.testing import CliRunner

    from patchkit.ui.cli import app

    docs = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    rows = {line.split("`")[1].split()[0]: line for line in docs.splitlines() if re.match(r"\| `", line)}
    shared = {"--site-packages", "--python", "--target", "--json", "--ray", "--help"}  # the [...] of each row
    command = typer.main.get_command(app)
    for name, sub in command.commands.items():
        for leaf in sub.commands.values() if hasattr(sub, "commands") else [sub]:
            options = [o for p in leaf.params for o in p.opts if o.startswith("--") and o not in shared]
            assert not [o for o in options if o not in rows[name]], (name, options)
    runner = CliRunner()
    wide = {"COLUMNS": "200", "NO_COLOR": "1"}
    assert "4 when the environment cannot run it" in " ".join(
        runner.invoke(app, ["rehearse", "--help"], env=wide).stdout.split()
    )
    for name in ("verify", "status", "scan", "doctor", "resolve", "list", "rehearse", "explain"):
        text = " ".join(runner.invoke(app, [name, "--help"], env=wide).stdout.split())
        assert "Distribution to read" in text and "Distribution to patch" not in text, name
    for name in ("apply", "revert"):
        assert "Distribution to patch" in " ".join(runner.invoke(app, [name, "--help"], env=wide).stdout.split()), name
