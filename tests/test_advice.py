"""What patchkit tells a user to do, on real releases: every item of issue 11's "Advice" list.

Each test failed on the code before issue 11 (the hint, exit code or message was wrong or absent).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from patchkit.store import journal as journal_mod
from patchkit.store import lock as lock_mod
from patchkit.store.journal import Journal
from test_install import make_venv, venv_site_packages
from test_releases import snapshot

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


def serving_venv(release, tmp_path: Path, version: str = "0.17.1") -> Path:
    """A venv (no pip, no torch) whose site-packages holds a real vLLM release's files; returns the venv folder."""
    venv = tmp_path / "serving"
    python = make_venv(venv)
    site = venv_site_packages(python)
    for entry in release(version).iterdir():
        shutil.move(str(entry), site / entry.name)
    return venv


# -- verify and apply ------------------------------------------------------------------------


@pytest.mark.release
def test_verify_on_a_release_without_the_contract_does_not_advise_apply(release, cli):
    sp = release("0.9.2")
    result = cli("verify", "--site-packages", str(sp))
    assert result.exit_code == 1
    hint = [line for line in result.stdout.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1
    assert "patchkit apply" not in hint[0] and "upgrade vLLM" in hint[0]
    applied = cli("apply", "--site-packages", str(sp))  # the advice matches what apply does there
    assert applied.exit_code == 3


@pytest.mark.release
def test_verify_hint_repeats_the_site_packages_given(release, cli):
    sp = release("0.17.1")
    result = cli("verify", "--site-packages", str(sp))
    assert result.exit_code == 1
    assert f"hint: run 'patchkit apply --target vllm --site-packages {sp} --dry-run'" in result.stdout


@pytest.mark.release
def test_verify_hint_for_a_chosen_architecture_on_a_native_era_release(release, cli):
    """On 0.33.0 (native era) verify --arch X of an unpatched X said 'supports EAGLE-3 natively ...
    the files differ from the release: reinstall vLLM', which is false: apply --arch X patches it."""
    sp = release("0.33.0")
    result = cli("verify", "--site-packages", str(sp), "--arch", "Glm4MoeForCausalLM")
    assert result.exit_code == 1
    hint = [line for line in result.stdout.splitlines() if line.startswith("hint:")]
    assert hint == [
        f"hint: run 'patchkit apply --target vllm --site-packages {sp} --arch Glm4MoeForCausalLM --dry-run' "
        "(writes nothing: shows the patches apply would write here, or why it would refuse (exit 3); "
        "without --dry-run it writes them)"
    ], hint
    shown = cli("apply", "--site-packages", str(sp), "--arch", "Glm4MoeForCausalLM", "--dry-run")
    assert shown.exit_code == 0 and "eagle3:Glm4MoeForCausalLM:interface" in shown.stdout
    applied = cli("apply", "--site-packages", str(sp), "--arch", "Glm4MoeForCausalLM")  # and that command works
    assert applied.exit_code == 0
    assert cli("verify", "--site-packages", str(sp), "--arch", "Glm4MoeForCausalLM").exit_code == 0


@pytest.mark.release
def test_requested_patch_not_applicable_writes_nothing(release, cli):
    sp = release("0.14.1")  # no Kimi-K2.5 in this registry: its proposer patch cannot apply
    before = snapshot(sp)
    code, report = cli.json("apply", "--site-packages", str(sp), "--patch", "eagle3-kimi-k25-proposer")
    assert code == 3
    outcomes = {p["id"]: p["outcome"] for p in report["patches"]}
    assert outcomes["eagle3-kimi-k25-proposer"] == "refused"
    assert outcomes["eagle3-deepseek-interface"] == "not written"
    assert report["written"] is False and report["refused"] is True
    assert snapshot(sp) == before
    assert not (sp / ".patchkit").exists()


@pytest.mark.release
def test_requested_patch_that_applies_still_works_alone(release, cli):
    sp = release("0.17.1")
    code, report = cli.json("apply", "--site-packages", str(sp), "--patch", "eagle3-kimi-k25-proposer")
    assert code == 0, report
    assert report["written"] is True


def test_misspelt_patch_gets_did_you_mean(cli, tmp_path):
    result = cli("apply", "--site-packages", str(tmp_path), "--patch", "eagle3-kimi-k25-propser")
    assert result.exit_code == 2
    assert "unknown --patch eagle3-kimi-k25-propser" in result.stderr
    assert "did you mean eagle3-kimi-k25-proposer" in result.stderr
    code, err = cli.json("apply", "--site-packages", str(tmp_path), "--patch", "eagle3-allowlst")
    assert code == 2 and err["hint"].startswith("did you mean eagle3-allowlist")


# -- resolve and doctor ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "  ", "Deepseek V3"])
def test_resolve_of_a_blank_name_is_a_usage_error(cli, tmp_path, name):
    result = cli("resolve", name, "--site-packages", str(tmp_path))  # checked before the install
    assert result.exit_code == 2
    assert "is not an architecture name" in result.stderr
    assert "Transformers backend" not in result.stdout + result.stderr
    code, err = cli.json("resolve", name, "--site-packages", str(tmp_path))
    assert code == 2 and err["exit_code"] == 2


@pytest.fixture
def sp_0_17_1(release) -> Path:
    return release("0.17.1")


def write_config(folder: Path, data: dict, bom: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes((b"\xef\xbb\xbf" if bom else b"") + json.dumps(data).encode())
    return folder


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
}


@pytest.mark.release
@pytest.mark.parametrize("layers", [-5, 0, 61.5, "61", True])
def test_doctor_rejects_a_layer_count_that_is_not_positive(cli, tmp_path, sp_0_17_1, layers):
    model = write_config(tmp_path / "target", {**DEEPSEEK_V3, "num_hidden_layers": layers})
    result = cli("doctor", "--model", str(model), "--site-packages", str(sp_0_17_1))
    assert result.exit_code == 4
    assert f"num_hidden_layers is {json.dumps(layers)}, not a positive layer count" in result.stderr
    assert "ids go from" not in result.stdout


@pytest.mark.release
def test_doctor_reads_a_config_with_a_byte_order_mark(cli, tmp_path, sp_0_17_1):
    model = write_config(tmp_path / "target", DEEPSEEK_V3, bom=True)
    code, report = cli.json("doctor", "--model", str(model), "--site-packages", str(sp_0_17_1))
    assert code == 1, report  # read (not ready: 0.17.1 is unpatched), not an invalid-JSON error
    assert report["target"]["architectures"] == ["DeepseekV3ForCausalLM"]
    assert report["target"]["num_hidden_layers"] == 61


# -- --python --------------------------------------------------------------------------------


@pytest.mark.release
def test_python_is_looked_up_on_path(release, cli, tmp_path, monkeypatch):
    venv = serving_venv(release, tmp_path)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    code, report = cli.json("status", "--python", "python3")
    assert code == 0, report
    assert Path(report["install"]["site_packages"]) == venv_site_packages(venv / "bin" / "python").resolve()


@pytest.mark.release
def test_python_may_be_the_venv_folder(release, cli, tmp_path):
    venv = serving_venv(release, tmp_path)
    code, report = cli.json("status", "--python", str(venv))
    assert code == 0, report
    assert report["install"]["version"] == "0.17.1"


def test_python_name_not_on_path(cli, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    result = cli("status", "--python", "no-such-python3")
    assert result.exit_code == 4
    assert "no command 'no-such-python3' on PATH" in result.stderr


@pytest.mark.release
def test_status_hint_repeats_the_python_given(release, cli, tmp_path):
    venv = serving_venv(release, tmp_path)
    python = venv / "bin" / "python"
    site = venv_site_packages(python)
    pristine = (site / DEEPSEEK).read_bytes()
    assert cli("apply", "--python", str(python)).exit_code == 0
    (site / DEEPSEEK).write_bytes(pristine)  # what a reinstall of the same version does
    result = cli("status", "--python", str(python))
    assert result.exit_code == 0
    assert f"hint: run 'patchkit apply --target vllm --python {python}' (again for this release" in result.stdout


# -- verify --runtime without torch -----------------------------------------------------------


@pytest.mark.release
def test_runtime_without_torch_keeps_the_static_results(release, cli, tmp_path):
    venv = serving_venv(release, tmp_path)
    python = venv / "bin" / "python"
    assert cli("apply", "--python", str(python)).exit_code == 0
    result = cli("verify", "--python", str(python), "--runtime")
    assert result.exit_code == 4
    assert "✓ DeepseekV2ForCausalLM" in result.stdout  # the static chain is shown
    assert "EAGLE-3 is in effect for the resolved classes (static checks" in result.stdout
    assert "cannot import vLLM and torch" in result.stderr
    code, report = cli.json("verify", "--python", str(python), "--runtime")
    assert code == 4
    assert report["ok"] is True and report["checks"]
    assert report["runtime_error"]["exit_code"] == 4
    assert "No module named 'torch'" in report["runtime_error"]["message"]


# -- full disk, read-only mount, the lock --------------------------------------------------------


def fail_vllm_writes(monkeypatch, code: int) -> None:
    """Make every write into the vLLM install fail with ``code``, as the kernel does."""
    real_mkdir = Path.mkdir

    def fsync(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    def mkdir(self: Path, *a, **k) -> None:
        if ".patchkit" in self.parts:
            raise OSError(code, os.strerror(code), str(self))
        real_mkdir(self, *a, **k)

    monkeypatch.setattr(journal_mod.os, "fsync", fsync)
    if code == errno.EROFS:  # nothing can be created on a read-only mount
        monkeypatch.setattr(Path, "mkdir", mkdir)


@pytest.mark.release
@pytest.mark.parametrize("code, named", [(errno.ENOSPC, "is full"), (errno.EROFS, "read-only file system")])
def test_full_disk_and_read_only_mount_are_named(release, cli, monkeypatch, code, named):
    sp = release("0.17.1")
    before = snapshot(sp)
    fail_vllm_writes(monkeypatch, code)
    result = cli("apply", "--site-packages", str(sp))
    monkeypatch.undo()
    assert result.exit_code == 4
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint:"))
    assert named in hint
    assert "permission" not in hint and "owns" not in hint
    assert snapshot(sp) == before


@pytest.mark.release
def test_waiting_for_the_lock_is_said(release, cli, monkeypatch):
    sp = release("0.17.1")
    monkeypatch.setattr(lock_mod, "LOCK_TIMEOUT_S", 0.5)
    entered, release_it = threading.Event(), threading.Event()

    def hold() -> None:
        with Journal(sp).lock():
            entered.set()
            release_it.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(10)
    try:
        result = cli("apply", "--site-packages", str(sp))
    finally:
        release_it.set()
        holder.join()
    assert result.exit_code == 4
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"waiting for another patchkit run on {sp} to finish")
    assert "(up to 0.5 s;" in lines[0]  # the timeout in effect, not rounded to 0
    assert lines[1].startswith("error: another patchkit run is changing")


# -- what plain verify and --help say patchkit checks (issue 25) --------------------------------


@pytest.mark.release
@pytest.mark.parametrize("version, code", [("0.33.0", 0), ("0.17.1", 1)])
def test_plain_verify_says_what_it_checked_and_how_to_check_any_other_architecture(release, cli, version, code):
    """Plain ``verify`` checks the default set only: it names those architectures and says that
    any other registered architecture is checked with ``--arch``/``--model`` (before issue 25 it
    said "in effect for the resolved classes", and a GLM user read that as their model)."""
    sp = release(version)
    got, report = cli.json("verify", "--site-packages", str(sp))
    assert got == code
    default = ["DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"]
    assert report["requested"] is False and report["architectures"] == default
    result = cli("verify", "--site-packages", str(sp))
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("checked:")]
    assert all(a in line for a in default) and "--arch ARCH" in line and "--model DIR" in line
    assert f"'patchkit scan --site-packages {sp}'" in line
    got, report = cli.json("verify", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM")
    assert report["requested"] is True and report["architectures"] == ["OlmoeForCausalLM"]
    result = cli("verify", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM")
    assert not [x for x in result.stdout.splitlines() if x.startswith("checked:")]


@pytest.mark.release
def test_plain_verify_on_a_release_without_the_protocol_offers_no_arch(release, cli):
    """On 0.9.2 (A0) no architecture can be patched: no 'checked: ... add --arch' line, only the upgrade."""
    sp = release("0.9.2")
    result = cli("verify", "--site-packages", str(sp))
    assert result.exit_code == 1
    assert not [x for x in result.stdout.splitlines() if x.startswith("checked:")]
    assert "upgrade vLLM" in result.stdout


def test_help_says_any_registered_architecture_is_patched_with_arch_or_model(cli):
    for args in ([], ["apply"], ["verify"]):
        result = cli(*args, "--help")
        assert result.exit_code == 0
        text = " ".join(result.stdout.split())
        assert "--arch" in text and "--model" in text, args
        assert "any architecture" in text or "any registered architecture" in text, args


def test_a_pip_step_runs_the_serving_interpreters_pip(tmp_path):
    """Issue 42, finding 5: with ``--python``, ``pip`` becomes ``PYTHON -m pip`` (a venv folder: its
    ``bin/python``); without it the step is left as it is."""
    from patchkit.advice import RunOptions, reinstall
    from patchkit.ui.hints import pip_words

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    step = reinstall("vllm", "0.34.0", "the release's own files back")
    tail = ("install", "--force-reinstall", "--no-deps", "vllm==0.34.0")
    assert pip_words(venv) == (str(venv / "bin" / "python"), "-m", "pip")
    ran = step.for_run(RunOptions(("--python", str(venv)), pip=pip_words(venv)))
    assert ran.argv == (str(venv / "bin" / "python"), "-m", "pip", *tail)
    assert ran.for_run(RunOptions(pip=pip_words(venv))).argv == ran.argv  # applied once only
    assert step.for_run(RunOptions()).argv == ("pip", *tail)
