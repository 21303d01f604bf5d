"""Target files a release registers but the install lacks (a deleted ``kimi_k25.py``).

A patch whose file is missing cannot run, and neither can the patches that require it; the
other patches still can. :func:`split` tells them apart before planning, so the planner only
sees patches whose files exist, and the command names the missing files (exit 4).

A patch's range is decided before its files are looked for: a patch not for this release
(``eagle3-kimi-k25-proposer``, ``<0.18.0``, whose ``v1/spec_decode/eagle.py`` 0.34.0 deletes) is
left to the planner, which says "supported upstream" or "not applicable" without reading a file.
A missing file is told apart by the release's own ``RECORD`` (the wheel's list of the files it
installs): a file RECORD lists was deleted from this install, and reinstalling vLLM brings it
back; a file RECORD does not list is one this release does not ship, and reinstalling changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.vllm.release.install import Install, record_lists
from patchkit.vllm.registry.table import Registry
from patchkit.results import Outcome, PatchResult
from patchkit.vllm.release.source import SourceTree
from patchkit.plan.spec import ClassTarget, ModuleTarget, Patch


def _module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def missing_file(patch: Patch, tree: SourceTree, registry: Registry) -> str | None:
    """The file (relative to site-packages) ``patch`` targets that this install lacks, or None.

    A class target is missing when the release's registry names it but the module file the
    registry points at does not exist; a module target when none of its modules exists.
    """
    target = patch.target
    if isinstance(target, ClassTarget):
        resolution = registry.resolve(target.architecture)
        if resolution is None or resolution.transformers_backend:
            return None
        if tree.relpath_of_module(resolution.entry.module) is None:
            return _module_file(resolution.entry.module)
        return None
    if isinstance(target, ModuleTarget):
        if all(tree.relpath_of_module(m) is None for m in target.modules):
            return _module_file(target.modules[0])
    return None


@dataclass(frozen=True)
class Missing:
    """What :func:`split` found missing.

    Attributes:
        deleted: missing files the release's RECORD lists (deleted from this install: a reinstall restores them).
        not_shipped: missing files the release does not ship (RECORD does not list them, or there is no
            RECORD to tell: no reinstall can bring them).
    """

    deleted: tuple[str, ...] = ()
    not_shipped: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """Every missing file, sorted."""
        return tuple(sorted({*self.deleted, *self.not_shipped}))


def _why_missing(relpath: str, install: Install) -> tuple[str, bool]:
    """``(reason, deleted)`` for a target file ``relpath`` the install lacks; ``deleted`` when RECORD lists it."""
    listed = record_lists(install, relpath)
    if listed:
        return (
            f"{relpath} is missing from this install, though vLLM {install.version}'s RECORD lists it (deleted?); "
            f"reinstall vLLM to patch it"
        ), True
    if listed is None:
        return (
            f"{relpath} is not in this install, and it has no RECORD to tell whether vLLM {install.version} "
            f"ships it; this patch cannot run here"
        ), False
    return (
        f"vLLM {install.version} does not ship {relpath} (its RECORD does not list it): this release has no "
        f"such file, so this patch cannot run on it, and reinstalling would not change that"
    ), False


def split(
    patches: list[Patch], tree: SourceTree, registry: Registry, install: Install
) -> tuple[list[Patch], list[PatchResult], Missing]:
    """Separate the patches that can run from those whose file (or a required patch's file) is missing.

    A patch whose range (``Patch.vllm``) does not hold ``install.version`` is runnable here: its
    files are not looked for, and the planner decides it by its range.

    Returns:
        ``(runnable, results, missing)``: the runnable patches in their order; a ``not applicable``
        :class:`PatchResult` for each other patch, saying which file is missing and whether the
        release ships it; the missing files (:class:`Missing`).
    Raises:
        InstallNotFound: the install's RECORD cannot be decoded.
    """
    runnable: list[Patch] = []
    results: list[PatchResult] = []
    deleted: list[str] = []
    not_shipped: list[str] = []
    dropped: dict[str, str] = {}  # patch id -> missing file
    for patch in patches:
        missing = missing_file(patch, tree, registry) if install.version in patch.vllm else None
        if missing is not None:
            dropped[patch.id] = missing
            reason, was_deleted = _why_missing(missing, install)
            (deleted if was_deleted else not_shipped).append(missing)
            results.append(PatchResult(patch.id, Outcome.NOT_APPLICABLE, reason, [missing]))
            continue
        dep = next((d for d in patch.requires if d in dropped), None)
        if dep is not None:
            dropped[patch.id] = dropped[dep]
            results.append(
                PatchResult(
                    patch.id,
                    Outcome.NOT_APPLICABLE,
                    f"needs {dep}, whose file {dropped[dep]} is missing from this install",
                )
            )
            continue
        runnable.append(patch)
    return runnable, results, Missing(tuple(sorted(set(deleted))), tuple(sorted(set(not_shipped))))
