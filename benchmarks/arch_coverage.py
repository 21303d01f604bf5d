"""Print the EAGLE-3 coverage table of docs/architectures.md, generated from ``patchkit scan --json`` on real releases.

Usage: ``python benchmarks/arch_coverage.py [--round-trip] [VERSION ...]`` (default: the table's releases),
or ``python benchmarks/arch_coverage.py --engine-results FILE``: the "proven in a real engine" table, per
architecture, from the JSON lines the real-engine tier (tests/test_engine.py) writes.
Each release's files come from the test cache (``tests/vllm_release.py`` fetches them). With
``--round-trip`` every patchable architecture is applied alone to a scratch copy, verified
statically and reverted (byte-identical), and counted as "enabled and consistency-checked" only then.
With ``--proven FILE`` (the JSON lines ``tests/test_engine.py`` appends, one per rehearsal) a column
counts the architectures patchkit patched whose whole cycle passed in a real engine of that
release (vLLM refused it unpatched, every rehearsal check passed patched, refused again after
``revert``; native controls are not counted), naming the distribution.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from releases import Sweep, sweep  # noqa: E402
from vllm_release import pristine_site_packages  # noqa: E402

RELEASES = sweep(Sweep.COVERAGE)


def patchkit(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "patchkit", *args, "--json"], capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "vllm").rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def row(version: str, round_trip: bool) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "sp"
        shutil.copytree(pristine_site_packages(version), sp)
        _, scanned = patchkit("scan", "--site-packages", str(sp))
        archs = scanned["architectures"]
        native = sum(1 for a in archs if a["state"] == "native")
        broken = sum(1 for a in archs if a["state"] == "declared but broken")
        patchable = [a for a in archs if a["state"] == "patchable"]
        refused = sum(1 for a in archs if a["state"] == "not patchable")
        verified = "-"
        if round_trip:  # in this process through the API (what the CLI calls), one architecture at a time
            from patchkit import api
            from patchkit.plan.request import Request
            from patchkit.vllm.release.install import from_site_packages

            install = from_site_packages(sp)
            pristine, ok = digest(sp), 0
            for a in patchable:
                model = Path(tmp) / "ckpt"
                model.mkdir(exist_ok=True)
                # a model type of our own for the start-up allow-list of 0.10.2 - 0.20.x (a user's config.json has it)
                (model / "config.json").write_text(
                    json.dumps({"architectures": [a["architecture"]], "model_type": a["architecture"].lower()})
                )
                request = Request((), model)
                applied = api.apply(install, request=request)
                if applied.written and not applied.refused:
                    verified_ok = api.verify(install, request=request).ok
                    api.revert(install)
                    ok += verified_ok and digest(sp) == pristine
            verified = str(ok)
        return [
            version,
            scanned["install"]["era"],
            str(native),
            str(broken),
            str(len(patchable)),
            verified,
            str(refused),
        ]


def _last_results(path: Path) -> dict[tuple[str, str], dict]:
    """The tier's results by (case, step): the last run of each wins."""
    last: dict[tuple[str, str], dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            last[(entry["case"], entry["step"])] = entry
    return last


def proven_in_engine(path: Path) -> dict[str, tuple[str, int]]:
    """Per vLLM version: (distribution, how many patched architectures passed every rehearsal check)."""
    last = _last_results(path)
    out: dict[str, tuple[str, set[str]]] = {}
    for (case, step), entry in last.items():
        unpatched, reverted = last.get((case, "unpatched")), last.get((case, "reverted"))
        # the whole cycle: vLLM refused it unpatched, every check passed patched, refused again after revert
        if (
            step == "patched"
            and entry["ok"]
            and unpatched is not None
            and not unpatched["ok"]
            and reverted is not None
            and not reverted["ok"]
        ):
            dist, _, version = entry["vllm"].rpartition(" ")
            out.setdefault(version, (dist, set()))[1].add(entry["architecture"])
    return {v: (d, len(archs)) for v, (d, archs) in out.items()}


def engine_table(path: Path) -> list[str]:
    """Markdown rows from the tier's results: the last run of each case and step wins."""
    last = _last_results(path)
    cases = list(dict.fromkeys(case for case, _ in last))
    out = [
        "| architecture (case) | vLLM | unpatched | patched: rehearse | aux distance (same ids / shifted by one) "
        "| accepted / draft tokens | rehearse time | after revert |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        un, pa, re = (last.get((case, s)) for s in ("unpatched", "patched", "reverted"))
        main = pa or un or last.get((case, "native"))
        if main is None:
            continue

        def refused(e):
            if e is None:
                return "-"
            if e["ok"]:
                return "runs (native)"
            where = next((w for _, _, w in e["failed"] if w), None)
            return f"refused ({where})" if where else "refused"

        dist = main.get("distance")
        shifted = [d for d in (main.get("shifted_distance") or {}).values() if d is not None]
        counters = main.get("counters") or {}
        acc = (
            (
                f"{counters.get('vllm:spec_decode_num_accepted_tokens', 0)} / "
                f"{counters.get('vllm:spec_decode_num_draft_tokens', 0)}"
            )
            if counters
            else "-"
        )
        if pa is None and un is not None and not un["ok"]:
            verdict = "not patched (apply wrote nothing); vLLM refuses it"
        else:
            verdict = "**proven**" if main["ok"] else "fails: " + "; ".join(n for n, _, _ in main["failed"])
        out.append(
            f"| {main.get('architecture')} ({case}) | {main.get('vllm')} | {refused(un) if pa else '-'} | {verdict} "
            f"| {f'{dist:.1e}' if dist is not None else '-'} / {', '.join(f'{d:.2g}' for d in shifted) or '-'} "
            f"| {acc} | {main['seconds']:.0f} s | {refused(re) if re else '-'} |"
        )
    return out


def main(argv: list[str]) -> int:
    if "--engine-results" in argv:
        print("\n".join(engine_table(Path(argv[argv.index("--engine-results") + 1]))))
        return 0
    round_trip = "--round-trip" in argv
    proven = proven_in_engine(Path(argv[argv.index("--proven") + 1])) if "--proven" in argv else None
    skip = {argv.index("--proven") + 1} if "--proven" in argv else set()
    versions = [a for i, a in enumerate(argv) if not a.startswith("--") and i not in skip] or RELEASES
    head = "| vLLM | era | native | declared but broken | patchable | enabled and consistency-checked | not patchable |"
    print(head + (" proven in a real engine |" if proven is not None else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if proven is not None else ""))
    for v in versions:
        cells = row(v, round_trip)
        if proven is not None:
            dist, count = proven.get(v, ("", 0))
            cells.append(f"{count} ({dist} {v})" if count else "-")
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
