"""``--python ./NAME`` names the file in the current folder, never a command on ``PATH`` (issue 42, finding 10,
held-back input of the ``--python`` kind). Failed before: Click turned ``./python3`` into ``python3``, which the
lookup took for a command as a shell would, and patchkit probed ``PATH``'s python3, another environment, without a
word (``no vLLM distribution found in the environment of /usr/.../python3``)."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_a_dot_slash_python_is_the_file_named(tmp_path, monkeypatch, cli, form):
    script = tmp_path / "python3"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    args = ["--python", "./python3"] if form == "separate" else ["--python=./python3"]
    result = cli("status", *args)
    assert "Traceback" not in result.stderr
    named = [line for line in result.stderr.splitlines() if "environment of" in line or "--python" in line]
    assert any(str(script) in line for line in named), result.stderr
