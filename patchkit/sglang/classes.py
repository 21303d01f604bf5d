"""SGLang's model classes read statically: a name resolved through a module's imports to the class it is, and what a
class holds through its bases (methods, attributes it sets, classes it builds). Standard library :mod:`ast` only;
SGLang is never imported.

Names are resolved as Python would bind them at module level: a ``class`` statement, an alias (``X = Y``), a
``from a.b import Y [as X]`` (absolute or relative), a ``from a.b import *``, or ``import a.b as m`` then ``m.Y``.
A name bound outside the ``sglang`` package (``torch.nn.Module``) ends the walk there: it is not SGLang's.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 30
"""How many aliases and re-exports a name may pass through before the reader gives up (a cycle of re-exports)."""


@dataclass(frozen=True)
class ClassRef:
    """One class statement of SGLang's package.

    Attributes:
        module: its dotted module (``sglang.srt.models.llama``).
        name: its ``__name__`` (the ``class`` statement's name).
        node: the parsed ``class`` statement.
    """

    module: str
    name: str
    node: ast.ClassDef = field(compare=False, repr=False)

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


def _bindings(body: list[ast.stmt]):
    """The module-level statements of ``body``, descending into ``if``/``try``/``with`` blocks (they bind at module
    level too), never into functions or classes."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _bindings(node.body)
            yield from _bindings(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _bindings(block)


class Package:
    """The ``sglang`` package below ``site_packages``, parsed lazily, one module at a time, each once.

    Args:
        site_packages: the folder that holds ``sglang/``.
    """

    def __init__(self, site_packages: Path, package: str = "sglang") -> None:
        self.root = Path(site_packages)
        self.package = package
        self._trees: dict[str, ast.Module | None] = {}
        self._resolved: dict[tuple[str, str], ClassRef | None] = {}
        self._assigned: dict[ClassRef, frozenset[str]] = {}
        self._lineages: dict[ClassRef, tuple[ClassRef, ...]] = {}
        self._built: dict[ClassRef, tuple[ClassRef, ...]] = {}
        self._attribute_pairs: dict[ClassRef, frozenset[tuple[str, str]]] = {}

    def path(self, module: str) -> Path | None:
        """The file of a dotted module (``a/b.py`` or ``a/b/__init__.py``), or None."""
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def tree(self, module: str) -> ast.Module | None:
        """The parsed module, or None when it is not a file of the package or does not parse."""
        if module not in self._trees:
            path = self.path(module)
            try:
                self._trees[module] = None if path is None else ast.parse(path.read_bytes(), str(path))
            except (SyntaxError, ValueError, OSError):
                self._trees[module] = None
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        path = self.path(module)
        return path is not None and path.name == "__init__.py"

    def _source(self, module: str, node: ast.ImportFrom) -> str:
        """The dotted module an ``from ... import`` statement of ``module`` reads from."""
        if not node.level:
            return node.module or ""
        parts = module.split(".")
        base = parts if self.is_package(module) else parts[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def resolve(self, module: str, name: str, depth: int = 0) -> ClassRef | None:
        """The class ``name`` is bound to at module level in ``module``, or None (not a class of the package)."""
        key = (module, name)
        if depth == 0 and key in self._resolved:
            return self._resolved[key]
        found = self._resolve(module, name, depth)
        if depth == 0:
            self._resolved[key] = found
        return found

    def _resolve(self, module: str, name: str, depth: int) -> ClassRef | None:
        tree = self.tree(module)
        if tree is None or depth > MAX_DEPTH:
            return None
        found = None
        for node in _bindings(tree.body):  # the last binding wins, as at run time
            hit = self._binding(module, node, name)
            if hit is not None:
                found = hit
        if found is None:
            return None
        kind, value = found
        if kind == "class":
            return ClassRef(module, name, value)
        if kind == "alias":
            return self.expression(module, value, depth + 1)
        source, original = value
        if source != self.package and not source.startswith(self.package + "."):
            return None
        return self.resolve(source, original, depth + 1)

    def _binding(self, module: str, node: ast.stmt, name: str):
        """How ``node`` binds ``name``: ``("class", ClassDef)``, ``("alias", expr)`` or ``("import", (module, name))``;
        None when it does not."""
        if isinstance(node, ast.ClassDef) and node.name == name:
            return "class", node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return "alias", node.value
        if isinstance(node, ast.ImportFrom):
            source = self._source(module, node)
            for alias in node.names:
                if alias.name == "*" and self.resolve(source, name, MAX_DEPTH) is not None:
                    return "import", (source, name)
                if (alias.asname or alias.name) == name:
                    return "import", (source, alias.name)
        return None

    def _module_alias(self, module: str, name: str) -> str | None:
        """The module ``name`` stands for in ``module`` (``import a.b as name``, ``from a import b as name``)."""
        tree = self.tree(module)
        for node in _bindings(tree.body if tree else []):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname == name or (alias.asname is None and alias.name == name):
                        return alias.name
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        sub = f"{self._source(module, node)}.{alias.name}"
                        return sub if self.path(sub) is not None else None
        return None

    def expression(self, module: str, expr: ast.expr, depth: int = 0) -> ClassRef | None:
        """The class an expression of ``module`` names: ``X`` or ``m.X`` (``m`` an imported module), else None."""
        if isinstance(expr, ast.Name):
            return self.resolve(module, expr.id, depth)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            target = self._module_alias(module, expr.value.id)
            return None if target is None else self.resolve(target, expr.attr, depth)
        return None

    def lineage(self, cls: ClassRef) -> tuple[ClassRef, ...]:
        """``cls`` and its bases that are classes of the package, nearest first (breadth-first, each once)."""
        if cls in self._lineages:
            return self._lineages[cls]
        out: list[ClassRef] = []
        todo = [cls]
        while todo:
            here = todo.pop(0)
            if here in out:
                continue
            out.append(here)
            todo.extend(b for b in (self.expression(here.module, base) for base in here.node.bases) if b is not None)
        self._lineages[cls] = tuple(out)
        return self._lineages[cls]

    def definer(self, cls: ClassRef, attribute: str) -> ClassRef | None:
        """The class of ``cls``'s lineage whose body defines ``attribute`` (a ``def`` or an assignment), or None."""
        for here in self.lineage(cls):
            for node in here.node.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute:
                    return here
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == attribute for t in node.targets
                ):
                    return here
        return None

    def sets(self, cls: ClassRef, attribute: str) -> bool:
        """Does a class of ``cls``'s lineage assign ``self.<attribute>`` a value other than ``None``?"""
        return any(attribute in self._sets(here) for here in self.lineage(cls))

    def reads(self, cls: ClassRef, holder: str, attribute: str) -> bool:
        """Does a class of ``cls``'s lineage read ``<x>.<holder>.<attribute>``
        (``forward_batch.spec_info.hidden_states``)?"""
        return any((holder, attribute) in self._pairs(here) for here in self.lineage(cls))

    def _pairs(self, cls: ClassRef) -> frozenset[tuple[str, str]]:
        """Every ``(holder, attribute)`` of an ``<x>.<holder>.<attribute>`` in ``cls``'s own body (one walk a class)."""
        if cls not in self._attribute_pairs:
            self._attribute_pairs[cls] = frozenset(
                (node.value.attr, node.attr)
                for node in ast.walk(cls.node)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            )
        return self._attribute_pairs[cls]

    def _sets(self, cls: ClassRef) -> frozenset[str]:
        """The attributes the methods of ``cls``'s own body assign on ``self``, ``None`` assignments left out
        (``self.pooler: Optional[Pooler] = None`` declares the attribute; it does not give the class a pooler)."""
        if cls not in self._assigned:
            found = set()
            for node in ast.walk(cls.node):
                if isinstance(node, ast.Assign | ast.AnnAssign) and not (
                    isinstance(node.value, ast.Constant) and node.value.value is None
                ):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    found.update(
                        t.attr
                        for t in targets
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                    )
            self._assigned[cls] = frozenset(found)
        return self._assigned[cls]

    def calls_on_self(self, cls: ClassRef, method: str) -> frozenset[str]:
        """The attributes of ``self`` called (``self.pooler(...)``) in the nearest ``method`` of ``cls``'s lineage;
        empty when no class of it defines ``method`` with a ``def``."""
        here = self.definer(cls, method)
        functions = (
            [] if here is None else [n for n in here.node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        )
        body = next((f for f in functions if f.name == method), None)
        if body is None:
            return frozenset()
        return frozenset(
            node.func.attr
            for node in ast.walk(body)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        )

    def builds(self, cls: ClassRef) -> tuple[ClassRef, ...]:
        """The classes of the package the lineage's bodies call (``self.model = LlamaModel(...)``), each once."""
        out: list[ClassRef] = []
        for here in self.lineage(cls):
            out.extend(b for b in self._calls(here) if b not in out and b != cls)
        return tuple(out)

    def _calls(self, cls: ClassRef) -> tuple[ClassRef, ...]:
        """The classes of the package ``cls``'s own body calls by name (``LlamaModel(...)``, ``m.LlamaModel(...)``)."""
        if cls not in self._built:
            called = {
                ast.unparse(node.func): node.func
                for node in ast.walk(cls.node)
                if isinstance(node, ast.Call)
                and (
                    isinstance(node.func, ast.Name)
                    or (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name))
                )
                and not (isinstance(node.func, ast.Attribute) and node.func.value.id == "self")
            }
            found = (self.expression(cls.module, func) for func in called.values())
            self._built[cls] = tuple(dict.fromkeys(b for b in found if b is not None))
        return self._built[cls]


__all__ = ["ClassRef", "MAX_DEPTH", "Package"]
