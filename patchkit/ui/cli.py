"""The ``patchkit`` command line: Typer options, a call into :mod:`patchkit.api`, rendering, an exit code.

This module is the Typer app: it registers the commands, which live by kind in
:mod:`patchkit.ui.patch_commands` (``apply``, ``verify``, ``revert``, ``status``),
:mod:`patchkit.ui.inspect_commands` (``resolve``, ``scan``, ``list``, ``doctor``, ``rehearse``,
``explain``) and :mod:`patchkit.ui.plugin_commands` (``guard``/``watch`` ``install``/``remove``). They share the
options (:mod:`patchkit.ui.options`), the runner that maps errors and signals to exit codes
(:mod:`patchkit.ui.runner`, which lists the codes), the output console (:mod:`patchkit.ui.console`)
and the hint scope (:mod:`patchkit.ui.hints`).

Start-up matters (issue 11): these modules import only Typer, the standard library and the small
:mod:`patchkit.errors` / :mod:`patchkit.settings` / :mod:`patchkit.interrupt` /
:mod:`patchkit.ui.render`; each command imports what it needs when it runs, and only ``apply``
ever imports libcst (through :mod:`patchkit.plan.engine`, or to ship it to the nodes with
``--ray``). Ray is imported only with ``--ray`` (:mod:`patchkit.ui.cluster_view`).
"""

from __future__ import annotations

import gc

import typer

from patchkit import __version__
from patchkit.ui import hints
from patchkit.ui.plugin_commands import guard_install, guard_remove, watch_install, watch_remove
from patchkit.ui.inspect_commands import doctor_cmd, explain_cmd, list_patches, rehearse_cmd, resolve, scan_cmd
from patchkit.ui.options import Command, RayCommand
from patchkit.ui.patch_commands import apply, revert, status, verify
from patchkit.ui.export_command import export_cmd

HELP = (
    "Patch an installed vLLM so EAGLE-3 works: for DeepSeek-V2/V3 and Kimi-K2.5 by default, for any "
    "architecture its registry holds with --arch/--model; verify; revert exactly."
)
"""``patchkit --help``'s description."""

app = typer.Typer(
    name="patchkit",
    help=HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"patchkit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print patchkit's version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """The root command (its help is :data:`HELP`)."""


app.command(cls=RayCommand)(apply)
app.command(cls=RayCommand)(verify)
app.command(cls=RayCommand)(revert)
app.command(cls=RayCommand)(status)
app.command(cls=Command)(resolve)
app.command("scan", cls=Command)(scan_cmd)
app.command("list", cls=Command)(list_patches)
app.command("doctor", cls=Command)(doctor_cmd)
app.command("rehearse", cls=Command)(rehearse_cmd)
app.command("explain", cls=Command)(explain_cmd)
app.command("export", cls=Command)(export_cmd)

guard_app = typer.Typer(
    name="guard",
    no_args_is_help=True,
    help="Install or remove patchkit's guard (a vLLM plugin that "
    "checks, in every vLLM process, that the patched files still hold patchkit's bytes).",
)
app.add_typer(guard_app, name="guard")
guard_app.command("install", cls=Command)(guard_install)
guard_app.command("remove", cls=Command)(guard_remove)

watch_app = typer.Typer(
    name="watch",
    no_args_is_help=True,
    help="Install or remove patchkit's acceptance watch (a vLLM "
    "stat-logger plugin that says why EAGLE-3 acceptance collapsed in a serve).",
)
app.add_typer(watch_app, name="watch")
watch_app.command("install", cls=Command)(watch_install)
watch_app.command("remove", cls=Command)(watch_remove)


def main() -> None:
    """Entry point of the ``patchkit`` script and ``python -m patchkit``; exits with the command's code.

    The cyclic garbage collector is switched off for the command's short life: the parsed trees of
    hundreds of vLLM files hold no reference cycles, and collecting over them took 60 % of ``scan``
    (benchmarks/bench.py); memory is still freed by reference counting. When the command is done,
    what is still alive is frozen (:func:`gc.freeze`): the interpreter's shutdown runs the
    collector even when it is disabled, and its passes over the trees a command kept (``scan`` of
    vLLM 0.17.1: 193 files, a 190 MB process) took about 0.6 s, six times the scan's own work
    besides parsing.
    """
    gc.disable()
    hints.given["process"] = "patchkit"
    try:
        app(prog_name="patchkit")
    finally:
        gc.freeze()
