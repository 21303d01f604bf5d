"""What a model class holds in an attribute, resolved from its ``__init__`` without importing it.

Facts (vLLM 0.10.2 - 0.17.1):

- ``DeepseekV2ForCausalLM.__init__`` assigns ``self.model = self.model_cls(...)`` with the class
  attribute ``model_cls = DeepseekV2Model`` (0.10.x: ``self.model = DeepseekV2Model(...)``).
- ``KimiK25ForConditionalGeneration.__init__`` assigns ``self.language_model`` a bare
  ``DeepseekV2Model(...)`` on 0.15.1 and ``init_vllm_registered_model(...,
  architectures=["DeepseekV2ForCausalLM"])`` on 0.16.0 and 0.17.1, which vLLM builds through its
  registry.

Both forms are followed here: a constructor call resolved through imports (or a class attribute),
or a registry call resolved through :class:`~patchkit.vllm.registry.table.Registry`.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree

REGISTRY_BUILDER = "init_vllm_registered_model"


@dataclass(frozen=True)
class Holder:
    """What a wrapper class holds in one attribute, as resolved from its ``__init__``.

    Attributes:
        attr: the attribute name, e.g. ``"language_model"``.
        kind: ``"causal_lm"`` (a model class with its own EAGLE-3 methods) or ``"backbone"``
            (a decoder stack whose ``aux_hidden_state_layers`` is set directly).
        cls: the held class.
        lineno: line of the assignment in the wrapper's file.
    """

    attr: str
    kind: str
    cls: ClassRef
    lineno: int


class CompositionError(Exception):
    """What a class holds cannot be resolved to exactly one vLLM class; the message says why."""


@dataclass(frozen=True)
class HeldClass:
    """A class held by another, and how the holder builds it.

    Attributes:
        cls: the held class.
        via: ``"constructor"`` or ``"registry"`` (``init_vllm_registered_model``).
        lineno: line of the assignment in the holder's file.
        architecture: for ``via == "registry"``, the architecture name passed.
    """

    cls: ClassRef
    via: str
    lineno: int
    architecture: str | None = None


def held_class(tree: SourceTree, registry: Registry, owner: ClassRef, attr: str) -> HeldClass:
    """Resolve the class that ``owner.__init__`` assigns to ``self.<attr>``.

    The ``__init__`` chain is followed: an ``__init__`` that does not assign ``self.<attr>`` but
    calls ``super().__init__(...)`` hands over to the next ``__init__`` of ``owner``'s MRO, with the
    keyword arguments it passes (vLLM 0.17.1 ``openpangu.py``: ``PanguEmbeddedForCausalLM`` has no
    body, ``OpenPanguModelBase.__init__`` assigns ``self.model``; ``internlm2_ve.py`` passes
    ``model_type=InternLM2VEModel`` to ``InternLM2ForCausalLM.__init__``, which assigns
    ``self.model = model_type(...)``, a parameter whose default is ``InternLM2Model``).

    Raises:
        CompositionError: no ``__init__`` in the MRO, no assignment, a callee that is not a vLLM
            class, or assignments that resolve to different classes.
    """
    found = tree.find_member(owner, "__init__")
    if found is None:
        raise CompositionError(f"{owner.name} has no __init__ in its vLLM bases")
    init_owner, init = found
    bindings: dict[str, tuple[str, ast.expr]] = {}
    visited: list[str] = []
    while True:
        visited.append(init_owner.name)
        assigned = [n for n in self_assignments(init).get(attr, ()) if isinstance(n.value, ast.Call)]
        if assigned:
            break
        handed = _super_init_call(init)
        following = _next_init(tree, owner, init_owner) if handed is not None else None
        if following is None:
            chain_text = " -> ".join(f"{name}.__init__" for name in visited)
            raise CompositionError(f"{chain_text} assigns no call result to self.{attr}")
        bindings = _bind(init_owner.module, init, handed, bindings)
        init_owner, init = following
    results = [
        _resolve_call(
            tree,
            registry,
            init_owner,
            node.value,
            node.lineno,
            owner,
            _with_defaults(init_owner.module, init, bindings),
        )
        for node in assigned
    ]
    distinct = {r.cls for r in results}
    if len(distinct) != 1:
        names = ", ".join(sorted(c.name for c in distinct))
        raise CompositionError(f"self.{attr} is assigned different classes ({names}) in {init_owner.name}.__init__")
    return results[0]


def _super_init_call(init: ast.AST) -> ast.Call | None:
    """The ``super().__init__(...)`` call among ``init``'s statements (zero-argument ``super``), or None."""
    for stmt in statements(init):
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "__init__"
            and isinstance(call.func.value, ast.Call)
            and isinstance(call.func.value.func, ast.Name)
            and call.func.value.func.id == "super"
            and not call.func.value.args
        ):
            return call
    return None


def _next_init(tree: SourceTree, owner: ClassRef, after: ClassRef) -> tuple[ClassRef, ast.FunctionDef] | None:
    """The next ``__init__`` after class ``after`` in ``owner``'s MRO (vLLM classes only), or None."""
    mro = tree.mro(owner)
    for cls in mro[mro.index(after) + 1 :] if after in mro else ():
        init = tree.method(cls, "__init__")
        if init is not None:
            return cls, init  # type: ignore[return-value]
    return None


def _parameters(init: ast.AST) -> dict[str, ast.expr | None]:
    """``__init__``'s parameter names and their default expressions (None: no default)."""
    args = init.args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = {a.arg: d for a, d in zip(positional, defaults)}
    out.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults)})
    return out


def _with_defaults(
    module: str, init: ast.AST, bindings: dict[str, tuple[str, ast.expr]]
) -> dict[str, tuple[str, ast.expr]]:
    """``bindings`` completed with ``init``'s parameter defaults (each with the module it is written in)."""
    parameters = _parameters(init)
    out = {name: (module, default) for name, default in parameters.items() if default is not None}
    out.update({k: v for k, v in bindings.items() if k in parameters})
    return out


def _bind(
    module: str, init: ast.AST, call: ast.Call, bindings: dict[str, tuple[str, ast.expr]]
) -> dict[str, tuple[str, ast.expr]]:
    """What a ``super().__init__(...)`` call in ``init`` passes by keyword, each value as written
    (a name of ``init``'s own parameters is replaced by what it is bound to, or its default)."""
    known = _with_defaults(module, init, bindings)
    out: dict[str, tuple[str, ast.expr]] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        value = kw.value
        if isinstance(value, ast.Name) and value.id in known:
            out[kw.arg] = known[value.id]
        else:
            out[kw.arg] = (module, value)
    return out


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def statements(node: ast.AST) -> list[ast.AST]:
    """Every statement nested in ``node``'s bodies (``if``/``for``/``with``/``try``/``match`` arms and
    nested functions), breadth first like :func:`ast.walk`; expressions are not entered."""
    out: list[ast.AST] = []
    todo = [node]
    while todo:
        current = todo.pop(0)
        for name in _BODIES:
            for child in getattr(current, name, ()) or ():
                out.append(child)
                todo.append(child)
    return out


@functools.lru_cache(maxsize=8192)
def self_assignments(fn: ast.AST) -> dict[str, tuple[ast.Assign, ...]]:
    """The ``self.X = ...`` statements of ``fn`` by ``X``, in :func:`ast.walk` order (remembered per
    function: the composition resolver and the shape reader ask about the same ``__init__`` often).

    Also read as such an assignment (each given as an ``ast.Assign`` at the line of ``self.X``):

    - an annotated one, ``self.X: T = value`` (0.33.0 ``dots_ocr.py``: ``self.language_model:
      Qwen2ForCausalLM = init_vllm_registered_model(...)``);
    - ``self.X = name`` where ``fn`` binds ``name`` exactly once, to a call (0.33.0 ``step3_vl.py``:
      ``language_model = init_vllm_registered_model(...)``, then ``self.language_model =
      language_model``): the value is that call.
    """
    local_calls: dict[str, list[ast.Call]] = {}
    for node in statements(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    local_calls.setdefault(t.id, []).append(node.value)
    out: dict[str, list[ast.Assign]] = {}
    for node in statements(fn):
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if (
            isinstance(value, ast.Name)
            and len(local_calls.get(value.id, ())) == 1
            and isinstance(local_calls[value.id][0], ast.Call)
        ):
            value = local_calls[value.id][0]
        if not (isinstance(node, ast.Assign) and value is node.value):  # read as a plain assignment of value
            node = ast.copy_location(ast.Assign(targets=list(targets), value=value), node)
        for name in dict.fromkeys(self_attr(t) for t in targets):
            if name is not None:
                out.setdefault(name, []).append(node)
    return {k: tuple(v) for k, v in out.items()}


@functools.lru_cache(maxsize=8192)
def self_mentions(node: ast.AST) -> frozenset[str]:
    """Every ``X`` of an expression ``self.X`` anywhere in ``node`` (remembered per node)."""
    return frozenset(filter(None, (self_attr(n) for n in ast.walk(node) if isinstance(n, ast.Attribute))))


def self_attr(node: ast.expr) -> str | None:
    """``"x"`` for the expression ``self.x``, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _resolve_call(
    tree: SourceTree,
    registry: Registry,
    owner: ClassRef,
    call: ast.Call,
    lineno: int,
    instance: ClassRef | None = None,
    parameters: dict[str, tuple[str, ast.expr]] | None = None,
) -> HeldClass:
    func = call.func
    if isinstance(func, ast.Name) and parameters and func.id in parameters:
        # a class passed in as a parameter (``model_type(...)``): what the chain binds it to, or its default
        module, bound = parameters[func.id]
        cls = tree.resolve_expr(module, bound)
        if not isinstance(cls, ClassRef):
            raise CompositionError(
                f"the call at line {lineno} ({func.id}, bound to {ast.unparse(bound)}) is not a vLLM class"
            )
        return HeldClass(cls, "constructor", lineno)
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name == REGISTRY_BUILDER:
        archs = [kw.value for kw in call.keywords if kw.arg == "architectures"]
        if len(archs) != 1 or not isinstance(archs[0], (ast.List, ast.Tuple)) or len(archs[0].elts) != 1:
            raise CompositionError(f"{REGISTRY_BUILDER}(...) at line {lineno} does not name exactly one architecture")
        arch_node = archs[0].elts[0]
        if not (isinstance(arch_node, ast.Constant) and isinstance(arch_node.value, str)):
            raise CompositionError(f"{REGISTRY_BUILDER}(...) at line {lineno} names its architecture indirectly")
        resolution = registry.resolve(arch_node.value)
        if resolution is None or resolution.cls is None:
            raise CompositionError(
                f"architecture {arch_node.value} (line {lineno}) is not one of vLLM's own models in this registry"
            )
        return HeldClass(resolution.cls, "registry", lineno, arch_node.value)
    if self_attr(func) is not None:
        # self.model_cls(...): a class attribute naming the class; self._init_model(...): a method
        # returning one (vLLM 0.18+ llama.py), looked up on the instance's class (a subclass may override it)
        member = tree.find_member(instance or owner, func.attr)
        if member is not None and isinstance(member[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            made = {
                tree.resolve_expr(member[0].module, r.value.func)
                for r in ast.walk(member[1])
                if isinstance(r, ast.Return) and isinstance(r.value, ast.Call)
            }
            if len(made) == 1 and isinstance(next(iter(made)), ClassRef):
                return HeldClass(next(iter(made)), "constructor", lineno)
            raise CompositionError(f"self.{func.attr}(...) (line {lineno}) does not return exactly one vLLM class")
        if member is None or not isinstance(member[1], (ast.Assign, ast.AnnAssign)) or member[1].value is None:
            raise CompositionError(f"self.{func.attr} (line {lineno}) is not a class attribute patchkit can read")
        cls = tree.resolve_expr(member[0].module, member[1].value)
    else:
        cls = tree.resolve_expr(owner.module, func)
    if not isinstance(cls, ClassRef):
        raise CompositionError(f"the call at line {lineno} ({ast.unparse(func)}) is not a vLLM class")
    return HeldClass(cls, "constructor", lineno)


def kind_of(tree: SourceTree, cls: ClassRef) -> str | None:
    """``"causal_lm"`` for a model class (defines ``compute_logits``), ``"backbone"`` for a decoder stack.

    A backbone is a class whose ``forward`` loops over ``self.layers``. Returns None for anything else.
    """
    if tree.find_member(cls, "compute_logits") is not None:
        return "causal_lm"
    forward = tree.find_member(cls, "forward")
    if forward is not None:
        for node in ast.walk(forward[1]):
            if isinstance(node, ast.For) and is_layer_loop(node):
                return "backbone"
    return None


def is_layer_loop(loop: ast.For) -> bool:
    """A loop over the decoder layers: its iterable names ``self.layers``, or it is
    ``range(self.start_layer, self.end_layer)`` (0.33.0 ``step3p5.py``: ``layer = self.layers[i]``)."""

    def mentions(attr: str) -> bool:
        return any(self_attr(n) == attr for n in ast.walk(loop.iter) if isinstance(n, ast.Attribute))

    return mentions("layers") or (
        isinstance(loop.iter, ast.Call)
        and isinstance(loop.iter.func, ast.Name)
        and loop.iter.func.id == "range"
        and mentions("start_layer")
        and mentions("end_layer")
    )


def holder(tree: SourceTree, registry: Registry, owner: ClassRef, attr: str) -> Holder:
    """The :class:`Holder` an interface codemod needs: attribute, kind and class held.

    Raises:
        CompositionError: as :func:`held_class`, or the held class is neither a causal LM nor a backbone.
    """
    held = held_class(tree, registry, owner, attr)
    kind = kind_of(tree, held.cls)
    if kind is None:
        raise CompositionError(
            f"self.{attr} holds {held.cls.name}, which is neither a causal LM nor a decoder backbone"
        )
    return Holder(attr=attr, kind=kind, cls=held.cls, lineno=held.lineno)


HOLDER_ATTRS = ("language_model", "model")
"""Attributes through which vLLM model classes hold their language model or backbone
(``KimiK25ForConditionalGeneration.language_model``, ``DeepseekV2ForCausalLM.model``)."""


def chain(tree: SourceTree, registry: Registry, cls: ClassRef, _depth: int = 0) -> list[tuple[str, ClassRef]]:
    """What ``cls`` holds, down to the decoder backbone: ``[(attr, held class), ...]``.

    At each level the first of :data:`HOLDER_ATTRS` that ``__init__`` assigns a causal LM or a
    backbone to is followed. Returns an empty list when nothing is found (or after 4 levels).
    """
    if _depth > 4:
        return []
    for attr in HOLDER_ATTRS:
        try:
            held = held_class(tree, registry, cls, attr)
        except CompositionError:
            continue
        kind = kind_of(tree, held.cls)
        if kind == "backbone":
            return [(attr, held.cls)]
        if kind == "causal_lm" and held.cls != cls:
            return [(attr, held.cls), *chain(tree, registry, held.cls, _depth + 1)]
    return []


def registry_built(tree: SourceTree, cls: ClassRef, attr: str) -> tuple[int, str | None] | None:
    """Whether ``cls.__init__`` builds ``self.<attr>`` through vLLM's registry.

    Fact (vLLM 0.10.2 - 0.33.0, multimodal model files): wrappers assign
    ``self.language_model = init_vllm_registered_model(..., architectures=[NAME])``, or leave
    ``architectures`` out so vLLM picks the checkpoint's ``text_config.architectures``.

    Returns:
        ``(line, architecture or None)`` for the first such assignment, or None when there is none.
    """
    found = tree.find_member(cls, "__init__")
    if found is None:
        return None
    for node in self_assignments(found[1]).get(attr, ()):
        if isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name != REGISTRY_BUILDER:
                continue
            archs = [kw.value for kw in node.value.keywords if kw.arg == "architectures"]
            if (
                archs
                and isinstance(archs[0], (ast.List, ast.Tuple))
                and len(archs[0].elts) == 1
                and isinstance(archs[0].elts[0], ast.Constant)
            ):
                return node.lineno, str(archs[0].elts[0].value)
            return node.lineno, None
    return None
