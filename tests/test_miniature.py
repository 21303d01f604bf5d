"""The miniature rehearse builds (patchkit/rehearse/miniature.py): what it keeps, maps and refuses (no engine)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from engine_models import GEMMA3_1B, GEMMA3_SPECULATORS_DRAFT, GLM45_AIR, GLM45_SPECFORGE_ONLY, LLAMA, vllm_draft
from patchkit.errors import RefusedError
from patchkit.rehearse.miniature import shrink, trained_ids


def test_ids_in_each_convention_are_mapped_onto_the_miniature_in_the_same_convention():
    mini = shrink(GLM45_AIR, GLM45_SPECFORGE_ONLY)
    n, m = mini.layers
    assert n == 46 and m < 12
    assert mini.id_field == "eagle_config" and mini.user_ids == (2, 23, 43)  # [1, 22, 42] + 1
    assert mini.draft_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [k - 1 for k in mini.ids]
    assert mini.ids == tuple(min(m - 1, max(1, round(k * m / n))) for k in (2, 23, 43))
    assert all(0 < k < m for k in mini.ids)
    top = shrink(GLM45_AIR, vllm_draft(GLM45_AIR, [2, 23, 43]))
    assert top.id_field == "top level" and top.draft_config["eagle_aux_hidden_state_layer_ids"] == list(top.ids)


def test_a_draft_without_ids_gets_the_miniatures_default_layers():
    mini = shrink(LLAMA, vllm_draft(LLAMA, None))
    m = mini.layers[1]
    assert mini.id_field == "none" and mini.ids == (2, m // 2, m - 3) and len(set(mini.ids)) == 3


def test_code_path_fields_are_kept_and_per_layer_lists_resampled():
    mini = shrink(GLM45_AIR, GLM45_SPECFORGE_ONLY)
    t = mini.target_config
    assert t["first_k_dense_replace"] == 1 and t["n_shared_experts"] == 1 and t["partial_rotary_factor"] == 0.5
    assert t["n_routed_experts"] == 4 and t["num_experts_per_tok"] == 2 and t["attention_bias"] is True
    gemma = shrink(GEMMA3_1B, GEMMA3_SPECULATORS_DRAFT).target_config
    assert len(gemma["layer_types"]) == gemma["num_hidden_layers"]
    assert set(gemma["layer_types"]) == {"sliding_attention", "full_attention"}


def test_vocabulary_rules_are_kept():
    same = shrink(LLAMA, vllm_draft(LLAMA, None))
    assert same.same_vocabulary and same.draft_config["vocab_size"] == same.target_config["vocab_size"]
    assert same.draft_config["draft_vocab_size"] < same.draft_config["vocab_size"]  # 32000 < 128256 kept smaller
    other = shrink(LLAMA, vllm_draft({**LLAMA, "vocab_size": 32000}, None, draft_vocab=None))
    assert not other.same_vocabulary and other.draft_config["vocab_size"] != other.target_config["vocab_size"]
    assert other.vocabularies == (128256, 32000)


def test_the_users_configs_are_not_changed():
    target, draft = copy.deepcopy(GEMMA3_1B), copy.deepcopy(GEMMA3_SPECULATORS_DRAFT)
    shrink(target, draft)
    assert target == GEMMA3_1B and draft == GEMMA3_SPECULATORS_DRAFT


def test_a_field_that_cannot_be_shrunk_is_refused_by_name():
    quantized = {**LLAMA, "quantization_config": {"quant_method": "fp8"}}
    with pytest.raises(RefusedError) as err:
        shrink(quantized, vllm_draft(LLAMA, None))
    assert "quantization_config" in err.value.message


def test_ids_outside_the_target_are_refused():
    with pytest.raises(RefusedError) as err:
        shrink(LLAMA, vllm_draft(LLAMA, [2, 16, 40]))
    assert "outside the target's 0..32 layers" in err.value.message


def test_trained_ids_follow_the_draft_conventions():
    assert trained_ids({"eagle_aux_hidden_state_layer_ids": [1, 2]}, 10) == ((1, 2), "top level")
    assert trained_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, 10) == ((2, 3), "eagle_config")
    assert trained_ids({}, 32) == ((2, 16, 29), "none")


def test_rehearse_needs_python_and_a_known_device(cli, tmp_path):
    from engine_models import write_checkpoint

    model = write_checkpoint(tmp_path / "model", LLAMA)
    draft = write_checkpoint(tmp_path / "draft", vllm_draft(LLAMA, None))
    result = cli("rehearse", "--model", str(model), "--draft", str(draft))
    assert result.exit_code == 2 and "needs --python" in result.stderr and "--python" in result.stderr
    result = cli("rehearse", "--model", str(model), "--draft", str(draft), "--device", "tpu", "--python", "python3")
    assert result.exit_code == 2 and "--device tpu" in result.stderr


def test_a_multi_line_engine_error_keeps_its_reason():
    """pydantic's ValidationError (vLLM's ModelConfig, 0.32.0 ``vllm/engine/arg_utils.py``) puts only a
    count on its first line; the reason ('... failed to be inspected') is on the next. The driver's
    check detail keeps the first three lines, joined, so a rehearsal names the cause."""
    from patchkit.rehearse.engine_driver import failure
    from patchkit.rehearse.engine_steps import Step

    exc = ValueError(
        "1 validation error for ModelConfig\n  Value error, Model architectures "
        "['Gemma3ForConditionalGeneration'] failed to be inspected.\n    For further information"
    )
    check = failure(Step.STARTED, exc)
    assert check["ok"] is False
    assert check["detail"] == (
        "ValueError: 1 validation error for ModelConfig | Value error, Model architectures "
        "['Gemma3ForConditionalGeneration'] failed to be inspected. | For further information"
    )


def _without(cfg: dict, *keys: str) -> dict:
    return {k: v for k, v in cfg.items() if k not in keys}


def test_head_fields_absent_from_the_users_config_are_set_consistently():
    """Glm4MoeConfig's class default num_key_value_heads is 8 (transformers): left out of the
    miniature, 2 query heads met 8 kv heads ("size of tensor a (2) must match ... (8)")."""
    mini = shrink(_without(GLM45_AIR, "num_key_value_heads", "head_dim"), GLM45_SPECFORGE_ONLY)
    t = mini.target_config
    assert t["num_attention_heads"] == 2 and t["num_key_value_heads"] == 2 and t["head_dim"] == 32
    assert t["hidden_size"] // t["num_attention_heads"] == t["head_dim"]
    assert "num_key_value_heads: (absent) -> 2" in mini.changed
    gqa = shrink(GLM45_AIR, GLM45_SPECFORGE_ONLY).target_config  # 8 of 96: still grouped (1 of 2)
    assert gqa["num_key_value_heads"] == 1


def test_moe_fields_absent_from_the_users_config_fit_the_miniatures_experts_and_layers():
    """DeepseekV3Config defaults num_experts_per_tok 8, n_group 8, topk_group 4, first_k_dense_replace
    3: four experts and a few layers hold none of them, so the miniature sets them explicitly."""
    user = _without(
        GLM45_AIR, "num_experts_per_tok", "n_group", "topk_group", "first_k_dense_replace", "moe_intermediate_size"
    )
    t = shrink(user, GLM45_SPECFORGE_ONLY).target_config
    assert t["n_routed_experts"] == 4 and t["num_experts_per_tok"] == 2
    assert t["n_group"] == 1 and t["topk_group"] == 1 and t["first_k_dense_replace"] == 1
    assert t["moe_intermediate_size"] == 64 and t["first_k_dense_replace"] < t["num_hidden_layers"]


def test_layer_and_mla_fields_follow_the_miniatures_layers_and_heads():
    qwen_moe = {
        **_without(GLM45_AIR, "n_routed_experts", "first_k_dense_replace", "n_group", "topk_group"),
        "num_experts": 60,
        "mlp_only_layers": [0, 45],
        "max_window_layers": 23,
    }
    t = shrink(qwen_moe, vllm_draft(qwen_moe, None)).target_config
    m = t["num_hidden_layers"]
    assert all(0 <= k < m for k in t["mlp_only_layers"]) and len(t["mlp_only_layers"]) == 2
    assert 0 < t["max_window_layers"] < m
    mla = {**GLM45_AIR, "kv_lora_rank": 512, "qk_rope_head_dim": 64}  # qk_nope / v_head_dim left to defaults
    t = shrink(mla, vllm_draft(mla, None)).target_config
    assert (t["kv_lora_rank"], t["qk_rope_head_dim"], t["qk_nope_head_dim"], t["v_head_dim"]) == (32, 32, 32, 32)
    assert "q_lora_rank" not in t  # None / absent selects the no-q-LoRA path: kept


def test_mrope_section_is_rescaled_onto_the_miniatures_head_size():
    vl = {**LLAMA, "head_dim": 128, "rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}}
    t = shrink(vl, vllm_draft(LLAMA, None)).target_config
    assert (
        sum(t["rope_scaling"]["mrope_section"]) == t["head_dim"] // 2 and len(t["rope_scaling"]["mrope_section"]) == 3
    )


def test_fields_that_cannot_be_made_consistent_are_refused_by_name():
    with pytest.raises(RefusedError) as err:
        shrink(_without(LLAMA, "num_attention_heads"), vllm_draft(LLAMA, None))
    assert "num_attention_heads" in err.value.message and err.value.exit_code == 3
    bad_types = {**GEMMA3_1B, "layer_types": ["sliding_attention", "full_attention"]}
    with pytest.raises(RefusedError) as err:
        shrink(bad_types, GEMMA3_SPECULATORS_DRAFT)
    assert "layer_types" in err.value.message and "2 entries for 26 layers" in err.value.message


@pytest.mark.release
def test_an_architecture_the_registry_does_not_hold_is_refused_before_anything_is_built(release, tmp_path, monkeypatch):
    """A typo in ``architectures`` ran the whole rehearsal (48 s) and ended 'rehearsal failed'; it is
    the --arch path's usage error (exit 2, closest names), before the device probe or the engine."""
    import dataclasses
    import sys

    from engine_models import write_checkpoint
    from patchkit.rehearse import rehearsal
    from patchkit.errors import UsageError
    from patchkit.vllm.release.install import from_site_packages

    install = dataclasses.replace(from_site_packages(release("0.32.0")), python=Path(sys.executable))

    def started(*_a, **_k):
        raise AssertionError("the rehearsal went on past the registry check")

    monkeypatch.setattr(rehearsal, "probe_device", started)
    monkeypatch.setattr(rehearsal.subprocess, "Popen", started)
    monkeypatch.setattr(rehearsal, "shrink", started)
    typo = {**GLM45_AIR, "architectures": ["Glm4MoeForCausalLn"]}
    model = write_checkpoint(tmp_path / "model", typo)
    draft = write_checkpoint(tmp_path / "draft", GLM45_SPECFORGE_ONLY)
    with pytest.raises(UsageError) as err:
        rehearsal.rehearse(install, model, draft)
    assert err.value.exit_code == 2
    assert (
        err.value.message
        == "--model's config.json architecture 'Glm4MoeForCausalLn' is not in vLLM 0.32.0's model registry"
    )
    assert err.value.hint == "did you mean Glm4MoeForCausalLM"  # and the scan to run, as a value:
    assert err.value.step.argv == ("patchkit", "scan", "--python", sys.executable)
    assert f"run 'patchkit scan --python {sys.executable}'" in err.value.hint_for()
    with pytest.raises(UsageError) as err:
        rehearsal.rehearse(install, write_checkpoint(tmp_path / "none", {**GLM45_AIR, "architectures": []}), draft)
    assert "lists no architectures" in err.value.message
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]


@pytest.mark.release
def test_an_interpreter_without_torch_is_the_environment_exit_4(release, tmp_path, cli):
    """rehearse with a --python that cannot import torch exited 3 ('refused'), which says patchkit
    declined to touch the install; it is the environment's problem (exit 4), named, nothing built."""
    import dataclasses
    import sys

    from engine_models import write_checkpoint
    from patchkit.errors import ExitCode, InterpreterError
    from patchkit.rehearse import rehearsal
    from patchkit.vllm.release.install import from_site_packages

    install = dataclasses.replace(from_site_packages(release("0.32.0")), python=Path(sys.executable))
    model = write_checkpoint(tmp_path / "model", GLM45_AIR)
    draft = write_checkpoint(tmp_path / "draft", GLM45_SPECFORGE_ONLY)
    with pytest.raises(InterpreterError) as err:
        rehearsal.rehearse(install, model, draft)
    assert err.value.exit_code == ExitCode.ENVIRONMENT
    assert "cannot import torch" in err.value.message and "environment that serves the model" in err.value.hint
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]
