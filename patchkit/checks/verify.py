"""Static verification: is EAGLE-3 in effect for the resolved classes, patched or native?

The check follows the chain the runner will follow, across modules, with bases resolved
through imports (not text): from each registry architecture (``DeepseekV2ForCausalLM``,
``DeepseekV3ForCausalLM``, ``KimiK25ForConditionalGeneration``) to its class, ``SupportsEagle3``
in its MRO, real (non-stub) ``set_aux_hidden_state_layers`` and getter, what the setter reaches
(``self.language_model`` -> ``DeepseekV2ForCausalLM`` -> ``self.model`` -> ``DeepseekV2Model``)
and, at the end, the backbone's ``forward`` capture; then every path vLLM's runner and EAGLE proposer
take through the class, derived from the release's code (:mod:`patchkit.vllm.proposer_paths`: aux-id
getter, ``get_language_model()``, ``.model``, ``embed_tokens``/``lm_head`` sharing, the image-token
field), and every per-platform branch of its registry name (:mod:`patchkit.checks.platforms`). It also
checks the start-up allow-list. Each node carries ``file:line`` evidence.
"""

from __future__ import annotations

import ast

from patchkit.vllm import loadpath, proposer_paths
from patchkit.checks import platforms
from patchkit.vllm.composition import CompositionError, held_class, is_layer_loop, kind_of, self_attr
from patchkit.vllm.contract import (
    ATTR,
    MAYBE_ADD,
    SETTER,
    Contract,
    Era,
    NoAllowList,
    admits,
    is_stub,
    read_allow_list,
)
from patchkit.vllm.registry import Registry
from patchkit.results import Check
from patchkit.vllm.source import ClassRef, SourceTree


def default_architectures() -> tuple[str, ...]:
    """The architectures the shipped default patch set serves (derived from ``patches/``), in order."""
    from patchkit.plan.spec import load_patches

    out: list[str] = []
    for patch in load_patches():
        out.extend(a for a in patch.architectures if a not in out)
    return tuple(out)


TEXT_MODEL_TYPES = ("deepseek_v3", "kimi_k2")
"""``hf_text_config.model_type`` of DeepSeek-V3 and Kimi-K2 / K2.5 checkpoints (the default set)."""
FINAL_LAYER_CHECK = "captures the final layer output (id n)"
FINAL_LAYER_CAPTURED = "final-layer-captured"
NOT_FOLLOWED = "not-followed"
"""``Check.kind`` of a failed link patchkit cannot follow statically (a composition or loop form it does
not read): never evidence that a class is broken (:func:`patchkit.vllm.shapes.classify`, :func:`settle`)."""
FINAL_LAYER_MISSED = "final-layer-missed"
"""``Check.kind`` of the node saying whether the backbone captures id n (read by :mod:`patchkit.checks.drafts`)."""
"""Label of the informational capture check for id n; its ``location`` is set only when the capture exists."""


def verify(tree: SourceTree, registry: Registry, contract: Contract,
           architectures: tuple[str, ...] | None = None,
           model_types: tuple[str, ...] | None = None, requested: tuple[str, ...] = ()) -> list[Check]:
    """Run every check on ``tree`` (files on disk, or a planned result through overrides).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        architectures: the registry names to check (default: :func:`default_architectures`).
        model_types: the ``hf_text_config.model_type`` values the start-up allow-list must admit
            (default: :data:`TEXT_MODEL_TYPES`).
        requested: architectures the user asked for (``--arch`` / ``--model``): one that patchkit
            does not serve on this release fails, with the broken link (:mod:`patchkit.vllm.proposer_paths`);
            in the default set it is shown as not supported.
    Returns:
        Top-level :class:`Check` nodes: the contract, one per architecture, the allow-list and
        the proposer.
    Raises:
        SourceError: a file on the chain does not parse.
    """
    checks = [
        Check(
            "EAGLE-3 contract",
            contract.era is not Era.A0,
            f"{contract.era}: {contract.description}",
            contract.protocol.location if contract.protocol else None,
        )
    ]
    if contract.protocol is None:
        return checks
    derivation = proposer_paths.derive(tree)
    for arch in architectures or default_architectures():
        resolution = registry.resolve(arch)
        if resolution is None:
            checks.append(Check(arch, None, "not in this release's model registry; nothing to check"))
            continue
        if resolution.cls is None:
            checks.append(Check(arch, False, f"the registry names {resolution.entry.module}.{resolution.entry.class_name}, which patchkit cannot find"))
            continue
        fault = loadpath.bare_language_model(tree, registry, resolution.cls) if not contract.native else None
        if fault is not None:  # patchkit does not patch it here (apply: not applicable); say why
            node = Check(arch, None, f"not supported on this release: {fault.reason()}", fault.proposer_at)
            if arch in requested:  # asked for: it cannot work here; the broken link says where
                node.ok, node.children = False, [proposer_paths.link_check(tree, registry, resolution.cls, derivation)]
            checks.append(node)
            continue
        node = architecture_chain(tree, registry, contract, resolution, derivation)
        from patchkit.vllm.shapes import classify

        settle(node, classify(tree, registry, contract, arch))
        node.label = f"{arch} -> {node.label}" if arch != resolution.cls.name else node.label
        checks.append(node)
    checks.append(_allow_list(tree, contract, TEXT_MODEL_TYPES if model_types is None else model_types))
    return checks


def settle(node: Check, shape) -> Check:
    """Give one architecture's chain check the classifier's verdict, so verify and doctor say what scan and apply say.

    Args:
        node: the architecture's chain check (:func:`architecture_chain` or :func:`model_check`), changed in place.
        shape: :func:`patchkit.vllm.shapes.classify` of the same architecture (an ``ArchShape``).
    Returns:
        ``node``: when the verdict is not native (patchable, not patchable, declared but broken), a failed
        first child says so with the classifier's reason; when it is native, a link patchkit could not
        follow (:data:`NOT_FOLLOWED`) is shown as not checked (None), not failed: the classifier calls no
        class broken on a link it cannot read. ``node.ok`` is recomputed.
    """
    from patchkit.vllm.shapes import State

    if shape.state is not State.NATIVE:
        node.children.insert(0, Check(f"patchkit's verdict: {shape.state.value}", False, shape.reason, shape.location))
    else:
        _not_followed_unchecked(node)
    node.ok = not any(c.failures() for c in node.children)
    return node


def _not_followed_unchecked(node: Check) -> bool:
    """Show :data:`NOT_FOLLOWED` failures under ``node`` as not checked (None), and a parent that failed only
    through them as not checked too. Returns True when something under ``node`` changed."""
    changed = False
    for child in node.children:
        changed = _not_followed_unchecked(child) or changed
    if node.ok is False and node.kind == NOT_FOLLOWED:
        node.ok = None
        node.detail += " (patchkit cannot follow this link statically; not checked, not called broken)"
        return True
    if changed and node.ok is False and not any(c.failures() for c in node.children):
        node.ok = None
    return changed


def architecture_chain(tree: SourceTree, registry: Registry, contract: Contract, resolution,
                       derivation: proposer_paths.Derivation | None = None) -> Check:
    """Every link of one registry architecture's chain, as ``verify`` checks it: the class's chain
    (:func:`model_check`), the runner's and proposer's paths through it (:mod:`patchkit.vllm.proposer_paths`)
    and its per-platform branches (:mod:`patchkit.checks.platforms`).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        resolution: the architecture's :class:`patchkit.vllm.registry.Resolution` (its ``cls`` is not None).
        derivation: :func:`patchkit.vllm.proposer_paths.derive` of ``tree`` (computed when None).
    Returns:
        A :class:`Check` named after the class; ``ok`` is False when any link fails. The classifier
        (:func:`patchkit.vllm.shapes.classify`) calls a natively declared class broken when this fails.
    Raises:
        SourceError: a file on the chain does not parse.
    """
    node = _model(tree, registry, contract, resolution.cls, set())
    node.children.append(proposer_paths.link_check(tree, registry, resolution.cls, derivation))
    node.children.extend(platforms.branch_checks(tree, registry, contract, resolution))
    node.ok = not any(c.failures() for c in node.children)
    return node


def model_check(tree: SourceTree, registry: Registry, contract: Contract, cls: ClassRef, *,
                follow_setter: bool = True) -> Check:
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


def _model(tree: SourceTree, registry: Registry, contract: Contract, cls: ClassRef, seen: set[ClassRef],
           follow_setter: bool = True) -> Check:
    node = Check(cls.name, True, "", cls.location)
    if cls in seen:
        node.ok, node.detail = False, "cycle in what the classes hold"
        return node
    seen = seen | {cls}
    mro = tree.mro(cls)
    protocol = contract.protocol
    via = next((c for c in mro if protocol in [b for b in tree.bases(c) if isinstance(b, ClassRef)]), None)
    node.children.append(
        Check("SupportsEagle3 in its bases", via is not None,
              f"through {via.name}" if via else "no class in its MRO derives from SupportsEagle3",
              via.location if via else cls.location)
    )
    setter = _method_check(tree, cls, SETTER, protocol)
    getter = _method_check(tree, cls, contract.getter or "", protocol)
    node.children += [setter, getter]

    found = tree.find_member(cls, SETTER)
    if follow_setter and found is not None and found[0] != protocol:
        node.children.append(_follow_setter(tree, registry, contract, cls, found, seen))
    elif follow_setter and found is not None and contract.native:
        node.children.append(_follow_default(tree, registry, cls, seen))
    node.ok = not any(c.failures() for c in node.children)
    return node


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


def _follow_setter(tree: SourceTree, registry: Registry, contract: Contract, cls: ClassRef,
                   found: tuple[ClassRef, ast.stmt], seen: set[ClassRef]) -> Check:
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
            return Check(label, False, f"the setter sets {ATTR} on {held.cls.name}, which is not a decoder backbone",
                         location, kind=NOT_FOLLOWED)
        child.label = label
        return child
    return Check("setter reaches the backbone", False,
                 f"{owner.name}.{SETTER} neither forwards the call nor sets a backbone's {ATTR}", location,
                 kind=NOT_FOLLOWED)


def _follow_default(tree: SourceTree, registry: Registry, cls: ClassRef, seen: set[ClassRef]) -> Check:
    """Follow the A2/A3 default ``set_aux_hidden_state_layers`` to the backbone it sets.

    Fact (vLLM 0.18.0 - 0.33.0, ``interfaces.py`` ``SupportsEagle3``): the default methods take
    ``get_language_model()`` if the model has it, else ``language_model``, else the model itself,
    then its ``.model``, and assert that is an ``EagleModelMixin``.
    """
    from patchkit.vllm.contract import MIXIN
    from patchkit.vllm.shapes import registry_built

    parent, how = cls, "self"
    built = registry_built(tree, cls, "language_model")
    try:
        held = held_class(tree, registry, cls, "language_model")
        parent, how = held.cls, f"self.language_model ({held.cls.name})"
    except CompositionError:
        if built is not None and built[1] is None:
            return Check("default methods reach the backbone", None,
                         "the language model is chosen from the checkpoint's text_config at run time; "
                         "check that architecture with --arch")
    try:
        backbone = held_class(tree, registry, parent, "model")
    except CompositionError as exc:
        return Check("default methods reach the backbone", False, f"{how}: .model: {exc}", cls.location,
                     kind=NOT_FOLLOWED)
    node = _backbone(tree, backbone.cls, registry)
    node.label = f"{how}.model holds {backbone.cls.name} ({parent.relpath}:{backbone.lineno})"
    mixin = tree.find_class("vllm.model_executor.models.interfaces", MIXIN)
    is_mixin = mixin is not None and mixin in tree.mro(backbone.cls)
    node.children.insert(0, Check(f"{backbone.cls.name} is an {MIXIN}", is_mixin,
                                  "" if is_mixin else "vLLM's default setter asserts it and fails at start-up",
                                  backbone.cls.location))
    node.ok = not any(c.failures() for c in node.children)
    return node


def _backbone(tree: SourceTree, cls: ClassRef, registry: Registry) -> Check:
    node = Check(cls.name, True, "decoder backbone", cls.location)
    forward = tree.find_member(cls, "forward")
    expected = expected_stream(tree, registry, cls)
    if forward is not None and any(isinstance(n, ast.Attribute) and n.attr == MAYBE_ADD for n in ast.walk(forward[1])):
        node.children.extend(mixin_capture_checks(forward[1], forward[0].relpath, expected))
        node.ok = not any(c.failures() for c in node.children)
        return node
    init = tree.find_member(cls, "__init__")
    # the attribute may be set by any __init__ of the MRO (a subclass's __init__ calls super().__init__)
    inits = [(c, m) for c in tree.mro(cls) if (m := tree.method(c, "__init__")) is not None]
    setter_init = next(((c, m) for c, m in inits if any(
        isinstance(n, (ast.Assign, ast.AnnAssign))
        and any(self_attr(t) == ATTR for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
        for n in ast.walk(m))), None)
    # ... or a class of the MRO declares it (0.18+ EagleModelMixin: ``aux_hidden_state_layers = ()``)
    sets_attr = setter_init is not None or tree.find_member(cls, ATTR) is not None
    if setter_init is not None:
        init = setter_init
    node.children.append(Check(f"__init__ sets self.{ATTR}", sets_attr,
                               "" if sets_attr else "the setter's attribute would not exist before the first call",
                               f"{init[0].relpath}:{init[1].lineno}" if init else cls.location))
    forward = tree.find_member(cls, "forward")
    if forward is None:
        node.children.append(Check("forward()", False, "no forward in its MRO", cls.location))
    else:
        node.children.extend(capture_checks(forward[1], f"{forward[0].relpath}", expected))
    node.ok = not any(c.failures() for c in node.children)
    return node


def expected_stream(tree: SourceTree, registry: Registry, backbone: ClassRef):
    """Which tensor is the residual stream entering each layer of ``backbone``, from the release's code
    (:func:`patchkit.vllm.stream.residual_stream`), or a :class:`patchkit.vllm.stream.StreamRefusal` saying why
    the code does not tell. The capture checks compare what a ``forward`` captures with it."""
    from patchkit.vllm.stream import StreamRefusal, residual_stream

    found = tree.find_member(backbone, "forward")
    if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return StreamRefusal(f"{backbone.name} has no forward", backbone.location)
    return residual_stream(tree, registry, found[0], backbone, found[1])


def capture_checks(forward: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, expected=None) -> list[Check]:
    """Check a backbone ``forward`` against the capture semantics (:mod:`patchkit.codemods.capture`).

    The semantics are vLLM's own native capture: vLLM 0.18.0 ``model_executor/models/deepseek_v2.py``
    ``DeepseekV2Model.forward`` (and, for id ``n``, vLLM 0.25.0's same forward).

    Args:
        forward: the function's AST.
        relpath: its file, for locations.
        expected: the stream the capture must take (:func:`expected_stream`: a
            :class:`patchkit.vllm.stream.StreamVerdict` or ``StreamRefusal``), or None: then the loop's
            form alone decides (``hidden_states + residual`` when the layer returns a residual).
    Returns:
        Checks for: global ids, residual-stream capture before each layer, the tuple return,
        and (informational) the final-layer capture.
    """
    from patchkit.vllm.shapes import Loop, decoder_loop

    where = f"{relpath}:{forward.lineno}"
    form = decoder_loop(forward)
    loops = [n for n in forward.body if isinstance(n, ast.For) and is_layer_loop(n)]
    if not isinstance(form, Loop) or len(loops) != 1:
        return [Check("forward captures aux hidden states", False,
                      form if isinstance(form, str) else "expected 1 decoder-layer loop", where, kind=NOT_FOLLOWED)]
    loop = loops[0]
    at = f"{relpath}:{loop.lineno}"
    tests = [s for s in loop.body if isinstance(s, ast.If) and isinstance(s.test, ast.Compare)
             and len(s.test.ops) == 1 and isinstance(s.test.ops[0], ast.In) and _mentions_self(s.test.comparators[0], ATTR)]
    if not tests:
        return [Check("captures the residual stream entering each layer", False,
                      f"no 'if <layer id> in self.{ATTR}' in the decoder-layer loop", at, kind=NOT_FOLLOWED)]
    index_name = ast.unparse(tests[0].test.left)
    checks = []
    if form.index is None:
        return [Check("forward captures aux hidden states", False, "the decoder-layer loop has no layer index", at,
                      kind=NOT_FOLLOWED)]
    global_ids = index_name == form.index
    checks.append(Check("ids are global layer indices", True if global_ids else None,
                        f"{index_name} is the global layer id" if global_ids else
                        f"{index_name} counts from 0 on each stage (the global id is {form.index}): right without "
                        "pipeline parallelism only (upstream's own form in some releases)", at))
    capture = None
    layer_call_index = None
    for i, stmt in enumerate(loop.body):
        if stmt is tests[0]:
            capture = (i, stmt)
    layer_call_index = form.call_at
    if capture is None:
        checks.append(Check("captures the residual stream entering each layer", False,
                            f"no 'if {index_name} in self.{ATTR}' in the decoder-layer loop", at, kind=NOT_FOLLOWED))
        return checks
    i, stmt = capture
    appended = [c.args[0] for c in ast.walk(stmt) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" and c.args]
    # an 'if residual is None: append(hidden_states) else: append(hidden_states + residual)' capture counts as one
    value = next((a for a in appended if _is_residual_stream(a)), appended[0] if appended else None)
    if isinstance(value, ast.Name):  # captured through a local: aux = hidden_states + residual; ...append(aux)
        assigned = [n.value for n in ast.walk(stmt) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)]
        value = assigned[0] if assigned else value
    before_layer = layer_call_index is not None and i < layer_call_index
    from patchkit.vllm.stream import Stream, StreamVerdict

    stream = expected.stream if isinstance(expected, StreamVerdict) else None
    if stream is None:
        stream = Stream.SUM if form.returns_residual else Stream.HIDDEN
    if stream is Stream.HIDDEN:  # where every layer returns None as the residual, the sum is the same tensor
        right = (isinstance(value, ast.Name) and value.id == "hidden_states") or (
            isinstance(expected, StreamVerdict) and expected.residual_none and value is not None and _is_residual_stream(value))
    else:
        right = value is not None and _is_residual_stream(value)
    ok = value is not None and right and before_layer
    detail = ast.unparse(value) if value is not None else "nothing appended"
    if value is not None and not right:
        detail += f" is not the residual stream ({stream.value})"
        if isinstance(expected, StreamVerdict):
            detail += f": {expected.evidence}"
    elif not before_layer:
        detail += " is taken after the layer runs: that is the next layer's input"
    elif expected is not None and not isinstance(expected, StreamVerdict):
        ok = None if ok else ok
        detail += f" (patchkit cannot tell from the code which tensor is the stream: {expected.reason})"
    checks.append(Check("captures the residual stream entering each layer", ok, detail, f"{relpath}:{stmt.lineno}"))
    states = appended_list_name(stmt)
    returns = [r for r in ast.walk(forward) if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)
               and len(r.value.elts) == 2 and isinstance(r.value.elts[1], ast.Name) and r.value.elts[1].id == states]
    checks.append(Check("returns (hidden_states, aux states) when ids were requested", bool(returns),
                        "" if returns else "the captured states never leave forward",
                        f"{relpath}:{returns[0].lineno}" if returns else where))
    final = [n for n in ast.walk(forward) if isinstance(n, ast.If) and _mentions_self(n.test, "end_layer") and _mentions_self(n.test, ATTR)]
    checks.append(Check(FINAL_LAYER_CHECK, None,
                        "after the loop, before the norm" if final else "not captured: a draft that asks for id n gets fewer states",
                        f"{relpath}:{final[0].lineno}" if final else None,
                        kind=FINAL_LAYER_CAPTURED if final else FINAL_LAYER_MISSED))
    return checks


def mixin_capture_checks(forward: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, expected=None) -> list[Check]:
    """Check a backbone ``forward`` that captures through ``EagleModelMixin._maybe_add_hidden_state``.

    Fact (vLLM 0.18.0 - 0.33.0, e.g. ``qwen3_moe.py``): one call before the decoder-layer loop for
    id ``start_layer`` and one after each layer for id ``layer_idx + 1``, with the loop enumerating
    from ``start_layer``; ``forward`` returns ``(hidden_states, aux)`` when something was captured.
    Some native classes count from 0 (safe only without pipeline parallelism): shown as information.
    ``expected`` is as for :func:`capture_checks`: where the stream is ``hidden_states`` alone and
    the layers hand on a residual that is not None, the calls must pass ``None`` as the residual
    (0.33.0 ``muse_glimmer.py`` does), else they capture ``hidden_states + residual``, no stream.
    """
    where = f"{relpath}:{forward.lineno}"
    calls = [n for n in ast.walk(forward) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == MAYBE_ADD and len(n.args) >= 2]
    loops = [n for n in forward.body if isinstance(n, ast.For) and is_layer_loop(n)]
    if len(loops) != 1:
        return [Check("forward captures aux hidden states", False, f"expected 1 decoder-layer loop, found {len(loops)}", where,
                      kind=NOT_FOLLOWED)]
    loop = loops[0]
    in_loop = [c for c in calls if any(c is n for n in ast.walk(loop))]
    before = [c for c in calls if c not in in_loop]
    from patchkit.vllm.shapes import Loop, decoder_loop

    form = decoder_loop(forward)
    index = in_loop[0].args[1] if in_loop and isinstance(in_loop[0].args[1], ast.BinOp) else None
    global_ids = isinstance(form, Loop) and form.index is not None and index is not None \
        and ast.unparse(index.left) == form.index
    checks = [Check("ids are global layer indices", True if global_ids else None,
                    "enumerate(..., start=self.start_layer)" if global_ids else
                    "counts from 0 on each stage (upstream's own form; vLLM refuses EAGLE-3 with pipeline parallelism "
                    "for such classes)", f"{relpath}:{loop.lineno}")]
    checks.append(Check("captures the stream entering the stage's first layer", bool(before),
                        ast.unparse(before[0]) if before else f"no {MAYBE_ADD} call before the loop",
                        f"{relpath}:{before[0].lineno}" if before else where))
    after_ok = bool(in_loop) and isinstance(in_loop[0].args[1], ast.BinOp)
    checks.append(Check("captures the stream after each layer (id layer_idx + 1)", after_ok,
                        ast.unparse(in_loop[0]) if in_loop else f"no {MAYBE_ADD} call in the loop",
                        f"{relpath}:{in_loop[0].lineno}" if in_loop else where))
    from patchkit.vllm.stream import Stream, StreamVerdict

    if isinstance(expected, StreamVerdict) and expected.stream is Stream.HIDDEN and not expected.residual_none:
        summed = [c for c in calls if len(c.args) >= 4 and not (isinstance(c.args[3], ast.Constant) and c.args[3].value is None)]
        checks.append(Check("captures the residual stream (hidden_states alone)", not summed,
                            f"{ast.unparse(summed[0])} adds the residual, which is not part of the stream: "
                            f"{expected.evidence}" if summed else "passes None as the residual",
                            f"{relpath}:{summed[0].lineno}" if summed else where))
    elif isinstance(expected, StreamVerdict) and expected.stream is Stream.SUM:
        # after a fused layer, hidden_states alone is the layer's delta: the call must add the residual
        alone = [c for c in in_loop if len(c.args) >= 4 and isinstance(c.args[3], ast.Constant) and c.args[3].value is None]
        checks.append(Check("captures the residual stream (hidden_states + residual)", not alone,
                            f"{ast.unparse(alone[0])} leaves the residual out: after a fused layer hidden_states is "
                            f"its delta, not the stream: {expected.evidence}" if alone else "passes the residual",
                            f"{relpath}:{alone[0].lineno}" if alone else where))
    returns = [r for r in ast.walk(forward) if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)
               and len(r.value.elts) == 2]
    checks.append(Check("returns (hidden_states, aux states) when ids were requested", bool(returns),
                        "" if returns else "the captured states never leave forward",
                        f"{relpath}:{returns[0].lineno}" if returns else where))
    checks.append(Check(FINAL_LAYER_CHECK, None, "the last layer's call captures id end_layer", None,
                        kind=FINAL_LAYER_CAPTURED))
    return checks


def appended_list_name(stmt: ast.stmt) -> str | None:
    """The name of the list a capture ``if`` appends to (``aux_hidden_states``)."""
    for c in ast.walk(stmt):
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" and isinstance(c.func.value, ast.Name):
            return c.func.value.id
    return None


def _mentions_self(node: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name) and n.value.id == "self" for n in ast.walk(node))


def _is_membership(test: ast.expr, index_name: str) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == index_name
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.In) and _mentions_self(test.comparators[0], ATTR))


def _is_residual_stream(value: ast.expr) -> bool:
    def is_sum(e: ast.expr) -> bool:
        return (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add)
                and {getattr(e.left, "id", None), getattr(e.right, "id", None)} == {"hidden_states", "residual"})
    if is_sum(value):
        return True
    return isinstance(value, ast.IfExp) and (is_sum(value.orelse) or is_sum(value.body))


def _allow_list(tree: SourceTree, contract: Contract, model_types: tuple[str, ...]) -> Check:
    found = read_allow_list(tree)
    if found is not None:
        if not model_types:
            return Check("speculative-config allow-list", None, "no model type to check (pass --model DIR)", found.location)
        refused = [t for t in model_types if not admits(found.entries, t)]
        return Check(
            "speculative-config allow-list admits " + ", ".join(model_types),
            not refused,
            f"{found.name} lacks an entry for {', '.join(refused)}" if refused else f"{found.name} = {found.entries}",
            found.location,
        )
    absent = NoAllowList.of(contract)
    return Check("speculative-config allow-list", absent.ok, absent.value)


