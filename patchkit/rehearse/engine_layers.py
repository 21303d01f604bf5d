"""How the miniature's layers are set apart, for the engine driver (TARGET interpreter; issue 41).

Part of the script :mod:`patchkit.rehearse.engine_driver` (it may import torch; patchkit never imports it), called
by :func:`patchkit.rehearse.engine_checkpoints.build_target`: which parameters carry a layer's branches
(:func:`branch_scales`), the plain build that scales a layer up until it stands apart (:func:`separate_layers`),
and the band build (:func:`band_layers`) for the model types of
:data:`patchkit.rehearse.tolerances.BANDED_MODEL_TYPES` only. The band build also scales layers down; for
StableLM 2 in the CPU tier that left the fitted draft agreeing with the target 0.05 of the time at position 1
(docs/engine.md, "Tried and not kept"), so every other model type keeps the plain build.
"""

from __future__ import annotations

import math

if __package__:
    from patchkit.rehearse.engine_checkpoints import decoder_layers, layer_states
else:  # run as part of the script: its folder is first on sys.path
    from engine_checkpoints import decoder_layers, layer_states

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


def separate_layers(model, tokens: list[int], margin: float, rounds: int = 8) -> None:
    """Scale each decoder layer's branch outputs (:func:`branch_scales`), first layer first, until its
    output stands at least ``1.25 * margin`` from its input (relative, both ways, median over ``tokens``):
    a random miniature's layers can be too alike to tell a shifted capture apart (GraniteMoE's
    ``residual_multiplier`` 0.22 against its ``embedding_multiplier`` 12: 0.06 apart). A layer already that
    far apart is left as it is. The margin reached is measured afterwards (:func:`layer_separation`)."""

    target = 1.25 * margin
    layers = decoder_layers(model)
    states = None  # the streams of the model as it is: measured again only after a layer was scaled
    for i, layer in enumerate(layers):
        params = branch_scales(layer)
        for _ in range(rounds if params else 0):
            if states is None:
                states, _logits = layer_states(model, tokens, "cpu")
            a, b = states[i], states[i + 1]
            step = min(
                float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)).median()),
                float(((a - b).norm(dim=-1) / a.norm(dim=-1).clamp_min(1e-30)).median()),
            )
            if step >= target:
                break
            factor = min(8.0, max(1.5, 1.2 * target / max(step, 1e-6)))
            _scale(params, factor)
            states = None


QUIET = 0.1
"""How far apart, as a share of the margin, :func:`band_layers` sets a layer no draft id needs apart."""
BAND = 1.1
"""The widest a layer's step may end above its aim before :func:`band_layers` scales it down."""


def band_layers(model, tokens: list[int], margin: float, ids: list[int] | None = None, rounds: int = 8) -> None:
    """Scale each decoder layer's branch outputs (:func:`branch_scales`), first layer first, until its output stands
    from its input (relative, both ways, median over ``tokens``) between ``1.25 * margin`` and :data:`BAND` times
    that where the aux check reads (a layer whose input or output is one of the draft's ``ids``; every layer when
    None), and between ``QUIET * margin`` and :data:`BAND` times that elsewhere.

    Why (issue 41, measured in transformers on the CPU): a layer whose branch adds ``r`` times the stream and
    changes by ``g`` times a relative change of its input changes by about ``sqrt(1 + g^2 r^2) / sqrt(1 + r^2)``
    times it. Qwen3-Next's Gated DeltaNet has ``g`` about 2 and its MLP 1.5; with all 10 layers 0.6 or more
    apart, bf16's median relative error grew from 0.0016 to 0.30 at the last layer and bf16's greedy
    continuation left fp32's at its first token. Banded: 0.019, and 24 of 24 greedy tokens as fp32's.
    Returns nothing; raises nothing of its own (torch's errors pass through)."""

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
            _scale(params, factor)
            states = None


def _scale(params: list, factor: float) -> None:
    """Scale a layer's branch parameters (:func:`branch_scales`) by ``factor`` in place: a zero-centred norm weight
    (Gemma's ``1 + weight``) as ``1 + weight``, every other one as it is."""
    import torch  # lazy: target interpreter only

    with torch.no_grad():
        for p, centred in params:
            if centred:
                p.copy_((1 + p) * factor - 1)
            else:
                p.mul_(factor)


def _ratio(step: float) -> float:
    """The branch's size against the stream (``r``) that stands a layer ``step`` apart, were its output
    orthogonal to its input: ``step = r / sqrt(1 + r^2)`` (the step is capped at 0.95)."""
    step = min(step, 0.95)
    return step / math.sqrt(1 - step * step)
