"""A wheel-installed patchkit (not only an editable one) finds its patch definitions; the wheel
installs as a tool with pipx and with uv under its distribution name, vllm-patchkit."""

from __future__ import annotations

import json
import os
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
    (found,) = out.glob("vllm_patchkit-*.whl")
    return found


@pytest.mark.release  # building the wheel fetches the build backend (setuptools>=69) from the package index
def test_wheel_is_named_vllm_patchkit(wheel):
    import patchkit

    metadata = (
        next(
            zipfile.ZipFile(wheel).open(n)
            for n in zipfile.ZipFile(wheel).namelist()
            if n.endswith(".dist-info/METADATA")
        )
        .read()
        .decode()
    )
    headers = dict(line.split(": ", 1) for line in metadata.split("\n\n")[0].splitlines() if ": " in line)
    assert headers["Name"] == "vllm-patchkit"
    assert headers["Version"] == patchkit.__version__
    entry_points = (
        next(
            zipfile.ZipFile(wheel).open(n)
            for n in zipfile.ZipFile(wheel).namelist()
            if n.endswith(".dist-info/entry_points.txt")
        )
        .read()
        .decode()
    )
    assert "patchkit = patchkit.entry:main" in entry_points


@pytest.mark.release  # pipx and uv fetch patchkit's dependencies from the package index
@pytest.mark.parametrize("tool", ["pipx", "uv"])
def test_tool_install_of_the_wheel(wheel, tmp_path, tool):
    """``pipx install`` / ``uv tool install`` of the built wheel give a working ``patchkit`` command.

    pipx and uv come with the ``test`` extra; their homes and bin folders are in ``tmp_path``.
    """
    import patchkit

    tools = Path(sys.executable).parent
    bin_dir = tmp_path / "bin"
    env = dict(
        os.environ,
        PIPX_HOME=str(tmp_path / "pipx-home"),
        PIPX_BIN_DIR=str(bin_dir),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        UV_TOOL_DIR=str(tmp_path / "uv-tools"),
        UV_TOOL_BIN_DIR=str(bin_dir),
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    env.pop("VIRTUAL_ENV", None)
    command = (
        [str(tools / "pipx"), "install", "--python", sys.executable, str(wheel)]
        if tool == "pipx"
        else [str(tools / "uv"), "tool", "install", "--python", sys.executable, str(wheel)]
    )
    installed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    version = subprocess.run(
        [str(bin_dir / "patchkit"), "--version"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"patchkit {patchkit.__version__}\n"
    listed = subprocess.run(
        [str(bin_dir / "patchkit"), "list", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert {p["id"] for p in json.loads(listed.stdout)["patches"]} == PATCH_IDS
    home = tmp_path / ("pipx-home" if tool == "pipx" else "uv-tools")
    assert os.path.realpath(bin_dir / "patchkit").startswith(str(home))  # the tool's own environment


@pytest.mark.release  # building the wheel fetches the build backend (setuptools>=69) from the package index
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
    listed = subprocess.run(
        [str(venv / "bin" / "patchkit"), "list", "--json"], capture_output=True, text=True, check=True
    )
    assert {p["id"] for p in json.loads(listed.stdout)["patches"]} == PATCH_IDS

    sp = release("0.17.1")
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import patchkit.patches; print(patchkit.patches.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert str(venv) in where.stdout  # the wheel's copy, not the source tree
    applied = subprocess.run(
        [str(venv / "bin" / "patchkit"), "apply", "--site-packages", str(sp), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert applied.returncode == 0, applied.stderr
    assert {p["outcome"] for p in json.loads(applied.stdout)["patches"]} == {"applied"}
    verified = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "patchkit", "verify", "--site-packages", str(sp)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert verified.returncode == 0, verified.stdout


@pytest.mark.release
def test_from_a_checkouts_root_verify_and_doctors_advice_work(wheel, release, tmp_path):
    """Issue 25: from the root of a checkout, ``python -m patchkit`` imports the checkout's ``patchkit/``
    (``-m`` puts the current folder first on ``sys.path``), which has no ``patchkit.patches``: verify
    crashed with a traceback and exit 1 ("not in effect"), and doctor, which planned through a child
    ``python -m patchkit``, said "could not plan on this install". Seen failing before the fix."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
    python = str(venv / "bin" / "python")
    sp = release("0.17.1")

    verified = subprocess.run(
        [python, "-m", "patchkit", "verify", "--site-packages", str(sp)], capture_output=True, text=True, cwd=REPO
    )
    assert verified.returncode == 1 and "Traceback" not in verified.stderr, verified.stderr[-2000:]
    assert "EAGLE-3 is not in effect" in verified.stdout

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "num_hidden_layers": 61,
                "hidden_size": 7168,
            }
        )
    )
    doctor = subprocess.run(
        [python, "-m", "patchkit", "doctor", "--model", str(target), "--site-packages", str(sp), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 1 and report["apply_command"], report["actions"]
    argv = report["next_steps"][0]["argv"]
    assert argv[:4] == [str(python), "-m", "patchkit", "apply"]  # run as python -m patchkit, named so (issue 32)
    applied = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)  # the advice, as printed
    assert applied.returncode == 0, applied.stdout + applied.stderr
    again = subprocess.run(
        [python, "-m", "patchkit", "doctor", "--model", str(target), "--site-packages", str(sp)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert again.returncode == 0 and "verdict: ready" in again.stdout, again.stdout

    # an interpreter without patchkit's requirements: one line and a hint, exit 4 (never 1, never a traceback)
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    crashed = subprocess.run(
        [str(bare / "bin" / "python"), "-m", "patchkit", "verify"], capture_output=True, text=True, cwd=REPO
    )
    assert crashed.returncode == 4 and "Traceback" not in crashed.stderr, crashed.stderr
    assert crashed.stderr.splitlines()[0].startswith("error: patchkit needs ")
