"""``verify --runtime`` against a real, importable vLLM 0.16.0 install (torch included, no GPU).

The venv is built once (``pip install vllm==0.16.0``, about 11 GB, a few minutes) and cached
outside the repository in ``$PATCHKIT_TEST_CACHE/venv-vllm-0.16.0``; later runs reuse it. Each
test leaves the install as it found it (pristine: the files match the distribution's RECORD).
"""

from __future__ import annotations

import contextlib

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from patchkit import api
from patchkit.vllm.release.install import from_python, record_sha256
from patchkit.store.files import sha256

from vllm_release import CACHE_ROOT

pytestmark = pytest.mark.runtime

VERSION = "0.16.0"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
DEFAULT_ARCHS = ["DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"]
TOUCHED = [
    "vllm/config/speculative.py",
    DEEPSEEK,
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
]


def _pristine(python: Path) -> None:
    """Undo anything a crashed earlier run left: patchkit's revert, then RECORD as the judge."""
    install = from_python(python)
    api.revert(install)
    record = record_sha256(install)
    drifted = [p for p in TOUCHED if sha256((install.site_packages / p).read_bytes()) != record[p]]
    if drifted:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", f"vllm=={VERSION}"],
            check=True,
        )


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    venv = CACHE_ROOT / f"venv-vllm-{VERSION}"
    python = venv / "bin" / "python"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    # Held for the whole module: another test run on this machine waits instead of interleaving.
    with FileLock(str(CACHE_ROOT / f"venv-vllm-{VERSION}.lock")):
        if not (venv / ".complete").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"vllm=={VERSION}"],
                check=True,
            )
            (venv / ".complete").touch()
        _pristine(python)
        yield python
        _pristine(python)


def tree_digest(site: Path) -> dict[str, str]:
    return {
        p.relative_to(site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((site / "vllm").rglob("*.py"))
    }


def runtime_checks(cli, python: Path) -> tuple[int, dict]:
    code, report = cli.json("verify", "--python", str(python), "--runtime")
    runtime = report["checks"][-1]
    assert runtime["label"].startswith("runtime: vLLM's own code")
    return code, runtime


def test_runtime_fails_before_apply_passes_after_and_fails_after_revert(cli, vllm_python):
    site = from_python(vllm_python).site_packages
    before = tree_digest(site)

    code, runtime = runtime_checks(cli, vllm_python)
    assert code == 1
    first = next(c for c in runtime["children"] if c["ok"] is False)
    assert first["label"] == "vLLM's supports_eagle3 accepts DeepseekV2ForCausalLM"
    assert "supports_eagle3 is False" in first["detail"]
    text = cli("verify", "--python", str(vllm_python), "--runtime").stdout
    assert "missing: vLLM's supports_eagle3 accepts DeepseekV2ForCausalLM" in text

    code, applied = cli.json("apply", "--python", str(vllm_python))
    assert code == 0 and applied["written"]

    code, runtime = runtime_checks(cli, vllm_python)
    assert code == 0, [c for c in runtime["children"] if not c["ok"]]
    labels = [c["label"] for c in runtime["children"]]
    assert labels == [
        "vLLM's supports_eagle3 accepts DeepseekV2ForCausalLM",
        "vLLM's supports_eagle3 accepts DeepseekV3ForCausalLM",
        "vLLM's supports_eagle3 accepts KimiK25ForConditionalGeneration",
        "DeepseekV2ForCausalLM: real EAGLE-3 methods reach the backbone (consistency check on stand-ins)",
        "DeepseekV3ForCausalLM: real EAGLE-3 methods reach the backbone (consistency check on stand-ins)",
        "KimiK25ForConditionalGeneration: real EAGLE-3 methods reach the backbone (consistency check on stand-ins)",
        "vLLM's speculative-config validation accepts an EAGLE-3 target of model type deepseek_v3",
        "vLLM's speculative-config validation accepts an EAGLE-3 target of model type kimi_k2",
        # the declared units 0.16.0 holds that the probe exercises (issue 39), by key
        "vLLM unit selector-default does what patchkit assumes (exercised)",
        "vLLM unit v1-reader does what patchkit assumes (exercised)",
        "the installed DeepseekV2Model.forward captures the residual stream (consistency check on stand-ins)",
        *[
            f"{arch}.forward passes the backbone's (hidden_states, aux_hidden_states) through unchanged "
            "(consistency check on stand-ins)"
            for arch in DEFAULT_ARCHS
        ],
        *[
            f"{arch}: vLLM's EagleProposer.load_model loads a draft and shares embeddings and head "
            "(consistency check on stand-ins)"
            for arch in DEFAULT_ARCHS
        ],
    ]
    kimi = runtime["children"][5]
    assert (
        kimi["detail"]
        == "KimiK25ForConditionalGeneration -> language_model: DeepseekV2ForCausalLM -> model: DeepseekV2Model"
    )
    loading = runtime["children"][-1]
    assert loading["detail"].startswith("vllm/v1/spec_decode/eagle.py:")
    assert "now uses the target's embed_tokens and lm_head" in loading["detail"]
    wrapper = runtime["children"][-4]
    assert "KimiK25ForConditionalGeneration -> DeepseekV2ForCausalLM -> DeepseekV2Model" in wrapper["detail"]

    code, reverted = cli.json("revert", "--python", str(vllm_python))
    assert code == 0
    assert tree_digest(site) == before  # byte-identical
    code, runtime = runtime_checks(cli, vllm_python)
    assert code == 1
    assert runtime["ok"] is False


# Deliberately wrong captures, written into a copy of the patched file (then put back).
WRONG_CAPTURES = {
    "normed value": (
        "aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)\n"
        "            hidden_states, residual = layer(",
        "aux_hidden_states.append(self.norm(hidden_states, residual)[0] if residual is not None else hidden_states)\n"
        "            hidden_states, residual = layer(",
        "not the residual stream entering that layer",
    ),
    "ids counted from 0 on a later stage": (
        "start=self.start_layer):",
        "start=0):",
        "id 2 on stage [2, 8)",
    ),
    "missing final-layer capture": (
        "        if self.end_layer == len(self.layers) and self.end_layer in self.aux_hidden_state_layers:\n"
        "            aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)\n",
        "",
        "aux states for ids (2, 5, 8)",
    ),
}


@contextlib.contextmanager
def default_set_applied(cli, vllm_python, relpath: str):
    """Apply the default set, then yield ``(install, verify_with)``: ``verify_with(name, old, new)``
    writes the patched ``relpath`` with ``old`` (found exactly once) replaced by ``new`` and returns
    ``verify --runtime``'s report. The patched bytes are put back, then everything is reverted."""
    install = from_python(vllm_python)
    code, _ = cli.json("apply", "--python", str(vllm_python))
    assert code == 0
    target = install.site_packages / relpath
    patched = target.read_bytes()

    def verify_with(name: str, old: str, new: str):
        text = patched.decode()
        assert text.count(old) == 1, name
        target.write_text(text.replace(old, new))
        return api.verify(install, runtime_python=vllm_python)

    try:
        yield install, verify_with
    finally:
        target.write_bytes(patched)
    code, _ = cli.json("revert", "--python", str(vllm_python))
    assert code == 0


def test_wrong_captures_are_caught(cli, vllm_python):
    with default_set_applied(cli, vllm_python, DEEPSEEK) as (_, verify_with):
        for name, (old, new, expected) in WRONG_CAPTURES.items():
            report = verify_with(name, old, new)
            forward = next(
                c
                for c in report.checks[-1].children
                if c.label
                == "the installed DeepseekV2Model.forward captures the residual stream (consistency check on stand-ins)"
            )
            assert forward.ok is False, name
            assert expected in forward.detail, (name, forward.detail)


KIMI = "vllm/model_executor/models/kimi_k25.py"
PROPOSER = "vllm/v1/spec_decode/eagle.py"
KIMI_LOADING = (
    "KimiK25ForConditionalGeneration: vLLM's EagleProposer.load_model loads a draft and shares embeddings and head "
    "(consistency check on stand-ins)"
)
KIMI_FORWARD = (
    "KimiK25ForConditionalGeneration.forward passes the backbone's (hidden_states, aux_hidden_states) "
    "through unchanged (consistency check on stand-ins)"
)
FORWARD_END = "        return hidden_states\n\n    def compute_logits("
# Faults written into a copy of the patched Kimi-K2.5 wrapper (then put back): (old, new, label, expected in detail).
WRAPPER_FAULTS = {
    # the 0.15.1 shape: get_language_model() hands the proposer the bare DeepseekV2Model
    "bare backbone": (
        FORWARD_END,
        FORWARD_END.replace(
            "    def compute_logits(",
            "    def get_language_model(self):\n        return self.language_model.model\n\n    def compute_logits(",
        ),
        KIMI_LOADING,
        "load_model raised AttributeError: Target model does not have 'model' attribute at " + PROPOSER + ":",
    ),
    "forward drops aux": (
        FORWARD_END,
        FORWARD_END.replace(
            "return hidden_states", "return hidden_states[0] if isinstance(hidden_states, tuple) else hidden_states"
        ),
        KIMI_FORWARD,
        "forward returned Tensor, not the (hidden_states, aux_hidden_states) tuple: the aux states were dropped",
    ),
    "forward reverses aux": (
        FORWARD_END,
        FORWARD_END.replace("return hidden_states", "return (hidden_states[0], hidden_states[1][::-1])"),
        KIMI_FORWARD,
        "the aux states came back changed or reordered",
    ),
}


def test_draft_loading_and_wrapper_faults_are_caught(cli, vllm_python):
    """vLLM's own load_model and the wrapper's forward, each broken in a copy of the patched file."""
    with default_set_applied(cli, vllm_python, KIMI) as (install, verify_with):
        proposer = (install.site_packages / PROPOSER).read_text().splitlines()
        # where vLLM raises it, found independently of the probe
        raise_line = 1 + next(i for i, line in enumerate(proposer) if "does not have 'model' attribute" in line)
        for name, (old, new, label, expected) in WRAPPER_FAULTS.items():
            report = verify_with(name, old, new)
            check = next(c for c in report.checks[-1].children if c.label == label)
            assert check.ok is False, (name, check.detail)
            assert expected in check.detail, (name, check.detail)
            if name == "bare backbone":
                assert check.detail.endswith(f"{PROPOSER}:{raise_line}"), check.detail
            others = [c for c in report.checks[-1].children if c.label != label]
            assert all(c.ok for c in others), (name, [c for c in others if not c.ok])  # only that check fails


def test_cuda_device_on_a_cuda_build_without_gpu_is_refused(cli, tmp_path):
    """--device cuda on the real CUDA build of vLLM 0.33.0 on this GPU-less machine: exit 3, named
    (here, beside the other users of the 0.33.0 venv, not in test_engine.py: one xdist group each)."""
    from engine_models import LLAMA, vllm_draft, write_checkpoint
    from vllm_release import runtime_venv

    model = write_checkpoint(tmp_path / "model", LLAMA)
    draft = write_checkpoint(tmp_path / "draft", vllm_draft(LLAMA, None))
    with runtime_venv("0.33.0") as python:
        result = cli(
            "rehearse", "--model", str(model), "--draft", str(draft), "--python", str(python), "--device", "cuda"
        )
    assert result.exit_code == 3, result.stdout + result.stderr
    assert "no GPU is visible" in result.stderr and "CUDA" in result.stderr and "--python" in result.stderr
