"""``watch install`` and ``watch remove``: a call into :mod:`patchkit.watch.watch`, one line, an exit code.

Typer command functions, registered on the ``watch`` sub-app by :mod:`patchkit.ui.cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from patchkit.ui import hints
from patchkit.ui.console import emit_json, qualified_note, next_lines, out, waiting, watch_line
from patchkit.ui.options import JsonOpt, PythonOpt, SitePackagesOpt, TargetOpt, find_install
from patchkit.ui.runner import run


def _watch_command(action: str, target: str, site_packages: Optional[Path], python: Optional[Path],
                   as_json: bool, drafts: Optional[int] = None, threshold: Optional[float] = None) -> None:
    """``watch install`` / ``watch remove``: a call into :mod:`patchkit.watch.watch`, one line, an exit code.

    Exit codes: 0 done; 2 a ``--drafts``/``--threshold`` out of range; 3 ``install`` on a vLLM
    without the ``vllm.stat_logger_plugins`` group (before 0.11.1; nothing written); 4 as for
    every command (no install, files that cannot be written).
    """

    def body() -> int:
        from patchkit.plugin_results import WatchAction  # lazy: the result types cost start-up time (list needs none)
        from patchkit.watch import watch as watch_mod  # lazy: the watch layer, only when a watch command runs

        from patchkit.vllm.contract import beyond_qualified  # lazy: start-up, only when the command runs

        install = find_install(target, site_packages, python)
        if action == "install":
            report = watch_mod.install_watch(install, drafts=drafts, threshold=threshold, target=target,
                                             command_options=hints.command_options(site_packages, python),
                                             on_wait=waiting(as_json))
        else:
            report = watch_mod.remove_watch(install, target=target, on_wait=waiting(as_json))
        code = int(report.exit_code)
        if as_json:
            emit_json({"command": f"watch {action}", **report.to_dict(),
                       "newer_than_qualified": beyond_qualified(install.version), "exit_code": code})
            return code
        w = out()
        w.line(f"vLLM {install.version} at {install.site_packages}", *qualified_note(beyond_qualified(install.version)))
        watch_line(w, report)
        if report.action is WatchAction.NO_PLUGIN_GROUP:
            next_lines(w, report.next_steps)
        elif report.action is WatchAction.NOT_INSTALLED:
            w.line("the watch is not installed here: nothing to remove")
        return code

    run(as_json, body, site_packages, python)


def watch_install(target: str = TargetOpt, site_packages: Optional[Path] = SitePackagesOpt,
                  python: Optional[Path] = PythonOpt, as_json: bool = JsonOpt,
                  drafts: Optional[int] = typer.Option(None, "--drafts", help="Drafts to count before judging "
                                                       "(default 200; PATCHKIT_WATCH_DRAFTS overrides it in the serve)."),
                  threshold: Optional[float] = typer.Option(None, "--threshold", help="First-position acceptance below "
                                                            "which it logs its line (default 0.2; "
                                                            "PATCHKIT_WATCH_THRESHOLD overrides it).")) -> None:
    """Install (or refresh) the acceptance watch: a vLLM stat-logger plugin (journaled; docs/watch.md)."""
    _watch_command("install", target, site_packages, python, as_json, drafts, threshold)


def watch_remove(target: str = TargetOpt, site_packages: Optional[Path] = SitePackagesOpt,
                 python: Optional[Path] = PythonOpt, as_json: bool = JsonOpt) -> None:
    """Delete the watch's files; the vLLM patches stay ('patchkit revert' removes both)."""
    _watch_command("remove", target, site_packages, python, as_json)
