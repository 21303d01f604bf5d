"""What the engine driver measures, from the states vLLM gave the draft and transformers' (TARGET interpreter).

Part of the script :mod:`patchkit.rehearse.engine_driver` (torch is imported inside each function;
patchkit never imports this module in its own process): the id-distance matrix
(:func:`aux_errors`), the fitted draft's acceptance replayed offline on transformers' hidden states
(:func:`draft_proposals`, :func:`offline_acceptance`) and, where two greedy outputs differ,
transformers' logit gap there and, for a MoE target, how close its routers came to another expert
on the way (:func:`first_difference_gap`, :func:`router_margin`). Nothing here decides a verdict:
:mod:`patchkit.rehearse.verdict` does, in patchkit's process.
"""

from __future__ import annotations

if __package__:
    from patchkit.rehearse.engine_checkpoints import layer_states
else:  # run as part of the script: its folder is first on sys.path
    from engine_checkpoints import layer_states


def aux_errors(first, reference: list, ids: list[int]) -> dict:
    """The id-distance matrix: for each of the draft's ids (in layer order, as vLLM concatenates
    them) and each transformers layer index k = 0 .. n, the relative distance at every prompt
    position, ``|vLLM - transformers|_2 / |transformers|_2`` of that token's state.

    ``first``: the ``[tokens, len(ids) * hidden]`` states the draft's ``combine_hidden_states``
    received in the prefill (cut to the prompt); ``reference``: :func:`layer_states`' states.
    """
    hidden = first.shape[-1] // len(ids)
    out = {
        "ids": ids,
        "n": len(reference) - 1,
        "tokens": int(first.shape[0]),
        "width": int(first.shape[-1]),
        "hidden": int(reference[0].shape[-1]),
        "errors": [],
    }
    if hidden != reference[0].shape[-1] or hidden * len(ids) != first.shape[-1]:
        return out  # another width than len(ids) states of the target's hidden size: no matrix
    for chunk in first.split(hidden, dim=-1):
        row = []
        for ref in reference:
            e = (chunk - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-12)
            row.append([float(v) for v in e])
        out["errors"].append(row)
    return out


def draft_proposals(states: list, ids: list[int], weights: dict, eps: float) -> list[int]:
    """The fitted draft's proposal at every position, from transformers' aux states there.

    The draft's midlayer adds nothing (``o_proj`` and ``down_proj`` are zero), so its logits are
    ``lm_head(rmsnorm(fc(aux)))`` at its first position, and at every later position too: a later
    position's input is the earlier one's pre-norm hidden state, which the midlayer passes through
    unchanged (``v1/spec_decode/eagle.py``, ``llama_eagle3.py``). Returns target token ids (through
    ``d2t`` when the draft has its own vocabulary); the proposal at position a is for token a + 2.
    """
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    x = torch.cat([states[k] for k in ids], dim=-1).float()
    h = x @ weights["fc.weight"].float().T
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    picked = (h @ weights["lm_head.weight"].float().T).argmax(-1)
    if "d2t" in weights:
        picked = picked + weights["d2t"][picked]
    return [int(t) for t in picked]


def offline_acceptance(tokens: list[int], prompt_len: int, proposals: list[int], k: int, max_tokens: int) -> dict:
    """Replay vLLM's EAGLE loop offline on ``tokens`` (the prompt and vLLM's greedy output).

    After the prefill the target has given token ``prompt_len``; each step the draft proposes ``k``
    tokens from the last position a whose target output is known (``proposals[a]`` at every draft
    position, :func:`draft_proposals`), the target accepts them up to the first that is not its own
    greedy token, and adds one token of its own; the next step proposes from a + accepted + 1.
    Steps repeat until ``max_tokens`` tokens are generated. Returns ``num_drafts`` and
    ``accepted_per_pos`` (how often draft position i + 1 was accepted), as vLLM counts them.
    """
    accepted = [0] * k
    drafts, generated, a = 0, 1, prompt_len - 1
    while generated < max_tokens:
        drafts += 1
        taken = 0
        for i in range(k):
            pos = a + 2 + i
            if pos >= len(tokens) or a >= len(proposals) or proposals[a] != tokens[pos]:
                break
            taken += 1
            accepted[i] += 1
        generated += taken + 1
        a += taken + 1
    return {"num_drafts": drafts, "accepted_per_pos": accepted}


EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""The config fields that give a MoE target's number of routed experts (Mixtral; OLMoE, Qwen-MoE;
DeepSeek, GLM-4.5; ERNIE-4.5 checkpoints)."""
TOP_K = ("num_experts_per_tok", "moe_k", "top_k")
"""The config fields that give how many experts a token is routed to."""


def router_margin(model, device: str, tokens: list[int]) -> dict | None:
    """How close a MoE target's routers came to picking another expert, over ``tokens``, in transformers
    on the engine's device and dtype: per token and router, the gap between the k-th and the (k+1)-th
    expert's logit relative to that token's largest router logit; the smallest of them, and where.

    A router is a module named ``gate`` or ``router`` whose 2-D weight has one row per routed expert.
    Why it matters: where that gap is within the dtype's rounding, two correct engines (compiled and
    eager, two compiled graphs) may route the token to different experts and emit different tokens from
    then on, with no speculation involved (the H200's plain compiled bf16 runs of one Mixtral miniature:
    tests/engine_records/h200-vllm-0.20.2-spec-lossless-1.jsonl). None for a dense target.
    """
    import torch  # lazy: target interpreter only

    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    experts = {int(getattr(text, f)) for f in EXPERT_COUNTS if isinstance(getattr(text, f, None), int)}
    k = next((int(getattr(text, f)) for f in TOP_K if isinstance(getattr(text, f, None), int)), None)
    if not experts or not k:
        return None
    found: dict = {}

    def hook(name):
        def fn(_module, _args, output):
            outs = output if isinstance(output, tuple) else (output,)
            logits = next((o for o in outs if torch.is_tensor(o) and o.shape[-1] in experts), None)
            if logits is None or logits.shape[-1] <= k:
                return
            logits = logits.detach().float().reshape(-1, logits.shape[-1])
            top = logits.topk(k + 1, dim=-1).values
            rel = (top[:, k - 1] - top[:, k]) / logits.abs().max(dim=-1).values.clamp_min(1e-12)
            j = int(rel.argmin())
            if "margin" not in found or float(rel[j]) < found["margin"]:
                found.update(margin=float(rel[j]), router=name, position=j)

        return fn

    handles = [
        mod.register_forward_hook(hook(name))
        for name, mod in model.named_modules()
        if name.rsplit(".", 1)[-1] in ("gate", "router")
        and getattr(mod, "weight", None) is not None
        and mod.weight.dim() == 2
        and mod.weight.shape[0] in experts
    ]
    if not handles:
        return None
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([tokens], dtype=torch.long, device=device))
    finally:
        for h in handles:
            h.remove()
    return found or None


def first_difference_gap(model, device: str, prompt: list[int], a: list[int], b: list[int]) -> dict | None:
    """Where two greedy outputs first differ: transformers' logits there (same device and dtype),
    the gap between the two chosen tokens relative to the largest logit (a near-tie is small) and, for
    a MoE target, the smallest router margin over the tokens that decide it (:func:`router_margin`)."""
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None:
        return None
    _states, logits = layer_states(model, prompt + a[:i], device)
    last = logits[-1]
    top = last.topk(2)
    scale = float(last.abs().max().clamp_min(1e-12))
    return {
        "index": i,
        "tokens": [a[i], b[i]],
        "gap": abs(float(last[a[i]] - last[b[i]])) / scale,
        "top2_gap": float(top.values[0] - top.values[1]) / scale,
        "transformers_token": int(top.indices[0]),
        "router": router_margin(model, device, prompt + a[:i]),
    }


def shares_target_embedding(draft, target, embed_reads: dict) -> bool | str:
    """Whether the draft's ``model.embed_tokens`` is the target's input embedding, found where the release's draft
    loader takes it: ``embed_reads`` (:func:`patchkit.rehearse.driver_run.embed_reads`, read from the install by
    :func:`patchkit.vllm.runner.draft_reads.derive`) gives the ``getter`` that turns a multimodal wrapper into its
    language model (``get_language_model``) and the ``paths`` off the language model (0.34.0: ``model.embed_tokens``
    or ``model.embedding``). The same module, or a tensor at the same address, is shared.

    Returns True or False, or ``"unknown: why"`` where nothing was found along those paths (never raises)."""
    paths = [tuple(p) for p in embed_reads.get("paths") or ()]
    if not paths:
        return (
            "unknown: the release's draft loader was not read, so patchkit does not know where it takes the embedding"
        )
    getter = embed_reads.get("getter")
    try:
        language_model = getattr(target, getter)() if getter and hasattr(target, getter) else target
        found = []
        for path in paths:
            obj = language_model
            for name in path:
                obj = getattr(obj, name, None)
            if obj is not None:
                found.append(obj)
        if not found:
            names = " or ".join(".".join(p) for p in paths)
            return f"unknown: no {names} on {type(language_model).__name__}, where the release's loader takes it"
        mine = draft.model.embed_tokens
        return any(mine is e or mine.weight.data_ptr() == e.weight.data_ptr() for e in found)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"unknown: {type(exc).__name__}: {exc}"
