"""``patchkit doctor`` reading real-shaped EAGLE-3 drafts on real vLLM releases.

The draft configs are written by the tests. Each builder carries the same fields as the published
drafts of one exporter (values chosen for the targets here):

- SpecForge / SGLang (``configs/deepseek-v3-671b-eagle3.json``): ``LlamaForCausalLMEagle3``, the ids
  inside ``eagle_config`` in the output-of-layer-k convention, ``draft_vocab_size`` 32000;
- TorchSpec (``configs/draft_models/kimi_k25_eagle3.json``): a plain Llama config, no ids, no
  draft vocabulary;
- speculators / RedHatAI: ``speculators_model_type``, ``speculators_config`` (proposal methods,
  verifier), ``transformer_layer_config``, top-level ids, no ``model_type``;
- AngelSlim (``qwen3-8b-eagle3.json``): ``Eagle3LlamaForCausalLM``, ``draft_vocab_size``, no ids;
- lmsys (SpecForge-trained uploads): ``LlamaForCausalLMEagle3``, ``draft_vocab_size``, no ids;
- the EAGLE repository: ``LlamaForCausalLM``, ``draft_vocab_size``, no ids.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from releases import Sweep, sweep

from test_doctor import DEEPSEEK_V3, KIMI_K25, check, checkpoint, child, doctor

pytestmark = pytest.mark.release

KIMI_K25_VOCAB = {**KIMI_K25, "text_config": {**KIMI_K25["text_config"], "vocab_size": 163840}}
DEEPSEEK_V3_VOCAB = {**DEEPSEEK_V3, "vocab_size": 129280}
LLAMA_3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "vocab_size": 128256,
}


def specforge(ids: list[int] | None = (1, 29, 57), vocab: int = 129280) -> dict[str, Any]:
    """SpecForge's DeepSeek-V3 draft shape: ids in eagle_config (output of layer k)."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "bos_token_id": 0,
        "eos_token_id": 1,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 40960,
        "max_position_embeddings": 163840,
        "model_type": "llama",
        "num_attention_heads": 56,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab,
        "draft_vocab_size": 32000,
    }
    if ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}
    return cfg


def torchspec_kimi() -> dict[str, Any]:
    """TorchSpec's Kimi-K2.5 draft shape: plain Llama config, the target's vocabulary, no ids."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "attention_bias": False,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "intermediate_size": 12288,
        "max_position_embeddings": 262144,
        "model_type": "llama",
        "num_attention_heads": 64,
        "num_hidden_layers": 1,
        "num_key_value_heads": 64,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 163840,
    }


def speculators(ids: list[int] | None, hidden: int = 7168, vocab: int = 129280) -> dict[str, Any]:
    """A speculators-format (RedHatAI) EAGLE-3 config: no top-level model_type, ids at the top level."""
    cfg: dict[str, Any] = {
        "architectures": ["Eagle3Speculator"],
        "auto_map": {"": "eagle3.Eagle3SpeculatorConfig"},
        "draft_vocab_size": 32000,
        "norm_before_residual": True,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": 3, "accept_tolerance": 0.0, "verifier_accept_k": 1}
            ],
            "verifier": {"architectures": ["DeepseekV3ForCausalLM"], "name_or_path": "deepseek-ai/DeepSeek-V3"},
        },
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "target_hidden_size": None,
        "transformer_layer_config": {
            "model_type": "llama",
            "hidden_size": hidden,
            "num_hidden_layers": 1,
            "num_attention_heads": 56,
            "num_key_value_heads": 8,
            "vocab_size": vocab,
        },
    }
    if ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(ids)
    return cfg


def angelslim(vocab: int = 129280, hidden: int = 7168) -> dict[str, Any]:
    """AngelSlim's draft shape: Eagle3LlamaForCausalLM, a draft vocabulary, no ids."""
    return {
        "architectures": ["Eagle3LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_hidden_layers": 1,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "draft_vocab_size": 32000,
    }


def lmsys(vocab: int = 129280) -> dict[str, Any]:
    """lmsys' SpecForge-trained upload shape: LlamaForCausalLMEagle3, a draft vocabulary, no ids."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 7168,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "draft_vocab_size": 32000,
    }


def eagle_repo() -> dict[str, Any]:
    """The EAGLE repository's Llama-3.1-8B EAGLE-3 draft shape: LlamaForCausalLM, a draft vocabulary, no ids."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-05,
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
        "torch_dtype": "float16",
    }


def write_safetensors(folder: Path, names: list[str], sizes: dict[str, int] | None = None) -> None:
    """A small, valid safetensors file holding one int64 tensor of zeros per name (2 elements, or
    ``sizes[name]``: a ``d2t`` of zeros maps draft id i to target id i; a ``t2d`` is as long as the
    target vocabulary the draft was trained against)."""
    sizes = sizes or {}
    header, offset = {}, 0
    for n in names:
        size = 8 * sizes.get(n, 2)
        header[n] = {"dtype": "I64", "shape": [size // 8], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def ready_release(release, cli, version: str) -> Path:
    """A release where EAGLE-3 is in effect for DeepSeek / Kimi-K2.5: patched by patchkit on A1 releases."""
    sp = release(version)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0, applied
    return sp


RELEASES = sweep(Sweep.ERAS)


# -- id conventions ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", RELEASES)
def test_specforge_eagle_config_ids_by_release(release, cli, tmp_path, version):
    """SpecForge's [1, 29, 57] (output of layer k) are vLLM's (2, 30, 58): right wherever vLLM ignores them,
    one layer early where a runner reads them verbatim (0.33.0's model runner)."""
    sp = ready_release(release, cli, version)
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, "sf", specforge())
    code, report = doctor(cli, sp, model, draft)
    d = report["draft"]
    assert d["kind"] == "eagle_config" and d["intended_aux_layer_ids"] == [2, 30, 58]
    assert not any("[1, 29, 57]" in a and "copy" in a and "unchanged" not in a for a in report["actions"])
    if version == "0.33.0":
        assert code == 1
        assert d["aux_layer_ids"] == [1, 29, 57]
        wrong = child(check(report, "aux layer ids (1, 29, 57)"), "model runner captures the trained layers")
        assert wrong["ok"] is False and "verbatim" in wrong["detail"]
        assert wrong["location"].startswith("vllm/v1/worker/gpu_model_runner.py:")
        fix = [a for a in report["actions"] if a.startswith('add "eagle_aux_hidden_state_layer_ids": [2, 30, 58]')]
        assert len(fix) == 1
        # the advice is the fix: both runners then capture the trained layers
        (draft / "config.json").write_text(json.dumps({**specforge(), "eagle_aux_hidden_state_layer_ids": [2, 30, 58]}))
        code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]
    assert report["draft"]["aux_layer_ids"] == [2, 30, 58]
    assert report["warnings"] == []


@pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])
def test_ids_that_look_like_the_default_minus_one_warn(release, cli, tmp_path, version):
    """A SpecForge id list copied unchanged to the top level: used verbatim, so warn and give the +1 ids."""
    sp = ready_release(release, cli, version)
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, "copied", {**specforge(ids=None), "eagle_aux_hidden_state_layer_ids": [1, 29, 57]})
    code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]  # a warning, not a verdict: the ids may be meant
    assert report["draft"]["aux_layer_ids"] == [1, 29, 57]
    assert len(report["warnings"]) == 1 and "set [2, 30, 58]" in report["warnings"][0]
    hint = child(check(report, "aux layer ids (1, 29, 57)"), "ids look like vLLM's default minus one")
    assert hint["ok"] is None and "[2, 30, 58]" in hint["detail"]
    text = cli("doctor", "--model", str(model), "--draft", str(draft), "--site-packages", str(sp))
    assert "warning: the draft's eagle_aux_hidden_state_layer_ids [1, 29, 57]" in text.stdout


@pytest.mark.parametrize("version, ids_reach_vllm", [("0.10.2", False), ("0.14.1", True), ("0.20.2", True)])
def test_speculators_top_level_ids(release, cli, tmp_path, version, ids_reach_vllm):
    """speculators drafts carry vLLM-convention ids at the top level; 0.10.2's converter drops them."""
    sp = ready_release(release, cli, version)
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, "spec", speculators([3, 31, 59]))
    code, report = doctor(cli, sp, model, draft)
    d = report["draft"]
    assert d["kind"] == "speculators" and d["model_type"] == "speculators"
    assert check(report, "draft model type speculators")["ok"] is True
    if ids_reach_vllm:
        assert code == 0, report["missing"]
        assert (d["aux_layer_ids"], d["aux_layer_ids_source"]) == ([3, 31, 59], "draft config")
    else:
        assert code == 1
        assert d["aux_layer_ids"] == [2, 30, 58]
        dropped = child(check(report, "aux layer ids (2, 30, 58)"), "model runner captures the trained layers")
        assert dropped["ok"] is False


# -- model type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, loadable", [("0.10.2", False), ("0.14.1", False), ("0.17.1", False), ("0.20.2", True), ("0.33.0", True)]
)
def test_kimi_k2_draft_model_type(release, cli, tmp_path, version, loadable):
    """model_type kimi_k2 is in no transformers release; vLLM's own config registry has it from 0.18.0."""
    sp = release(version)
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25_VOCAB)
    draft = checkpoint(tmp_path, "draft", {**torchspec_kimi(), "model_type": "kimi_k2"})
    _, report = doctor(cli, sp, model, draft)
    mt = check(report, "draft model type kimi_k2")
    assert mt["ok"] is loadable, mt
    if loadable:
        assert "own config registry" in mt["detail"] and mt["location"].startswith("vllm/transformers_utils/config.py:")
    else:
        assert "no transformers release up to 5.24.0 registers it" in mt["detail"]
        assert any("model_type 'kimi_k2'" in a for a in report["actions"])
        # remote code named by auto_map loads it with --trust-remote-code: said, not failed
        remote = checkpoint(
            tmp_path,
            "remote",
            {
                **torchspec_kimi(),
                "model_type": "kimi_k2",
                "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
            },
        )
        _, report = doctor(cli, sp, model, remote)
        assert check(report, "draft model type kimi_k2")["ok"] is None
        assert any("--trust-remote-code" in w for w in report["warnings"])


def test_kimi_k25_model_type_needs_transformers_5_outside_the_registry(release, cli, tmp_path):
    """0.14.1's registry lacks kimi_k25 and it allows only transformers < 5, which lacks it too."""
    sp = release("0.14.1")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, "draft", {**torchspec_kimi(), "model_type": "kimi_k25", "vocab_size": 129280})
    _, report = doctor(cli, sp, model, draft)
    mt = check(report, "draft model type kimi_k25")
    assert mt["ok"] is False
    assert (
        "no transformers release this release allows (transformers<5,>=4.56.0) registers it "
        "(none before 5.0; 5.20.2 does)" in mt["detail"]
    )


# -- vocabulary -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.17.1", "0.20.2", "0.33.0"])
def test_draft_for_another_tokenizer(release, cli, tmp_path, version):
    """A DeepSeek-V3 draft (129280) on Kimi-K2.5 (163840) is not ready; TorchSpec's Kimi draft is."""
    sp = ready_release(release, cli, version)
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25_VOCAB)
    wrong = checkpoint(tmp_path, "ds-draft", specforge(ids=None))
    code, report = doctor(cli, sp, model, wrong)
    assert code == 1
    vocab = check(report, "draft vocabulary")
    assert vocab["ok"] is False and "129280, the target's 163840" in vocab["detail"]
    assert report["missing"] == [f"draft vocabulary: {vocab['detail']}"]

    right = checkpoint(tmp_path, "kimi-draft", torchspec_kimi())
    code, report = doctor(cli, sp, model, right)
    assert code == 0, report["missing"]
    assert check(report, "draft vocabulary")["ok"] is True


@pytest.mark.parametrize("kind", ["angelslim", "lmsys"])
def test_draft_vocabulary_needs_its_d2t_map(release, cli, tmp_path, kind):
    sp = ready_release(release, cli, "0.17.1")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, kind, angelslim() if kind == "angelslim" else lmsys())

    code, report = doctor(cli, sp, model, draft)  # config only: said, not failed
    assert code == 0, report["missing"]
    assert child(check(report, "draft vocabulary"), "draft_vocab_size 32000")["ok"] is None

    maps = {"t2d": 129280, "d2t": 32000}  # t2d: one entry per target id; d2t: one per draft id
    write_safetensors(draft, ["midlayer.self_attn.q_proj.weight", "fc.weight", "t2d"], maps)
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    row = child(check(report, "draft vocabulary"), "draft_vocab_size 32000")
    assert row["ok"] is False and "no d2t map" in row["detail"]

    write_safetensors(draft, ["midlayer.self_attn.q_proj.weight", "fc.weight", "t2d", "d2t"], maps)
    code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]
    assert child(check(report, "draft vocabulary"), "draft_vocab_size 32000")["ok"] is True


# -- order ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.14.1", "0.33.0"])
def test_states_reach_the_draft_in_layer_order(release, cli, tmp_path, version):
    sp = ready_release(release, cli, version)
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, "draft", {**specforge(ids=None), "eagle_aux_hidden_state_layer_ids": [58, 2, 30]})
    code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]
    assert report["draft"]["capture_order"] == [2, 30, 58]
    order = child(check(report, "aux layer ids (58, 2, 30)"), "order the states reach the draft")
    assert order["ok"] is None
    assert order["detail"].startswith("layer order (2, 30, 58), not the order given (58, 2, 30)")
    assert "verbatim" not in json.dumps(check(report, "aux layer ids (58, 2, 30)"))


# -- pipeline parallelism ---------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.10.2", "0.17.1", "0.20.2", "0.33.0"])
def test_pipeline_stages_drop_early_ids_without_transport(release, cli, tmp_path, version):
    """DeepSeek's backbone carries no aux states between stages on any release: with 2 stages
    (layers 0..30 and 31..60) ids 2 and 30 never reach the draft."""
    sp = ready_release(release, cli, version)
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    draft = checkpoint(tmp_path, "draft", lmsys())
    code, report = cli.json(
        "doctor",
        "--model",
        str(model),
        "--draft",
        str(draft),
        "--site-packages",
        str(sp),
        "--pipeline-parallel-size",
        "2",
    )
    assert code == 1
    assert report["draft"]["unreachable_aux_layer_ids"] == [2, 30]
    pp = child(check(report, "aux layer ids (2, 30, 58)"), "pipeline parallel size 2")
    assert pp["ok"] is False and "the last stage owns layers 31..60" in pp["detail"]
    assert any("--pipeline-parallel-size 1" in a for a in report["actions"])
    code, report = doctor(cli, sp, model, draft)  # the default, one stage
    assert code == 0, report["missing"]


@pytest.mark.parametrize("version, transport", [("0.20.2", False), ("0.33.0", True)])
def test_pipeline_transport_is_read_from_the_backbone(release, cli, tmp_path, version, transport):
    """The EAGLE repository's Llama-3.1-8B draft: 0.33.0's LlamaModel carries aux states between stages."""
    sp = release(version)
    model = checkpoint(tmp_path, "llama", LLAMA_3_8B)
    draft = checkpoint(tmp_path, "eagle", eagle_repo())
    code, report = cli.json(
        "doctor",
        "--model",
        str(model),
        "--draft",
        str(draft),
        "--site-packages",
        str(sp),
        "--pipeline-parallel-size",
        "2",
    )
    pp = child(check(report, "aux layer ids (2, 16, 29)"), "pipeline parallel size 2")
    assert pp["ok"] is transport
    if transport:
        assert code == 0, report["missing"]
        assert "LlamaModel.supports_aux_hidden_states_over_pp = True" in pp["detail"]
    else:
        assert code == 1 and report["draft"]["unreachable_aux_layer_ids"] == [2]


def test_pipeline_size_must_be_positive(release, cli, tmp_path):
    sp = release("0.17.1")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3_VOCAB)
    result = cli("doctor", "--model", str(model), "--site-packages", str(sp), "--pipeline-parallel-size", "0")
    assert result.exit_code == 2
    assert "Invalid value for '--pipeline-parallel-size'" in result.stderr


# -- platform branches ------------------------------------------------------------------------


def test_every_platform_branch_is_checked(release, cli, tmp_path):
    """0.33.0's vllm.models.deepseek_v4 picks one of four classes per platform: doctor checks each."""
    sp = release("0.33.0")
    model = checkpoint(
        tmp_path,
        "v4",
        {
            "architectures": ["DeepseekV4ForCausalLM"],
            "model_type": "deepseek_v4",
            "num_hidden_layers": 61,
            "hidden_size": 7168,
        },
    )
    code, report = doctor(cli, sp, model)
    assert code == 0, report["missing"]
    effect = check(report, "EAGLE-3 in effect for DeepseekV4ForCausalLM")
    branches = [c["label"] for c in effect["children"]]
    assert len(branches) == 4 and all(b.startswith("platform branch vllm.models.deepseek_v4.") for b in branches)
    assert {b.split(".")[3] for b in branches} == {"amd", "cpu", "nvidia", "xpu"}

    # a branch without the interface (written into this copy of the release) is named, wherever it sits
    xpu = sp / "vllm/models/deepseek_v4/xpu/model.py"
    text = xpu.read_text()
    assert text.count("class DeepseekV4ForCausalLM(nn.Module, SupportsPP, SupportsEagle3, SupportsLoRA):") == 1
    xpu.write_text(
        text.replace(
            "class DeepseekV4ForCausalLM(nn.Module, SupportsPP, SupportsEagle3, SupportsLoRA):",
            "class DeepseekV4ForCausalLM(nn.Module, SupportsPP, SupportsLoRA):",
        )
    )
    code, report = doctor(cli, sp, model)
    assert code == 1
    effect = check(report, "EAGLE-3 in effect for DeepseekV4ForCausalLM")
    assert effect["ok"] is False
    bad = child(effect, "platform branch vllm.models.deepseek_v4.xpu.model.DeepseekV4ForCausalLM")
    assert bad["ok"] is False and bad["location"] == "vllm/models/deepseek_v4/xpu/model.py:1301"
    assert "not in effect on: vllm.models.deepseek_v4.xpu.model.DeepseekV4ForCausalLM" in effect["detail"]


# -- Kimi-K2.5 on 0.15.1 ----------------------------------------------------------------------


def test_kimi_k25_on_0_15_1_doctor_agrees_with_verify(release, cli, tmp_path):
    sp = ready_release(release, cli, "0.15.1")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25_VOCAB)
    draft = checkpoint(tmp_path, "draft", torchspec_kimi())
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    load = check(report, "EAGLE proposer loads a draft for this target")
    assert load["ok"] is False and load["location"] == "vllm/v1/spec_decode/eagle.py:1145"
    assert "bare DeepseekV2Model" in load["detail"] and "vLLM >= 0.16.0" in load["detail"]
    assert report["apply_command"] is None  # patchkit has nothing that fixes it on this release
    upgrade = [s for s in report["next_steps"] if s["effect"] == "upgrade"]
    assert [s["argv"] for s in upgrade] == [["pip", "install", "vllm>=0.16.0"]], report["next_steps"]
    assert any(a.startswith("upgrade vLLM: ") and "run \"pip install 'vllm>=0.16.0'\"" in a for a in report["actions"])
    code, verified = cli.json("verify", "--site-packages", str(sp))
    kimi = next(c for c in verified["checks"] if c["label"] == "KimiK25ForConditionalGeneration")
    assert kimi["location"] == load["location"] and kimi["detail"].endswith(load["detail"])

    newer = ready_release(release, cli, "0.16.0")
    code, report = doctor(cli, newer, model, draft)
    assert code == 0, report["missing"]
    assert not [c for c in report["checks"] if c["label"] == "EAGLE proposer loads a draft for this target"]


def write_torch_bin(folder: Path, names: list[str]) -> None:
    """A ``pytorch_model.bin`` in PyTorch's zip layout whose pickle maps each name to a placeholder."""
    import pickle
    import zipfile

    with zipfile.ZipFile(folder / "pytorch_model.bin", "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({n: i for i, n in enumerate(names)}, protocol=2))
        zf.writestr("archive/version", "3\n")


def test_eagle_repo_draft_vocabulary_map_in_a_torch_bin(release, cli, tmp_path):
    """The EAGLE repository ships pytorch_model.bin: its tensor names are read without unpickling."""
    sp = release("0.20.2")
    model = checkpoint(tmp_path, "llama", LLAMA_3_8B)
    draft = checkpoint(tmp_path, "eagle", eagle_repo())
    write_torch_bin(draft, ["midlayer.self_attn.q_proj.weight", "fc.weight", "t2d"])
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    assert child(check(report, "draft vocabulary"), "draft_vocab_size 32000")["ok"] is False
    write_torch_bin(draft, ["midlayer.self_attn.q_proj.weight", "fc.weight", "d2t", "t2d"])
    code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]
    assert child(check(report, "draft vocabulary"), "draft_vocab_size 32000")["ok"] is True


@pytest.mark.parametrize(
    "spec, kimi_k25, kimi_k2",
    [
        ("<5,>=4.56.0", False, False),  # 0.14.1 - 0.17.1: the 4.x line has neither
        ("<5.21.0,>=5.16.1", True, False),  # 0.33.0
        (">=4.55.2", True, False),  # 0.10.2: no upper bound
        ("<5.10,>=4.56", None, False),  # releases between the checked ones: not known, not guessed
    ],
)
def test_transformers_range_decides_model_types_outside_vllms_registry(spec, kimi_k25, kimi_k2):
    from packaging.specifiers import SpecifierSet

    from patchkit.vllm.checkpoints.drafts import transformers_has as _transformers_has

    assert _transformers_has(SpecifierSet(spec), "kimi_k25") is kimi_k25
    assert _transformers_has(SpecifierSet(spec), "kimi_k2") is kimi_k2
    assert _transformers_has(SpecifierSet(spec), "llama") is True


@pytest.mark.release
def test_final_layer_capture_is_read_from_the_check_kind_not_its_location(release):
    """A mixin backbone (0.18+) captures id n through the last layer's call: the check has no
    file:line of its own, and that must still count as captured (it did not, when read from
    the location)."""
    from patchkit.vllm.release import contract as contract_mod
    from patchkit.checks import verify as verify_mod
    from patchkit.checks.drafts.checklist import final_layer_capture
    from patchkit.vllm.registry.table import Registry
    from patchkit.vllm.release.source import SourceTree

    tree = SourceTree(release("0.33.0"))
    checks = verify_mod.verify(tree, Registry(tree), contract_mod.detect(tree), ("Qwen3MoeForCausalLM",), ())
    chain = next(c for c in checks if c.label.startswith("Qwen3MoeForCausalLM"))
    assert chain.ok
    assert final_layer_capture(chain) is True
