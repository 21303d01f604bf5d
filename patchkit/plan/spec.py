"""The declarative form of a patch, and loading the patch set shipped in ``patches/``.

A patch is a value: an id, the vLLM releases it is for (a PEP 440 specifier), what it targets
(a registry architecture and class, or a module), the codemod that makes the change, the patches
it needs, a summary, why, and the upstream reference. Versions and targets are checked centrally
by :mod:`patchkit.plan.engine`, never inside a codemod.
"""

from __future__ import annotations

import difflib
import graphlib
import importlib
import importlib.util
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet

import patchkit
from patchkit.codemods import CodemodRef
from patchkit.errors import PatchkitError, UsageError

TARGETS = ("vllm",)
"""Distributions patchkit knows how to patch (``--target``)."""


@dataclass(frozen=True)
class ClassTarget:
    """A class reached through vLLM's model registry.

    Attributes:
        architecture: the registry key to start from, e.g. ``"DeepseekV2ForCausalLM"``.
        held: attribute hops from that class to the class to edit, e.g. ``("model",)`` for the
            backbone a causal LM holds in ``self.model``; empty to edit the registered class.
        forwards_to: for interface patches, the attribute whose held object the new methods
            forward to (``"model"``, ``"language_model"``); None otherwise.
        defining: edit the class of the reached class's MRO that defines this member (a
            capture goes where ``forward`` is defined, which may be a base class); None: the
            reached class itself.
    """

    architecture: str
    held: tuple[str, ...] = ()
    forwards_to: str | None = None
    defining: str | None = None

    def describe(self) -> str:
        """``Arch`` or ``Arch.attr``, for listings."""
        return ".".join((self.architecture, *self.held))


@dataclass(frozen=True)
class ModuleTarget:
    """A module of the vLLM package; the first of ``modules`` present in the install holds the anchor.

    Attributes:
        modules: dotted module names, newest layout first.
    """

    modules: tuple[str, ...]

    def describe(self) -> str:
        """The module names joined by ``|``."""
        return " | ".join(self.modules)


@dataclass(frozen=True)
class Patch:
    """One patch definition (see ``patches/``).

    Attributes:
        id: stable identifier, used in the journal and on the command line.
        summary: one line on what the patch changes.
        why: what fails without it (shown by ``explain``).
        reference: upstream reference (pull request or release that has the change natively).
        vllm: the releases this patch is written for.
        target: where the change lands.
        codemod: the transform, by reference (imported only when a run plans the patch).
        requires: ids of patches that must be in effect for this one to make sense.
        distribution: the ``--target`` this patch belongs to.
        upstream_from: the first release that has the change natively; on it and later ones the
            patch's outcome is "supported upstream" (None: no such release).
        architectures: the registry architectures this patch serves (for ``--arch`` and verify).
    """

    id: str
    summary: str
    why: str
    reference: str
    vllm: SpecifierSet
    target: ClassTarget | ModuleTarget
    codemod: CodemodRef
    requires: tuple[str, ...] = ()
    distribution: str = "vllm"
    upstream_from: str | None = None
    architectures: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """A declarative entry for a model family with public EAGLE-3 drafts (``patches/eagle3_families.py``).

    patchkit derives how to patch any registry architecture from the release's own files
    (:mod:`patchkit.vllm.shapes.classify`); a family entry adds what those files cannot tell.

    Attributes:
        name: a short name, e.g. ``"glm4-moe"``.
        architectures: registry names of the family (checkpoint ``architectures`` entries).
        model_types: the ``hf_text_config.model_type`` values of its checkpoints, which vLLM's
            start-up allow-list (0.10.2 - 0.20.x) must admit.
    """

    name: str
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]


def patches_package():
    """The package ``patchkit.patches``: the patch definitions (``pyproject.toml`` installs the
    repository's top-level ``patches/`` under that name).

    Run from a checkout's root (``python -m patchkit``, which puts the current folder first on
    ``sys.path``), the checkout's ``patchkit/`` is imported and has no ``patches`` subpackage; the
    checkout's own ``patches/`` beside it is then loaded as ``patchkit.patches``, the mapping
    ``pyproject.toml`` makes (issue 25: this crashed with a traceback and exit 1).

    Raises:
        PatchkitError: neither exists (a damaged install): exit 4, one line.
    """
    try:
        return importlib.import_module("patchkit.patches")
    except ModuleNotFoundError as exc:
        if exc.name != "patchkit.patches":
            raise
    folder = Path(patchkit.__file__).resolve().parent.parent / "patches"
    init = folder / "__init__.py"
    if not init.is_file():
        raise PatchkitError(
            f"patchkit's patch definitions (patchkit.patches) are missing from "
            f"{Path(patchkit.__file__).resolve().parent}",
            "reinstall patchkit (pip install --force-reinstall /path/to/patchkit), or run "
            "the installed 'patchkit' script instead of 'python -m patchkit' in a checkout",
        )
    spec = importlib.util.spec_from_file_location("patchkit.patches", init, submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["patchkit.patches"] = module
    spec.loader.exec_module(module)
    patchkit.patches = module
    return module


def load_families() -> tuple[Family, ...]:
    """Every :class:`Family` shipped in ``patches/`` (modules defining ``FAMILIES``)."""
    package = patches_package()
    found: list[Family] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"patchkit.patches.{info.name}")
        found.extend(f for f in getattr(module, "FAMILIES", ()) if isinstance(f, Family))
    return tuple(found)


def check_target(distribution: str) -> None:
    """Raise :class:`UsageError` unless ``distribution`` is a ``--target`` patchkit knows."""
    if distribution not in TARGETS:
        raise UsageError(f"unknown --target {distribution!r}", f"known targets: {', '.join(TARGETS)}")


def load_patches(distribution: str = "vllm") -> list[Patch]:
    """Every patch shipped with patchkit for ``distribution``, dependencies before dependents.

    The definitions live in the repository's ``patches/`` folder, installed as the
    ``patchkit.patches`` package (editable and wheel installs alike). Each module there defines
    ``PATCH``.

    Raises:
        UsageError: ``distribution`` is not one patchkit knows.
    """
    check_target(distribution)
    package = patches_package()
    found: dict[str, Patch] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"patchkit.patches.{info.name}")
        patch = getattr(module, "PATCH", None)
        if isinstance(patch, Patch) and patch.distribution == distribution:
            found[patch.id] = patch
    return _order(found)


def default_architectures() -> tuple[str, ...]:
    """The architectures the shipped default patch set serves (derived from ``patches/``), in order."""
    out: list[str] = []
    for patch in load_patches():
        out.extend(a for a in patch.architectures if a not in out)
    return tuple(out)


TEXT_MODEL_TYPES = ("deepseek_v3", "kimi_k2")
"""``hf_text_config.model_type`` of DeepSeek-V3 and Kimi-K2 / K2.5 checkpoints (the default set)."""


def order(patches: dict[str, Patch]) -> list[Patch]:
    """Patches with every requirement before what requires it (``graphlib``; stable otherwise).

    Raises:
        UsageError: the requirements form a cycle.
    """
    sorter = graphlib.TopologicalSorter({pid: [d for d in p.requires if d in patches] for pid, p in patches.items()})
    try:
        ids = list(sorter.static_order())
    except graphlib.CycleError as exc:
        raise UsageError(
            f"patch requirements form a cycle: {' -> '.join(exc.args[1])}", "fix the patch definitions"
        ) from exc
    rank = {pid: i for i, pid in enumerate(patches)}
    # static_order is a valid order; re-sort stably by (depth, definition order) for a readable run order
    depth: dict[str, int] = {}
    for pid in ids:
        depth[pid] = 1 + max((depth[d] for d in patches[pid].requires if d in patches), default=-1)
    return [patches[pid] for pid in sorted(ids, key=lambda i: (depth[i], rank[i]))]


_order = order


def select(patches: list[Patch], ids: list[str] | None) -> list[Patch]:
    """The patches named in ``ids`` plus what they require (all patches when ``ids`` is empty).

    Raises:
        UsageError: an id is unknown.
    """
    if not ids:
        return patches
    by_id = {p.id: p for p in patches}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise UsageError(f"unknown --patch {', '.join(unknown)}", f"known patches: {', '.join(by_id)}")
    wanted: set[str] = set()

    def add(pid: str) -> None:
        if pid in wanted or pid not in by_id:
            return
        wanted.add(pid)
        for dep in by_id[pid].requires:
            add(dep)

    for pid in ids:
        add(pid)
    return [p for p in patches if p.id in wanted]


def check_patch_ids(ids: list[str] | None, target: str = "vllm") -> None:
    """Raise :class:`UsageError` for an unknown ``--patch`` id (the hint suggests the closest ids).

    The CLI calls this before it looks for the install, so a typo is reported as one.
    """
    if ids:
        unknown_patch_ids(ids, [p.id for p in load_patches(target)])


def unknown_patch_ids(ids: list[str] | None, known: list[str]) -> None:
    """Raise :class:`UsageError` for an id of ``ids`` not in ``known``, suggesting the closest known ids (exit 2)."""
    unknown = [i for i in ids or () if i not in known]
    if not unknown:
        return
    close = list(dict.fromkeys(c for i in unknown for c in difflib.get_close_matches(i, known, n=2, cutoff=0.6)))
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise UsageError(
        f"unknown --patch {', '.join(unknown)}", hint + f"known patches: {', '.join(known)} ('patchkit list')"
    )
