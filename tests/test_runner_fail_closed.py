"""Fail closed (issue 29, part 3): every runner fact a check rests on is declared
(:mod:`patchkit.vllm.runner.generations`); a real release copy that lacks one, removed or renamed in
turn, gets "not checked: <what, where patchkit looked>" and no success from verify or doctor.

Each case copies a real release (0.34.0: V2 alone; 0.20.2: V1 by default, V2 with
``VLLM_USE_V2_MODEL_RUNNER=1``) and breaks one fact. On main before the runner wing these all passed:
0.34.0's load path had no proposer half yet verify exited 0, and V1's missing proposer left the check
with only the aux half (a non-empty derivation), so nothing failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.release

NATIVE = "LlamaForCausalLM"
V2_EAGLE = "vllm/v1/worker/gpu/spec_decode/eagle"


def _delete(relpath: str):
    def apply(site: Path) -> None:
        (site / relpath).unlink()

    return apply


def _rename(relpath: str, old: str, new: str):
    def apply(site: Path) -> None:
        path = site / relpath
        text = path.read_text()
        assert old in text, (relpath, old)
        path.write_text(text.replace(old, new))

    return apply


CASES = [
    ("0.34.0", None, "the V2 loader's file", _delete(f"{V2_EAGLE}/utils.py"), "load_eagle_model"),
    (
        "0.34.0",
        None,
        "load_eagle_model renamed",
        _rename(f"{V2_EAGLE}/utils.py", "def load_eagle_model(", "def load_draft_model_v3("),
        "load_eagle_model",
    ),
    ("0.34.0", None, "the V2 aux setter's file", _delete(f"{V2_EAGLE}/eagle3_utils.py"), "eagle3_utils.py"),
    (
        "0.34.0",
        None,
        "the V2 aux reader renamed",
        _rename(f"{V2_EAGLE}/eagle3_utils.py", "def get_eagle3_aux_layers_from_config(", "def aux_layers_of("),
        "get_eagle3_aux_layers_from_config",
    ),
    ("0.34.0", None, "the V2 runner's file", _delete("vllm/v1/worker/gpu/model_runner.py"), "model runner"),
    (
        "0.20.2",
        None,
        "the V1 proposer renamed",
        _rename("vllm/v1/spec_decode/eagle.py", "class EagleProposer(", "class EagleDrafter("),
        "EagleProposer",
    ),
    (
        "0.20.2",
        None,
        "the V1 proposer's base (load_model)",
        _delete("vllm/v1/spec_decode/llm_base_proposer.py"),
        "EagleProposer.load_model",
    ),
    (
        "0.20.2",
        None,
        "the V1 aux setter",
        _rename("vllm/v1/worker/gpu_model_runner.py", ".set_aux_hidden_state_layers(", ".set_aux_layers("),
        "set_aux_hidden_state_layers",
    ),
    ("0.20.2", "1", "the V2 loader's file, V2 selected", _delete(f"{V2_EAGLE}/utils.py"), "load_eagle_model"),
]


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("configs")
    model, draft = root / "model", root / "draft"
    model.mkdir()
    draft.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": [NATIVE],
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "vocab_size": 128256,
                "intermediate_size": 14336,
            }
        )
    )
    (draft / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 1,
                "num_attention_heads": 32,
                "vocab_size": 128256,
                "intermediate_size": 14336,
            }
        )
    )
    return model, draft


@pytest.mark.parametrize("version, flag, fact, mutate, named", CASES, ids=[c[2] for c in CASES])
def test_a_missing_runner_fact_is_never_success(release, cli, monkeypatch, configs, version, flag, fact, mutate, named):
    if flag is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", flag)
    site = release(version)
    mutate(site)
    verified = cli("verify", "--site-packages", str(site), "--arch", NATIVE)
    assert verified.exit_code != 0, verified.stdout
    assert "not checked" in verified.stdout and named in verified.stdout, verified.stdout
    model, draft = configs
    code, doctor = cli.json("doctor", "--site-packages", str(site), "--model", str(model), "--draft", str(draft))
    assert doctor["ready"] is False, doctor
    text = json.dumps(doctor)
    assert "not checked" in text and named in text


@pytest.mark.parametrize("version, flag", [("0.34.0", None), ("0.20.2", None), ("0.20.2", "1")])
def test_the_intact_release_is_checked_on_the_runner_it_serves_with(release, cli, monkeypatch, configs, version, flag):
    """The control: the same commands on the intact copy pass, and name the runner they followed."""
    if flag is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", flag)
    site = release(version)
    verified = cli("verify", "--site-packages", str(site), "--arch", NATIVE)
    runner = "V2" if version == "0.34.0" or flag == "1" else "V1"
    assert verified.exit_code == 0, verified.stdout
    assert f"runner {runner}:" in verified.stdout and "not checked: " not in verified.stdout
    model, draft = configs
    code, doctor = cli.json("doctor", "--site-packages", str(site), "--model", str(model), "--draft", str(draft))
    assert f"model runner {runner}" in json.dumps(doctor)
