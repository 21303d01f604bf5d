"""Print the README's EAGLE-3 coverage table, generated from ``patchkit scan --json`` on real releases.

Usage: ``python benchmarks/coverage.py [--round-trip] [VERSION ...]`` (default: the README's releases).
Each release's files come from the test cache (``tests/vllm_release.py`` fetches them). With
``--round-trip`` every patchable architecture is applied alone to a scratch copy, verified
statically and reverted (byte-identical), and counted as "enabled and verified" only then.
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
from vllm_release import pristine_site_packages  # noqa: E402

RELEASES = ["0.10.2", "0.14.1", "0.16.0", "0.17.1", "0.18.0", "0.20.2", "0.25.0", "0.28.0", "0.33.0"]


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
        if round_trip:
            pristine, ok = digest(sp), 0
            for a in patchable:
                model = Path(tmp) / "ckpt"
                model.mkdir(exist_ok=True)
                (model / "config.json").write_text(json.dumps({"architectures": [a["architecture"]],
                                                               "model_type": a["architecture"].lower()}))
                code, _ = patchkit("apply", "--site-packages", str(sp), "--model", str(model))
                if code == 0:
                    vcode, _ = patchkit("verify", "--site-packages", str(sp), "--model", str(model))
                    patchkit("revert", "--site-packages", str(sp))
                    ok += vcode == 0 and digest(sp) == pristine
            verified = str(ok)
        return [version, scanned["install"]["era"], str(native), str(broken), str(len(patchable)), verified, str(refused)]


def main(argv: list[str]) -> int:
    round_trip = "--round-trip" in argv
    versions = [a for a in argv if not a.startswith("--")] or RELEASES
    print("| vLLM | era | native | declared but broken | patchable | enabled and verified | not patchable |")
    print("|---|---|---|---|---|---|---|")
    for v in versions:
        print("| " + " | ".join(row(v, round_trip)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
