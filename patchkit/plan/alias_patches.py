"""The alias patches: a read-only property naming a target's embedding or head where vLLM's EAGLE proposer
reads it, for a class that holds it under another name.

:func:`embedding_attribute` and :func:`head_attribute` say whether a class needs one (and under which
attribute it holds the module); :func:`alias_patch` and :func:`head_alias_patch` make the patch.
:mod:`patchkit.plan.arch_patches` plans them before an architecture's interface patch.
"""

from __future__ import annotations

import ast

from patchkit.codemods import CodemodKind, CodemodRef
from patchkit.plan.patch_ids import alias_id, head_alias_id
from patchkit.plan.spec import ClassTarget, Patch
from patchkit.vllm.classes.class_attrs import assigned_at
from patchkit.vllm.classes.composition import self_assignments
from patchkit.vllm.release.contract import EAGLE3_RELEASES
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.runner.draft_reads import derive
from patchkit.vllm.shapes.classify import BACKBONE_ATTR


class NoEmbedding(Exception):
    """vLLM's EAGLE proposer finds no embedding on a backbone, and it holds none patchkit can name
    (:func:`embedding_attribute`); the message says so."""


def embedding_attribute(tree: SourceTree, backbone: ClassRef) -> tuple[ClassRef, str] | None:
    """The class defining ``backbone``'s ``__init__`` and the attribute holding its embedding, when
    vLLM's EAGLE proposer would not find it (:func:`embedding_names`); None when it would.

    The embedding is the first ``self.X = <...Embedding>(...)`` of the ``__init__`` chain (vLLM
    0.33.0 ``bailing_moe.py``: ``self.word_embeddings = VocabParallelEmbedding(...)``).

    Raises:
        NoEmbedding: the proposer finds no embedding and the backbone holds none patchkit can name.
    """
    names = embedding_names(tree)
    found = _unnamed(tree, backbone, names, "Embedding")
    if found is _NAMED:
        return None
    if found is None:
        raise NoEmbedding(
            f"{backbone.name} has no {' or '.join(names)}, and no embedding patchkit can name: "
            "vLLM's EAGLE proposer raises AttributeError when it loads a draft"
        )
    return found


def head_attribute(tree: SourceTree, cls: ClassRef) -> tuple[ClassRef, str] | None:
    """The class defining ``cls``'s ``__init__`` and the attribute holding its head (the first
    ``self.X = <...LMHead>(...)`` of the ``__init__`` chain; vLLM 0.17.1 and 0.33.0
    ``internlm2.py``: ``self.output = ParallelLMHead(...)``), when vLLM's EAGLE proposer would not
    find it under :func:`head_names`; None when it would, or when ``cls`` holds no such head."""
    found = _unnamed(tree, cls, head_names(tree), "LMHead")
    return None if found is _NAMED else found


_NAMED = (None, "")


def _unnamed(tree: SourceTree, cls: ClassRef, names: tuple[str, ...], made_by: str):
    """``_NAMED`` when ``cls`` has one of ``names`` (or none are read); else ``(class defining its
    __init__, X)`` for the first ``self.X = <...made_by>(...)`` of its ``__init__`` chain, or None."""
    if not names or any(assigned_at(tree, cls, name) is not None for name in names):
        return _NAMED
    found = tree.find_member(cls, "__init__")
    if found is None:
        return None
    # every __init__ of the MRO may assign it (an __init__ that calls super().__init__: 0.33.0 glm4.py)
    inits = [tree.method(c, "__init__") for c in tree.mro(cls)]
    for held in (self_assignments(init) for init in inits if init is not None):
        for attr, nodes in held.items():
            for node in nodes:
                func = node.value.func if isinstance(node.value, ast.Call) else None
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name.endswith(made_by):
                    return found[0], attr
    return None


def embedding_names(tree: SourceTree) -> tuple[str, ...]:
    """The names vLLM's EAGLE proposer requires the target backbone's embedding under, in order
    (``("embed_tokens", "embedding")``; 0.10.2: ``("embed_tokens",)``), derived from the release's
    ``load_model`` (:func:`patchkit.vllm.runner.draft_reads.derive`: a required read ``model.<name>``, with
    its ``hasattr`` alternatives); empty when the proposer requires none."""
    for read in derive(tree, with_aux=False).reads:
        if read.required and len(read.path) == 2 and read.path[0] == BACKBONE_ATTR:
            alternatives = [p[1] for p in read.alternatives if len(p) == 2 and p[0] == BACKBONE_ATTR]
            return tuple(dict.fromkeys([read.path[1], *alternatives]))
    return ()


def head_names(tree: SourceTree) -> tuple[str, ...]:
    """The names vLLM's EAGLE proposer reads the target's head under (``("lm_head",)``), derived
    from the release's ``load_model`` (:func:`patchkit.vllm.runner.draft_reads.derive`: the reads of
    ``target_language_model.<name>`` other than its backbone)."""
    return tuple(
        dict.fromkeys(
            r.path[0] for r in derive(tree, with_aux=False).reads if len(r.path) == 1 and r.path[0] != BACKBONE_ATTR
        )
    )


def head_alias_patch(arch: str, cls: ClassRef, attribute: str, names: tuple[str, ...]) -> Patch:
    """The patch that gives ``cls`` (which calls its head ``attribute``) the head names the proposer reads
    (``names``, from :func:`head_attribute`). Out: a :class:`Patch` of kind ``HEAD_ALIAS``; raises nothing."""
    return _alias_patch(
        head_alias_id(cls.name),
        CodemodKind.HEAD_ALIAS,
        arch,
        (),
        cls,
        attribute,
        names,
        f"vLLM's EAGLE proposer shares the target's {names[0]} with a draft that ships no head of its own, "
        f"but only if the target has one; {cls.name} calls its head {attribute}, so such a draft would "
        "keep a head that was never loaded, without an error.",
    )


def alias_patch(arch: str, backbone: ClassRef, attribute: str, names: tuple[str, ...]) -> Patch:
    """The patch that gives ``backbone`` (which calls its embedding ``attribute``) the embedding names the
    proposer reads (``names``, from :func:`embedding_attribute`). Out: a :class:`Patch` of kind
    ``EMBEDDING_ALIAS``; raises nothing."""
    return _alias_patch(
        alias_id(backbone.name),
        CodemodKind.EMBEDDING_ALIAS,
        arch,
        (BACKBONE_ATTR,),
        backbone,
        attribute,
        names,
        f"vLLM's EAGLE proposer reads the target backbone's {' or '.join(names)} when it loads any "
        f"draft and raises AttributeError without one; {backbone.name} calls its embedding {attribute}.",
    )


def _alias_patch(
    pid: str,
    kind: CodemodKind,
    arch: str,
    held: tuple[str, ...],
    cls: ClassRef,
    attribute: str,
    names: tuple[str, ...],
    why: str,
) -> Patch:
    """A read-only property ``names[0]`` returning ``self.<attribute>`` on ``cls`` (reached from
    ``arch`` through ``held``, in the class defining its ``__init__``)."""
    return Patch(
        id=pid,
        summary=f"{cls.name}.{names[0]} names its {attribute}",
        why=why,
        reference="vLLM v1/spec_decode/eagle.py EagleProposer.load_model, later v1/spec_decode/llm_base_proposer.py "
        "_maybe_share_embeddings / _maybe_share_lm_head",
        vllm=EAGLE3_RELEASES,
        target=ClassTarget(architecture=arch, held=held, defining="__init__"),
        codemod=CodemodRef.of(kind, alias=names[0], attribute=attribute, patch_id=pid),
        architectures=(arch,),
    )


__all__ = [
    "NoEmbedding",
    "alias_patch",
    "embedding_attribute",
    "embedding_names",
    "head_alias_patch",
    "head_attribute",
    "head_names",
]
