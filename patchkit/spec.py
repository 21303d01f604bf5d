"""The declarative form of a patch, and loading the patch set shipped in ``patches/``.

A patch is a value: an id, the vLLM releases it is for (a PEP 440 specifier), what it targets
(a registry architecture and class, or a module), the codemod that makes the change, the patches
it needs, a summary, why, and the upstream reference. Versions and targets are checked centrally
by :mod:`patchkit.engine`, never inside a codemod.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from typing import TYPE_CHECKING

from patchkit.errors import UsageError

if TYPE_CHECKING:
    from patchkit.codemods.base import Codemod

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
    """

    architecture: str
    held: tuple[str, ...] = ()
    forwards_to: str | None = None

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
        codemod: the transform.
        requires: ids of patches that must be in effect for this one to make sense.
        distribution: the ``--target`` this patch belongs to.
    """

    id: str
    summary: str
    why: str
    reference: str
    vllm: SpecifierSet
    target: ClassTarget | ModuleTarget
    codemod: Codemod
    requires: tuple[str, ...] = ()
    distribution: str = "vllm"


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
    package = importlib.import_module("patchkit.patches")
    found: dict[str, Patch] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"patchkit.patches.{info.name}")
        patch = getattr(module, "PATCH", None)
        if isinstance(patch, Patch) and patch.distribution == distribution:
            found[patch.id] = patch
    return _order(found)


def _order(patches: dict[str, Patch]) -> list[Patch]:
    ordered: list[Patch] = []
    seen: set[str] = set()

    def visit(p: Patch) -> None:
        if p.id in seen:
            return
        seen.add(p.id)
        for dep in p.requires:
            if dep in patches:
                visit(patches[dep])
        ordered.append(p)

    for p in patches.values():
        visit(p)
    return ordered


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
