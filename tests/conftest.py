"""Shared fixtures: real vLLM release trees (fetched at test time, cached outside the repo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

import vllm_release  # noqa: E402
from vllm_release import fresh_copy  # noqa: E402

from patchkit.ui.cli import app  # noqa: E402


@pytest.fixture(autouse=True)
def _network_markers(request):
    """Tell ``vllm_release`` the running test's markers: a test that fetches a release or builds a
    venv without the ``release``/``runtime``/``engine`` marker fails instead of reaching the network."""
    vllm_release.current_test_markers = frozenset(m.name for m in request.node.iter_markers())
    yield
    vllm_release.current_test_markers = None


@pytest.fixture
def release(tmp_path: Path):
    """Factory: ``release("0.17.1")`` returns a fresh, writable site-packages copy of that release."""

    def make(version: str) -> Path:
        return fresh_copy(version, tmp_path / f"vllm-{version}")

    return make


class Cli:
    """Runs ``patchkit`` in-process through Typer's test runner."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str):
        return self.runner.invoke(app, list(args), catch_exceptions=False)

    def json(self, *args: str) -> tuple[int, dict]:
        result = self(*args, "--json")
        return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def cli() -> Cli:
    """The ``patchkit`` CLI, in-process."""
    return Cli()
