"""The steps that repeat or finish a run: the same ``apply``/``revert`` again, a refused revert's way
on, the guard's and the watch's install/remove (values made where the API decides; ``ui/`` renders them)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from patchkit.advice import Effect, NextStep, patchkit_argv, reinstall
from patchkit.plan.request import Request
from patchkit.results import InstallInfo, RevertedFile

if TYPE_CHECKING:
    from patchkit.store.plugin_dist import Plugin


def again(
    command: str,
    target: str,
    request: Request,
    force: bool,
    *,
    command_options: Sequence[str] | None = None,
    patch_ids: list[str] | None = None,
    guard: bool = False,
    watch: Sequence[str] = (),
) -> NextStep:
    """The ``patchkit apply`` or ``patchkit revert`` step that repeats a run: its environment,
    ``--patch``, ``--arch``, ``--model`` (absolute), ``--force``, ``--guard`` and ``--watch`` options."""
    argv = patchkit_argv(
        command,
        target=target if target != "vllm" else None,
        environment=command_options or (),
        patch_ids=patch_ids or (),
        architectures=request.architectures,
        model=os.path.abspath(request.model) if request.model is not None else None,
        force=force,
        guard=guard,
        extra=watch,
    )
    return NextStep(
        argv, f"again, to {command} the patches", effect=Effect.PATCHES if command == "apply" else Effect.RESTORES
    )


def revert_refused(
    info: InstallInfo,
    target: str,
    request: Request,
    files: Sequence[RevertedFile],
    guard_edits: dict[str, tuple[str, ...]],
) -> tuple[NextStep, ...]:
    """The next steps of a refused revert: the same revert with ``--force``, and, when a vLLM file
    blocked it, the reinstall that gives the release's own bytes back (an edited guard file is
    patchkit's, which no reinstall of vLLM touches)."""
    vllm_edits = [f for f in files if f.blocking and f.path not in guard_edits]
    why = (
        "writes the originals over the edits (the edits are lost)"
        if not guard_edits
        else "deletes patchkit's guard, its edited file(s) included"
        if not vllm_edits
        else "writes the originals over the edits and deletes patchkit's guard (the edits are lost)"
    )
    steps = [replace(again("revert", target, request, True), why=why)]
    if vllm_edits:
        steps.append(
            reinstall(
                info.distribution,
                info.version,
                "the release's own files back, then 'patchkit status' shows the journal settled",
            )
        )
    return tuple(steps)


def plugin_step(command_options: Sequence[str] | None, why: str, plugin: Plugin, remove: bool = False) -> NextStep:
    """``patchkit <plugin> install`` (or ``remove``) with the environment options given; its effect is the plugin's."""
    verb = "remove" if remove else "install"
    return NextStep(
        patchkit_argv(f"{plugin.NAME} {verb}", environment=command_options or ()), why, effect=plugin.EFFECT
    )
