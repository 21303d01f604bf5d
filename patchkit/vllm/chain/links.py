"""The recursive chain check of one registry architecture's classes, with its per-platform branches.

See :mod:`patchkit.vllm.chain` for what the chain is. :func:`architecture_chain` is the whole check
``verify`` runs per architecture (the class's chain, the load path, every platform branch);
:func:`model_check` is the class's chain alone; :func:`branch_checks` runs it on every platform
branch of a registry name (:func:`patchkit.vllm.registry.platforms.branches`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace

from patchkit.results import Check
from patchkit.vllm.chain.capture import capture_checks, expected_stream, mixin_capture_checks, split_capture_checks
from patchkit.vllm.chain.kinds import BRANCH_LABEL, NOT_FOLLOWED
from patchkit.vllm.chain.load_path import link_check
from patchkit.vllm.classes.composition import CompositionError, held_class, kind_of, registry_built, self_attr
from patchkit.vllm.release.contract import ATTR, MAYBE_ADD, MIXIN, SETTER, Contract, is_stub
from patchkit.vllm.registry.platforms import branches
from patchkit.vllm.runner.draft_reads import Derivation
from patchkit.vllm.registry.table import Registry, Resolution
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.stream.split import split_stream


def architecture_chain(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    resolution: Resolution,
    derivation: Derivation | None = None,
) -> Check:
    """Every link of one registry architecture's chain, as ``verify`` checks it: the class's chain
    (:func:`model_check`), the runner's and proposer's paths through it (:mod:`patchkit.vllm.chain.load_path`)
    and its per-platform branches (:func:`branch_checks`).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        resolution: the architecture's :class:`patchkit.vllm.registry.table.Resolution` (its ``cls`` is not None).
        derivation: :func:`patchkit.vllm.runner.draft_reads.derive` of ``tree`` (computed when None).
    Returns:
        A :class:`Check` named after the class; ``ok`` is False when any link fails. The classifier
        (:func:`patchkit.vllm.shapes.classify.classify`) calls a natively declared class broken when this fails.
    Raises:
        SourceError: a file on the chain does not parse.
    """
    node = _model(tree, registry, contract, resolution.cls, set())
    children = (
        *node.children,
        link_check(tree, registry, resolution.cls, derivation),
        *branch_checks(tree, registry, contract, resolution),
    )
    return replace(node, children=children, ok=not any(c.failures() for c in children))


def model_check(
    tree: SourceTree, registry: Registry, contract: Contract, cls: ClassRef, *, follow_setter: bool = True
) -> Check:
    """The chain check of one model class, as ``verify`` runs it for each architecture.

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        cls: the class to check (a registry architecture's class).
        follow_setter: also follow ``set_aux_hidden_state_layers`` into the held classes and
            check the backbone's capture (False: only the interface: bases and non-stub methods).
    Returns:
        A :class:`Check` named after the class; its children are the individual checks.
    Raises:
        SourceError: a file on the chain does not parse.
    """
    return _model(tree, registry, contract, cls, set(), follow_setter=follow_setter)


def _model(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    cls: ClassRef,
    seen: set[ClassRef],
    follow_setter: bool = True,
) -> Check:
    if cls in seen:
        return Check(cls.name, False, "cycle in what the classes hold", cls.location)
    seen = seen | {cls}
    mro = tree.mro(cls)
    protocol = contract.protocol
    via = next((c for c in mro if protocol in [b for b in tree.bases(c) if isinstance(b, ClassRef)]), None)
    children = [
        Check(
            "SupportsEagle3 in its bases",
            via is not None,
            f"through {via.name}" if via else "no class in its MRO derives from SupportsEagle3",
            via.location if via else cls.location,
        )
    ]
    setter = _method_check(tree, cls, SETTER, protocol)
    getter = _method_check(tree, cls, contract.getter or "", protocol)
    children += [setter, getter]

    found = tree.find_member(cls, SETTER)
    if follow_setter and found is not None and found[0] != protocol:
        children.append(_follow_setter(tree, registry, contract, cls, found, seen))
    elif follow_setter and found is not None and contract.native:
        children.append(_follow_default(tree, registry, cls, seen))
    return Check(cls.name, not any(c.failures() for c in children), "", cls.location, children=children)


def _method_check(tree: SourceTree, cls: ClassRef, name: str, protocol: ClassRef | None) -> Check:
    found = tree.find_member(cls, name)
    if found is None:
        return Check(f"{name}()", False, "not defined anywhere in its MRO", cls.location)
    owner, stmt = found
    location = f"{owner.relpath}:{stmt.lineno}"
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return Check(f"{name}()", False, f"{owner.name}.{name} is not a method", location)
    if owner == protocol and is_stub(stmt):
        return Check(f"{name}()", False, "only the Protocol's stub, which returns None", location)
    if is_stub(stmt):
        return Check(f"{name}()", False, f"{owner.name}.{name} has an empty body", location)
    return Check(f"{name}()", True, f"defined in {owner.name}", location)


def _follow_setter(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    cls: ClassRef,
    found: tuple[ClassRef, ast.stmt],
    seen: set[ClassRef],
) -> Check:
    owner, stmt = found
    location = f"{owner.relpath}:{stmt.lineno}"
    for sub in ast.walk(stmt):
        attr, kind = None, None
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == SETTER:
            attr, kind = self_attr(sub.func.value), "causal_lm"
        elif isinstance(sub, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == ATTR for t in sub.targets):
            target = next(t for t in sub.targets if isinstance(t, ast.Attribute) and t.attr == ATTR)
            attr, kind = self_attr(target.value), "backbone"
        if attr is None:
            continue
        try:
            held = held_class(tree, registry, cls, attr)
        except CompositionError as exc:
            return Check(f"self.{attr}", False, str(exc), location, kind=NOT_FOLLOWED)
        how = f"built through the registry as {held.architecture}" if held.via == "registry" else "constructed directly"
        label = f"self.{attr} holds {held.cls.name} ({how}, {owner.relpath}:{held.lineno})"
        actual = kind_of(tree, held.cls)
        if kind == "causal_lm":
            child = _model(tree, registry, contract, held.cls, seen)
        elif actual == "backbone":
            child = _backbone(tree, held.cls, registry)
        else:
            return Check(
                label,
                False,
                f"the setter sets {ATTR} on {held.cls.name}, which is not a decoder backbone",
                location,
                kind=NOT_FOLLOWED,
            )
        return replace(child, label=label)
    return Check(
        "setter reaches the backbone",
        False,
        f"{owner.name}.{SETTER} neither forwards the call nor sets a backbone's {ATTR}",
        location,
        kind=NOT_FOLLOWED,
    )


def _follow_default(tree: SourceTree, registry: Registry, cls: ClassRef, seen: set[ClassRef]) -> Check:
    """Follow the A2/A3 default ``set_aux_hidden_state_layers`` to the backbone it sets.

    Fact (vLLM 0.18.0 - 0.33.0, ``interfaces.py`` ``SupportsEagle3``): the default methods take
    ``get_language_model()`` if the model has it, else ``language_model``, else the model itself,
    then its ``.model``, and assert that is an ``EagleModelMixin``.
    """
    parent, how = cls, "self"
    built = registry_built(tree, cls, "language_model")
    try:
        held = held_class(tree, registry, cls, "language_model")
        parent, how = held.cls, f"self.language_model ({held.cls.name})"
    except CompositionError:
        if built is not None and built[1] is None:
            return Check(
                "default methods reach the backbone",
                None,
                "the language model is chosen from the checkpoint's text_config at run time; "
                "check that architecture with --arch",
            )
    try:
        backbone = held_class(tree, registry, parent, "model")
    except CompositionError as exc:
        return Check(
            "default methods reach the backbone", False, f"{how}: .model: {exc}", cls.location, kind=NOT_FOLLOWED
        )
    node = _backbone(tree, backbone.cls, registry)
    label = f"{how}.model holds {backbone.cls.name} ({parent.relpath}:{backbone.lineno})"
    mixin = tree.find_class("vllm.model_executor.models.interfaces", MIXIN)
    is_mixin = mixin is not None and mixin in tree.mro(backbone.cls)
    children = (
        Check(
            f"{backbone.cls.name} is an {MIXIN}",
            is_mixin,
            "" if is_mixin else "vLLM's default setter asserts it and fails at start-up",
            backbone.cls.location,
        ),
        *node.children,
    )
    return replace(node, label=label, children=children, ok=not any(c.failures() for c in children))


def _backbone(tree: SourceTree, cls: ClassRef, registry: Registry) -> Check:
    forward = tree.find_member(cls, "forward")
    expected = expected_stream(tree, registry, cls)
    split = split_stream(tree, registry, cls)  # the input norm run apart (0.34.0): its own capture form
    if (
        forward is not None
        and split is None
        and any(isinstance(n, ast.Attribute) and n.attr == MAYBE_ADD for n in ast.walk(forward[1]))
    ):
        return _backbone_node(cls, mixin_capture_checks(forward[1], forward[0].relpath, expected))
    init = tree.find_member(cls, "__init__")
    # the attribute may be set by any __init__ of the MRO (a subclass's __init__ calls super().__init__)
    inits = [(c, m) for c in tree.mro(cls) if (m := tree.method(c, "__init__")) is not None]
    setter_init = next(
        (
            (c, m)
            for c, m in inits
            if any(
                isinstance(n, (ast.Assign, ast.AnnAssign))
                and any(self_attr(t) == ATTR for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
                for n in ast.walk(m)
            )
        ),
        None,
    )
    # ... or a class of the MRO declares it (0.18+ EagleModelMixin: ``aux_hidden_state_layers = ()``)
    sets_attr = setter_init is not None or tree.find_member(cls, ATTR) is not None
    if setter_init is not None:
        init = setter_init
    children = [
        Check(
            f"__init__ sets self.{ATTR}",
            sets_attr,
            "" if sets_attr else "the setter's attribute would not exist before the first call",
            f"{init[0].relpath}:{init[1].lineno}" if init else cls.location,
        )
    ]
    forward = tree.find_member(cls, "forward")
    if forward is None:
        children.append(Check("forward()", False, "no forward in its MRO", cls.location))
    elif split is not None:
        children.extend(split_capture_checks(forward[1], f"{forward[0].relpath}", split))
    else:
        children.extend(capture_checks(forward[1], f"{forward[0].relpath}", expected))
    return _backbone_node(cls, children)


def _backbone_node(cls: ClassRef, children: Sequence[Check]) -> Check:
    """The decoder backbone ``cls``'s node over its checks ``children``; it fails when one of them does."""
    return Check(cls.name, not any(c.failures() for c in children), "decoder backbone", cls.location, children=children)


def branch_checks(
    tree: SourceTree, registry: Registry, contract: Contract, resolution: Resolution | None, follow_setter: bool = True
) -> list[Check]:
    """The chain check (:func:`model_check`) of every branch but the first.

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        resolution: the registry name's resolution (its class is the first branch, checked by the caller).
        follow_setter: as :func:`model_check`.
    Returns:
        One :class:`Check` per other branch, labelled :data:`BRANCH_LABEL` + ``module.Class``; it
        fails when the branch lacks the interface (or its class cannot be found).
    Raises:
        SourceError: a file on a chain does not parse.
    """
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
    return model_check(tree, registry, contract, cls, follow_setter=False).ok
