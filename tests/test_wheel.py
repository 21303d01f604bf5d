"""A wheel-installed patchkit (not only an editable one) finds its patch definitions."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATCH_IDS = {
    "eagle3-allowlist",
    "eagle3-deepseek-backbone",
    "eagle3-deepseek-interface",
    "eagle3-kimi-k25-interface",
    "eagle3-kimi-k25-proposer",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)], check=True)
    (found,) = out.glob("patchkit-*.whl")
    return found


def test_wheel_ships_the_patch_definitions(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith("patchkit/patches/") and n.endswith(".py")}
    repo_patches = {f"patchkit/patches/{p.name}" for p in (REPO / "patches").glob("*.py")}
    assert shipped == repo_patches
    assert not any(n.startswith(("tests/", "patches/")) for n in names)


@pytest.mark.release
def test_wheel_install_applies_on_a_real_release(wheel, release, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
    listed = subprocess.run([str(venv / "bin" / "patchkit"), "list", "--json"], capture_output=True, text=True, check=True)
    assert {p["id"] for p in json.loads(listed.stdout)["patches"]} == PATCH_IDS

    sp = release("0.17.1")
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import patchkit.patches; print(patchkit.patches.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    assert str(venv) in where.stdout  # the wheel's copy, not the source tree
    applied = subprocess.run([str(venv / "bin" / "patchkit"), "apply", "--site-packages", str(sp), "--json"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert {p["outcome"] for p in json.loads(applied.stdout)["patches"]} == {"applied"}
    verified = subprocess.run([str(venv / "bin" / "python"), "-m", "patchkit", "verify", "--site-packages", str(sp)],
                              capture_output=True, text=True, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout
