"""Per-platform dispatch of a registry entry: every class a registry name can bind to.

Fact (vLLM 0.22.0 - 0.33.0 ``vllm/models/<name>/__init__.py``, e.g. ``deepseek_v4``, ``deepseek_v32``):
a registry row naming an absolute ``vllm.models.*`` package gets the class its ``__init__`` imports
under ``if current_platform.is_cuda(): ... elif current_platform.is_rocm(): ... else: ...``.
:meth:`patchkit.vllm.release.source.SourceTree.resolve_name` follows the first arm and
:meth:`patchkit.vllm.release.source.SourceTree.alternatives` lists the others. ``resolve`` lists every branch,
``verify`` and ``doctor`` check every branch (:func:`patchkit.vllm.chain.links.branch_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.vllm.registry.table import Resolution
from patchkit.vllm.release.source import ClassRef, SourceTree


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
