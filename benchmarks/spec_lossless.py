"""Is speculative decoding lossless here? Greedy output with a speculator against greedy output without.

A GPU diagnostic for issue 30 (Mixtral patched by patchkit served by Model Runner V2 gave other tokens),
run in the serving interpreter (it imports vLLM, torch and transformers; patchkit's own process never
does). Independent of ``patchkit rehearse``: it checks nothing of patchkit's, only vLLM's output.

    # build the miniature checkpoints of some cases (transformers, random weights, fitted draft)
    python benchmarks/spec_lossless.py build --cases mixtral,llama --out /root/sl
    # one engine run: method none|ngram|eagle3, runner v1|v2 (v2: VLLM_USE_V2_MODEL_RUNNER=1)
    python benchmarks/spec_lossless.py run --dir /root/sl/mixtral --method eagle3 --runner v2 --dtype bf16 [--eager]
    # a campaign: envs (unpatched, patched) x cases x methods x runners, side by side, one JSON line a run
    python benchmarks/spec_lossless.py campaign --out /root/sl --jobs 10 --deadline 480

Each ``run`` prints one JSON line: the tokens per prompt, vLLM's own top-2 logprob gap at every
position, and a digest of the target's weights after the engine loaded (the draft shares the target's
embedding and head: a digest that differs from the plain run's would mean the draft's load wrote into
the target). ``compare`` pairs each speculative run with the plain run of the same env, case, runner,
dtype and path, and names the first differing position per prompt and vLLM's gap there (a near-tie is
a gap under ``--tie``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PROMPTS = 4
PROMPT_LEN = 16
MAX_TOKENS = 48
K = 3


def build(cases: list[str], out: Path) -> None:
    from engine_models import CASES, GPU_CASES

    from patchkit.rehearse.engine_checkpoints import build_target, decoder_layers, save_draft, train_draft
    from patchkit.rehearse.miniature import shrink
    from patchkit.rehearse.rehearsal import PROMPT, PROMPT_TOKENS

    by_name = {c.name: c for c in [*CASES, *GPU_CASES]}
    for name in cases:
        case = by_name[name]
        mini = shrink(case.target, case.draft)
        work = out / name
        work.mkdir(parents=True, exist_ok=True)
        spec = {
            "workdir": str(work),
            "target_config": mini.target_config,
            "draft_config": mini.draft_config,
            "reference_ids": list(mini.ids),
            "prompt": PROMPT,
            "max_tokens": PROMPT_TOKENS,
            "num_speculative_tokens": 2,
            "seed": 0,
            "init_scale": 5.0,
        }
        t0 = time.monotonic()
        model, _target = build_target(spec)
        trained = train_draft(model, spec, len(decoder_layers(model)))
        save_draft(spec, trained["weights"])
        vocab = mini.target_config.get("vocab_size") or mini.target_config["text_config"]["vocab_size"]
        rng = random.Random(7)
        prompts = [PROMPT] + [[rng.randrange(3, vocab) for _ in range(PROMPT_LEN)] for _ in range(PROMPTS - 1)]
        (work / "prompts.json").write_text(json.dumps(prompts))
        (work / "case.json").write_text(
            json.dumps(
                {
                    "case": name,
                    "arch": case.target["architectures"][0],
                    "ids": list(mini.ids),
                    "fit": trained["fit"],
                    "build_s": round(time.monotonic() - t0, 1),
                }
            )
        )
        print(json.dumps({"built": name, "ids": list(mini.ids), "fit": trained["fit"]}), flush=True)


def _router_gates(state: dict, experts: int) -> list[str]:
    """The router weights of a MoE checkpoint: ``...gate.weight`` tensors with one row per expert."""
    return [k for k, v in state.items() if k.endswith("gate.weight") and "proj" not in k and v.shape[0] == experts]


def decisive(src: Path, dst: Path, factor: float) -> None:
    """A copy of ``src``'s miniature whose MoE router weights are multiplied by ``factor``: the top-k
    experts win by a wide margin, so a rounding difference between two kernels flips no expert."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst, dirs_exist_ok=True)
    experts = json.loads((src / "target" / "config.json").read_text()).get("num_local_experts")
    for f in (dst / "target").glob("*.safetensors"):
        state = load_file(str(f))
        for k in _router_gates(state, experts):
            state[k] = state[k] * factor
        save_file(state, str(f), metadata={"format": "pt"})
    case = json.loads((dst / "case.json").read_text())
    (dst / "case.json").write_text(json.dumps({**case, "case": dst.name, "router_scale": factor}))


def router_margins(folder: Path, dtype: str) -> dict:
    """transformers' router logits over each prompt, on the GPU in ``dtype``: per layer, the smallest gap
    between the k-th and the (k+1)-th expert's logit (a near-tie flips an expert on a rounding)."""
    import torch
    import transformers

    cfg = json.loads((folder / "target" / "config.json").read_text())
    k, experts = cfg.get("num_experts_per_tok", 2), cfg.get("num_local_experts")
    model = (
        transformers.AutoModelForCausalLM.from_pretrained(str(folder / "target"), torch_dtype=getattr(torch, dtype))
        .to("cuda")
        .eval()
    )
    gaps: dict[str, float] = {}

    def hook(name):
        def fn(_mod, _inp, out):
            outs = out if isinstance(out, tuple) else (out,)
            logits = next(o for o in outs if torch.is_tensor(o) and o.shape[-1] == experts).float().reshape(-1, experts)
            top = logits.topk(k + 1, dim=-1).values
            g = float((top[:, k - 1] - top[:, k]).min())
            gaps[name] = min(gaps.get(name, g), g)

        return fn

    for name, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if name.endswith(".gate") and w is not None and w.dim() == 2 and w.shape[0] == experts:
            mod.register_forward_hook(hook(name))
    with torch.no_grad():
        for p in json.loads((folder / "prompts.json").read_text()):
            model(torch.tensor([p], device="cuda"))
    return {"case": folder.name, "dtype": dtype, "min_router_gap": gaps}


def _digest(worker):
    runner = worker.model_runner
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        if hasattr(p, "detach"):
            h.update(name.encode())
            h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def one_run(folder: Path, method: str, dtype: str, eager: bool) -> dict:
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    prompts = json.loads((folder / "prompts.json").read_text())
    kwargs = dict(
        model=str(folder / "target"),
        skip_tokenizer_init=True,
        dtype=dtype,
        max_model_len=256,
        enforce_eager=eager,
        seed=0,
        max_num_seqs=4,
        distributed_executor_backend="uni",
        gpu_memory_utilization=0.05,
        kv_cache_memory_bytes=256 << 20,
    )
    if method == "eagle3":
        kwargs["speculative_config"] = {"method": "eagle3", "model": str(folder / "draft"), "num_speculative_tokens": K}
    elif method == "ngram":
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": K,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        }
    t0 = time.monotonic()
    llm = LLM(**kwargs)
    started = time.monotonic() - t0
    digest = llm.collective_rpc(_digest)[0]
    params = SamplingParams(
        temperature=0.0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS, ignore_eos=True, detokenize=False, logprobs=2
    )
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    tokens, gaps = [], []
    for o in outs:
        c = o.outputs[0]
        tokens.append(list(c.token_ids))
        row = []
        for lp in c.logprobs or []:
            vals = sorted((v.logprob for v in lp.values()), reverse=True)
            row.append(round(vals[0] - vals[1], 5) if len(vals) > 1 else None)
        gaps.append(row)
    counters = {}
    try:
        for m in llm.get_metrics():
            if m.name.startswith("vllm:spec_decode"):
                counters[m.name] = (
                    getattr(m, "value", None) if getattr(m, "value", None) is not None else getattr(m, "values", None)
                )
    except Exception as exc:  # noqa: BLE001
        counters["error"] = str(exc)
    return {"tokens": tokens, "gaps": gaps, "digest": digest, "start_s": round(started, 1), "counters": counters}


def compare(rows: list[dict], tie: float) -> list[dict]:
    """Each speculative run against the plain run of the same env, case, runner, dtype and path."""
    plain = {
        (r["env"], r["case"], r["runner"], r["dtype"], r["path"]): r
        for r in rows
        if r["method"] == "none" and r.get("tokens")
    }
    out = []
    for r in rows:
        if r["method"] == "none" or not r.get("tokens"):
            continue
        base = plain.get((r["env"], r["case"], r["runner"], r["dtype"], r["path"]))
        if base is None:
            continue
        per = []
        for a, b, g in zip(base["tokens"], r["tokens"], base["gaps"]):
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
            per.append({"first": first, "gap": None if first is None else g[first]})
        differ = [p for p in per if p["first"] is not None]
        out.append(
            {
                "env": r["env"],
                "case": r["case"],
                "runner": r["runner"],
                "dtype": r["dtype"],
                "path": r["path"],
                "method": r["method"],
                "equal": f"{len(per) - len(differ)}/{len(per)}",
                "first": per,
                "near_tie": all(p["gap"] is not None and p["gap"] < tie for p in differ) if differ else None,
                "target_weights_same": r["digest"] == base["digest"],
            }
        )
    return out


def campaign(args) -> int:
    """Two envs (the interpreter's vLLM, never patched, and a hard-linked copy patched for the cases),
    every case's plain, ngram and eagle3 runs under both runners, side by side."""
    from gpu_campaign import make_env, patchkit, run

    out = Path(args.out)
    cases = json.loads(args.plan)
    envs = {"unpatched": make_env(out, "unpatched"), "patched": make_env(out, "patched")}
    archs = sorted(
        {
            json.loads((out / c / "case.json").read_text())["arch"]
            for c in {j[1] for j in cases}
            if (out / c / "case.json").exists()
        }
    )
    marker = out / "patched-for.json"
    if not marker.exists() or json.loads(marker.read_text()) != archs:
        done = run([*patchkit(), "apply", *[x for a in archs for x in ("--arch", a)], "--python", envs["patched"]])
        print(
            json.dumps({"apply": archs, "exit": done.returncode, "tail": done.stdout[-600:] + done.stderr[-300:]}),
            flush=True,
        )
        marker.write_text(json.dumps(archs))
    deadline = time.monotonic() + args.deadline
    results = out / "runs.jsonl"

    def job(j):
        env, case, method, runner, dtype, path = j
        if time.monotonic() > deadline:
            return None
        env_vars = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "VLLM_CACHE_ROOT": str(out / "cache" / ("-".join(j) + f"-{os.urandom(3).hex()}")),
        }
        env_vars.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        if runner == "v2":
            env_vars["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        cmd = [envs[env], __file__, "run", "--dir", str(out / case), "--method", method, "--dtype", dtype]
        if path == "eager":
            cmd.append("--eager")
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, env=env_vars, timeout=max(30, deadline - time.monotonic())
            )
            last = [line for line in p.stdout.splitlines() if line.startswith("{")]
            row = json.loads(last[-1]) if last else {"error": (p.stderr or "")[-1500:]}
        except subprocess.TimeoutExpired:
            row = {"error": "timed out"}
        row.update(
            env=env,
            case=case,
            method=method,
            runner=runner,
            dtype=dtype,
            path=path,
            seconds=round(time.monotonic() - t0, 1),
        )
        with results.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(
            json.dumps(
                {k: row.get(k) for k in ("env", "case", "method", "runner", "dtype", "path", "seconds")}
                | {"error": (row.get("error") or "")[-300:]}
            ),
            flush=True,
        )
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(job, [tuple(j) for j in cases]))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    for c in compare(rows, args.tie):
        print(json.dumps(c), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--cases", required=True)
    b.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--method", choices=["none", "ngram", "eagle3"], required=True)
    r.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    r.add_argument("--eager", action="store_true")
    c = sub.add_parser("campaign")
    c.add_argument("--out", required=True)
    c.add_argument("--plan", required=True, help="JSON list of [env, case, method, runner, dtype, path]")
    c.add_argument("--jobs", type=int, default=10)
    c.add_argument("--deadline", type=float, default=480)
    c.add_argument("--tie", type=float, default=0.05)
    d = sub.add_parser("decisive")
    d.add_argument("--src", required=True)
    d.add_argument("--dst", required=True)
    d.add_argument("--factor", type=float, default=30.0)
    g = sub.add_parser("router")
    g.add_argument("--dir", required=True)
    g.add_argument("--dtype", default="bfloat16")
    m = sub.add_parser("compare")
    m.add_argument("runs")
    m.add_argument("--tie", type=float, default=0.05)
    args = ap.parse_args()
    if args.cmd == "build":
        build(args.cases.split(","), Path(args.out))
    elif args.cmd == "run":
        try:
            print(json.dumps(one_run(Path(args.dir), args.method, args.dtype, args.eager)), flush=True)
        except Exception as exc:  # noqa: BLE001 - one line, the campaign records it
            import traceback

            tb = traceback.extract_tb(exc.__traceback__)
            where = next(
                (f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(tb) if "vllm" in f.filename),
                None,
            )
            print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:500]}", "where": where}), flush=True)
            return 1
    elif args.cmd == "campaign":
        return campaign(args)
    elif args.cmd == "decisive":
        decisive(Path(args.src), Path(args.dst), args.factor)
    elif args.cmd == "router":
        print(json.dumps(router_margins(Path(args.dir), args.dtype)), flush=True)
    else:
        rows = [json.loads(line) for line in Path(args.runs).read_text().splitlines()]
        for row in compare(rows, args.tie):
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
