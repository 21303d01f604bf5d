"""``guard install`` and ``guard remove``: a call into :mod:`patchkit.guard.guard`, one line, an exit code.

Typer command functions, registered on the ``guard`` sub-app by :mod:`patchkit.ui.cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from patchkit.ui import hints
from patchkit.ui.console import emit_json, qualified_note, guard_line, next_lines, out, waiting
from patchkit.ui.options import JsonOpt, PythonOpt, SitePackagesOpt, TargetOpt, find_install
from patchkit.ui.runner import run


def _guard_command(action: str, target: str, site_packages: Optional[Path], python: Optional[Path],
                   as_json: bool) -> None:
    """``guard install`` / ``guard remove``: a call into :mod:`patchkit.guard.guard`, one line, an exit code.

    Exit codes: 0 done; 3 ``install`` when patchkit has patched nothing here (nothing to watch;
    nothing written); 4 as for every command (no install, files that cannot be written).
    """

    def body() -> int:
        from patchkit.guard import guard as guard_mod  # lazy: the guard layer, only when a guard command runs
        from patchkit.plugin_results import GuardAction  # lazy: the result types cost start-up time (list needs none)

        from patchkit.vllm.contract import beyond_qualified  # lazy: start-up, only when the command runs

        install = find_install(target, site_packages, python)
        if action == "install":
            report = guard_mod.install_guard(install, command_options=hints.command_options(site_packages, python),
                                             target=target, on_wait=waiting(as_json))
        else:
            report = guard_mod.remove_guard(install, target=target, on_wait=waiting(as_json))
        code = int(report.exit_code)
        if as_json:
            emit_json({"command": f"guard {action}", **report.to_dict(),
                       "newer_than_qualified": beyond_qualified(install.version), "exit_code": code})
            return code
        w = out()
        w.line(f"vLLM {install.version} at {install.site_packages}", *qualified_note(beyond_qualified(install.version)))
        guard_line(w, report)
        if report.action is GuardAction.NOTHING_TO_GUARD:
            next_lines(w, report.next_steps)
        elif report.action is GuardAction.NOT_INSTALLED:
            w.line("the guard is not installed here: nothing to remove")
        return code

    run(as_json, body)


def guard_install(target: str = TargetOpt, site_packages: Optional[Path] = SitePackagesOpt,
                  python: Optional[Path] = PythonOpt, as_json: bool = JsonOpt) -> None:
    """Install (or refresh) the guard for the files patchkit has patched in this install (journaled)."""
    _guard_command("install", target, site_packages, python, as_json)


def guard_remove(target: str = TargetOpt, site_packages: Optional[Path] = SitePackagesOpt,
                 python: Optional[Path] = PythonOpt, as_json: bool = JsonOpt) -> None:
    """Delete the guard's files; the vLLM patches stay ('patchkit revert' removes both)."""
    _guard_command("remove", target, site_packages, python, as_json)
