"""A static, read-only view of the installed ``vllm`` package: modules, classes and imports.

Nothing here imports vLLM. Files are parsed with :mod:`ast` (fast, for reading); rewrites are
done elsewhere with libcst. Names are resolved the way Python would resolve them: a class is
found where it is defined, following ``from X import Y`` (relative or absolute) and
``import X as Y`` across modules, never by matching text or guessing file names.
"""

from __future__ import annotations

import ast
import functools
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from patchkit.errors import PatchkitError, SourceError

_MAX_IMPORT_HOPS = 8  # re-export chains in vLLM are one or two hops deep

_PARSED: OrderedDict[tuple[str, bytes], ast.Module] = OrderedDict()
_PARSED_MAX = 64  # more than the files one apply reads, twice (the planned tree and the checked one)


def parse(source: bytes, relpath: str) -> ast.Module:
    """``ast.parse(source, filename=relpath)``, remembered for the last few distinct files.

    ``apply`` parses the same bytes in several :class:`SourceTree` views (the install as it is,
    the planned result checked before writing); the trees are only read, never changed, so one
    parse serves them all.

    Raises:
        SyntaxError, ValueError, UnicodeError: as :func:`ast.parse` (nothing is remembered).
    """
    key = (relpath, source)
    tree = _PARSED.get(key)
    if tree is None:
        tree = ast.parse(source, filename=relpath)
        _PARSED[key] = tree
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(key)
    return tree


@functools.lru_cache(maxsize=16)
def nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of ``tree`` in :func:`ast.walk` order, remembered for the last few trees (several
    checks search the same large module, ``v1/spec_decode/eagle.py``, one walk serves them all)."""
    return tuple(ast.walk(tree))


@dataclass(frozen=True)
class ClassRef:
    """A class definition found in the vLLM sources.

    Attributes:
        module: dotted module name, e.g. ``vllm.model_executor.models.deepseek_v2``.
        name: the class name as defined (not an import alias).
        relpath: path of the defining file relative to site-packages, POSIX form.
        lineno: 1-based line of the ``class`` statement.
    """

    module: str
    name: str
    relpath: str
    lineno: int

    @property
    def location(self) -> str:
        """``relpath:lineno``, the form shown to users."""
        return f"{self.relpath}:{self.lineno}"


@dataclass(frozen=True)
class ModuleRef:
    """A module of the vLLM package (result of resolving an ``import`` alias)."""

    module: str


@dataclass
class _Module:
    name: str
    relpath: str
    source: bytes
    tree: ast.Module
    is_package: bool
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    # local name -> (absolute module, imported name or None for a module import)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    # names bound again in another arm of a module-level `if`: (absolute module, imported name)
    alternatives: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


class SourceTree:
    """Static view of the Python files under one site-packages directory.

    Args:
        site_packages: folder holding the top-level package (``vllm/``).
        overrides: optional ``{relpath: bytes}`` to read instead of the file on disk (used to
            check the result of a patch before anything is written).
    """

    def __init__(self, site_packages: Path, overrides: dict[str, bytes] | None = None) -> None:
        self.site_packages = Path(site_packages)
        self._overrides = dict(overrides or {})
        self._modules: dict[str, _Module | None] = {}
        self._relpaths: dict[str, str | None] = {}
        self._bases: dict[ClassRef, tuple[ClassRef | str, ...]] = {}
        self._mros: dict[ClassRef, tuple[ClassRef, ...]] = {}

    def _reinstall(self):
        """The step that gives a damaged file its release bytes back: ``pip install --force-reinstall
        --no-deps DIST==VERSION`` of the distribution in :attr:`site_packages`, or None when its
        metadata cannot be read either (read only on this error path)."""
        from patchkit.advice import reinstall  # lazy: only a damaged file needs it
        from patchkit.vllm.release.install import from_site_packages  # lazy: as above

        try:
            install = from_site_packages(self.site_packages)
        except PatchkitError:
            return None
        return reinstall(install.distribution, str(install.version), "the release's own files back")

    # -- files and modules -------------------------------------------------------------

    def relpath_of_module(self, module: str) -> str | None:
        """Relative path of ``module``'s file (``a/b.py`` or ``a/b/__init__.py``), or None.

        Looked up once per module (a scan asks about the same modules thousands of times).
        """
        if module in self._relpaths:
            return self._relpaths[module]
        base = module.replace(".", "/")
        found = None
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self._overrides or os.path.isfile(os.path.join(self.site_packages, candidate)):
                found = candidate
                break
        self._relpaths[module] = found
        return found

    def read_bytes(self, relpath: str) -> bytes:
        """The bytes of a file relative to site-packages (override first, then disk).

        Raises:
            SourceError: the file does not exist or cannot be read.
        """
        if relpath in self._overrides:
            return self._overrides[relpath]
        path = self.site_packages / relpath
        try:
            return path.read_bytes()
        except OSError as exc:
            raise SourceError(
                f"cannot read {path}: {exc.strerror or exc}",
                "check that the vLLM install is complete and readable",
            ) from exc

    def _load(self, module: str) -> _Module | None:
        if module in self._modules:
            return self._modules[module]
        relpath = self.relpath_of_module(module)
        if relpath is None:
            self._modules[module] = None
            return None
        source = self.read_bytes(relpath)
        try:
            tree = parse(source, relpath)
        except (ValueError, UnicodeError) as exc:  # null bytes, undecodable bytes
            raise SourceError(
                f"{relpath}: cannot be read as Python source: {exc}",
                "the installed file is damaged",
                self._reinstall(),
            ) from exc
        except SyntaxError as exc:
            raise SourceError(
                f"{relpath}:{exc.lineno}: syntax error: {exc.msg}",
                "the installed file is damaged",
                self._reinstall(),
            ) from exc
        mod = _Module(module, relpath, source, tree, relpath.endswith("__init__.py"))
        package = module if mod.is_package else module.rpartition(".")[0]
        for node in tree.body:
            self._index_statement(mod, node, package)
        self._modules[module] = mod
        return mod

    def _index_statement(self, mod: _Module, node: ast.stmt, package: str, branch: bool = False) -> None:
        if isinstance(node, ast.ClassDef):
            mod.classes[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            source_module = _absolute_module(node.module, node.level, package)
            for alias in node.names:
                if alias.name == "*":
                    continue
                local = alias.asname or alias.name
                if branch and local in mod.imports:
                    # another arm of an `if` binds it too (a per-platform dispatch): the first
                    # arm (the static default type checkers see) wins; the others are noted
                    mod.alternatives.setdefault(local, []).append((source_module, alias.name))
                    continue
                mod.imports[local] = (source_module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    mod.imports[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    mod.imports[top] = (top, None)
        elif isinstance(node, ast.If):
            # `if TYPE_CHECKING:` and platform branches: index both arms, the first arm first.
            for child in node.body + node.orelse:
                self._index_statement(mod, child, package, branch=True)
        elif isinstance(node, ast.Try):
            for child in node.body:
                self._index_statement(mod, child, package)

    def module_tree(self, module: str) -> ast.Module:
        """The parsed :mod:`ast` of ``module``.

        Raises:
            SourceError: the module has no file in this install, or does not parse.
        """
        mod = self._load(module)
        if mod is None:
            raise SourceError(
                f"module {module} has no file under {self.site_packages}",
                "the vLLM install is incomplete; reinstall it",
            )
        return mod.tree

    def has_module(self, module: str) -> bool:
        """True when ``module`` has a file in this install."""
        return self.relpath_of_module(module) is not None

    # -- name resolution -------------------------------------------------------------

    def class_node(self, ref: ClassRef) -> ast.ClassDef:
        """The :class:`ast.ClassDef` behind ``ref``."""
        mod = self._load(ref.module)
        assert mod is not None and ref.name in mod.classes
        return mod.classes[ref.name]

    def find_class(self, module: str, name: str) -> ClassRef | None:
        """Resolve ``name`` as seen from ``module`` to the class it denotes, following imports.

        Returns:
            The defining :class:`ClassRef`, or None when the name is not a class of the vLLM
            package (for instance ``nn.Module`` from torch, or a name the module lacks).
        """
        found = self.resolve_name(module, name)
        return found if isinstance(found, ClassRef) else None

    def resolve_name(self, module: str, name: str, _hops: int = 0) -> ClassRef | ModuleRef | None:
        """Resolve a top-level name of ``module``: a class defined there, or what an import binds."""
        if _hops > _MAX_IMPORT_HOPS:
            return None
        mod = self._load(module)
        if mod is None:
            return None
        if name in mod.classes:
            node = mod.classes[name]
            return ClassRef(module, name, mod.relpath, node.lineno)
        if name in mod.imports:
            source_module, imported = mod.imports[name]
            if imported is None:
                return ModuleRef(source_module) if self.has_module(source_module) else None
            submodule = f"{source_module}.{imported}"
            if self.has_module(source_module):
                found = self.resolve_name(source_module, imported, _hops + 1)
                if found is not None:
                    return found
            if self.has_module(submodule):
                return ModuleRef(submodule)
        return None

    def alternatives(self, module: str, name: str) -> list[str]:
        """Other bindings of ``name`` in ``module`` from other arms of an ``if`` (``"module.Name"``).

        vLLM 0.22+ ``vllm/models/deepseek_v4/__init__.py`` picks a per-platform implementation this
        way; :meth:`resolve_name` follows the first arm.
        """
        mod = self._load(module)
        return [f"{m}.{n}" for m, n in mod.alternatives.get(name, [])] if mod else []

    def resolve_expr(self, module: str, expr: ast.expr) -> ClassRef | ModuleRef | None:
        """Resolve a name or dotted attribute expression (``SupportsPP``, ``interfaces.SupportsPP``)."""
        if isinstance(expr, ast.Name):
            return self.resolve_name(module, expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve_expr(module, expr.value)
            if isinstance(owner, ModuleRef):
                return self.resolve_name(owner.module, expr.attr) or (
                    ModuleRef(f"{owner.module}.{expr.attr}") if self.has_module(f"{owner.module}.{expr.attr}") else None
                )
        if isinstance(expr, ast.Subscript):  # Generic[T] and the like
            return self.resolve_expr(module, expr.value)
        return None

    def bases(self, ref: ClassRef) -> list[ClassRef | str]:
        """The bases of ``ref`` in order: a :class:`ClassRef` where it is a vLLM class, else its source text.

        Resolved once per class and tree (a tree's files do not change).
        """
        if ref not in self._bases:
            node = self.class_node(ref)
            out: list[ClassRef | str] = []
            for base in node.bases:
                found = self.resolve_expr(ref.module, base)
                out.append(found if isinstance(found, ClassRef) else ast.unparse(base))
            self._bases[ref] = tuple(out)
        return list(self._bases[ref])

    def mro(self, ref: ClassRef) -> list[ClassRef]:
        """The method resolution order of ``ref`` restricted to vLLM classes (C3 linearization).

        External bases (torch, typing) are left out; they define none of the members patchkit
        checks. Falls back to a depth-first order if C3 has no solution for the vLLM part.
        """
        if ref not in self._mros:
            self._mros[ref] = tuple(_c3(ref, lambda r: [b for b in self.bases(r) if isinstance(b, ClassRef)]))
        return list(self._mros[ref])

    def method(self, ref: ClassRef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function ``name`` defined directly in the body of class ``ref``, or None."""
        for stmt in self.class_node(ref).body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return stmt
        return None

    def find_member(self, ref: ClassRef, name: str) -> tuple[ClassRef, ast.stmt] | None:
        """The first class in the MRO of ``ref`` whose body defines ``name``, with the definition."""
        for cls in self.mro(ref):
            for stmt in self.class_node(cls).body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                    return cls, stmt
                if _assigns_name(stmt, name):
                    return cls, stmt
        return None


def _assigns_name(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


def _absolute_module(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{module}" if module else base


def _c3(root: ClassRef, parents_of) -> list[ClassRef]:
    cache: dict[ClassRef, list[ClassRef]] = {}

    def linearize(cls: ClassRef, stack: tuple[ClassRef, ...]) -> list[ClassRef]:
        if cls in cache:
            return cache[cls]
        if cls in stack:  # a cycle cannot happen in real code; stop rather than recurse forever
            return [cls]
        parents = parents_of(cls)
        seqs = [linearize(p, stack + (cls,)) for p in parents] + [list(parents)]
        result = [cls]
        seqs = [list(s) for s in seqs if s]
        while seqs:
            for seq in seqs:
                head = seq[0]
                if not any(head in s[1:] for s in seqs):
                    break
            else:  # inconsistent for the vLLM-only view: fall back to depth-first order
                rest: list[ClassRef] = []
                for s in seqs:
                    rest.extend(c for c in s if c not in rest and c not in result)
                result.extend(rest)
                break
            result.append(head)
            seqs = [[c for c in s if c != head] for s in seqs]
            seqs = [s for s in seqs if s]
        cache[cls] = result
        return result

    return linearize(root, ())
