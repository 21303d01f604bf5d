"""Per-platform dispatch of a registry entry: every class a registry name can bind to.

Fact (vLLM 0.22.0 - 0.33.0 ``vllm/models/<name>/__init__.py``, e.g. ``deepseek_v4``, ``deepseek_v32``):
a registry row naming an absolute ``vllm.models.*`` package gets the class its ``__init__`` imports
under ``if current_platform.is_cuda(): ... elif current_platform.is_rocm(): ... else: ...``.
:meth:`patchkit.vllm.source.SourceTree.resolve_name` follows the first arm and
:meth:`patchkit.vllm.source.SourceTree.alternatives` lists the others. ``resolve`` lists every branch,
``verify`` and ``doctor`` check every branch (:func:`branch_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.vllm.contract import Contract
from patchkit.vllm.registry import Registry, Resolution
from patchkit.results import Check
from patchkit.vllm.source import ClassRef, SourceTree

BRANCH_LABEL = "platform branch "
"""Prefix of a branch node's label; the rest is the branch's ``module.Class``."""


@dataclass(frozen=True)
class Branch:
    """One class a registry name binds to on some platform.

    Attributes:
        dotted: ``module.Class`` as imported in that arm of the ``if``.
        cls: the class definition, or None when patchkit cannot find it.
        first: True for the arm :meth:`SourceTree.resolve_name` follows (what ``resolve`` shows first).
    """

    dotted: str
    cls: ClassRef | None
    first: bool


def branches(tree: SourceTree, resolution: Resolution | None) -> list[Branch]:
    """Every branch of ``resolution``'s registry name, the first arm first; ``[]`` when it has only one.

    Raises:
        SourceError: a module on the way does not parse.
    """
    if resolution is None or resolution.cls is None:
        return []
    others = tree.alternatives(resolution.entry.module, resolution.entry.class_name)
    if not others:
        return []
    out = [Branch(f"{resolution.cls.module}.{resolution.cls.name}", resolution.cls, True)]
    for dotted in others:
        module, _, name = dotted.rpartition(".")
        alt = tree.resolve_name(module, name)
        out.append(Branch(dotted, alt if isinstance(alt, ClassRef) else None, False))
    return out


def branch_checks(tree: SourceTree, registry: Registry, contract: Contract, resolution: Resolution | None,
                  follow_setter: bool = True) -> list[Check]:
    """The chain check (:func:`patchkit.checks.verify.model_check`) of every branch but the first.

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        resolution: the registry name's resolution (its class is the first branch, checked by the caller).
        follow_setter: as :func:`patchkit.checks.verify.model_check`.
    Returns:
        One :class:`Check` per other branch, labelled :data:`BRANCH_LABEL` + ``module.Class``; it
        fails when the branch lacks the interface (or its class cannot be found).
    Raises:
        SourceError: a file on a chain does not parse.
    """
    from patchkit.checks.verify import model_check

    out = []
    for branch in branches(tree, resolution)[1:]:
        if branch.cls is None:
            out.append(Check(BRANCH_LABEL + branch.dotted, False, "patchkit cannot find this class"))
            continue
        chain = model_check(tree, registry, contract, branch.cls, follow_setter=follow_setter)
        detail = "in effect" if chain.ok else "missing: " + "; ".join(c.label for c in chain.failures())
        out.append(Check(BRANCH_LABEL + branch.dotted, chain.ok, detail, branch.cls.location, children=chain.children))
    return out


def has_interface(tree: SourceTree, registry: Registry, contract: Contract, cls: ClassRef | None) -> bool | None:
    """True when ``cls`` carries the EAGLE-3 interface (bases and non-stub methods), None when unknown."""
    if cls is None or contract.protocol is None:
        return None
    from patchkit.checks.verify import model_check

    return model_check(tree, registry, contract, cls, follow_setter=False).ok
