"""``doctor --target sglang``'s text and JSON: the checklist of :func:`patchkit.checks.sglang_doctor.doctor`.

One line a check (✓, ✗, or "not checked" with its reason), each SGLang fact's ``file:line`` below site-packages,
the vLLM comparison, then the verdict. Exit 0 when ready, 1 when not (docs/commands.md).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Optional

from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import PatchkitError, UsageError
from patchkit.sglang.contract import DISTRIBUTION as SGLANG
from patchkit.ui.console import emit_json, out, working
from patchkit.ui.hints import run_options
from patchkit.ui.options import SGLANG_COMMANDS
from patchkit.ui.runner import verdict

MARKS = {"ok": ("✓", "green"), "failed": ("✗", "red"), "not checked": ("?", "yellow"), "info": ("·", "dim")}
"""The mark of each check status."""


def doctor_sglang(
    model: Path, draft: Optional[Path], site_packages: Optional[Path], python: Optional[Path], as_json: bool
) -> int:
    """Run :func:`patchkit.checks.sglang_doctor.doctor` and render it; the exit code of its verdict.

    Raises:
        UsageError: no ``--draft``, or both ``--site-packages`` and ``--python`` (exit 2).
    """
    from patchkit.checks.sglang_doctor import doctor  # lazy: the checks layer, only when doctor runs
    from patchkit.sglang.install import locate  # lazy: as above

    if draft is None:
        raise UsageError(
            "doctor --target sglang needs --draft: it reads how SGLang takes the draft's ids",
            "give --draft DIR, the EAGLE-3 draft's folder (its config.json)",
        )
    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    install = locate(site_packages, python)
    with working("checking the checkpoints against this SGLang...", as_json):
        report = doctor(install, model, draft)
    if as_json:
        emit_json(report.to_dict())
        return verdict(report.ready)
    w = out()
    w.line(f"SGLang {report.install.version} at {report.install.site_packages}")
    w.line(f"target: {report.target_config}", f"  draft: {report.draft_config}")
    for item in report.items:
        mark, style = MARKS[item.status]
        where = f" ({item.location})" if item.location else ""
        w.line((mark, style), f" {item.label}: {item.detail}", (where, "dim"))
    if report.ready:
        w.line(("verdict: ready", "green"), " for EAGLE-3 with this SGLang")
    else:
        failed = [i.label for i in report.items if not i.info and not i.ok]
        w.line(("verdict: not ready", "red"), f" ({', '.join(failed)}: details above)")
    return verdict(report.ready)


def _install(site_packages: Optional[Path], python: Optional[Path]):
    """The SGLang install of ``--site-packages`` or ``--python`` (one of them at most)."""
    from patchkit.sglang.install import locate  # lazy: only the SGLang commands read SGLang

    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    return locate(site_packages, python)


@contextlib.contextmanager
def sglang_steps():
    """An error's next step made an SGLang command: the shared journal's steps (``patchkit apply`` again after a
    Ctrl-C, ``patchkit revert``, ``patchkit status``) get ``--target sglang``; a step SGLang has no command for
    becomes ``verify --target sglang``."""
    try:
        yield
    except PatchkitError as exc:
        step = exc.step
        if step is not None and step.argv[:1] == ("patchkit",) and "--target" not in step.argv:
            if len(step.argv) > 1 and step.argv[1] in SGLANG_COMMANDS:
                exc.step = replace(step, argv=(*step.argv[:2], "--target", SGLANG, *step.argv[2:]))
            else:
                exc.step = NextStep(patchkit_argv("verify", target=SGLANG), "it checks each patched class")
        raise


def refuse_options(command: str, given: dict[str, object]) -> None:
    """A :class:`UsageError` (exit 2, nothing read or written) for an option not written for SGLang."""
    used = [name for name, value in given.items() if value]
    if used:
        raise UsageError(
            f"--target sglang: {command} does not take {', '.join(used)} yet (issue 44)",
            f"run patchkit {command} --target sglang without it (docs/sglang.md)",
        )


def apply_sglang(
    arch: Optional[list[str]],
    site_packages: Optional[Path],
    python: Optional[Path],
    as_json: bool,
    dry_run: bool = False,
) -> int:
    """``apply --target sglang --arch X [--dry-run]``: :func:`patchkit.plan.sglang_apply.apply`, rendered (with
    ``--dry-run``: ``would apply`` and the unified diff, nothing written); 0 or 3 (refused)."""
    from patchkit.plan.sglang_apply import Status, apply  # lazy: the planning layer, only when apply runs

    if not arch:
        raise UsageError(
            "apply --target sglang needs --arch: it patches the classes you name",
            "give --arch NAME for a missing class (repeatable)",
            step=NextStep(patchkit_argv("scan", target=SGLANG), "it lists each architecture's state"),
        )
    install = _install(site_packages, python)
    with sglang_steps(), working("planning and checking the patches...", as_json):
        report = apply(install, list(arch), dry_run=dry_run)
    if as_json:
        emit_json(report.to_dict())
        return int(report.exit_code)
    w = out()
    w.line(f"SGLang {install.version} at {install.site_packages}")
    style = {Status.APPLIED: "green", Status.ALREADY: "green", Status.NATIVE: "green", Status.REFUSED: "red"}
    for o in report.outcomes:
        label, colour = o.status.value, style[o.status]
        if o.status is Status.APPLIED and dry_run:
            label, colour = "would apply", "yellow"
        w.line((label, colour), f" {o.architecture} ({o.path}): {o.reason}")
    if dry_run and report.diff:
        w.raw(report.diff)
    if dry_run and not any(o.status is Status.REFUSED for o in report.outcomes):
        would = f"would write {', '.join(report.planned)}; " if report.planned else ""
        w.line(f"dry run: {would}nothing was written")
    elif report.written:
        undo = NextStep(patchkit_argv("revert", target=SGLANG), "it puts the files back").for_run(run_options())
        w.line(f"wrote {', '.join(report.written)}; {undo.line()}")
    elif any(o.status is Status.REFUSED for o in report.outcomes):
        w.line(("nothing written", "red"), ": every file is as it was")
    return int(report.exit_code)


def verify_sglang(
    arch: Optional[list[str]], site_packages: Optional[Path], python: Optional[Path], as_json: bool
) -> int:
    """``verify --target sglang``: :func:`patchkit.checks.sglang_verify.verify`, rendered; 0 in effect, else 1."""
    from patchkit.checks.sglang_verify import verify  # lazy: the checks layer, only when verify runs

    install = _install(site_packages, python)
    with working("checking...", as_json):
        report = verify(install, list(arch) if arch else None)
    if as_json:
        emit_json(report.to_dict())
        return int(report.exit_code)
    w = out()
    w.line(f"SGLang {install.version} at {install.site_packages}")
    if not report.verdicts:
        w.line(("nothing patched", "red"), ": give --arch NAME to check a class (patchkit scan --target sglang)")
    for v in report.verdicts:
        w.line((MARKS["ok" if v.ok else "failed"][0], "green" if v.ok else "red"), f" {v.architecture}: {v.state}")
        for link in v.links:
            if not link.ok or v.state == "patched":
                mark, style = MARKS["ok" if link.ok else "failed"]
                w.line("    ", (mark, style), f" {link.label}: {link.detail}")
    return int(report.exit_code)


def revert_sglang(
    site_packages: Optional[Path],
    python: Optional[Path],
    force: bool,
    as_json: bool,
    arch: Optional[list[str]] = None,
) -> int:
    """``revert --target sglang [--arch X ...]``: :func:`patchkit.plan.sglang_revert.revert`, rendered; 0, or 3 when
    refused (a file edited since patchkit wrote it)."""
    from patchkit.plan.sglang_revert import revert  # lazy: the planning layer, only when revert runs

    install = _install(site_packages, python)
    with sglang_steps():
        report = revert(install, force=force, architectures=list(arch) if arch else None)
    if as_json:
        emit_json(report.to_dict())
        return int(report.exit_code)
    w = out()
    if report.changed:
        w.line(("refused", "red"), f": changed since patchkit wrote them: {', '.join(report.changed)}; nothing written")
        w.line("revert --force restores them too (the edits are lost)")
        return int(report.exit_code)
    if report.restored:
        w.line(f"restored {', '.join(report.restored)} to their original bytes")
    if report.rewritten:
        w.line(f"rewrote {', '.join(report.rewritten)} to hold only the classes that stay patched")
    if not report.restored and not report.rewritten:
        w.line("nothing to revert: patchkit changed no SGLang file here")
    return int(report.exit_code)


def status_sglang(
    site_packages: Optional[Path], python: Optional[Path], as_json: bool, arch: Optional[list[str]] = None
) -> int:
    """``status --target sglang [--arch X ...]``: :func:`patchkit.plan.sglang_status.status`, rendered; exit 0.

    Raises:
        UsageError: both ``--site-packages`` and ``--python``, or an ``--arch`` SGLang does not register (exit 2).
        InstallNotFound: no SGLang there (exit 4); StateError: a journal that cannot be read (exit 4).
    """
    from patchkit.plan.sglang_status import status  # lazy: the planning layer, only when status runs

    install = _install(site_packages, python)
    with sglang_steps():
        report = status(install, tuple(dict.fromkeys(arch or ())))
    if as_json:
        emit_json(report.to_dict())
        return report.exit_code
    w = out()
    w.line(f"SGLang {install.version} at {install.site_packages}")
    for name in report.not_patched:
        w.line(("not patched:", "yellow"), f" {name} (patchkit's journal here holds no patch for it)")
    if report.unfinished is not None:
        w.line(("unfinished run:", "yellow"), " ", report.unfinished.summary())
    if report.record_missing:
        w.line(("no RECORD:", "yellow"), " this SGLang has no RECORD file: an upgrade cannot be told from an edit")
    for r in report.classes:
        style = "green" if r.state.value == "patched" else "yellow"
        w.line((r.state.value, style), f" {r.architecture}  ", (f"{r.path} ({r.patch})", "dim"))
    if not report.files and not report.pending:
        w.line("no patchkit changes in this SGLang" + (" for these architectures" if report.architectures else ""))
        return report.exit_code
    w.table(
        ["file", "state", "SGLang", "applied at", "patches"],
        [
            [
                f.path,
                (f.state.value, None if f.state.value == "patched" else "yellow"),
                f.version,
                f.applied_at,
                ", ".join(f.patches),
            ]
            for f in report.files
        ],
    )
    for state, meaning in report.notes():
        w.line((f"{state.value}:", "yellow"), f" {meaning}")
    return report.exit_code


def resolve_sglang(architecture: str, site_packages: Optional[Path], python: Optional[Path], as_json: bool) -> int:
    """``resolve --target sglang ARCH``: :func:`patchkit.checks.sglang_resolve.resolve`, rendered; 0 when the registry
    holds it, 1 when not (the closest names suggested)."""
    from patchkit.checks.sglang_resolve import resolve  # lazy: the checks layer, only when resolve runs

    install = _install(site_packages, python)
    report = resolve(install, architecture)
    if as_json:
        emit_json(report.to_dict())
        return int(report.exit_code)
    w = out()
    if report.module is None:
        w.line(f"{architecture} is not in SGLang {install.version}'s registry (sglang/srt/models/*.py EntryClass)")
        if report.suggestions:
            w.line(f"did you mean: {', '.join(report.suggestions)}?")
        return int(report.exit_code)
    w.line(f"{architecture}: registered in {report.module} ({report.state}; SGLang {install.version})")
    if report.bases:
        w.line("bases: ", (", ".join(report.bases), "dim"))
    for link in report.chain:
        w.line(f"{link.role}: {link.cls} ", (f"({link.file}:{link.line})", "dim"))
    return int(report.exit_code)


def explain_sglang(patch_id: str, site_packages: Optional[Path], python: Optional[Path], as_json: bool) -> int:
    """``explain --target sglang ID``: :func:`patchkit.ui.sglang_explain.explain`, rendered; exit 0.

    Raises:
        UsageError: an unknown id, or an architecture SGLang does not register (exit 2).
        InstallNotFound: no SGLang there, for an ``<id>:<Architecture>`` id (exit 4).
    """
    from patchkit.ui import sglang_explain  # lazy: only when explain runs

    install = _install(site_packages, python) if sglang_explain.needs_install(patch_id) else None
    report = sglang_explain.explain(patch_id, install)
    if as_json:
        emit_json(report.to_dict())
        return 0
    head, _, rest = report.heading.partition(": ")
    w = out()
    w.line((head, "bold"), f": {rest}")
    w.table(["", ""], [[(k, "dim"), v] for k, v in report.rows()], show_header=False)
    return 0


__all__ = [
    "apply_sglang",
    "explain_sglang",
    "resolve_sglang",
    "doctor_sglang",
    "refuse_options",
    "revert_sglang",
    "sglang_steps",
    "status_sglang",
    "verify_sglang",
]
