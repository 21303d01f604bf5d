"""``doctor --target sglang``'s text and JSON: the checklist of :func:`patchkit.checks.sglang_doctor.doctor`.

One line a check (✓, ✗, or "not checked" with its reason), each SGLang fact's ``file:line`` below site-packages,
the vLLM comparison, then the verdict. Exit 0 when ready, 1 when not (docs/commands.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from patchkit.errors import UsageError
from patchkit.ui.console import emit_json, out, working
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


__all__ = ["doctor_sglang"]
