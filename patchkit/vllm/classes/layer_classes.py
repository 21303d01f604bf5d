"""The decoder-layer classes a backbone builds into ``self.layers``, read without importing vLLM.

Used by :func:`patchkit.vllm.stream.residual.residual_stream`, which reads each layer class's ``forward``.
"""

from __future__ import annotations

import ast

from patchkit.vllm.classes.ast_reads import assigned_names, returns_in
from patchkit.vllm.classes.composition import _bind, _next_init, _super_init_call, _with_defaults, statements
from patchkit.vllm.release.source import ClassRef, SourceTree


def layer_classes(tree: SourceTree, backbone: ClassRef) -> list[ClassRef] | str:
    """The decoder-layer classes ``backbone``'s ``__init__`` builds into ``self.layers``.

    Fact (vLLM 0.10.2 - 0.33.0 model files): ``self.start_layer, self.end_layer, self.layers =
    make_layers(n, lambda prefix: XDecoderLayer(...), ...)`` or ``nn.ModuleList([X(...) for ...])``;
    the class may be a local (``layer_type = ...``, or a dict of classes indexed by the config) or an
    ``__init__`` parameter with a default that subclasses pass on through ``super().__init__``
    (``LlamaModel(layer_type=...)``). Every class such a name can be is returned.

    Returns:
        The classes (vLLM classes with a ``forward``), or a one-line reason none could be found.
    """
    found = _layers_init(tree, backbone)
    if isinstance(found, str):
        return found
    owner, init, assigns, bindings = found
    search = _LayerSearch(tree, backbone, _with_defaults(owner.module, init, bindings), *_init_names(init))
    for assign in assigns:
        for node in ast.walk(assign.value):
            if isinstance(node, ast.Call):
                search.candidates(node.func, owner.module)
            elif isinstance(node, ast.Name) and node.id in search.nested:
                search.candidates(node, owner.module)
    if not search.out:
        return (
            f"no decoder-layer class found in what {owner.name} assigns to self.layers "
            f"({owner.relpath}:{assigns[0].lineno})"
        )
    return search.out


def _builds_layers(fn: ast.AST) -> list[ast.Assign]:
    """The statements of ``fn`` that assign ``self.layers``."""
    return [
        s
        for s in statements(fn)
        if isinstance(s, ast.Assign)
        and any(
            isinstance(n, ast.Attribute)
            and n.attr == "layers"
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            for t in s.targets
            for n in ast.walk(t)
        )
    ]


def _layers_builder(tree: SourceTree, backbone: ClassRef, init: ast.AST):
    """The ``(owner, method)`` a ``self.<method>(...)`` call in ``init`` names, when that method assigns
    ``self.layers`` (0.33.0 minicpm.py: ``self._init_layers(...)``); None when none does."""
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            member = tree.find_member(backbone, node.func.attr)
            if (
                member is not None
                and isinstance(member[1], (ast.FunctionDef, ast.AsyncFunctionDef))
                and _builds_layers(member[1])
            ):
                return member
    return None


def _layers_init(tree: SourceTree, backbone: ClassRef):
    """The ``(owner, function, assigns, bindings)`` that builds ``self.layers``: ``backbone``'s ``__init__``, a
    method it calls, or an ``__init__`` up the ``super().__init__`` chain (with the arguments bound on the way);
    or a one-line reason."""
    found = tree.find_member(backbone, "__init__")
    if found is None:
        return f"{backbone.name} has no __init__"
    owner, init = found
    bindings: dict[str, tuple[str, ast.expr]] = {}
    while True:
        assigns = _builds_layers(init)
        if not assigns:
            member = _layers_builder(tree, backbone, init)
            if member is not None:
                owner, init, assigns = member[0], member[1], _builds_layers(member[1])
        if assigns:
            return owner, init, assigns, bindings
        handed = _super_init_call(init)
        following = _next_init(tree, backbone, owner) if handed is not None else None
        if following is None:
            return f"{owner.name}.__init__ does not build self.layers"
        bindings = _bind(owner.module, init, handed, bindings)
        owner, init = following


def _init_names(init: ast.AST) -> tuple[dict[str, list[ast.expr]], dict[str, ast.AST]]:
    """The values assigned to each local name of ``init``, and the functions it defines."""
    locals_: dict[str, list[ast.expr]] = {}
    nested: dict[str, ast.AST] = {}
    for s in statements(init):
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None:
            for name in assigned_names(s):
                locals_.setdefault(name, []).append(s.value)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested[s.name] = s
    return locals_, nested


class _LayerSearch:
    """Every class a name in what ``__init__`` assigns to ``self.layers`` can be, gathered in :attr:`out`."""

    def __init__(
        self,
        tree: SourceTree,
        backbone: ClassRef,
        params: dict,
        locals_: dict[str, list[ast.expr]],
        nested: dict[str, ast.AST],
    ):
        self.tree, self.backbone, self.params, self.locals_, self.nested = tree, backbone, params, locals_, nested
        self.out: list[ClassRef] = []

    def candidates(
        self, expr: ast.expr, module: str, depth: int = 0, local: bool = True, skip: str | None = None
    ) -> None:
        if depth > 8:
            return
        if isinstance(expr, ast.Name) and local and self._local(expr, module, depth, skip):
            return
        if isinstance(expr, ast.BoolOp):
            for v in expr.values:
                self.candidates(v, module, depth + 1, local, skip)
            return
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            member = self.tree.find_member(
                self.backbone, expr.attr
            )  # a class attribute (0.33.0 qwen3.py decoder_layer_type)
            if (
                member is not None
                and isinstance(member[1], (ast.Assign, ast.AnnAssign))
                and member[1].value is not None
            ):
                self.candidates(member[1].value, member[0].module, depth + 1, local=False)
            return
        if isinstance(expr, ast.IfExp):
            self.candidates(expr.body, module, depth + 1, local, skip)
            self.candidates(expr.orelse, module, depth + 1, local, skip)
            return
        if isinstance(expr, ast.Dict):
            for v in expr.values:
                if v is not None:
                    self.candidates(v, module, depth + 1, local)
            return
        if isinstance(expr, ast.Subscript):
            self.candidates(expr.value, module, depth + 1, local)
            return
        self._resolved(expr, module, depth)

    def _local(self, expr: ast.Name, module: str, depth: int, skip: str | None) -> bool:
        """Follow a name of ``__init__``'s own (a nested function, a parameter, a local); False if it is none."""
        if expr.id in self.nested:
            for r in returns_in(self.nested[expr.id]):
                if isinstance(r.value, ast.Call):
                    self.candidates(r.value.func, module, depth + 1)
            return True
        if expr.id in self.params and (expr.id not in self.locals_ or expr.id == skip):
            mod, bound = self.params[expr.id]
            self.candidates(bound, mod, depth + 1, local=False)
            return True
        if expr.id in self.locals_:
            # ``x = x or Default`` (0.17.1 seed_oss.py): the ``x`` inside is the parameter
            for value in self.locals_[expr.id]:
                self.candidates(value, module, depth + 1, skip=expr.id)
            return True
        return False

    def _resolved(self, expr: ast.expr, module: str, depth: int) -> None:
        """A name resolved in its module: a layer class, or a module-level table of classes."""
        ref = self.tree.resolve_expr(module, expr)
        if ref is None and isinstance(expr, ast.Name):  # a module-level table of classes
            for stmt in self.tree.module_tree(module).body:
                if (
                    isinstance(stmt, (ast.Assign, ast.AnnAssign))
                    and stmt.value is not None
                    and expr.id in assigned_names(stmt)
                    and isinstance(stmt.value, ast.Dict)
                ):
                    self.candidates(stmt.value, module, depth + 1, local=False)
            return
        if (
            isinstance(ref, ClassRef)
            and ref != self.backbone
            and self.tree.find_member(ref, "forward") is not None
            and ref not in self.out
        ):
            self.out.append(ref)
