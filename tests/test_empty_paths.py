"""An empty path option (an unset "$SP") is a usage error on every command, never the current folder.

Failed before the fix (every case): Click turned "" into Path("."), so each command acted on the
current folder (here a copy of vLLM 0.17.1's site-packages) instead of exiting 2.
"""

from __future__ import annotations

import pytest

from test_releases import snapshot

pytestmark = pytest.mark.release
GLM = str(__import__("pathlib").Path(__file__).parent / "checkpoints" / "glm-4.6")

CASES = [
    ["apply", "--site-packages", ""],
    ["apply", "--site-packages="],
    ["apply", "--python", ""],
    ["apply", "--model", ""],
    ["verify", "--site-packages", ""],
    ["revert", "--model", ""],
    ["status", "--site-packages", ""],
    ["scan", "--site-packages", ""],
    ["resolve", "Glm4MoeForCausalLM", "--site-packages", ""],
    ["doctor", "--model", ""],
    ["doctor", "--model", GLM, "--draft", ""],
    ["rehearse", "--model", GLM, "--draft", "", "--python", "python3"],
    ["guard", "install", "--site-packages", ""],
    ["guard", "remove", "--python", ""],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a).replace(GLM, "GLM") for a in CASES])
def test_empty_path_is_a_usage_error(release, cli, monkeypatch, args):
    sp = release("0.17.1")
    monkeypatch.chdir(sp)  # what '.' would have found
    before = snapshot(sp)
    result = cli(*args)
    option = next(a for a in args if a.startswith("--") and (a.endswith("=") or args[args.index(a) + 1] == ""))
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.splitlines() == [
        f"error: {option.rstrip('=')} was given an empty path",
        f'hint: give {option.rstrip("=")} a folder or file (an unset shell variable expands to ""; '
        "'.' names the current folder)",
    ], result.stderr
    assert result.stdout == "" and snapshot(sp) == before


def test_empty_path_with_json_is_one_object(release, cli, monkeypatch):
    sp = release("0.17.1")
    monkeypatch.chdir(sp)
    code, data = cli.json("verify", "--site-packages", "")
    assert code == 2 and data["exit_code"] == 2 and data["error"] == "--site-packages was given an empty path"
