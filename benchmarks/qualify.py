"""Qualify a vLLM release: one command, one report (issue 29, part 5).

Usage::

    python benchmarks/qualify.py VERSION [--previous X.Y.Z] [--no-runtime]

It fetches the release's real files (``tests/vllm_release.py``) and runs, on copies of them:

1. **scan**, and its changes against the previous qualified release (the newest release below
   VERSION with a report in ``docs/releases/``; without one, the newest release below VERSION that
   ``tests/releases.py`` declares; ``--previous`` names it): which architectures appeared,
   disappeared or changed verdict;
2. **the cycle** over every architecture scan calls patchable: ``apply --arch`` -> ``verify --arch``
   -> a second ``apply`` (must write nothing) -> ``revert``, the tree byte-exact against the pristine
   one after each architecture;
3. **the runtime**: on a real importable install (``runtime_venv``: the release's own ``vllm`` wheel and
   its dependencies, ``tests/releases.py``'s overrides applied), every patchable architecture is
   applied and ``verify --runtime`` runs vLLM's own code on them; then revert, byte-exact.
   ``--no-runtime`` skips it and the report says "runtime not checked";
4. **the declared facts** about vLLM's runner: each with where patchkit looked and whether it was
   found (the runner wing's declarations, ``patchkit.vllm.runner``, when this checkout has them;
   otherwise the facts the load-path check derives through ``patchkit.vllm.proposer_paths``, and the
   report says which source it read).

It writes ``docs/releases/VERSION.json`` (the report) and rewrites ``docs/releases.md``: the table of
every qualified release with its figures, and one section per release generated from its JSON. Running
it again replaces that release's report and section (idempotent; nothing else in the file changes).
The report names the branch and commit it ran on, and whether the tree had uncommitted changes.

Exit status: 0 qualified (runtime checked or not), 1 not qualified (the report says why), 2 bad usage.
Needs the ``test`` extra (``filelock``, ``uv``) and the network on first use of a release.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import releases as declared  # noqa: E402
from vllm_release import fresh_copy, pristine_site_packages, runtime_venv  # noqa: E402

from patchkit import api  # noqa: E402
from patchkit.checks.verify import RUNNER_SHOWN_CHECK  # noqa: E402
from patchkit.plan.request import Request  # noqa: E402
from patchkit.vllm.stream.hybrids import HYBRID_CHECK  # noqa: E402
from patchkit.vllm.release.install import from_python, from_site_packages  # noqa: E402
from patchkit.vllm.release.source import SourceTree  # noqa: E402

REPORTS = ROOT / "docs" / "releases"
PAGE = ROOT / "docs" / "releases.md"
MAX_LISTED = 12
"""Architectures named per list in the markdown (the JSON has them all)."""


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def digest(site: Path) -> dict[str, str]:
    """SHA-256 of every ``vllm/**/*.py`` under ``site`` (relative path -> hex digest)."""
    return {
        p.relative_to(site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((site / "vllm").rglob("*.py"))
    }


def git(*args: str) -> str:
    """``git`` in the checkout patchkit is imported from (the code being qualified)."""
    import patchkit

    out = subprocess.run(
        ["git", "-C", str(Path(patchkit.__file__).resolve().parent), *args], capture_output=True, text=True
    )
    return out.stdout.strip()


# -- 1. scan and its changes ---------------------------------------------------------------------


def scan_rows(site: Path) -> dict[str, dict]:
    """``scan`` of the tree at ``site``: architecture -> {state, shape, group, reason, location}."""
    report = api.scan(from_site_packages(site))
    return {
        r.architecture: {
            "state": r.state,
            "shape": r.shape,
            "group": r.group,
            "reason": r.reason,
            "location": r.location,
        }
        for r in report.rows
    }


def previous_release(version: str, given: str | None) -> tuple[str | None, str]:
    """The release to compare with and where that choice came from."""
    if given:
        return given, "--previous"
    qualified = sorted((p.stem for p in REPORTS.glob("*.json") if _vkey(p.stem) < _vkey(version)), key=_vkey)
    if qualified:
        return qualified[-1], "the newest release below it with a report in docs/releases/"
    below = [r.version for r in declared.RELEASES if _vkey(r.version) < _vkey(version) and not r.benchmark_only]
    if below:
        return below[-1], "no earlier qualification report: the newest release below it in tests/releases.py"
    return None, "no earlier release declared"


def scan_changes(now: dict[str, dict], before: dict[str, dict]) -> dict:
    """What changed between two scans: appeared, disappeared, and changed verdict (state)."""
    changed = {
        a: {"from": before[a]["state"], "to": now[a]["state"]}
        for a in now
        if a in before and now[a]["state"] != before[a]["state"]
    }
    return {
        "appeared": sorted(set(now) - set(before)),
        "disappeared": sorted(set(before) - set(now)),
        "changed": dict(sorted(changed.items())),
    }


# -- 2. the cycle ---------------------------------------------------------------------------------


def _model_dir(tmp: Path, arch: str, row: dict) -> Path:
    """A checkpoint folder of our own for a release with a start-up allow-list: the model type is ours."""
    module = row["location"].split("/")[-1].split(".py")[0] if row["location"] else arch.lower()
    folder = tmp / f"ckpt-{arch}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": f"pk_{module}"}))
    return folder


def _needs_model(site: Path) -> bool:
    from patchkit.vllm.release.contract import read_allow_list

    return read_allow_list(SourceTree(site)) is not None


def cycle(site: Path, rows: dict[str, dict], tmp: Path) -> dict:
    """apply -> verify -> apply again -> revert for each patchable architecture of the tree at ``site``."""
    install = from_site_packages(site)
    pristine = digest(site)
    with_model = _needs_model(site)
    failures: dict[str, list[str]] = {"apply": [], "verify": [], "second apply": [], "revert": []}
    refused_here: list[str] = []
    patchable = [a for a, r in rows.items() if r["state"] == "patchable"]
    for arch in patchable:
        request = Request((arch,), _model_dir(tmp, arch, rows[arch]) if with_model else None)
        # --force: every shape patchkit writes is cycled, also the ones apply refuses here without it (a
        # hybrid whose mixers lose greedy output, a shape not shown lossless under the serve's runner);
        # verify fails those on their lossless check alone, which is counted apart, not as a failure
        first = api.apply(install, request=request, force=True)
        if first.refused or not first.written:
            failures["apply"].append(
                f"{arch}: " + "; ".join(f"{p.id} {p.outcome.value} {p.reason}".strip() for p in first.patches)
            )
            api.revert(install, force=True)
            continue
        verified = api.verify(install, request=request)
        failed = [f for c in verified.checks for f in c.failures()]
        gated = [f for f in failed if f.kind in LOSSLESS_KINDS]
        if gated:
            refused_here.append(f"{arch}: " + "; ".join(f"{f.label}: {f.detail}" for f in gated))
        if any(f.kind not in LOSSLESS_KINDS for f in failed):
            failures["verify"].append(
                f"{arch}: " + "; ".join(f"{f.label}: {f.detail}" for f in failed if f.kind not in LOSSLESS_KINDS)
            )
        second = api.apply(install, request=request, force=True)
        if second.written or second.refused:
            failures["second apply"].append(f"{arch}: wrote {second.written}, refused {second.refused}")
        api.revert(install)
        if digest(site) != pristine:
            failures["revert"].append(arch)
            break  # later architectures would start from a wrong tree
    return {
        "architectures": len(patchable),
        "with_model": with_model,
        "failures": failures,
        "refused without --force": refused_here,
        "byte_exact": not failures["revert"],
    }


# -- 3. the runtime -------------------------------------------------------------------------------

LOSSLESS_KINDS = frozenset({HYBRID_CHECK, RUNNER_SHOWN_CHECK})
"""The checks that fail a shape patchkit writes only because it is not lossless on this serve (apply
refuses it without --force: issues 30, 31); the cycle counts them apart."""

MISSING_IMPORT = re.compile(r"could not load it: (ModuleNotFoundError|ImportError)\(")
"""A class vLLM's registry could not import here because the environment lacks a module vLLM's
wheel does not require (0.33.0 and 0.34.0: timm for Kanana-V): that architecture is not checked at
runtime, listed apart, not counted as a failure (tests/test_runtime_arch.py does the same)."""


def _walk(check, out: list) -> None:
    out.append(check)
    for child in check.children:
        _walk(child, out)


def runtime(version: str) -> dict:
    """Apply every patchable architecture in the real venv, ``verify --runtime`` them, revert."""
    with runtime_venv(version) as python:
        install = from_python(python)
        site = install.site_packages
        before = digest(site)
        rows = scan_rows(site)
        archs = tuple(a for a, r in rows.items() if r["state"] == "patchable")
        result: dict = {"python": str(python), "architectures": len(archs)}
        if _needs_model(site):
            result["not checked"] = (
                "this release has a start-up allow-list: each architecture needs a model type "
                "of its own (tests/test_runtime_arch.py applies them one by one)"
            )
            return result
        applied = api.apply(install, request=Request(archs), force=True)  # as the cycle: every shape
        result["applied"] = bool(applied.written) and not applied.refused
        if result["applied"]:
            report = api.verify(install, runtime_python=python, request=Request(archs))
            node = report.checks[-1] if report.checks else None
            if report.runtime_error is not None or node is None:
                result["error"] = str(report.runtime_error)
            checks: list = []
            for top in report.checks:  # the static checks too: a failure there fails the runtime step
                _walk(top, checks)
            result["label"] = node.label if node is not None else None
            result["checks"] = {
                "passed": sum(c.ok is True for c in checks),
                "failed": sum(c.ok is False for c in checks),
                "not run": sum(c.ok is None for c in checks),
            }
            leaves = [c for c in checks if c.ok is False and not c.children and c.kind not in LOSSLESS_KINDS]
            missing = [c for c in leaves if MISSING_IMPORT.search(c.detail)]
            result["failed"] = [f"{c.label}: {c.detail}" for c in leaves if c not in missing]
            result["environment lacks"] = [f"{c.label}: {c.detail}" for c in missing]
            result["ok"] = not result["failed"] and report.runtime_error is None and node is not None
        else:
            result["refused"] = [
                f"{p.id} {p.outcome.value} {p.reason}"
                for p in applied.patches
                if p.outcome.value not in ("applied", "already applied")
            ]
        api.revert(install, force=True)
        result["byte_exact"] = digest(site) == before
        return result


# -- 4. the declared facts ------------------------------------------------------------------------


def declared_facts(site: Path) -> dict:
    """Each declared runner fact, where patchkit looked, and whether this release has it."""
    tree = SourceTree(site)
    try:
        from patchkit.vllm.runner import generations, serving
    except ImportError:
        return _derived_facts(tree)
    facts = []
    for generation in generations.GENERATIONS:
        missing = set(serving.missing_facts(tree, generation))
        present = generation.runner and (site / generation.runner).is_file()
        for fact in generation.facts():
            facts.append(
                {
                    "generation": generation.name,
                    "what": fact.what,
                    "where": fact.where,
                    "found": fact not in missing,
                    "runner present": bool(present),
                }
            )
    choice = serving.serving_runner(tree, environ={})
    return {
        "source": "patchkit.vllm.runner (the runner wing's declarations)",
        "serving runner": choice.name,
        "why": choice.reason,
        "facts": facts,
    }


def _derived_facts(tree: SourceTree) -> dict:
    """Without the runner wing: what the load-path check derives (patchkit.vllm.proposer_paths)."""
    from patchkit.vllm import proposer_paths

    d = proposer_paths.derive(tree)
    facts = [
        {
            "what": "the draft loader (proposer load_model)",
            "where": d.loader or "vllm/v1/spec_decode/",
            "found": d.loader is not None,
        },
        {
            "what": "the proposer's language model (get_language_model)",
            "where": d.language_model or "",
            "found": d.language_model is not None,
        },
        {
            "what": "the proposer's reads of the target",
            "where": ", ".join(sorted({r.location for r in d.reads}))[:200],
            "found": bool(d.reads),
        },
    ]
    facts += [{"what": f"aux ids from {a.kind} {a.name}", "where": a.location, "found": True} for a in d.aux]
    if not d.aux:
        facts.append({"what": "aux-id sources", "where": "", "found": False})
    return {
        "source": "patchkit.vllm.proposer_paths (no runner wing in this checkout: the facts the load-path "
        "and aux-id checks derive)",
        "facts": facts,
    }


# -- the report -----------------------------------------------------------------------------------


def verdict(report: dict) -> tuple[bool, list[str]]:
    """Qualified, and the reasons it is not (or the caveats)."""
    reasons = []
    failures = report["cycle"]["failures"]
    for stage, archs in failures.items():
        if archs:
            reasons.append(f"cycle: {stage} failed for {len(archs)} architecture(s)")
    run = report["runtime"]
    if run is None:
        reasons.append("runtime not checked (--no-runtime)")
    elif "not checked" in run:
        reasons.append(f"runtime not checked: {run['not checked']}")
    elif not run.get("applied"):
        reasons.append("runtime: apply refused in the real install")
    elif not run.get("ok"):
        reasons.append(f"runtime: verify --runtime failed ({len(run['failed'])} check(s))")
    elif not run.get("byte_exact"):
        reasons.append("runtime: revert not byte-exact")
    missing = [f["what"] for f in report["facts"]["facts"] if not f["found"] and f.get("runner present", True)]
    if missing:
        reasons.append(f"declared facts not found: {', '.join(missing)}")
    blocking = [r for r in reasons if not r.startswith("runtime not checked (--no-runtime)")]
    return not blocking, reasons


def qualify(version: str, previous: str | None, with_runtime: bool) -> dict:
    started = time.monotonic()
    timings: dict[str, float] = {}
    report: dict = {
        "version": version,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(
            git(
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ":(top)",
                ":(top,exclude)docs/releases.md",
                ":(top,exclude)docs/releases",
            )
        ),
    }
    with tempfile.TemporaryDirectory(prefix="qualify-") as tmp_name:
        tmp = Path(tmp_name)
        t = time.monotonic()
        site = fresh_copy(version, tmp / "sp")
        rows = scan_rows(site)
        prev, why = previous_release(version, previous)
        counts: dict[str, int] = {}
        for r in rows.values():
            counts[r["state"]] = counts.get(r["state"], 0) + 1
        report["scan"] = {"architectures": len(rows), "counts": dict(sorted(counts.items())), "rows": rows}
        report["previous"] = {"version": prev, "why": why}
        if prev:
            report["previous"]["changes"] = scan_changes(rows, scan_rows(fresh_copy(prev, tmp / "prev")))
        timings["scan"] = time.monotonic() - t

        t = time.monotonic()
        report["cycle"] = cycle(site, rows, tmp)
        timings["cycle"] = time.monotonic() - t

        t = time.monotonic()
        report["facts"] = declared_facts(site)
        report["units"] = record_prints(version, site)
        patched = patched_default(version, tmp / "patched")
        if patched is not None:
            record_prints(version, patched, again=True)
        timings["facts"] = time.monotonic() - t
    t = time.monotonic()
    report["runtime"] = runtime(version) if with_runtime else None
    timings["runtime"] = time.monotonic() - t
    timings["total"] = time.monotonic() - started
    report["seconds"] = {k: round(v, 1) for k, v in timings.items()}
    ok, reasons = verdict(report)
    report["qualified"], report["reasons"] = ok, reasons
    return report


def record_prints(version: str, site: Path, again: bool = False) -> dict[str, str]:
    """Record the fingerprints of the declared units (:mod:`patchkit.vllm.runner.units`) on ``version``'s
    files in ``patchkit/vllm/runner/unit_prints.json``: the code patchkit was qualified on (issue 39).
    With ``again``, ``site`` holds the same release as patched by patchkit's default ``apply`` (the Kimi-K2.5
    proposer branch is written into the V1 draft loader), added beside the pristine fingerprints.

    Returns:
        ``{unit key: "file:line" or "absent"}`` for the report.
    """
    from patchkit.vllm.release.source import SourceTree  # lazy: after sys.path holds the checkout
    from patchkit.vllm.runner import pins as pins_mod  # lazy: as above

    data = json.loads(pins_mod.PRINTS_FILE.read_text()) if pins_mod.PRINTS_FILE.exists() else {"units": {}}
    units = data.setdefault("units", {})
    files = data.setdefault("files", {})
    pins_mod._RECORDED.clear()
    pins_mod._RECORDED.update(units={}, files={})  # compute every fingerprint afresh
    tree = SourceTree(site)
    for u in pins_mod.UNITS:
        for relpath in dict.fromkeys(p for p, _ in u.places):
            if (site / relpath).is_file():
                source = tree.read_bytes(relpath)
                hit = pins_mod.place_hit(u, relpath, source)
                files.setdefault(pins_mod.file_hash(source), {})[u.key] = list(hit) if hit else None
    for per in units.values() if not again else ():  # a release recorded again replaces its earlier prints
        for releases in per.values():
            if version in releases:
                releases.remove(version)
    out: dict[str, str] = {}
    for found in pins_mod.pins(tree, version).found:
        out[found.unit.key] = found.location if found.relpath else "absent"
        if found.relpath:
            units.setdefault(found.unit.key, {}).setdefault(found.print, []).append(version)
    for key, per in list(units.items()):
        units[key] = {p: sorted(set(r), key=_vkey) for p, r in sorted(per.items()) if r}
    data["about"] = (
        "Fingerprints of the vLLM units patchkit's verdicts rest on (patchkit/vllm/runner/units.py), per "
        "qualified release; written by benchmarks/qualify.py, never by hand."
    )
    data["files"] = dict(sorted(files.items()))
    pins_mod.PRINTS_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    pins_mod._RECORDED.clear()
    return out


def patched_default(version: str, tmp: Path) -> Path | None:
    """A copy of ``version``'s files with patchkit's default ``apply`` written, or None when it writes nothing."""
    site = fresh_copy(version, tmp / "sp")
    run = subprocess.run(
        # --force: the patched loader's fingerprint is what is being recorded, so the chain gate cannot know it yet
        [
            sys.executable,
            "-m",
            "patchkit",
            "apply",
            "--target",
            "vllm",
            "--site-packages",
            str(site),
            "--json",
            "--force",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    applied = run.returncode == 0 and any(p.get("outcome") == "applied" for p in json.loads(run.stdout)["patches"])
    return site if applied else None


def section(r: dict) -> str:
    """The markdown section of one report."""

    def names(items) -> str:
        items = list(items)
        shown = ", ".join(items[:MAX_LISTED])
        return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "") if items else "none"

    status = "qualified" if r["qualified"] else "**not qualified**"
    lines = [
        f"## vLLM {r['version']}",
        "",
        f"{status}; ran {r['date']} on branch `{r['branch']}` at commit `{r['commit'][:10]}`"
        + (" (with uncommitted changes)" if r["dirty"] else "")
        + f", in {r['seconds']['total']:.0f} s.",
        "",
    ]
    lines += [f"- {reason}" for reason in r["reasons"]] + ([""] if r["reasons"] else [])
    counts = ", ".join(f"{n} {s}" for s, n in r["scan"]["counts"].items())
    lines += [f"**scan**: {r['scan']['architectures']} architectures: {counts}."]
    prev = r["previous"]
    if prev["version"]:
        c = prev["changes"]
        lines += [
            "",
            f"**against {prev['version']}** ({prev['why']}): "
            f"{len(c['appeared'])} appeared ({names(c['appeared'])}); "
            f"{len(c['disappeared'])} disappeared ({names(c['disappeared'])}); "
            f"{len(c['changed'])} changed verdict:",
        ]
        lines += [f"- {a}: {v['from']} → {v['to']}" for a, v in c["changed"].items()]
    cy = r["cycle"]
    failed = {s: a for s, a in cy["failures"].items() if a}
    lines += [
        "",
        f"**cycle** (apply → verify → apply again → revert, each architecture alone): "
        f"{cy['architectures']} patchable architectures, "
        + (
            "all passed, every revert byte-exact"
            if not failed
            else "; ".join(f"{s} failed: {names(a.split(':')[0] for a in archs)}" for s, archs in failed.items())
        )
        + f" ({r['seconds']['cycle']:.0f} s).",
    ]
    gated = cy.get("refused without --force", [])
    if gated:
        lines += [
            "",
            f"**lossless or refused**: {len(gated)} of them are refused by `apply` without `--force` here "
            f"(a hybrid whose mixers lose greedy output, or a shape not shown lossless under the serve's "
            f"runner; cycled with `--force`): {names(a.split(':')[0] for a in gated)}.",
        ]
    run = r["runtime"]
    if run is None:
        lines += ["", "**runtime**: not checked (`--no-runtime`)."]
    elif "not checked" in run:
        lines += ["", f"**runtime**: not checked: {run['not checked']}."]
    else:
        head = (
            f"{run['architectures']} architectures applied in a real `vllm=={r['version']}` install; "
            if run.get("applied")
            else "apply refused in the real install; "
        )
        if run.get("applied"):
            k = run["checks"]
            head += (
                f"`verify --runtime` {'passed' if run['ok'] else 'failed'}: {k['passed']} checks passed, "
                f"{len(run['failed'])} failed, {len(run.get('environment lacks', []))} not checked for a "
                f"missing import, {k['not run']} not run"
            )
        lines += [
            "",
            f"**runtime**: {head}; revert {'byte-exact' if run.get('byte_exact') else 'NOT byte-exact'} "
            f"({r['seconds']['runtime']:.0f} s).",
        ]
        lines += [f"- failed: {f[:300]}" for f in run.get("failed", [])[:MAX_LISTED]]
        lines += [
            f"- not checked, the environment lacks an import: {f[:300]}"
            for f in run.get("environment lacks", [])[:MAX_LISTED]
        ]
    facts = r["facts"]
    lines += [
        "",
        f"**declared facts** (from {facts['source']})"
        + (f"; the serve uses runner {facts['serving runner']}: {facts['why']}" if "serving runner" in facts else "")
        + ":",
        "",
        "| fact | where patchkit looked | found |",
        "|---|---|---|",
    ]
    for f in facts["facts"]:
        what = f"{f['generation']}: {f['what']}" if "generation" in f else f["what"]
        found = (
            "yes"
            if f["found"]
            else ("no" if f.get("runner present", True) else f"no: this release has no {f['generation']} runner")
        )
        lines.append(f"| {what} | `{f['where']}` | {found} |")
    units = r.get("units")
    if units:
        found = {k: v for k, v in units.items() if v != "absent"}
        lines += [
            "",
            f"**declared units** (`patchkit/vllm/runner/units.py`, issue 39): {len(found)} of {len(units)} in this "
            "release, each fingerprint recorded in `patchkit/vllm/runner/unit_prints.json`: "
            + ", ".join(f"{k} (`{v}`)" for k, v in found.items())
            + "; absent: "
            + names(k for k, v in units.items() if v == "absent")
            + ".",
        ]
    return "\n".join(lines) + "\n"


HEAD = """# Qualified vLLM releases

Each release here was qualified with `python benchmarks/qualify.py VERSION` (see that script's
docstring for what it runs). Its full report is `docs/releases/VERSION.json`; this page is generated
from those reports (running the script again for a release replaces its row and section).

| vLLM | verdict | architectures | patchable | cycle | runtime | facts found | run on | seconds |
|---|---|---|---|---|---|---|---|---|
"""


def row(r: dict) -> str:
    cy = r["cycle"]
    cycle_cell = "passed" if not any(cy["failures"].values()) else "failed"
    run = r["runtime"]
    run_cell = (
        "not checked"
        if run is None or "not checked" in run
        else ("passed" if run.get("ok") else "failed") + f" ({run['architectures']})"
    )
    facts = [f for f in r["facts"]["facts"] if f.get("runner present", True)]  # of the runners the release has
    found = sum(f["found"] for f in facts)
    return (
        f"| {r['version']} | {'qualified' if r['qualified'] else 'not qualified'} | {r['scan']['architectures']} | "
        f"{r['scan']['counts'].get('patchable', 0)} | {cycle_cell} ({cy['architectures']}) | {run_cell} | "
        f"{found}/{len(facts)} | `{r['commit'][:10]}` | {r['seconds']['total']:.0f} |"
    )


def write_page() -> None:
    reports = sorted(
        (json.loads(p.read_text()) for p in REPORTS.glob("*.json")), key=lambda r: _vkey(r["version"]), reverse=True
    )
    PAGE.write_text(HEAD + "\n".join(row(r) for r in reports) + "\n\n" + "\n".join(section(r) for r in reports))


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    previous = None
    if "--previous" in argv:
        i = argv.index("--previous")
        if i + 1 >= len(argv):
            print("qualify: --previous needs a release, e.g. --previous 0.33.0", file=sys.stderr)
            return 2
        previous = argv[i + 1]
        args = [a for a in args if a != previous]
    if argv[:1] == ["--prints"]:  # only the fingerprints, for every given release (or every declared one)
        for version in argv[1:] or declared.PREFETCHED:
            found = record_prints(version, pristine_site_packages(version))  # read only
            print(version, sum(v != "absent" for v in found.values()), "units found")
            with tempfile.TemporaryDirectory(prefix="qualify-") as tmp_name:
                patched = patched_default(version, Path(tmp_name))
                if patched is not None:
                    record_prints(version, patched, again=True)
        return 0
    unknown = [a for a in argv if a.startswith("--") and a not in ("--previous", "--no-runtime")]
    if len(args) != 1 or unknown or not all(p.isdigit() for p in args[0].split(".")):
        print(
            "usage: python benchmarks/qualify.py VERSION [--previous X.Y.Z] [--no-runtime]\n"
            "hint: VERSION is an exact vLLM release, e.g. 0.34.0",
            file=sys.stderr,
        )
        return 2
    report = qualify(args[0], previous, "--no-runtime" not in argv)
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / f"{args[0]}.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    write_page()
    print(section(report))
    return 0 if report["qualified"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
