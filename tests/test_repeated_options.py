"""An option that takes one value, given twice, is a usage error on every command (issue 42, finding 8).

Failed before the fix: Click kept the last value and dropped the others without a word, so
``apply --model A --model B`` patched B alone and exited 0 (four of five GPU rehearsals ran unpatched).
Nothing here reads a release: the refusal comes before the install is looked for.
"""

from __future__ import annotations

import pytest

CASES = [
    (["apply", "--model", "/tmp/a", "--model", "/tmp/b"], "--model", 2),
    (["apply", "--model=/tmp/a", "--model", "/tmp/b", "--model=/tmp/c"], "--model", 3),
    (["verify", "--model", "/tmp/a", "--model", "/tmp/b"], "--model", 2),
    (["status", "--model", "/tmp/a", "--model", "/tmp/b"], "--model", 2),
    (["revert", "--model", "/tmp/a", "--model", "/tmp/b"], "--model", 2),
    (["doctor", "--model", "/tmp/a", "--model", "/tmp/b"], "--model", 2),
    (["doctor", "--model", "/tmp/a", "--draft", "/tmp/b", "--draft", "/tmp/c"], "--draft", 2),
    (["rehearse", "--model", "/tmp/a", "--model", "/tmp/b", "--draft", "/tmp/c"], "--model", 2),
    (["apply", "--python", "/tmp/a", "--python", "/tmp/b"], "--python", 2),
]


@pytest.mark.parametrize("args,option,count", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_repeated_single_value_option_is_refused(cli, args, option, count):
    result = cli(*args)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.splitlines()[0] == f"error: {option} was given {count} times; it takes one value"
    assert result.stdout == ""


def test_the_refusal_with_json_is_one_object(cli):
    code, data = cli.json("apply", "--model", "/tmp/a", "--model", "/tmp/b")
    assert code == 2 and data["exit_code"] == 2 and data["error"] == "--model was given 2 times; it takes one value"


@pytest.mark.parametrize("command", ["apply", "verify", "status", "revert"])
def test_arch_is_taken_as_many_times_as_given(cli, command, tmp_path):
    """``--arch`` is repeatable: two of them reach the command (here: to the missing install's error), not exit 2."""
    result = cli(command, "--arch", "A", "--arch", "B", "--site-packages", str(tmp_path / "none"))
    assert result.exit_code == 4 and "is not a directory" in result.stderr, result.stderr


def test_a_value_that_looks_like_the_option_is_not_counted(cli, tmp_path):
    """``--python --model`` names an interpreter called ``--model``: one --model follows, not two."""
    result = cli("apply", "--python", "--model", "--model", str(tmp_path), "--dry-run")
    assert "was given" not in result.stderr
