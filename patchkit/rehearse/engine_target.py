"""The miniature target with random weights, for the engine driver (TARGET interpreter; issue 41).

Part of the script :mod:`patchkit.rehearse.engine_driver` runs in the serving interpreter (it may import torch
and transformers; patchkit never imports it): :func:`build_target` builds and saves it, :func:`seed_routers`
gives routers transformers leaves at zero random weights, :func:`separate_layers` scales its layers so that the
states the draft receives stand apart from every other layer's (the aux check's ``nearest_other``), and no
further than that, since a layer that stands further apart amplifies bf16's rounding; :func:`separation_reached`
and :func:`same_prefix` measure what the build reached.
"""

from __future__ import annotations

import json
import math
import os

if __package__:
    from patchkit.rehearse.engine_checkpoints import cast_copy, decoder_layers, layer_states
else:  # run as part of the script: its folder is first on sys.path
    from engine_checkpoints import cast_copy, decoder_layers, layer_states


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
    if spec.get("layer_margin"):  # each layer's branch scaled until the draft's layers stand apart (issue 41)
        separate_layers(model, spec["prompt"], float(spec["layer_margin"]), spec.get("reference_ids"))
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


BRANCH_OUTPUTS = ("o_proj", "down_proj", "out_proj", "output_linear", "w2", "c_proj", "fc2", "dense")
"""The last linear map of a decoder layer's branch (attention, MLP, experts, a mixer), by the last part of
its parameter's name in transformers' classes (``self_attn.o_proj.weight``, ``mlp.experts.down_proj``,
GraniteMoE's ``block_sparse_moe.output_linear.weight``, LFM2's ``feed_forward.w2.weight``): what the branch
adds to the residual stream scales with it, unless a norm after the branch (below) takes its scale away."""
POST_NORMS = ("post_feedforward_layernorm", "post_mlp_layernorm", "post_self_attn_layernorm")
"""Norms applied to a branch's output before the residual add (Gemma 2 and 3, OLMo 2, GLM-4); with
``post_feedforward_layernorm``, ``post_attention_layernorm`` is one too (in Llama it is the MLP's input norm)."""


def branch_scales(layer) -> list[tuple[object, bool]]:
    """The parameters of ``layer`` whose scale is its branches' contribution to the residual stream, each
    with whether it is a zero-centred norm weight (Gemma's ``1 + weight``: scaled as ``1 + weight``)."""
    named = dict(layer.named_parameters())
    words = {part for name in named for part in name.split(".")}
    post = set(POST_NORMS) | ({"post_attention_layernorm"} if "post_feedforward_layernorm" in words else set())
    out = []
    for name, p in named.items():
        parts = [w for w in name.split(".") if w not in ("weight", "bias")]
        if parts and parts[-1] in post and p.dim() == 1:
            out.append((p, bool((p == 0).all())))
    if out:  # the norms after the branches decide the scale; the projections before them do not
        return out
    for name, p in named.items():  # weights (3-D for fused experts) and biases of the branches' last maps
        parts = [w for w in name.split(".") if w not in ("weight", "bias")]
        if parts and parts[-1] in BRANCH_OUTPUTS:
            out.append((p, False))
    return out


def layer_separation(states: list, ids: list[int] | None = None) -> float:
    """The smallest distance between two layers' streams, as the aux check measures it: over every pair
    (j, k), j one of ``ids`` (every layer when None), the median over tokens of ``|h_j - h_k| / |h_k|``.
    The aux check asks only this of the miniature: each state the draft receives is its own layer's and far
    from every other layer's (:func:`patchkit.rehearse.verdict.decide_aux`, ``nearest_other``)."""
    worst = float("inf")
    for j, a in enumerate(states):
        for k, b in enumerate(states):
            if j != k and (ids is None or j in ids):
                worst = min(worst, float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)).median()))
    return worst


def separation_reached(model, tokens: list[int], dtype: str, ids: list[int] | None = None) -> dict[str, float]:
    """The miniature's :func:`layer_separation` (of the draft's ``ids`` from every other layer; of every two
    layers when None) on ``tokens`` in transformers on the CPU, in float32 and in ``dtype`` (the rehearsal's):
    the margin the build reached, checked before the engine runs."""
    out = {"float32": layer_separation(layer_states(model, tokens, "cpu")[0], ids)}
    if dtype != "float32":
        out[dtype] = layer_separation(layer_states(cast_copy(model, dtype), tokens, "cpu")[0], ids)
    return {k: round(v, 4) for k, v in out.items()}


QUIET = 0.1
"""How far apart, as a share of the margin, :func:`separate_layers` sets a layer no draft id needs apart."""
BAND = 1.1
"""The widest a layer's step may end above its aim before :func:`separate_layers` scales it down."""


def separate_layers(model, tokens: list[int], margin: float, ids: list[int] | None = None, rounds: int = 8) -> None:
    """Scale each decoder layer's branch outputs (:func:`branch_scales`), first layer first, until its
    output stands from its input (relative, both ways, median over ``tokens``) between ``1.25 * margin``
    and :data:`BAND` times that where the aux check needs it (a layer whose input or output is one of the
    draft's ``ids``, every layer when None), and between ``QUIET * margin`` and ``BAND`` times that elsewhere:
    a random miniature's layers can be too alike to tell a shifted capture apart (GraniteMoE's
    ``residual_multiplier`` 0.22 against its ``embedding_multiplier`` 12: 0.06 apart), and a layer that
    stands further apart than that amplifies bf16's rounding more (issue 41: a layer whose branch adds ``r``
    times the stream and changes by ``g`` times a relative change of its input changes by about
    ``sqrt(1 + g^2 r^2) / sqrt(1 + r^2)`` times it; Qwen3-Next's Gated DeltaNet has ``g`` about 2, its MLP
    1.5, and its 10 layers, all scaled to about 0.6 or more, amplified bf16's error from 0.006 to 0.30
    at the last: the bf16 greedy continuation left fp32's at its first token). The margin reached is
    measured afterwards (:func:`layer_separation`)."""
    import torch  # lazy: target interpreter only

    layers = decoder_layers(model)
    states = None  # the streams of the model as it is: measured again only after a layer was scaled
    for i, layer in enumerate(layers):
        params = branch_scales(layer)
        low = 1.25 * margin if ids is None or i in ids or i + 1 in ids else QUIET * margin
        for _ in range(rounds if params else 0):
            if states is None:
                states, _logits = layer_states(model, tokens, "cpu")
            a, b = states[i], states[i + 1]
            grown = float(((a - b).norm(dim=-1) / a.norm(dim=-1).clamp_min(1e-30)).median())  # the branches' r
            step = min(float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)).median()), grown)
            if low <= step <= BAND * low:
                break
            factor = min(8.0, max(0.125, _ratio(low * (1 + BAND) / 2) / max(grown, 1e-6)))
            with torch.no_grad():
                for p, centred in params:
                    if centred:
                        p.copy_((1 + p) * factor - 1)
                    else:
                        p.mul_(factor)
            states = None


def _ratio(step: float) -> float:
    """The branch's size against the stream (``r``) that stands a layer ``step`` apart, were its output
    orthogonal to its input: ``step = r / sqrt(1 + r^2)`` (the step is capped at 0.95)."""
    step = min(step, 0.95)
    return step / math.sqrt(1 - step * step)


def same_prefix(tokens: list | None, reference: list) -> int | None:
    """How many of ``reference``'s tokens ``tokens`` (the run dtype's greedy continuation in transformers on the
    CPU, from the fit's rollouts) repeat from the start; None when the fit ran none (fp32, or no fit). A bf16
    miniature whose continuation leaves fp32's early amplifies rounding: its greedy tokens and the fitted
    draft's agreement depend on the device's (issue 41: Qwen3-Next's left at its first token)."""
    if tokens is None:
        return None
    return next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), min(len(tokens), len(reference)))
