"""What an architecture's classes look like, as far as EAGLE-3 is concerned, read without importing vLLM.

For one registry architecture this module answers: does the class already support EAGLE-3
(native), does it declare support that cannot work (declared but broken), can patchkit give it
support and in which *shape*, or not (and why). ``scan``, ``apply --arch`` and ``verify`` share it.

Shapes (each read from the release's own files, vLLM 0.10.2 - 0.33.0):

- ``standard-loop``: the backbone's ``forward`` has exactly one loop over ``self.layers`` (from
  ``start_layer`` to ``end_layer``) whose body calls the layer once as
  ``hidden_states, residual = layer(...)`` (``llama.py``, ``glm4_moe.py``, ...).
- ``hidden-states-only``: the same loop, but ``hidden_states`` alone is the residual stream
  entering each layer: the layer returns ``hidden_states`` alone (``granite.py``-like), or it
  ignores the residual it is given, adds it back inside and returns the full stream first
  (0.33.0 ``exaone4.py``); the capture takes ``hidden_states``.

Which tensor is the stream is decided from the layer's and the backbone's own code by
:func:`patchkit.vllm.stream.residual.residual_stream`; a backbone whose code does not say, or whose signals
disagree, is not patchable (the reason names ``file:line``).
- ``interface-only``: the backbone already captures (inline ``aux_hidden_state_layers`` or the
  mixin's ``_maybe_add_hidden_state``), only the class's interface is missing.
- ``wrapper-only``: a multimodal wrapper holding a language model built through the registry
  (``init_vllm_registered_model(..., architectures=[...])``) in ``self.language_model``; only
  the wrapper's interface is missing (the language model is native, or patched in the same run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from patchkit.vllm.chain.kinds import NOT_FOLLOWED, UNPINNED
from patchkit.vllm.chain.links import architecture_chain
from patchkit.vllm.classes.class_attrs import language_model_attr
from patchkit.vllm.classes.composition import CompositionError, HeldClass, held_class, kind_of, registry_built
from patchkit.vllm.release.contract import SETTER, Contract, is_stub, no_protocol
from patchkit.vllm.classes.loadpath import bare_language_model
from patchkit.vllm.classes.loops import Loop, decoder_loop, final_return_count, split_layer
from patchkit.vllm.registry.table import TARGET_GROUPS, Registry
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.stream.residual import Stream, StreamRefusal, StreamVerdict, residual_stream
from patchkit.vllm.registry.transformers_backend import backend_route


class Shape(Enum):
    """How patchkit gives an architecture EAGLE-3 support (see the module docstring)."""

    STANDARD = "standard-loop"
    HIDDEN_ONLY = "hidden-states-only"
    INTERFACE_ONLY = "interface-only"
    WRAPPER_ONLY = "wrapper-only"


class State(Enum):
    """An architecture's EAGLE-3 state in one release."""

    NATIVE = "native"
    BROKEN = "declared but broken"
    PATCHABLE = "patchable"
    PATCHED = "patched by patchkit"
    NOT_PATCHABLE = "not patchable"


BACKBONE_ATTR = "model"
"""Where a causal LM holds its decoder backbone. Fact: vLLM's proposer reads
``target_language_model.model`` (``v1/spec_decode/eagle.py``, 0.10.2 - 0.33.0) and the A2/A3
default interface methods assert ``parent.model`` (``interfaces.py``, 0.18.0 on)."""
WRAPPER_ATTR = "language_model"
"""Where a multimodal wrapper holds its language model (``get_language_model()`` returns it)."""


@dataclass(frozen=True)
class ArchShape:
    """One architecture's EAGLE-3 state and, when patchable, how.

    Attributes:
        architecture: the registry name.
        group: the registry dict that lists it (``_TEXT_GENERATION_MODELS``, ...), or None.
        state: see :class:`State` (``PATCHED`` is decided by the caller, from the journal).
        shape: the patch shape (patchable and repairable broken states), else None.
        reason: one line for users: what is there, what is missing, or what breaks.
        cls: the registry class, or None when it cannot be found.
        backbone: the decoder backbone class the capture lives in, when found.
        inner: for a wrapper, the architecture its language model is built as.
        location: ``file:line`` of the evidence for ``reason``.
        stream: for a capture patchkit writes (standard-loop, hidden-states-only), which tensor is the
            residual stream and why (:func:`patchkit.vllm.stream.residual.residual_stream`), else None.
    """

    architecture: str
    group: str | None
    state: State
    shape: Shape | None
    reason: str
    cls: ClassRef | None = None
    backbone: ClassRef | None = None
    inner: str | None = None
    location: str | None = None
    stream: StreamVerdict | None = None


def classify(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    architecture: str,
    text_architecture: str | None = None,
    _depth: int = 0,
) -> ArchShape:
    """Classify ``architecture`` of this release (see :class:`State` and :class:`Shape`).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        architecture: a registry name.
        text_architecture: for a wrapper that builds its language model from the checkpoint's
            ``text_config`` at run time, that config's architecture (from ``--model DIR``).
    Returns:
        An :class:`ArchShape`; never ``State.PATCHED`` (the journal decides that).
    Raises:
        SourceError: a file on the way does not parse.
    """
    group = registry.group_of(architecture, TARGET_GROUPS) or registry.group_of(architecture)
    resolution = registry.resolve(architecture)
    if resolution is None:
        return ArchShape(
            architecture,
            None,
            State.NOT_PATCHABLE,
            None,
            "not in this release's model registry (vLLM would load it through its Transformers backend)",
        )
    route = backend_route(tree, contract, resolution)
    if route is not None and route.declares:  # vLLM's Transformers backend serves it: a route, not a patch
        return ArchShape(
            architecture,
            group,
            State.NOT_PATCHABLE if route.usable is False else State.NATIVE,
            None,
            route.reason(),
            route.cls,
            location=route.location,
        )
    if resolution.transformers_backend or resolution.cls is None:
        return ArchShape(
            architecture,
            group,
            State.NOT_PATCHABLE,
            None,
            f"the registry names {resolution.entry.module}.{resolution.entry.class_name}, "
            + (
                "vLLM's Transformers backend, no model file of vLLM's own"
                if resolution.transformers_backend
                else "a class patchkit cannot find in this install"
            ),
        )
    cls = resolution.cls
    if contract.protocol is None:
        return ArchShape(architecture, group, State.NOT_PATCHABLE, None, no_protocol(), cls)
    declared = any(contract.protocol in [b for b in tree.bases(c) if isinstance(b, ClassRef)] for c in tree.mro(cls))
    if declared:
        return _declared(tree, registry, contract, architecture, group, cls)
    shape = _lacking(tree, registry, contract, architecture, group, cls, text_architecture, _depth)
    if shape.state in (State.PATCHABLE, State.NOT_PATCHABLE):
        # vLLM's own draft loading must be able to go through what get_language_model() returns
        # (0.33.0 molmo.py: a bare MolmoModel, no .model): patching the interface would not help, whatever
        # else the backbone lacks, so this reason comes first
        fault = bare_language_model(tree, registry, cls)
        if fault is not None:
            return ArchShape(
                architecture, group, State.NOT_PATCHABLE, None, fault.reason(), cls, location=fault.proposer_at
            )
    return shape


def _declared(
    tree: SourceTree, registry: Registry, contract: Contract, architecture: str, group: str | None, cls: ClassRef
) -> ArchShape:
    """A class with ``SupportsEagle3`` in its MRO: native, unless a link is positively broken.

    Broken links: the A1 Protocol's stub methods not overridden (they return None), or a backbone
    whose ``forward`` captures nothing. A link patchkit cannot follow statically is not called broken.
    """

    def broken(reason: str, where: str | None, repair: _Repair | None = None) -> ArchShape:
        return ArchShape(
            architecture,
            group,
            State.BROKEN,
            repair.shape if repair else None,
            f"declares SupportsEagle3 but {reason}",
            cls,
            repair.backbone if repair else None,
            location=where,
            stream=repair.stream if repair else None,
        )

    if contract.getter:
        for name in (SETTER, contract.getter):
            found = tree.find_member(cls, name)
            if found is None:
                return broken(f"{name}() is not defined", cls.location)
            owner, stmt = found
            if (
                owner == contract.protocol
                and contract.patchable
                and isinstance(stmt, ast.FunctionDef)
                and is_stub(stmt)
            ):
                return broken(
                    f"{name}() is only the Protocol's stub, which returns None", f"{owner.relpath}:{stmt.lineno}"
                )
    holder = cls
    built = registry_built(tree, cls, WRAPPER_ATTR)
    if built is not None and built[1] is not None:
        inner = registry.resolve(built[1])
        holder = inner.cls if inner is not None and inner.cls is not None else None
    try:
        backbone = held_class(tree, registry, holder, BACKBONE_ATTR).cls if holder is not None else None
    except CompositionError:
        backbone = None
    if backbone is not None and kind_of(tree, backbone) == "backbone":
        found = tree.find_member(backbone, "forward")
        if found is not None and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            loop = decoder_loop(found[1])
            if isinstance(loop, Loop) and not loop.captures:
                return broken(
                    f"its backbone {backbone.name}.forward captures no aux hidden states",
                    f"{found[0].relpath}:{found[1].lineno}",
                    _repairable(tree, registry, contract, holder),
                )
    # every other link, as verify checks it (one reader: scan, apply, verify and doctor share this verdict);
    # 0.33.0 cohere_compass.py: CohereCompassTextModel is no EagleModelMixin, vLLM's default setter asserts it
    resolution = registry.resolve(architecture)
    if resolution is not None and resolution.cls == cls:
        chain = architecture_chain(tree, registry, contract, resolution)
        failed = _first_failure(chain)
        if failed is not None:
            link, leaf = failed
            where = f"{link.label}: " if link is not leaf else ""
            detail = f" ({leaf.detail})" if leaf.detail else ""
            return broken(f"fails {where}'{leaf.label}'{detail}", leaf.location or cls.location)
    return ArchShape(
        architecture,
        group,
        State.NATIVE,
        None,
        "supports EAGLE-3 in this release",
        cls,
        backbone,
        location=cls.location,
    )


def _first_failure(check):
    """``(link, failure)``: the first failure of a :class:`patchkit.results.Check` tree that shows a broken
    link (not one patchkit could not follow, :data:`patchkit.vllm.chain.kinds.NOT_FOLLOWED`) and the top-level child
    it is under (a held class, the load path, a platform branch), or None."""
    for link in check.children:
        found = next((f for f in link.failures() if f.kind not in (NOT_FOLLOWED, UNPINNED)), None)
        if found is not None:
            return link, found
    return None


def _builds_another_class(new: ast.stmt) -> bool:
    """``__new__`` returns a call other than ``...__new__(...)``: it builds the instance as another class
    (0.16.0 ``grok1.py`` and ``minicpmv.py``: ``return instance_cls(vllm_config=..., prefix=...)``),
    unlike ``SupportsQuant.__new__`` (``instance = super().__new__(cls); ...; return instance``)."""
    return any(
        isinstance(r, ast.Return)
        and isinstance(r.value, ast.Call)
        and not (isinstance(r.value.func, ast.Attribute) and r.value.func.attr == "__new__")
        for r in ast.walk(new)
    )


def _lacking(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    architecture: str,
    group: str | None,
    cls: ClassRef,
    text_architecture: str | None,
    depth: int,
) -> ArchShape:
    """Classify a class without ``SupportsEagle3``: which shape would give it support, or why none.

    In turn: a ``__new__`` factory (never patchable), a multimodal wrapper (:func:`_as_wrapper`), a
    causal LM holding a decoder backbone (:func:`_as_decoder`).
    """
    no = _refuser(architecture, group, cls)
    factory = tree.find_member(cls, "__new__")
    if factory is not None and _builds_another_class(factory[1]):
        # 0.16.0 grok1.py: GrokForCausalLM.__new__ returns a Grok1ForCausalLM or Grok2ForCausalLM, which do
        # not derive from it: the model vLLM's runner asks supports_eagle3 about is not of this class
        return no(
            f"{factory[0].name}.__new__ builds the model as another class (a factory), so the class vLLM's "
            f"runner checks is not {cls.name}",
            f"{factory[0].relpath}:{factory[1].lineno}",
        )
    wrapped = _as_wrapper(tree, registry, contract, architecture, group, cls, text_architecture, depth)
    if wrapped is not None:
        return wrapped
    return _as_decoder(tree, registry, contract, architecture, group, cls)


def _refuser(architecture: str, group: str | None, cls: ClassRef):
    """``no(reason, where=None)``: the :class:`ArchShape` saying ``cls`` is not patchable, and why
    (located at ``where``, else at the class)."""

    def no(reason: str, where: str | None = None) -> ArchShape:
        return ArchShape(architecture, group, State.NOT_PATCHABLE, None, reason, cls, location=where or cls.location)

    return no


def _as_wrapper(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    architecture: str,
    group: str | None,
    cls: ClassRef,
    text_architecture: str | None,
    depth: int,
) -> ArchShape | None:
    """A multimodal wrapper (its language model in ``self.language_model``, built through the registry):
    its shape from the held architecture's, or why none; None when ``cls`` is no such wrapper."""
    no = _refuser(architecture, group, cls)
    built = registry_built(tree, cls, WRAPPER_ATTR)
    try:
        held = held_class(tree, registry, cls, WRAPPER_ATTR)
    except CompositionError as exc:
        held = None
        if built is not None and built[1] is None:  # architecture chosen from text_config at run time
            if text_architecture is None:
                return no(
                    f"builds self.{WRAPPER_ATTR} from the checkpoint's text_config at run time; pass --model DIR "
                    "so patchkit knows which language model it is",
                    f"{cls.relpath}:{built[0]}",
                )
            resolution = registry.resolve(text_architecture)
            if resolution is None or resolution.cls is None:
                return no(f"its text_config names {text_architecture}, which is not one of this release's own models")
            held = HeldClass(resolution.cls, "registry", built[0], text_architecture)
        elif built is not None:
            return no(f"self.{WRAPPER_ATTR}: {exc}", f"{cls.relpath}:{built[0]}")
    if held is not None:
        if held.via != "registry" or held.architecture is None:
            return no(
                f"self.{WRAPPER_ATTR} holds {held.cls.name} built directly, not a causal LM built through the "
                "registry: vLLM's proposer reads get_language_model().model, which a bare backbone lacks"
            )
        if depth > 2:
            return no("wrappers nested too deeply")
        inner = classify(tree, registry, contract, held.architecture, None, depth + 1)
        if inner.state is State.NATIVE or (inner.state is State.PATCHABLE and inner.shape is not Shape.WRAPPER_ONLY):
            how = "native" if inner.state is State.NATIVE else f"patchable ({inner.shape.value})"
            return ArchShape(
                architecture,
                group,
                State.PATCHABLE,
                Shape.WRAPPER_ONLY,
                f"self.{WRAPPER_ATTR} is {held.architecture} ({how}); the wrapper lacks SupportsEagle3",
                cls,
                inner.backbone,
                held.architecture,
                f"{cls.relpath}:{held.lineno}",
            )
        return no(f"its language model {held.architecture} is {inner.state.value}: {inner.reason}")
    return None


def _as_decoder(
    tree: SourceTree, registry: Registry, contract: Contract, architecture: str, group: str | None, cls: ClassRef
) -> ArchShape:
    """A causal LM whose decoder backbone is ``self.model``: the shape its backbone's ``forward`` reads
    as (:func:`_backbone_shape`), or why it has none."""
    no = _refuser(architecture, group, cls)
    try:
        backbone = held_class(tree, registry, cls, BACKBONE_ATTR)
    except CompositionError as exc:
        getter = language_model_attr(tree, cls)
        if getter is not None and getter[0] not in (WRAPPER_ATTR, BACKBONE_ATTR):
            # 0.33.0 ovis.py: self.llm = init_vllm_registered_model(...) under _mark_language_model
            return no(
                f"its language model is self.{getter[0]} (what get_language_model() returns), which patchkit "
                f"does not follow: it reads a wrapper's self.{WRAPPER_ATTR}",
                getter[1],
            )
        return no(f"no decoder backbone in self.{BACKBONE_ATTR} ({exc}); vLLM's proposer reads .{BACKBONE_ATTR}")
    if kind_of(tree, backbone.cls) != "backbone":
        return no(
            f"self.{BACKBONE_ATTR} holds {backbone.cls.name}, which is not a decoder backbone "
            "(no forward looping over self.layers)",
            backbone.cls.location,
        )
    read = _backbone_shape(tree, registry, contract, backbone.cls)
    if isinstance(read, str):
        return no(f"{backbone.cls.name}: {read}", backbone.cls.location)
    shape, stream = read
    reason = {
        Shape.STANDARD: "standard decoder loop; lacks SupportsEagle3 and the capture",
        Shape.HIDDEN_ONLY: (
            "the layer's hidden_states output is the residual stream; lacks SupportsEagle3 and the capture"
        ),
        Shape.INTERFACE_ONLY: f"{backbone.cls.name} already captures; only SupportsEagle3 is missing",
    }[shape]
    owner = forward_owner(tree, backbone.cls)
    if owner != backbone.cls and shape is not Shape.INTERFACE_ONLY:
        reason += f" (forward inherited from {owner.name}, patched there)"
    if shape is Shape.HIDDEN_ONLY and stream is not None and _loop_returns_residual(tree, owner):
        # the surprising case: a residual is passed around, but it is not part of the stream (0.33.0 exaone4.py)
        reason += f" (the layer keeps its own residual: {stream.location})"
    return ArchShape(
        architecture,
        group,
        State.PATCHABLE,
        shape,
        reason,
        cls,
        owner if shape is not Shape.INTERFACE_ONLY else backbone.cls,
        location=backbone.cls.location,
        stream=stream,
    )


@dataclass(frozen=True)
class _Repair:
    shape: Shape
    backbone: ClassRef
    stream: StreamVerdict | None = None


def _repairable(tree: SourceTree, registry: Registry, contract: Contract, cls: ClassRef) -> _Repair | None:
    """For a declared-but-broken class: a backbone whose missing capture patchkit could write."""
    try:
        backbone = held_class(tree, registry, cls, BACKBONE_ATTR)
    except CompositionError:
        return None
    read = _backbone_shape(tree, registry, contract, backbone.cls)
    if not isinstance(read, str) and read[0] in (Shape.STANDARD, Shape.HIDDEN_ONLY):
        return _Repair(read[0], forward_owner(tree, backbone.cls), read[1])
    return None


def _loop_returns_residual(tree: SourceTree, owner: ClassRef) -> bool:
    found = tree.find_member(owner, "forward")
    loop = decoder_loop(found[1]) if found is not None else None  # type: ignore[arg-type]
    return isinstance(loop, Loop) and loop.returns_residual


def forward_owner(tree: SourceTree, backbone: ClassRef) -> ClassRef:
    """The class of ``backbone``'s MRO that defines its ``forward`` (where a capture is written)."""
    found = tree.find_member(backbone, "forward")
    return found[0] if found is not None else backbone


def _backbone_shape(
    tree: SourceTree, registry: Registry, contract: Contract, backbone: ClassRef
) -> tuple[Shape, StreamVerdict | None] | str:
    """The shape of a backbone's ``forward`` and, for a capture patchkit writes, the stream it captures.

    Returns:
        ``(shape, stream)`` (``stream`` None for ``INTERFACE_ONLY``), or a one-line reason it has none.
    """
    found = tree.find_member(backbone, "forward")
    if found is None:
        return "no forward in its MRO"
    owner, forward = found
    if not isinstance(forward, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "forward is not a method"
    loop = decoder_loop(forward)
    if isinstance(loop, str):
        return loop
    if loop.captures:
        return Shape.INTERFACE_ONLY, None
    if split_layer(forward) is not None:  # 0.34.0's form: the stream exists only after the layer's own norm
        return (
            "its loop runs each layer's input norm apart from the rest of the layer (a split layer): "
            "patchkit writes no capture into that form"
        )
    if final_return_count(forward) != 1:
        return f"forward has {final_return_count(forward)} top-level 'return hidden_states', expected 1"
    # an inherited forward is patched where it is defined (0.33.0 longcat_flash_ngram.py: FlashModel.forward)
    init = tree.method(owner, "__init__")
    if init is None:
        return "no __init__ of its own"
    stream = residual_stream(tree, registry, owner, backbone, forward)
    if isinstance(stream, StreamRefusal):
        return stream.reason
    return (Shape.STANDARD if stream.stream is Stream.SUM else Shape.HIDDEN_ONLY), stream
