"""Target files a release registers but the install lacks (a deleted ``kimi_k25.py``).

A patch whose file is missing cannot run, and neither can the patches that require it; the
other patches still can. :func:`split` tells them apart before planning, so the planner only
sees patches whose files exist, and the command names the missing files (exit 4).
"""

from __future__ import annotations

from patchkit.vllm.registry import Registry
from patchkit.results import Outcome, PatchResult
from patchkit.vllm.source import SourceTree
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


def split(patches: list[Patch], tree: SourceTree, registry: Registry) -> tuple[list[Patch], list[PatchResult], list[str]]:
    """Separate the patches that can run from those whose file (or a required patch's file) is missing.

    Returns:
        ``(runnable, results, files)``: the runnable patches in their order; a ``not applicable``
        :class:`PatchResult` for each other patch, saying which file is missing; the missing files.
    """
    runnable: list[Patch] = []
    results: list[PatchResult] = []
    files: list[str] = []
    dropped: dict[str, str] = {}  # patch id -> missing file
    for patch in patches:
        missing = missing_file(patch, tree, registry)
        if missing is not None:
            dropped[patch.id] = missing
            files.append(missing)
            results.append(PatchResult(patch.id, Outcome.NOT_APPLICABLE,
                                       f"{missing} is missing from this install (deleted?); reinstall vLLM to patch it",
                                       [missing]))
            continue
        dep = next((d for d in patch.requires if d in dropped), None)
        if dep is not None:
            dropped[patch.id] = dropped[dep]
            results.append(PatchResult(patch.id, Outcome.NOT_APPLICABLE,
                                       f"needs {dep}, whose file {dropped[dep]} is missing from this install"))
            continue
        runnable.append(patch)
    return runnable, results, sorted(set(files))
