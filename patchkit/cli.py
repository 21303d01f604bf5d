"""The ``patchkit`` command line: Typer options, a call into :mod:`patchkit.api`, rendering, an exit code.

Exit codes (also in the README): 0 done / EAGLE-3 in effect; 1 ``verify`` found EAGLE-3 not in
effect; 2 bad command line; 3 refused, nothing written; 4 no usable vLLM install, bad
``--python``, or files that cannot be read or written.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree
from typer.core import TyperCommand

from patchkit import api
from patchkit import doctor as doctor_mod
from patchkit import explain as explain_mod
from patchkit.errors import ExitCode, PatchkitError, UsageError
from patchkit.install import Install, locate
from patchkit.results import Check, Outcome
from patchkit.spec import check_target, load_patches

app = typer.Typer(
    name="patchkit",
    help="Patch an installed vLLM so EAGLE-3 works for DeepSeek-V2/V3 and Kimi-K2.5; verify; revert exactly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# On a terminal rich uses its width; piped output (a log, a script) is not cut at 80 columns.
# NO_COLOR (no-color.org) turns off every escape code, bold and dim included.
_PIPE_WIDTH = 240
_PLAIN = {"color_system": None} if os.environ.get("NO_COLOR") else {}
out = Console(highlight=False, width=None if sys.stdout.isatty() else _PIPE_WIDTH, **_PLAIN)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else _PIPE_WIDTH, **_PLAIN)

TargetOpt = typer.Option("vllm", "--target", help="Distribution to patch (only 'vllm').")
SitePackagesOpt = typer.Option(None, "--site-packages", help="Folder holding vllm/ and its .dist-info.")
PythonOpt = typer.Option(None, "--python", help="Interpreter of the environment that serves the model.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object (schema in the README).")
RayOpt = typer.Option(None, "--ray", metavar="[ADDRESS]",
                      help="Run on every node of a Ray cluster (no ADDRESS: the one ray.init finds). Needs the 'ray' extra.")


class _RayCommand(TyperCommand):
    """A command whose ``--ray`` may come without a value: then it means ``auto`` (what ``ray.init`` finds).

    Typer has no option with an optional value, so a bare ``--ray`` (last, or before another
    option) gets ``auto`` inserted before Click parses the line.
    """

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                args.insert(i + 1, "auto")
                break
        return super().parse_args(ctx, args)


_MARK = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[dim]·[/]"}
_OUTCOME_STYLE = {
    Outcome.APPLIED: "green",
    Outcome.ALREADY_APPLIED: "green",
    Outcome.UPSTREAM: "cyan",
    Outcome.NOT_APPLICABLE: "yellow",
    Outcome.REFUSED: "red",
    Outcome.NOT_WRITTEN: "yellow",
}


def _table(*columns: str) -> Table:
    """A borderless table whose cells fold instead of being cut (paths and ids stay whole)."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _print_table(table: Table) -> None:
    """Print a table without the trailing padding rich adds to each row."""
    with out.capture() as captured:
        out.print(table)
    for line in captured.get().splitlines():
        out.file.write(line.rstrip() + "\n")


def _install(target: str, site_packages: Optional[Path], python: Optional[Path]) -> Install:
    check_target(target)
    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    return locate(site_packages=site_packages, python=python)


def _working(message: str, as_json: bool):
    """A spinner on stderr while something slow runs, only on a terminal and never with --json."""
    if as_json or not err.is_terminal:
        return contextlib.nullcontext()
    return err.status(message, spinner="dots")


def _run(as_json: bool, body: Callable[[], int]) -> None:
    """Run a command body; map patchkit errors to their one-line message, hint and exit code."""
    try:
        code = body()
    except PatchkitError as exc:
        if as_json:
            print(json.dumps({"error": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}))
        else:
            err.print(f"[red]error:[/] {escape(exc.message)}")
            if exc.hint:
                err.print(f"[dim]hint:[/] {escape(exc.hint)}")
        raise typer.Exit(int(exc.exit_code))
    raise typer.Exit(code)


def _emit_json(data: dict[str, Any]) -> None:
    print(json.dumps(data, indent=2))


def _header(info) -> None:
    out.print(f"vLLM {info.version} at {escape(info.site_packages)}  [dim](EAGLE-3 contract {info.era})[/]")


@app.command(cls=_RayCommand)
def apply(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff; write nothing."),
    patch: Optional[list[str]] = typer.Option(None, "--patch", help="Only this patch (and what it needs); repeatable."),
    force: bool = typer.Option(False, "--force", help="Patch files that differ from the distribution's RECORD."),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Apply every patch that applies to this vLLM release, all or nothing."""

    def body() -> int:
        if ray is not None:
            from patchkit import cluster_view
            return cluster_view.apply(ray, target=target, site_packages=site_packages, python=python,
                                      dry_run=dry_run, patch=patch, force=force, as_json=as_json)
        install = _install(target, site_packages, python)
        with _working("planning and checking the patches...", as_json):
            report = api.apply(install, dry_run=dry_run, patch_ids=patch, target=target, force=force)
        if as_json:
            _emit_json(report.to_dict())
        else:
            _header(report.install)
            for path in report.recovered:
                out.print(f"[yellow]rolled back[/] {escape(path)} [dim](an earlier run did not finish)[/]")
            table = _table("patch", "outcome", "where / why")
            for p in report.patches:
                style = _OUTCOME_STYLE[p.outcome]
                label = p.outcome.value
                if p.outcome is Outcome.APPLIED and dry_run:
                    label, style = "would apply", "yellow"
                detail = p.target or "" if p.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED) else p.reason
                if p.outcome is Outcome.ALREADY_APPLIED and p.reason.startswith("note:"):
                    detail = f"{detail} ({p.reason})"
                table.add_row(p.id, f"[{style}]{label}[/]", escape(detail))
            _print_table(table)
            if dry_run and report.diff:
                out.print(escape(report.diff), end="", markup=True)
            if report.verify is not None and not report.verify.ok:
                _print_checks(report.verify.checks)
            if report.refused:
                out.print("[red]refused:[/] nothing was written")
            elif report.written:
                out.print(f"wrote {len(report.files)} file(s); 'patchkit verify' shows the chain, 'patchkit revert' undoes it")
            elif dry_run:
                out.print("dry run: nothing was written")
            else:
                out.print("nothing to write")
        return int(ExitCode.REFUSED) if report.refused else int(ExitCode.OK)

    _run(as_json, body)


def _check_tree(check: Check, parent: Tree | None, shown: set[tuple[str, str | None]]) -> Tree:
    """Render a check subtree; a subtree already printed (same label and place) is referred back to."""
    text = f"{_MARK[check.ok]} {escape(check.label)}"
    key = (check.label, check.location)
    repeat = bool(check.children) and key in shown and parent is not None
    if repeat:
        text += "  [dim](as above)[/]"
    elif check.detail:
        text += f"  [dim]{escape(check.detail)}[/]"
    if check.location:
        text += f"  [blue]{escape(check.location)}[/]"
    node = parent.add(text) if parent is not None else Tree(text)
    if repeat:
        return node
    if check.children:
        shown.add(key)
    for child in check.children:
        _check_tree(child, node, shown)
    return node


def _print_checks(checks: list[Check]) -> None:
    shown: set[tuple[str, str | None]] = set()
    for check in checks:
        out.print(_check_tree(check, None, shown))


def _missing_lines(checks: list[Check]) -> list[str]:
    """One line per distinct failing check (a class shared by several architectures counts once)."""
    lines: list[str] = []
    for top in checks:
        for c in top.failures():
            line = f"  missing: {c.label}: {c.detail}" + (f" ({c.location})" if c.location else "")
            if line not in lines:
                lines.append(line)
    return lines


@app.command(cls=_RayCommand)
def verify(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    runtime: bool = typer.Option(
        False, "--runtime", help="Also ask vLLM's own code, in a fresh subprocess of the target interpreter."
    ),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Exit 0 only when EAGLE-3 is in effect for the resolved classes (patched or native)."""

    def body() -> int:
        if ray is not None:
            if runtime:
                raise UsageError("--runtime is not available with --ray", "run 'patchkit verify --runtime' on each node")
            from patchkit import cluster_view
            return cluster_view.run("verify", ray, target=target, site_packages=site_packages, python=python,
                                    as_json=as_json)
        install = _install(target, site_packages, python)
        runtime_python = None
        if runtime:
            if python is None and site_packages is not None:
                raise UsageError("--runtime runs vLLM's own code and needs its interpreter",
                                 "give --python /path/to/venv/bin/python instead of --site-packages")
            runtime_python = python if python is not None else Path(sys.executable)
        message = f"running vLLM's own checks with {runtime_python} (imports vLLM and torch)..." if runtime else "checking..."
        with _working(message, as_json):
            report = api.verify(install, runtime_python=runtime_python)
        if as_json:
            _emit_json(report.to_dict())
        else:
            _header(report.install)
            _print_checks(report.checks)
            if report.ok:
                out.print("[green]EAGLE-3 is in effect[/] for the resolved classes")
            else:
                out.print("[red]EAGLE-3 is not in effect:[/]")
                for line in _missing_lines(report.checks):
                    out.print(escape(line))
                out.print("hint: run 'patchkit apply --target vllm' (add the same --python/--site-packages)")
        return int(ExitCode.OK) if report.ok else int(ExitCode.NOT_IN_EFFECT)

    _run(as_json, body)


@app.command(cls=_RayCommand)
def revert(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    force: bool = typer.Option(False, "--force", help="Also restore files edited by hand since (the edit is lost)."),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Restore every file patchkit changed to the exact bytes it had before."""

    def body() -> int:
        if ray is not None:
            from patchkit import cluster_view
            return cluster_view.run("revert", ray, target=target, site_packages=site_packages, python=python,
                                    force=force, as_json=as_json)
        install = _install(target, site_packages, python)
        report = api.revert(install, target=target, force=force)
        if as_json:
            _emit_json(report.to_dict())
        else:
            _header(report.install)
            if not report.files:
                out.print("nothing to revert: patchkit has not changed this install")
            for f in report.files:
                mark = _MARK[True if f.restored else (False if report.refused and "not touched" in f.reason else None)]
                out.print(f"{mark} {escape(f.path)}  [dim]{escape(f.reason)}[/]")
            if report.refused:
                out.print("[red]refused:[/] nothing was reverted")
                out.print("hint: 'patchkit revert --force' writes the originals over the edits; or reinstall vLLM "
                          "(pip install --force-reinstall --no-deps vllm==X.Y.Z)")
        return int(ExitCode.REFUSED) if report.refused else int(ExitCode.OK)

    _run(as_json, body)


@app.command(cls=_RayCommand)
def status(
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """What patchkit has applied to this install: files, patches, vLLM version, state."""

    def body() -> int:
        if ray is not None:
            from patchkit import cluster_view
            return cluster_view.run("status", ray, target=target, site_packages=site_packages, python=python,
                                    as_json=as_json)
        install = _install(target, site_packages, python)
        report = api.status(install, target=target)
        if as_json:
            _emit_json(report.to_dict())
        else:
            _header(report.install)
            if report.pending:
                out.print(f"[yellow]unfinished run:[/] an earlier apply stopped while writing {', '.join(report.pending)}; "
                          "the next 'patchkit apply' or 'patchkit revert' rolls it back first")
            if not report.entries and not report.pending:
                out.print("no patchkit changes in this install")
            table = _table("file", "state", "patches", "vLLM", "applied at")
            for e in report.entries:
                table.add_row(escape(e.path), e.state, ", ".join(e.patches), e.vllm_version, e.applied_at)
            if report.entries:
                _print_table(table)
                for state in sorted({e.state for e in report.entries} - {"patched"}):
                    out.print(f"[yellow]{state}[/]: {api.FILE_STATES[state]}")
                if {e.state for e in report.entries} & {"reinstalled", "upgraded"}:
                    out.print("hint: run 'patchkit apply --target vllm' again for this release")
        return int(ExitCode.OK)

    _run(as_json, body)


@app.command()
def resolve(
    architecture: str = typer.Argument(..., help="Architecture name from a checkpoint's config.json."),
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Resolve an architecture through this vLLM's model registry: file, line, class, bases."""

    def body() -> int:
        install = _install(target, site_packages, python)
        report = api.resolve(install, architecture)
        r = report.resolution
        if as_json:
            _emit_json(report.to_dict())
        elif r is None:
            out.print(
                f"{escape(architecture)} is not a native model of vLLM {report.install.version}: it is not in the "
                "model registry, so vLLM would load it through its Transformers backend (trust_remote_code) "
                "and no edit of vLLM's model files reaches it."
            )
            out.print("[dim]Kimi-K2 text checkpoints list DeepseekV3ForCausalLM; Kimi-K2.5 lists KimiK25ForConditionalGeneration.[/]")
            if report.suggestions:
                out.print(f"did you mean: {', '.join(report.suggestions)}?")
        elif r.transformers_backend:
            out.print(f"{escape(architecture)} is served by vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}); no native model file")
        elif r.cls is None:
            out.print(f"the registry maps {escape(architecture)} to {r.entry.module}.{r.entry.class_name}, which patchkit cannot find in this install")
        else:
            out.print(f"{escape(architecture)} -> {r.cls.name}  [blue]{r.cls.location}[/]")
            out.print(f"  module: {r.cls.module}  [dim](registry: {report.registry_file}:{r.entry.lineno})[/]")
            out.print(f"  bases: {escape(', '.join(report.bases))}")
            if len(r.aliases) > 1:
                out.print(f"  same class for: {', '.join(r.aliases)}")
            if report.alternatives:
                out.print(f"  note: {r.entry.module} picks the class per platform; shown: its first branch; "
                          f"also: {', '.join(report.alternatives)}")
        return int(ExitCode.OK) if report.native else int(ExitCode.NOT_IN_EFFECT)

    _run(as_json, body)


@app.command("list")
def list_patches(target: str = TargetOpt, as_json: bool = JsonOpt) -> None:
    """List the patch definitions, their vLLM ranges and targets."""

    def body() -> int:
        patches = load_patches(target)
        if as_json:
            _emit_json({"command": "list", "patches": [
                {"id": p.id, "vllm": str(p.vllm), "target": p.target.describe(), "summary": p.summary,
                 "requires": list(p.requires), "reference": p.reference} for p in patches]})
        else:
            table = _table("patch", "vLLM", "target", "summary")
            for p in patches:
                table.add_row(p.id, str(p.vllm), p.target.describe(), escape(p.summary))
            _print_table(table)
        return int(ExitCode.OK)

    _run(as_json, body)


@app.command("doctor")
def doctor_cmd(
    model: Path = typer.Option(..., "--model", help="Target checkpoint folder; only its config.json is read, nothing is downloaded."),
    draft: Optional[Path] = typer.Option(None, "--draft", help="EAGLE-3 draft checkpoint folder (its config.json)."),
    target: str = TargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a target (and EAGLE-3 draft) checkpoint against this vLLM: one checklist and a verdict."""

    def body() -> int:
        install = _install(target, site_packages, python)
        options = (["--python", str(python)] if python is not None else
                   ["--site-packages", str(site_packages)] if site_packages is not None else None)
        with _working("checking the checkpoints against this vLLM...", as_json):
            report = doctor_mod.doctor(install, model, draft, command_options=options, distribution=target)
        if as_json:
            _emit_json(report.to_dict())
        else:
            _header(report.install)
            out.print(f"target: {escape(report.target.config)}"
                      + (f"  draft: {escape(report.draft.config)}" if report.draft else "  [dim](no --draft)[/]"))
            _print_checks(report.checks)
            if report.ready:
                out.print("[green]verdict: ready[/] for EAGLE-3 with this vLLM")
            else:
                labels = list(dict.fromkeys(c.label for top in report.checks for c in top.failures()))
                out.print(f"[red]verdict: not ready[/] ({len(labels)} problem{'s' if len(labels) != 1 else ''}, details above):")
                for label in labels:
                    out.print(f"  - {escape(label)}")
            for action in report.actions:
                out.print(f"next: {escape(action)}")
        return int(ExitCode.OK) if report.ready else int(ExitCode.NOT_IN_EFFECT)

    _run(as_json, body)


@app.command("explain")
def explain_cmd(
    patch_id: str = typer.Argument(..., metavar="ID", help="A patch id, as 'patchkit list' shows it."),
    target: str = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """What one patch changes and why, where it lands, its vLLM range and the upstream reference."""

    def body() -> int:
        report = explain_mod.explain(patch_id, target)
        if as_json:
            _emit_json(report.to_dict())
        else:
            p = report.patch
            name, description, doc = report.codemod
            out.print(f"[bold]{escape(p.id)}[/]: {escape(p.summary)}")
            table = Table(show_header=False, box=None, pad_edge=False)
            table.add_column(style="dim")
            table.add_column()
            table.add_row("vLLM", escape(str(p.vllm)))
            table.add_row("target", escape(report.target))
            table.add_row("codemod", escape(f"{name}: {description}" + (f" ({doc})" if doc else "")))
            table.add_row("expects", escape(p.codemod.expects))
            table.add_row("requires", escape(", ".join(p.requires) or "-"))
            table.add_row("needed by", escape(", ".join(report.required_by) or "-"))
            table.add_row("why", escape(p.why))
            table.add_row("reference", escape(p.reference))
            _print_table(table)
        return int(ExitCode.OK)

    _run(as_json, body)


def main() -> None:
    """Entry point of the ``patchkit`` script and ``python -m patchkit``; exits with the command's code."""
    app(prog_name="patchkit")
