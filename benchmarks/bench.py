"""Wall time of patchkit's commands on a real vLLM release, as ratios to baselines measured in the same run.

Usage: python benchmarks/bench.py [VERSION ...] [--repeat N] [--runtime PYTHON]

For each release (default 0.17.1), N times on a fresh copy of its files (fetched once, see
tests/vllm_release.py), every command runs as a subprocess of this interpreter (what a user
waits for, interpreter start included), and so does each baseline:

- ``ast`` baseline of a command: ``python -c`` that parses, with ``ast``, every vLLM ``.py``
  file the command reads, to parse it or to hash it (recorded by running the command once in
  this process, see :func:`files_read`);
- ``libcst`` baseline: ``python -c`` that imports libcst, parses the files ``apply`` touches
  and generates their code again.

Prints the medians, then the ratios the project holds itself to (issue 11):
``status`` <= 2.5x its ``ast`` baseline, ``verify`` <= 3x, ``list`` and ``explain`` no slower than
``status``, ``apply --dry-run`` and ``apply`` <= 1.5x the ``libcst`` baseline (issue 11), and
``scan`` <= 1.5x ``python -c`` parsing every model file of the release with ``ast`` (issue 8).

With ``--runtime PYTHON`` (an environment with a real, importable vLLM): the wall time of
``patchkit verify --runtime --python PYTHON`` next to a bare import of the same vLLM modules
(registry, the model files, the speculative config) by that interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from vllm_release import pristine_site_packages  # noqa: E402

PATCHKIT = [sys.executable, "-m", "patchkit"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Subprocesses may cache bytecode, as every installed package has it (pip compiles on install)."""

AST_BASELINE = "import ast, sys\nfor f in sys.argv[1:]:\n    ast.parse(open(f, 'rb').read(), filename=f)\n"
CST_BASELINE = "import sys, libcst\nfor f in sys.argv[1:]:\n    libcst.parse_module(open(f, 'rb').read()).bytes\n"

LIMITS = [
    # (label, command, baseline or other command, at most)
    ("status / ast baseline", "status", "ast: status", 2.5),
    ("verify / ast baseline", "verify", "ast: verify", 3.0),
    ("verify (unpatched) / ast baseline", "verify (unpatched)", "ast: verify", 3.0),
    ("list / status", "list", "status", 1.0),
    ("explain / status", "explain", "status", 1.0),
    ("apply --dry-run / libcst baseline", "apply --dry-run", "libcst: apply", 1.5),
    ("apply / libcst baseline", "apply", "libcst: apply", 1.5),
    ("scan / ast baseline (every model file)", "scan", "ast: scan", 1.5),
]


def timed(cmd: list[str], expect: int) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}, expected {expect}\n{proc.stdout}{proc.stderr}")
    return elapsed


def files_read(site: Path) -> dict[str, list[str]]:
    """The vLLM ``.py`` files ``status`` and ``verify`` read, and the files ``apply`` changes.

    Recorded on a copy of ``site`` by running the API calls in this process with
    :meth:`pathlib.Path.read_bytes` (how patchkit reads every vLLM file: to parse it, or to hash
    it) wrapped; ``status`` and ``verify`` run on the patched copy, as in the timed runs.
    """
    from patchkit import api
    from patchkit.vllm.release.install import from_site_packages

    seen: set[Path] = set()
    real = Path.read_bytes

    def recording(self: Path) -> bytes:
        seen.add(self)
        return real(self)

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "site-packages"
        shutil.copytree(site, copy)
        install = from_site_packages(copy)
        Path.read_bytes = recording
        try:
            out = {"apply": [f.path for f in api.apply(install).files]}
            for name, call in (("status", api.status), ("verify", api.verify)):
                seen.clear()
                call(install)
                out[name] = sorted(str(p.relative_to(copy)) for p in seen if p.suffix == ".py" and copy in p.parents)
        finally:
            Path.read_bytes = real
    return out


def bench(version: str, repeat: int) -> tuple[dict[str, float], dict[str, list[str]]]:
    pristine = pristine_site_packages(version)
    reads = files_read(pristine)
    runs: dict[str, list[float]] = {}
    for cmd in (["list"], ["explain", "eagle3-allowlist"], ["--version"]):  # warm: bytecode written
        timed([*PATCHKIT, *cmd], 0)

    def add(key: str, seconds: float) -> None:
        runs.setdefault(key, []).append(seconds)

    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            site = Path(tmp) / "site-packages"
            shutil.copytree(pristine, site)
            sp = ["--site-packages", str(site)]
            for name in ("status", "verify"):
                add(
                    f"ast: {name}",
                    timed([sys.executable, "-c", AST_BASELINE, *(str(site / f) for f in reads[name])], 0),
                )
            models = [
                str(p) for d in ("vllm/model_executor/models", "vllm/models") for p in sorted((site / d).rglob("*.py"))
            ]
            add("ast: scan", timed([sys.executable, "-c", AST_BASELINE, *models], 0))
            add("scan", timed([*PATCHKIT, "scan", "--json", *sp], 0))
            add(
                "libcst: apply",
                timed([sys.executable, "-c", CST_BASELINE, *(str(site / f) for f in reads["apply"])], 0),
            )
            # verify fails before apply, except on a release that needs no patch (0.18.0 on: apply writes nothing)
            add("verify (unpatched)", timed([*PATCHKIT, "verify", *sp], 1 if reads["apply"] else 0))
            add("apply --dry-run", timed([*PATCHKIT, "apply", "--dry-run", *sp], 0))
            add("apply", timed([*PATCHKIT, "apply", *sp], 0))
            add("verify", timed([*PATCHKIT, "verify", *sp], 0))
            add("status", timed([*PATCHKIT, "status", *sp], 0))
            add("list", timed([*PATCHKIT, "list"], 0))
            add("explain", timed([*PATCHKIT, "explain", "eagle3-deepseek-backbone"], 0))
            add("revert", timed([*PATCHKIT, "revert", *sp], 0))
    return {k: statistics.median(v) for k, v in runs.items()}, reads


BARE_IMPORT = (
    "import vllm.model_executor.models.registry, vllm.model_executor.models.deepseek_v2, "
    "vllm.model_executor.models.kimi_k25, vllm.config.speculative, vllm.model_executor.models.interfaces"
)


def bench_runtime(python: str, repeat: int) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {"verify --runtime": [], "bare import": []}
    for _ in range(repeat):
        runs["bare import"].append(timed([python, "-c", BARE_IMPORT], 0))
        start = time.perf_counter()
        subprocess.run([*PATCHKIT, "verify", "--runtime", "--python", python], capture_output=True)
        runs["verify --runtime"].append(time.perf_counter() - start)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=["0.17.1"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runtime", metavar="PYTHON", help="interpreter of an environment with an importable vLLM")
    parser.add_argument("--json", action="store_true", help="also print the medians and ratios as one JSON line")
    args = parser.parse_args()
    print(f"median of {args.repeat} runs, seconds, each a subprocess of {sys.executable}\n")
    failed = False
    for v in args.versions:
        r, reads = bench(v, args.repeat)
        print(
            f"vLLM {v}: ast baselines parse {len(reads['status'])} file(s) (status), "
            f"{len(reads['verify'])} (verify); the libcst baseline {len(reads['apply'])} (apply)\n"
        )
        print("| " + " | ".join(r) + " |")
        print("|---" * len(r) + "|")
        print("| " + " | ".join(f"{s:.2f}" for s in r.values()) + " |\n")
        print("| ratio | measured | at most | |\n|---|---|---|---|")
        ratios = {}
        for label, command, base, limit in LIMITS:
            ratio = r[command] / r[base]
            ratios[label] = ratio
            failed |= ratio > limit
            print(f"| {label} | {ratio:.2f} | {limit:g} | {'ok' if ratio <= limit else 'OVER'} |")
        if args.json:
            print(json.dumps({"vllm": v, "medians": r, "ratios": ratios}))
        print()
    if args.runtime:
        runs = bench_runtime(args.runtime, args.repeat)
        print(f"| {args.runtime} | verify --runtime | bare import of the same vLLM modules |\n|---|---|---|")
        print(
            f"| median of {args.repeat} | {statistics.median(runs['verify --runtime']):.2f} | "
            f"{statistics.median(runs['bare import']):.2f} |"
        )
        print(
            f"| range | {min(runs['verify --runtime']):.2f} - {max(runs['verify --runtime']):.2f} | "
            f"{min(runs['bare import']):.2f} - {max(runs['bare import']):.2f} |"
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
