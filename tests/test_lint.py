"""ruff in CI (issue 33): ``ruff check`` and ``ruff format --check`` pass over the code, with the settings of
``pyproject.toml`` (one line length, 120), and the formatter skips no file of ours.

The formatter is pinned in the ``test`` extra: another ruff may format differently.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
CODE = ["patchkit", "patches", "tests", "benchmarks"]
RUFF = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]


def _ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, input=stdin)


@pytest.mark.parametrize("args", [("check",), ("format", "--check")], ids=["check", "format"])
def test_ruff_passes(args):
    result = _ruff(*args, *CODE)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def test_the_formatter_skips_no_file():
    """Every file is formatted: the only exclusion is the codemods' byte-exact fixtures, which are data. An
    exclude list for the formatter alone (how the unformatted files were carried until issue 33) is gone."""
    assert RUFF.get("extend-exclude") == ["tests/codemod_cases"]
    assert "exclude" not in RUFF and "exclude" not in RUFF.get("format", {})
