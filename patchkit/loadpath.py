"""Can vLLM's EAGLE proposer load a draft for this target? The path ``load_model`` takes through a wrapper.

Fact (``v1/spec_decode/eagle.py`` ``EagleProposer.load_model``, vLLM 0.15.1 - 0.18.0): for a
multimodal target the proposer takes ``target_language_model = target_model.get_language_model()``
and, with pipeline size 1, reads ``target_language_model.model`` (0.15.1 inline; 0.16.0 on through
``getattr(target_language_model, "model", None)`` in ``_maybe_share_embeddings``, raising
``AttributeError`` when it is missing) to share ``embed_tokens``, and ``target_language_model.lm_head``
to share the head. A wrapper whose ``get_language_model()`` returns a bare decoder backbone (no
``.model``, no ``lm_head``: ``KimiK25ForConditionalGeneration`` on 0.15.1, which holds a
``DeepseekV2Model``) crashes there as soon as any draft loads, after ``supports_eagle3`` passed; and
the head is never shared. From 0.16.0 that wrapper holds a registry-built ``DeepseekV2ForCausalLM``.

:func:`bare_language_model` detects that shape (never the version); ``apply`` (not applicable),
``verify`` and ``doctor`` all report the same :class:`LoadPathFault`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit import composition
from patchkit.registry import Registry
from patchkit.source import ClassRef, SourceTree

PROPOSER_MODULE = "vllm.v1.spec_decode.eagle"
"""Module of vLLM's EAGLE proposer (``EagleProposer.load_model``)."""
LANGUAGE_MODEL_VAR = "target_language_model"
"""Name the proposer gives ``target_model.get_language_model()`` (vLLM 0.15.1 - 0.18.0)."""
GETTER = "get_language_model"
"""``SupportsMultiModal`` method the proposer calls on a multimodal target."""
FIRST_FIXED = "0.16.0"
"""First release whose Kimi-K2.5 wrapper holds a causal LM (``DeepseekV2ForCausalLM``) the proposer can load from."""


@dataclass(frozen=True)
class LoadPathFault:
    """The proposer's draft loading breaks on what ``get_language_model()`` returns.

    Attributes:
        cls: the wrapper class name.
        attr: the attribute ``get_language_model()`` returns (``"language_model"``).
        held: the bare backbone class it holds.
        held_at: ``file:line`` of the assignment in the wrapper's ``__init__``.
        proposer_at: ``file:line`` where the proposer reads ``.model`` of the language model.
    """

    cls: str
    attr: str
    held: ClassRef
    held_at: str
    proposer_at: str

    def reason(self) -> str:
        """One line: what breaks, where, and the release that fixes it."""
        return (f"{self.cls}.{GETTER}() returns self.{self.attr}, a bare {self.held.name} ({self.held_at}) with no "
                f".model and no lm_head; vLLM's EAGLE proposer reads {LANGUAGE_MODEL_VAR}.model when it loads any "
                f"draft ({self.proposer_at}: AttributeError) and shares the head from it; vLLM {FIRST_FIXED} and later "
                f"hold a causal LM there: use vLLM >= {FIRST_FIXED}")


def proposer_reads_inner_model(tree: SourceTree) -> str | None:
    """``file:line`` of the proposer's first read of ``target_language_model.model`` (None: it has none).

    Counts ``target_language_model.model`` and ``getattr(target_language_model, "model", ...)``, in a
    module that assigns ``target_language_model`` from a ``.get_language_model()`` call.

    Raises:
        SourceError: the proposer module does not parse.
    """
    relpath = tree.relpath_of_module(PROPOSER_MODULE)
    if relpath is None:
        return None
    module = tree.module_tree(PROPOSER_MODULE)
    assigned = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == LANGUAGE_MODEL_VAR for t in node.targets)
        and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == GETTER
        for node in ast.walk(module))
    if not assigned:
        return None
    lines = []
    for node in ast.walk(module):
        if (isinstance(node, ast.Attribute) and node.attr == "model" and isinstance(node.value, ast.Name)
                and node.value.id == LANGUAGE_MODEL_VAR and isinstance(node.ctx, ast.Load)):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == LANGUAGE_MODEL_VAR
              and isinstance(node.args[1], ast.Constant) and node.args[1].value == "model"):
            lines.append(node.lineno)
    return f"{relpath}:{min(lines)}" if lines else None


def _returned_attr(tree: SourceTree, cls: ClassRef) -> str | None:
    """The ``self.X`` that ``cls.get_language_model()`` returns, when it is exactly that."""
    found = tree.find_member(cls, GETTER)
    if found is None:
        return None
    fn = found[1]
    body = [s for s in getattr(fn, "body", []) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return composition.self_attr(body[0].value)
    return None


def bare_language_model(tree: SourceTree, registry: Registry, cls: ClassRef) -> LoadPathFault | None:
    """The :class:`LoadPathFault` of ``cls``, or None when the proposer can load a draft for it.

    A fault needs both: ``cls.get_language_model()`` returns ``self.X`` that ``__init__`` builds as
    a decoder backbone (:func:`patchkit.composition.kind_of`), and the proposer reads
    ``target_language_model.model`` (:func:`proposer_reads_inner_model`).

    Raises:
        SourceError: a file on the way does not parse.
    """
    attr = _returned_attr(tree, cls)
    if attr is None:
        return None
    try:
        held = composition.held_class(tree, registry, cls, attr)
    except composition.CompositionError:
        return None
    if composition.kind_of(tree, held.cls) != "backbone":
        return None
    proposer_at = proposer_reads_inner_model(tree)
    if proposer_at is None:
        return None
    return LoadPathFault(cls.name, attr, held.cls, f"{cls.relpath}:{held.lineno}", proposer_at)


__all__ = ["LoadPathFault", "bare_language_model", "proposer_reads_inner_model"]
