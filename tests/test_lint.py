"""ruff in CI (issue 33): ``ruff check`` and ``ruff format --check`` pass over the code, with the settings of
``pyproject.toml`` (one line length, 120), and the files not formatted yet stay a shrinking list.

The formatter is pinned in the ``test`` extra: another ruff may format differently.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from test_layout import MAX_FUNCTION_LINES, MAX_LINES

ROOT = Path(__file__).resolve().parents[1]
CODE = ["patchkit", "patches", "tests", "benchmarks"]
NOT_FORMATTED = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["format"]["exclude"]


def _ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, input=stdin)


@pytest.mark.parametrize("args", [("check",), ("format", "--check")], ids=["check", "format"])
def test_ruff_passes(args):
    result = _ruff(*args, *CODE)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def _over_the_limits(source: str) -> list[str]:
    over = [f"{len(source.splitlines())} lines"] if len(source.splitlines()) > MAX_LINES else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                over.append(f"{node.name} {node.end_lineno - start + 1} lines")
    return over


@pytest.mark.parametrize("path", NOT_FORMATTED)
def test_a_file_left_unformatted_would_break_a_limit_once_formatted(path):
    """Each file the formatter skips is skipped only because, formatted, it would break the layout's limits
    (a module over 500 lines, a function over 80): one that would not must leave the list and be formatted."""
    source = (ROOT / path).read_text()
    assert not _over_the_limits(source), f"{path} is over the limits unformatted"
    formatted = _ruff("format", "--isolated", "--line-length", "120", "--target-version", "py310", "-", stdin=source)
    assert formatted.returncode == 0, formatted.stderr
    assert _over_the_limits(formatted.stdout), f"{path} fits the limits formatted: take it out of the exclude list"
