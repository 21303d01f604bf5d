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

Those reads are not listed here: :func:`patchkit.vllm.runner.draft_reads.derive` reads them from the release.
:func:`bare_language_model` is the refusal that derivation implies for one class: a *required* read
(one that raises when the attribute is missing) that the class ``get_language_model()`` returns
cannot satisfy. ``apply`` (not applicable), ``verify`` and ``doctor`` all report the same
:class:`LoadPathFault`; ``verify`` shows the broken link itself (:func:`patchkit.vllm.chain.load_path.link_check`).
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.vllm.classes import class_attrs, composition
from patchkit.vllm.runner import draft_reads
from patchkit.vllm.release.contract import KIMI_K25_LOADABLE_FROM, is_multimodal
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree

LANGUAGE_MODEL_VAR = "target_language_model"
"""Name the proposer gives ``target_model.get_language_model()`` (vLLM 0.15.1 - 0.18.0), used in the reason."""
GETTER = draft_reads.GETTER
FIXED_IN = {"KimiK25ForConditionalGeneration": KIMI_K25_LOADABLE_FROM}
"""Wrappers whose later release holds a causal LM (vLLM 0.16.0 ``kimi_k25.py``: ``init_vllm_registered_model(...,
architectures=["DeepseekV2ForCausalLM"])``); a fact across releases, so it cannot be derived from one tree."""


@dataclass(frozen=True)
class LoadPathFault:
    """The proposer's draft loading breaks on what ``get_language_model()`` returns.

    Attributes:
        cls: the wrapper class name.
        attr: the attribute ``get_language_model()`` returns (``"language_model"``).
        held: the bare backbone class it holds.
        held_at: ``file:line`` of the assignment in the wrapper's ``__init__``.
        proposer_at: ``file:line`` where the proposer reads it (derived from the release).
        missing: the attribute the proposer requires and the held class lacks (``"model"``).
        loader: who reads it, in words (V1: ``"EAGLE proposer"``; V2: ``"V2 runner's load_eagle_model"``).
    """

    cls: str
    attr: str
    held: ClassRef
    held_at: str
    proposer_at: str
    missing: str = "model"
    loader: str = "EAGLE proposer"

    def reason(self) -> str:
        """One line: what breaks, where, and (for a class in :data:`FIXED_IN`) the release that fixes it."""
        text = (
            f"{self.cls}.{GETTER}() returns self.{self.attr}, a bare {self.held.name} ({self.held_at}) with no "
            f".{self.missing}; vLLM's {self.loader} reads {LANGUAGE_MODEL_VAR}.{self.missing} when it loads any "
            f"draft ({self.proposer_at}: AttributeError)"
        )
        fixed = FIXED_IN.get(self.cls)
        return text + (
            f"; vLLM {fixed} and later hold a causal LM there: use vLLM >= {fixed}"
            if fixed
            else "; EAGLE-3 cannot load a draft for it on this release"
        )


def proposer_reads_inner_model(tree: SourceTree) -> str | None:
    """``file:line`` of the proposer's first required read of ``target_language_model.model`` (None: it has none).

    Derived by :func:`patchkit.vllm.runner.draft_reads.derive`.

    Raises:
        SourceError: the proposer module does not parse.
    """
    derivation = draft_reads.derive(tree, with_aux=False)
    if derivation.language_model is None:
        return None
    return next((r.location for r in derivation.reads if r.path == ("model",) and r.required), None)


def bare_language_model(tree: SourceTree, registry: Registry, cls: ClassRef) -> LoadPathFault | None:
    """The :class:`LoadPathFault` of ``cls``, or None when the proposer can load a draft for it.

    A fault needs all of: ``cls`` is multimodal (the proposer calls ``get_language_model()``), that
    call returns ``self.X`` (:func:`patchkit.vllm.classes.class_attrs.language_model_attr`) that ``__init__``
    builds as one vLLM class, and a required read the proposer makes off it (derived from the
    release, :func:`patchkit.vllm.runner.draft_reads.derive`) names an attribute that class lacks.

    Raises:
        SourceError: a file on the way does not parse.
    """
    if not is_multimodal(tree, cls):
        return None
    found = class_attrs.language_model_attr(tree, cls)
    if found is None:
        return None
    attr = found[0]
    try:
        held = composition.held_class(tree, registry, cls, attr)
    except composition.CompositionError:
        return None
    derivation = draft_reads.derive(tree, with_aux=False)
    if derivation.language_model is None:
        return None
    broken = [
        r
        for r in derivation.reads
        if r.required and len(r.path) == 1 and class_attrs.assigned_at(tree, held.cls, r.path[0]) is None
    ]
    if not broken:
        return None
    loader = "EAGLE proposer" if derivation.reader == "proposer" else f"{derivation.runner} runner's load_eagle_model"
    return LoadPathFault(
        cls.name, attr, held.cls, f"{cls.relpath}:{held.lineno}", broken[0].location, broken[0].path[0], loader
    )


__all__ = ["LoadPathFault", "bare_language_model", "proposer_reads_inner_model"]
