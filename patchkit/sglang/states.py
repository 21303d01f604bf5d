"""Each registered SGLang architecture's EAGLE-3 state, and the capture idiom its release uses, read statically.

The decision order, first match wins (:func:`classify`):

1. **unread**: the ``EntryClass`` element does not resolve to a class statement of the package.
2. **not generative**: SGLang serves it as an embedding, reward or classification model: its name is one
   ``is_generation_model`` tests (``sglang/srt/configs/model_config.py``), or its lineage sets ``self.pooler`` and
   never ``self.logits_processor`` (``TransformersEmbeddingModel``), or its ``forward`` calls ``self.pooler`` and
   never ``self.logits_processor`` (``EmbeddingGemmaModel``, whose base ``Gemma3ForCausalLM`` has both).
3. **draft**: a draft model, not a target: its lineage defines ``project_target_hidden`` (DFlash, DSpark), or it
   or a class it builds reads the target's hidden states (``forward_batch.spec_info.hidden_states``: EAGLE, NextN,
   MTP).
4. **native**: its lineage defines ``set_eagle3_layers_to_capture``, what SGLang's model runner requires of an
   EAGLE-3 target (:data:`patchkit.sglang.contract.CAPTURE_SETTER`).
5. **missing**: a generative target without it.

The capture idioms (:class:`Idiom`) are read from the module that defines ``set_eagle3_layers_to_capture``, else
from the modules of the classes it inherits or builds (a multimodal class that hands the call to its language
model). A missing class is shown with the idioms of its native siblings, the native classes that share a model
module with it (:func:`with_sibling_idioms`): the shape a patch for it would follow.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass

from patchkit.sglang import contract as c
from patchkit.sglang.classes import ClassRef, Package
from patchkit.sglang.registry import Entry


class State(enum.Enum):
    """An architecture's EAGLE-3 state on SGLang (the decision order: the module docstring)."""

    NATIVE = "native"
    PATCHED = "patched"
    """Native because patchkit's journal records writing its setter (``apply --target sglang``); decided above this
    wing, where the journal is read (:func:`patchkit.checks.sglang_verify.journaled`), never by :func:`classify`."""
    MISSING = "missing"
    DRAFT = "draft"
    NOT_GENERATIVE = "not generative"
    UNREAD = "unread"


class Idiom(enum.Enum):
    """How a native SGLang class collects the hidden states of the layers it captures."""

    APPEND = "list append"
    """``aux_hidden_states.append(...)`` in the decoder loop (``contract.APPEND_LIST``)."""
    BOUNDARY = "capture boundary"
    """``capture_output=aux_hidden_states.capture`` into the layer (``contract.CAPTURE_KEYWORDS``)."""
    LAYER_FLAG = "per-layer flag"
    """``layer._is_layer_to_capture`` set by the setter, read by the loop (``contract.LAYER_FLAG``)."""


@dataclass(frozen=True)
class Classified:
    """One architecture's state.

    Attributes:
        entry: the registry entry.
        state: its state.
        setter: the class that defines ``set_eagle3_layers_to_capture`` (native only), or None.
        embed_and_head: its lineage defines ``get_embed_and_head`` (what the draft shares).
        idioms: native: the idioms its capture uses; missing: those of its native siblings; else empty.
    """

    entry: Entry
    state: State
    setter: ClassRef | None = None
    embed_and_head: bool = False
    idioms: tuple[Idiom, ...] = ()


def module_idioms(package: Package, module: str) -> tuple[Idiom, ...]:
    """The capture idioms written in ``module``'s file, in :class:`Idiom` order."""
    tree = package.tree(module)
    found: set[Idiom] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == c.APPEND_LIST
        ):
            found.add(Idiom.APPEND)
        elif (isinstance(node, ast.keyword) and node.arg in c.CAPTURE_KEYWORDS) or (
            isinstance(node, ast.Name) and node.id in c.ACCUMULATORS
        ):
            found.add(Idiom.BOUNDARY)
        elif (isinstance(node, ast.Attribute) and node.attr == c.LAYER_FLAG) or (
            isinstance(node, ast.Constant) and node.value == c.LAYER_FLAG
        ):
            found.add(Idiom.LAYER_FLAG)
    return tuple(i for i in Idiom if i in found)


def is_pooling(package: Package, cls: ClassRef) -> bool:
    """A pooling model: its lineage gives it a pooler and no logits processor, or its ``forward`` calls
    ``self.pooler`` and never ``self.logits_processor``."""
    if package.sets(cls, c.POOLER) and not package.sets(cls, c.LOGITS):
        return True
    called = package.calls_on_self(cls, "forward")
    return c.POOLER in called and c.LOGITS not in called


def is_draft(package: Package, cls: ClassRef) -> bool:
    """A draft model: its lineage defines ``project_target_hidden`` (DFlash, DSpark), or it or a class it builds reads
    the target's hidden states (EAGLE, NextN, MTP)."""
    if package.definer(cls, c.DRAFT_METHOD) is not None:
        return True
    return any(package.reads(here, *c.DRAFT_INPUT) for here in (cls, *package.builds(cls)))


def model_modules(package: Package, cls: ClassRef) -> tuple[str, ...]:
    """The modules of ``sglang/srt/models/`` that write ``cls``, its bases, the classes it builds and their bases
    (``Qwen3ForCausalLM``: ``qwen3``, then ``qwen2`` for the ``Qwen2Model`` its ``Qwen3Model`` extends), each once."""
    classes = [*package.lineage(cls), *(r for b in package.builds(cls) for r in package.lineage(b))]
    prefix = c.MODELS_PACKAGE + "."
    return tuple(dict.fromkeys(r.module for r in classes if r.module.startswith(prefix)))


def _idioms_of(package: Package, cls: ClassRef, setter: ClassRef) -> tuple[Idiom, ...]:
    """The idioms of the setter's module, else of the first of :func:`model_modules` that writes one."""
    for module in dict.fromkeys([setter.module, *model_modules(package, cls)]):
        found = module_idioms(package, module)
        if found:
            return found
    return ()


def classify(package: Package, entry: Entry, pooling_names: frozenset[str]) -> Classified:
    """The state of one registry entry, in the decision order of the module docstring.

    Args:
        package: the install's package reader.
        entry: one registry entry (:func:`patchkit.sglang.registry.entries`).
        pooling_names: the names ``is_generation_model`` serves as not generative
            (:func:`patchkit.sglang.registry.not_generative`).
    """
    cls = entry.cls
    if cls is None:
        return Classified(entry, State.UNREAD)
    if entry.architecture in pooling_names or is_pooling(package, cls):
        return Classified(entry, State.NOT_GENERATIVE)
    embed = package.definer(cls, c.EMBED_AND_HEAD) is not None
    if is_draft(package, cls):
        return Classified(entry, State.DRAFT, embed_and_head=embed)
    setter = package.definer(cls, c.CAPTURE_SETTER)
    if setter is not None:
        return Classified(entry, State.NATIVE, setter, embed, _idioms_of(package, cls, setter))
    return Classified(entry, State.MISSING, embed_and_head=embed)


def with_sibling_idioms(package: Package, rows: list[Classified]) -> list[Classified]:
    """The rows, each missing one given the idioms of its native siblings, in :class:`Idiom` order: the native rows
    that share a module of ``sglang/srt/models/`` with it (:func:`model_modules`: one is written beside it, extends
    a class it extends, or builds the same inner model)."""
    by_module: dict[str, set[Idiom]] = {}
    for row in rows:
        if row.state is State.NATIVE and row.entry.cls is not None:
            for module in model_modules(package, row.entry.cls):
                by_module.setdefault(module, set()).update(row.idioms)
    out = []
    for row in rows:
        if row.state is State.MISSING and row.entry.cls is not None:
            near = set().union(*(by_module.get(m, set()) for m in model_modules(package, row.entry.cls)))
            row = Classified(row.entry, row.state, None, row.embed_and_head, tuple(i for i in Idiom if i in near))
        out.append(row)
    return out


__all__ = [
    "Classified",
    "Idiom",
    "State",
    "classify",
    "is_draft",
    "model_modules",
    "module_idioms",
    "with_sibling_idioms",
]
