"""``apply``, ``verify``, ``revert`` and ``status``: the commands on an install's patches.

Each is a Typer command function (registered by :mod:`patchkit.ui.cli`): its options, a call into
:mod:`patchkit.api` (or, with ``--ray``, :mod:`patchkit.ui.cluster_view`), the report rendered as
text or JSON, and the report's own exit code (``exit_code`` of the :mod:`patchkit.results` value).
The API, the result types and the cluster view are imported when a command runs (start-up, issue 11).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from patchkit.errors import ExitCode, PatchkitError, UsageError
from patchkit.ui import hints, patch_views
from patchkit.ui.console import emit_json, error, waiting, working
from patchkit.ui.options import (
    ArchOpt,
    JsonOpt,
    ModelOpt,
    PatchTargetOpt,
    PythonOpt,
    RayOpt,
    ScanTargetOpt,
    SitePackagesOpt,
    find_install,
    request,
)
from patchkit.sglang.contract import DISTRIBUTION as SGLANG
from patchkit.ui.runner import run
from patchkit.ui.sglang_views import apply_sglang, refuse_options, revert_sglang, status_sglang, verify_sglang


def apply(
    target: str = PatchTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff; write nothing."),
    patch: Optional[list[str]] = typer.Option(None, "--patch", help="Only this patch (and what it needs); repeatable."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Patch files that differ from the distribution's RECORD, and hybrids whose mixers lose losslessness "
        "under speculation on this release (docs/hybrids.md).",
    ),
    arch: Optional[list[str]] = ArchOpt,
    model: Optional[Path] = ModelOpt,
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
    guard: bool = typer.Option(
        False,
        "--guard",
        help="Also install patchkit's guard: a vLLM plugin that checks, in "
        "every vLLM process, that the patched files still hold patchkit's bytes.",
    ),
    watch: bool = typer.Option(
        False,
        "--watch",
        help="Also install the acceptance watch: a vLLM stat-logger plugin that "
        "logs one line naming the likeliest cause when EAGLE-3 acceptance collapses (docs/watch.md).",
    ),
    watch_drafts: Optional[int] = typer.Option(
        None, "--watch-drafts", help="With --watch: drafts to count before judging (default 200)."
    ),
    watch_threshold: Optional[float] = typer.Option(
        None, "--watch-threshold", help="With --watch: first-position acceptance below which it speaks (default 0.2)."
    ),
) -> None:
    """Apply every patch this vLLM release needs, all or nothing: for DeepSeek-V2/V3 and Kimi-K2.5 by default,
    for any registered architecture with --arch/--model."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)
        from patchkit.plan.spec import check_patch_ids  # lazy: as above

        if target == SGLANG:
            refuse_options("apply", {"--patch": patch, "--force": force, "--model": model})
            refuse_options("apply", {"--ray": ray, "--guard": guard, "--watch": watch})
            return apply_sglang(arch, site_packages, python, as_json, dry_run)
        check_patch_ids(patch, target)
        watching = _watching(watch, watch_drafts, watch_threshold)
        if ray is not None:
            _one_selection(patch, arch, model)
            options = dict(site_packages=site_packages, python=python, dry_run=dry_run, patch=patch, force=force)
            return _apply_on_cluster(ray, target, arch, model, as_json, guard, watching, options)
        install = find_install(target, site_packages, python)
        with working("planning and checking the patches...", as_json):
            _one_selection(patch, arch, model)
            report = api.apply(
                install,
                dry_run=dry_run,
                patch_ids=patch,
                target=target,
                force=force,
                request=request(arch, model),
                on_wait=waiting(as_json),
                guard=guard,
                command_options=hints.command_options(site_packages, python),
                **watching,
            )
        return _shown(_completed(report), dry_run, as_json)

    run(as_json, body, site_packages, python, arch=arch, model=model, guard=guard)


def _apply_on_cluster(ray, target, arch, model, as_json: bool, guard: bool, watching: dict, options: dict) -> int:
    """``apply --ray``: :func:`patchkit.ui.cluster_view.apply` with the command's options (``options``: the
    install, ``--dry-run``, ``--patch`` and ``--force``); its exit code."""
    from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray

    return cluster_view.apply(
        ray,
        target=target,
        **options,
        arch=arch,
        model=model,
        as_json=as_json,
        **({"guard": True} if guard else {}),
        **watching,
    )


def _watching(watch: bool, watch_drafts: Optional[int], watch_threshold: Optional[float]) -> dict:
    """``apply``'s keyword arguments for the acceptance watch (none without ``--watch``); ``--watch-drafts``
    or ``--watch-threshold`` without ``--watch`` is a :class:`UsageError`."""
    if (watch_drafts is not None or watch_threshold is not None) and not watch:
        raise UsageError("--watch-drafts and --watch-threshold set the acceptance watch", "add --watch")
    return {"watch": True, "watch_drafts": watch_drafts, "watch_threshold": watch_threshold} if watch else {}


def _one_selection(patch: Optional[list[str]], arch: Optional[list[str]], model: Optional[Path]) -> None:
    """Raise a :class:`UsageError` when ``apply`` is given both ``--patch`` and ``--arch``/``--model``."""
    if patch and (arch or model):
        raise UsageError("give --patch or --arch/--model, not both", "--arch plans every patch that architecture needs")


def _shown(report, dry_run: bool, as_json: bool) -> int:
    """Print ``apply``'s ``report`` (one JSON object with ``as_json``, else text); returns its exit code."""
    if as_json:
        emit_json(report.to_dict())
    else:
        patch_views.show_apply(report, dry_run)
    return patch_views.apply_code(report, dry_run, as_json)


def _completed(report):
    """``report`` with its next steps completed with the run's options (:func:`patchkit.ui.hints.steps`)."""
    from dataclasses import replace  # lazy: only when a report is rendered

    return replace(report, next_steps=tuple(hints.steps(report.next_steps))) if report.next_steps else report


def verify(
    target: str = ScanTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    runtime: bool = typer.Option(
        False, "--runtime", help="Also ask vLLM's own code, in a fresh subprocess of the target interpreter."
    ),
    arch: Optional[list[str]] = ArchOpt,
    model: Optional[Path] = ModelOpt,
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Exit 0 only when EAGLE-3 is in effect (patched or native): for DeepSeek-V2/V3 and Kimi-K2.5 (and what
    patchkit patched) by default, for any registered architecture with --arch/--model."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)

        if target == SGLANG:
            refuse_options("verify", {"--runtime": runtime, "--model": model, "--ray": ray})
            return verify_sglang(arch, site_packages, python, as_json)
        if ray is not None:
            if runtime:
                raise UsageError(
                    "--runtime is not available with --ray", "run 'patchkit verify --runtime' on each node"
                )
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray
            from patchkit.ui.cluster_report import ClusterCommand  # lazy: as above

            return cluster_view.run(
                ClusterCommand.VERIFY,
                ray,
                target=target,
                site_packages=site_packages,
                python=python,
                arch=arch,
                model=model,
                as_json=as_json,
            )
        install = find_install(target, site_packages, python)
        runtime_python = None
        if runtime:
            if python is None and site_packages is not None:
                raise UsageError(
                    "--runtime runs vLLM's own code and needs its interpreter",
                    "give --python /path/to/venv/bin/python instead of --site-packages",
                )
            runtime_python = install.python or Path(sys.executable)
        message = (
            f"running vLLM's own checks with {runtime_python} (imports vLLM and torch)..." if runtime else "checking..."
        )
        with working(message, as_json):
            report = api.verify(install, runtime_python=runtime_python, request=request(arch, model))
        failed = report.runtime_error
        code = int(report.exit_code)
        report.next_steps = tuple(hints.steps(report.next_steps))
        if as_json:
            emit_json(report.to_dict())
            return code
        patch_views.show_verify(report)
        if failed:
            error(PatchkitError(failed.message, failed.hint), False)
        return code

    run(as_json, body, site_packages, python, arch=arch, model=model)


def revert(
    target: str = PatchTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    force: bool = typer.Option(
        False,
        "--force",
        help="Also restore files edited by hand since, and delete "
        "patchkit's guard with edits to it (the edits are lost).",
    ),
    arch: Optional[list[str]] = typer.Option(
        None, "--arch", help="Revert only what this architecture needs and no other patched one does (repeatable)."
    ),
    model: Optional[Path] = typer.Option(
        None, "--model", help="Revert only the architectures in this checkpoint's config.json."
    ),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """Restore every file patchkit changed to the exact bytes it had before."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)

        if target == SGLANG:
            refuse_options("revert", {"--model": model, "--ray": ray})
            return revert_sglang(site_packages, python, force, as_json, arch)
        if ray is not None:
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray
            from patchkit.ui.cluster_report import ClusterCommand  # lazy: as above

            return cluster_view.run(
                ClusterCommand.REVERT,
                ray,
                target=target,
                site_packages=site_packages,
                python=python,
                force=force,
                arch=arch,
                model=model,
                as_json=as_json,
            )
        install = find_install(target, site_packages, python)
        report = _completed(
            api.revert(install, target=target, force=force, on_wait=waiting(as_json), request=request(arch, model))
        )
        if as_json:
            emit_json(report.to_dict())
            return int(report.exit_code)
        patch_views.show_revert(report)
        return int(report.exit_code)

    run(as_json, body, site_packages, python, arch=arch, model=model)


def status(
    target: str = ScanTargetOpt,
    site_packages: Optional[Path] = SitePackagesOpt,
    python: Optional[Path] = PythonOpt,
    arch: Optional[list[str]] = typer.Option(None, "--arch", help="Only what this architecture needs (repeatable)."),
    model: Optional[Path] = typer.Option(
        None, "--model", help="Only the architectures in this checkpoint's config.json."
    ),
    as_json: bool = JsonOpt,
    ray: Optional[str] = RayOpt,
) -> None:
    """What patchkit has applied to this install: files, patches, vLLM version, state."""

    def body() -> int:
        from patchkit import api  # lazy: the API and the layers below it cost start-up time (list needs none of them)

        if target == SGLANG:
            refuse_options("status", {"--model": model, "--ray": ray})
            return status_sglang(site_packages, python, as_json, arch)
        if ray is not None:
            from patchkit.ui import cluster_view  # lazy: the cluster code, only with --ray
            from patchkit.ui.cluster_report import ClusterCommand  # lazy: as above

            return cluster_view.run(
                ClusterCommand.STATUS,
                ray,
                target=target,
                site_packages=site_packages,
                python=python,
                arch=arch,
                model=model,
                as_json=as_json,
            )
        install = find_install(target, site_packages, python)
        report = api.status(install, target=target, request=request(arch, model))
        report.next_steps = tuple(hints.steps(report.next_steps))
        if as_json:
            emit_json(report.to_dict())
            return int(ExitCode.OK)
        patch_views.show_status(report)
        return int(ExitCode.OK)

    run(as_json, body, site_packages, python, arch=arch, model=model)
