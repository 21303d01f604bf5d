"""No silent success at the edges (issue 20): each case answers right, on real vLLM release files.

Each test here failed before its fix (the report of issue 20 names the before/after output).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_install import make_venv, venv_site_packages
from test_releases import snapshot

pytestmark = pytest.mark.release
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
TYPOS = ["DeepseekV3ForCausalLm", "DeepseekV3ForCausalLM ", "NoSuchArch", ""]


@pytest.mark.parametrize("version", ["0.17.0", "0.17.1"])
@pytest.mark.parametrize("command", ["apply", "verify", "status", "revert"])
def test_unknown_arch_is_a_usage_error_on_every_command(release, cli, version, command):
    """A name the registry does not hold is exit 2 with the closest names, never 'in effect'."""
    sp = release(version)
    before = snapshot(sp)
    for name in TYPOS:
        result = cli(command, "--site-packages", str(sp), "--arch", name)
        assert result.exit_code == 2, (name, result.stdout + result.stderr)
        assert "EAGLE-3 is in effect" not in result.stdout
        assert result.stderr.startswith("error: --arch "), result.stderr
        if name.strip().startswith("Deepseek"):
            assert "did you mean DeepseekV3ForCausalLM" in result.stderr
        code, data = cli.json(command, "--site-packages", str(sp), "--arch", name)
        assert code == 2 and data["exit_code"] == 2 and "ok" not in data, data
    assert snapshot(sp) == before


def test_empty_arch_agrees_with_resolve(release, cli):
    sp = release("0.17.1")
    assert cli("resolve", "", "--site-packages", str(sp)).exit_code == 2
    result = cli("apply", "--site-packages", str(sp), "--arch", "")
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "is not an architecture name" in result.stderr


def _serving_venv(release, tmp_path: Path, version: str = "0.17.1") -> tuple[Path, Path]:
    python = make_venv(tmp_path / "venv")
    site = venv_site_packages(python)
    for entry in release(version).iterdir():
        shutil.move(str(entry), site / entry.name)
    return python, site


def test_interpreter_that_imports_another_vllm(release, cli, tmp_path, monkeypatch):
    """A bare vllm/ earlier on the path (PYTHONPATH=src): apply refuses (3), verify fails (1)."""
    python, site = _serving_venv(release, tmp_path)
    (tmp_path / "src" / "vllm").mkdir(parents=True)
    (tmp_path / "src" / "vllm" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    before = snapshot(site)
    for extra in ([], ["--dry-run"]):
        result = cli("apply", "--python", str(python), *extra)
        assert result.exit_code == 3, result.stdout + result.stderr
        assert f"imports vllm from {tmp_path / 'src' / 'vllm'}" in result.stderr
        assert f"take {tmp_path / 'src'} off that interpreter's import path" in result.stderr
    assert snapshot(site) == before
    monkeypatch.delenv("PYTHONPATH")
    assert cli("apply", "--python", str(python)).exit_code == 0
    assert cli("verify", "--python", str(python)).exit_code == 0
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    result = cli("verify", "--python", str(python))
    assert result.exit_code == 1, result.stdout
    assert "EAGLE-3 is not in effect" in result.stdout and "the interpreter imports this vLLM" in result.stdout
    code, data = cli.json("verify", "--python", str(python))
    assert code == 1 and data["ok"] is False
    assert any(m.startswith("the interpreter imports this vLLM") for m in data["missing"])
    assert cli("revert", "--python", str(python)).exit_code == 0  # revert still works on the install
    assert snapshot(site) == before


def test_symlinked_package_folder_is_refused_and_status_tells_the_truth(release, cli, tmp_path):
    """linked/vllm -> real/vllm: apply through 'linked' refuses before writing; 'real' is untouched."""
    real = release("0.17.1")
    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.copytree(real / "vllm-0.17.1.dist-info", linked / "vllm-0.17.1.dist-info")
    (linked / "vllm").symlink_to(real / "vllm")
    before = snapshot(real)
    code, data = cli.json("apply", "--site-packages", str(linked))
    assert code == 3, data
    reasons = {p["reason"] for p in data["patches"]}
    assert all(f"vllm is a symbolic link to {real / 'vllm'}" in r for r in reasons), reasons
    assert not any("target install instead" in r for r in reasons)
    assert snapshot(real) == before and not (linked / ".patchkit").exists()
    assert "no patchkit changes in this install" in cli("status", "--site-packages", str(real)).stdout
    assert cli("apply", "--site-packages", str(linked), "--dry-run").exit_code == 3


def _uv_cache(release, tmp_path: Path) -> Path:
    """A uv cache as uv lays it out: CACHEDIR.TAG at the root, an unpacked wheel in archive-v0/<id>/."""
    cache = tmp_path / "uv-cache"
    entry = cache / "archive-v0" / "Xq3bT9"
    entry.parent.mkdir(parents=True)
    shutil.move(str(release("0.17.1")), entry)
    (cache / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    return entry


def _uv_venv(tmp_path: Path, entry: Path, link) -> Path:
    """A uv-made venv (CACHEDIR.TAG and pyvenv.cfg at its root) whose vLLM files link into ``entry``."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    for src in entry.rglob("*"):
        dest = site / src.relative_to(entry)
        if src.is_dir():
            dest.mkdir(exist_ok=True)
        else:
            link(src, dest)
    return site


def test_uv_cache_is_refused_and_never_advised(release, cli, tmp_path):
    entry = _uv_cache(release, tmp_path)
    before = snapshot(entry)
    result = cli("apply", "--site-packages", str(entry))
    assert result.exit_code == 3, result.stdout + result.stderr
    assert "is inside a package cache" in result.stderr and "CACHEDIR.TAG" in result.stderr
    site = _uv_venv(tmp_path, entry, lambda src, dest: dest.symlink_to(src))  # uv --link-mode symlink
    code, data = cli.json("apply", "--site-packages", str(site))
    assert code == 3, data
    for p in data["patches"]:
        assert "is a symbolic link to" in p["reason"] and "target install instead" not in p["reason"], p
        assert "--link-mode copy" in p["reason"]
    assert snapshot(entry) == before


def test_hardlinked_uv_venv_never_changes_the_cache(release, cli, tmp_path):
    """uv's default on Linux (--link-mode hardlink): patchkit replaces files (a new inode), so the cache keeps its bytes."""
    entry = _uv_cache(release, tmp_path)
    before = snapshot(entry)
    site = _uv_venv(tmp_path, entry, lambda src, dest: os.link(src, dest))
    assert (site / DEEPSEEK).stat().st_ino == (entry / DEEPSEEK).stat().st_ino
    assert cli("apply", "--site-packages", str(site)).exit_code == 0
    assert (site / DEEPSEEK).read_bytes() != (entry / DEEPSEEK).read_bytes()
    assert snapshot(entry) == before and not (entry / ".patchkit").exists()
    assert cli("revert", "--site-packages", str(site)).exit_code == 0
    assert snapshot(entry) == before and snapshot(site) == before
