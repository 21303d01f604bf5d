"""``patchkit export``: the change ``apply`` would write, as a git patch vLLM could merge, and its description.

The command reads (the install, the checkout, the ``--evidence`` report) and writes only what it is asked to: the
patch to standard output or ``--out``, the description to ``--description``, ``OUT.md`` beside ``--out``, or, with
``--evidence`` and neither, standard error. Every check (the options, the report, apply's refusals) is made before
the first of them is written; the install is never written (docs/export.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from patchkit.errors import PatchkitError, UsageError
from patchkit.ui.console import emit_json, err, working
from patchkit.ui.options import (
    ArchOpt,
    JsonOpt,
    ModelOpt,
    PythonOpt,
    SitePackagesOpt,
    TargetOpt,
    find_install,
    request,
)
from patchkit.ui.runner import run


def export_cmd(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    source: Optional[Path] = typer.Option(
        None, "--source", help="A vLLM source checkout (the folder holding vllm/) to diff against, read in place."
    ),
    arch: Optional[list[str]] = ArchOpt,
    model: Optional[Path] = ModelOpt,
    out: Optional[Path] = typer.Option(None, "--out", help="Write the patch to this file (default: standard output)."),
    evidence: Optional[Path] = typer.Option(
        None, "--evidence", help="A 'rehearse --json' report of this architecture and release, for the description."
    ),
    description: Optional[Path] = typer.Option(
        None, "--description", help="Write the pull-request description here (default with --out: OUT.md)."
    ),
    force: bool = typer.Option(False, "--force", help="Export what 'apply --force' would write (docs/export.md)."),
    as_json: bool = JsonOpt,
) -> None:
    """Write the change 'apply --arch/--model' would make as a git patch in upstream vLLM's style (no patchkit
    comment, vLLM's line length), with a pull-request description; nothing is written into the install."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the planning layer cost start-up time

        given = [name for name, value in (("--site-packages", site_packages), ("--python", python)) if value]
        if source is not None and given:
            raise UsageError(f"give --source or {given[0]}, not both", "--source diffs against a vLLM checkout")
        if not (arch or model):
            raise UsageError("export needs the architectures to export", "give --arch ARCH (repeatable) or --model DIR")
        install = _install(target, site_packages, python, source)
        steps = _reproduce(tuple(arch or ()), (site_packages, python, source), model, force, str(install.version))
        with working("planning the export...", as_json):
            report = api.export(
                install,
                request=request(arch, model),
                force=force,
                source=source is not None,
                evidence=evidence,
                reproduce=steps,
            )
        if report.refused:
            return _refused(report, as_json)
        return _written(report, out, description, evidence is not None, as_json)

    run(as_json, body, site_packages, python, arch=arch, model=model)


def _install(target: str, site_packages: Optional[Path], python: Optional[Path], source: Optional[Path]):
    """The install (``--site-packages``/``--python``/patchkit's own) or the checkout (``--source``) to export
    against."""
    from patchkit.vllm.release.checkout import from_source  # lazy: only with --source

    if source is None:
        return find_install(target, site_packages, python)
    from patchkit.plan.spec import check_target  # lazy: the patch catalogue

    check_target(target)
    return from_source(source)


def _refused(report, as_json: bool) -> int:
    """apply refuses: say why (one line per refused patch), write nothing; exit 3."""
    if as_json:
        emit_json(report.to_dict())
    else:
        writer = err()
        for reason in report.reasons or ("a patch of the run was refused",):
            writer.line(("refused:", "red"), " ", reason)
        writer.line(("hint:", "dim"), " ", "export writes what apply would write; nothing was exported")
    return report.exit_code


def _reproduce(archs: tuple, where: tuple, model: Optional[Path], force: bool, version: str) -> list[str]:
    """The commands that reproduce the export and its evidence with patchkit (``where``: the ``--site-packages``,
    ``--python`` and ``--source`` given; ``model``: the ``--model`` given, named instead of the architectures)."""
    site_packages, python, source = where
    env = (
        f"--source {source}"
        if source is not None
        else f"--python {python}"
        if python is not None
        else f"--site-packages {site_packages}"
        if site_packages is not None
        else ""
    )
    named = f"--model {model}" if model is not None else " ".join(f"--arch {a}" for a in archs)
    plain = " ".join(part for part in ("--target vllm", env, named) if part)
    opts = plain + (" --force" if force else "")
    served = "" if source is not None else f"pip install vllm=={version}  # the release exported against\n"
    lines = [f"{served}patchkit export {opts} --out eagle3.patch"]
    if source is None:
        lines += [f"patchkit apply {opts}", f"patchkit verify {plain}"]
        lines.append(
            "patchkit rehearse --model TARGET_DIR --draft EAGLE3_DRAFT_DIR --device cuda --json > rehearse.json"
        )
    return "\n".join(lines).splitlines()


def _written(report, out: Optional[Path], description: Optional[Path], evidence: bool, as_json: bool) -> int:
    """Write the patch and the description where they go; a short account on stderr. Returns the exit code."""
    text = report.description or ""
    where = description if description is not None else out.with_name(out.name + ".md") if out is not None else None
    if not report.patch:
        reasons = "; ".join(f"{r.id}: {r.reason}" for r in report.results) or "no patch applies"
        if as_json:
            emit_json(report.to_dict())
        else:
            err().line(("nothing to export:", "yellow"), " ", reasons)
        return report.exit_code
    try:
        if out is not None:
            out.write_text(report.patch, encoding="utf-8")
        if where is not None:
            where.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise PatchkitError(f"cannot write {exc.filename}: {exc.strerror}", "give --out/--description a writable path")
    if as_json:
        emit_json(report.to_dict())
        return report.exit_code
    if out is None:
        sys.stdout.write(report.patch)
    writer = err()
    if where is None and evidence:
        writer.line(text)
    shapes = ", ".join(f"{a} ({s})" for a, s in report.shapes.items())
    writer.line(f"exported {len(report.files)} file(s) for {shapes} on vLLM {report.info.version}")
    for line in report.long_lines:
        writer.line(("warning:", "yellow"), " ", f"{line} is over {report.line_length} columns (not wrapped)")
    return report.exit_code
