"""``<plugin> install`` and ``<plugin> remove`` for every plugin (:data:`patchkit.api.PLUGINS`: ``guard``,
``watch``): a call into :mod:`patchkit.api`, one line, an exit code.

Typer command functions, registered on each plugin's sub-app by :mod:`patchkit.ui.cli`
(:func:`command`; the watch's install takes its two settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer

from patchkit.ui import hints
from patchkit.ui.console import emit_json, guard_line, next_lines, out, qualified_note, waiting, watch_line
from patchkit.ui.options import JsonOpt, PythonOpt, SitePackagesOpt, TargetOpt, find_install
from patchkit.ui.runner import run

LINES: dict[str, Callable[..., None]] = {"guard": guard_line, "watch": watch_line}
"""Each plugin's line (:mod:`patchkit.ui.console`), by its name."""


def _plugin_command(
    name: str,
    action: str,
    target: str,
    site_packages: Optional[Path],
    python: Optional[Path],
    as_json: bool,
    settings: Optional[dict[str, Any]] = None,
) -> None:
    """``<name> install`` / ``<name> remove``: a call into :mod:`patchkit.api`, one line, an exit code.

    Exit codes: 0 done; 2 a setting out of range (the watch's ``--drafts``/``--threshold``); 3
    ``install`` refused, nothing written (the guard: patchkit has patched nothing here; the watch:
    this vLLM lacks the ``vllm.stat_logger_plugins`` group); 4 as for every command (no install,
    files that cannot be written).
    """

    def body() -> int:
        from patchkit import api  # lazy: the API layer, only when a plugin command runs
        from patchkit.plugin_results import PluginAction, PluginRun  # lazy: the result types cost start-up time
        from patchkit.vllm.release.contract import beyond_qualified  # lazy: start-up, only when the command runs

        install = find_install(target, site_packages, python)
        if action == "install":
            report = api.install_plugin(
                name,
                install,
                PluginRun(True, hints.command_options(site_packages, python), target=target, settings=settings or {}),
                on_wait=waiting(as_json),
            )
        else:
            report = api.remove_plugin(name, install, target=target, on_wait=waiting(as_json))
        code = int(report.exit_code)
        if as_json:
            emit_json(
                {
                    "command": f"{name} {action}",
                    **report.to_dict(),
                    "newer_than_qualified": beyond_qualified(install.version),
                    "exit_code": code,
                }
            )
            return code
        w = out()
        w.line(f"vLLM {install.version} at {install.site_packages}", *qualified_note(beyond_qualified(install.version)))
        LINES[name](w, report)
        if report.action.refused:
            next_lines(w, report.next_steps)
        elif report.action is PluginAction.NOT_INSTALLED:
            w.line(f"the {name} is not installed here: nothing to remove")
        return code

    run(as_json, body, site_packages, python)


def command(name: str, action: str, summary: str) -> Callable[..., None]:
    """The ``<name> <action>`` command (``install``, ``remove``) of a plugin without settings of its own;
    ``summary`` is its help line."""

    def plugin_command(
        target: str = TargetOpt,
        site_packages: Optional[Path] = SitePackagesOpt,
        python: Optional[Path] = PythonOpt,
        as_json: bool = JsonOpt,
    ) -> None:
        _plugin_command(name, action, target, site_packages, python, as_json)

    plugin_command.__doc__ = summary
    return plugin_command


def watch_install(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
    drafts: Optional[int] = typer.Option(
        None,
        "--drafts",
        help="Drafts to count before judging (default 200; PATCHKIT_WATCH_DRAFTS overrides it in the serve).",
    ),
    threshold: Optional[float] = typer.Option(
        None,
        "--threshold",
        help="First-position acceptance below "
        "which it logs its line (default 0.2; "
        "PATCHKIT_WATCH_THRESHOLD overrides it).",
    ),
) -> None:
    """Install (or refresh) the acceptance watch: a vLLM stat-logger plugin (journaled; docs/watch.md)."""
    _plugin_command(
        "watch", "install", target, site_packages, python, as_json, {"drafts": drafts, "threshold": threshold}
    )


guard_install = command(
    "guard", "install", "Install (or refresh) the guard for the files patchkit has patched in this install (journaled)."
)
guard_remove = command(
    "guard", "remove", "Delete the guard's files; the vLLM patches stay ('patchkit revert' removes both)."
)
watch_remove = command(
    "watch", "remove", "Delete the watch's files; the vLLM patches stay ('patchkit revert' removes both)."
)
