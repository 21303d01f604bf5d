"""Wall time of patchkit's commands on a real vLLM release, next to plain parse times.

Usage: python benchmarks/bench.py [VERSION ...] [--repeat N] [--runtime PYTHON]

For each release (default 0.17.1): a fresh copy of its files (fetched once, see
tests/vllm_release.py), then ``patchkit apply``, ``verify``, ``status`` and ``revert`` run as
subprocesses (what a user waits for, interpreter start included), each repeated N times on a
fresh copy; the median is printed. Beside them: the time to parse the files apply touches
with ``ast`` and with libcst, in this process. Prints a Markdown table.

With ``--runtime PYTHON`` (an environment with a real, importable vLLM): the wall time of
``patchkit verify --runtime --python PYTHON`` next to a bare import of the same vLLM modules
(registry, the model files, the speculative config) by that interpreter.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from vllm_release import pristine_site_packages  # noqa: E402

TOUCHED = [
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
]
PATCHKIT = [sys.executable, "-m", "patchkit"]


def timed(cmd: list[str], expect: int) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}, expected {expect}\n{proc.stdout}{proc.stderr}")
    return elapsed


def parse_times(site: Path, files: list[str]) -> tuple[float, float]:
    sources = [(site / f).read_bytes() for f in files if (site / f).exists()]
    t0 = time.perf_counter()
    for s in sources:
        ast.parse(s)
    t1 = time.perf_counter()
    for s in sources:
        cst.parse_module(s)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def bench(version: str, repeat: int) -> dict[str, float]:
    pristine = pristine_site_packages(version)
    runs: dict[str, list[float]] = {k: [] for k in ("apply", "verify", "status", "revert", "verify (unpatched)", "ast", "libcst")}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            site = Path(tmp) / "site-packages"
            shutil.copytree(pristine, site)
            sp = ["--site-packages", str(site)]
            runs["verify (unpatched)"].append(timed([*PATCHKIT, "verify", *sp], 1))
            runs["apply"].append(timed([*PATCHKIT, "apply", *sp], 0))
            runs["verify"].append(timed([*PATCHKIT, "verify", *sp], 0))
            runs["status"].append(timed([*PATCHKIT, "status", *sp], 0))
            runs["revert"].append(timed([*PATCHKIT, "revert", *sp], 0))
            a, c = parse_times(site, TOUCHED)
            runs["ast"].append(a)
            runs["libcst"].append(c)
    return {k: statistics.median(v) for k, v in runs.items()}


BARE_IMPORT = (
    "import vllm.model_executor.models.registry, vllm.model_executor.models.deepseek_v2, "
    "vllm.model_executor.models.kimi_k25, vllm.config.speculative, vllm.model_executor.models.interfaces"
)


def bench_runtime(python: str, repeat: int) -> dict[str, float]:
    runs: dict[str, list[float]] = {"verify --runtime": [], "bare import": []}
    for _ in range(repeat):
        runs["bare import"].append(timed([python, "-c", BARE_IMPORT], 0))
        start = time.perf_counter()
        subprocess.run([*PATCHKIT, "verify", "--runtime", "--python", python], capture_output=True)
        runs["verify --runtime"].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=["0.17.1"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runtime", metavar="PYTHON", help="interpreter of an environment with an importable vLLM")
    args = parser.parse_args()
    cols = ["apply", "verify", "verify (unpatched)", "status", "revert", "ast", "libcst"]
    print(f"median of {args.repeat} runs, seconds; ast/libcst: parsing the {len(TOUCHED)} files apply touches\n")
    print("| vLLM | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for v in args.versions:
        r = bench(v, args.repeat)
        print(f"| {v} | " + " | ".join(f"{r[c]:.2f}" for c in cols) + " |")
    if args.runtime:
        r = bench_runtime(args.runtime, args.repeat)
        print(f"\n| {args.runtime} | verify --runtime | bare import of the same vLLM modules |\n|---|---|---|")
        print(f"| median of {args.repeat} | {r['verify --runtime']:.2f} | {r['bare import']:.2f} |")


if __name__ == "__main__":
    main()
