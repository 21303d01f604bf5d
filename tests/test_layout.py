"""The house keeps its layers: an import-graph check of ``patchkit/`` (issue 19), read with ``ast`` alone.

The layering rule (docs/development.md, "The layering rule"), one test per rule:

1. A module imports only from its own group or from strictly lower ranks (:data:`RANKS`); the
   same-rank siblings (``store``/``codemods``, ``rehearse``/``guard``) do not import each other.
   Every module must belong to a group of the map.
2. No import cycle between any two modules, counting imports inside functions
   (:class:`graphlib.TopologicalSorter` finds them); and no module imports its own subpackage's
   ``__init__`` (:func:`own_package_imports`): that ``__init__`` is the subpackage's face to the
   layers above and names its modules (by import, or by string as the codemod catalogue does), so a
   module reading from it closes a cycle the graph cannot always see (issue 25: ``codemods/base.py``
   read the catalogue from ``patchkit.codemods``, whose entries load ``base``'s subclasses).
3. An import inside a function (or a method, or a lambda) carries a trailing ``# lazy: <why>``.
4. No module over :data:`MAX_LINES` lines.
5. A vLLM release number written in a string of a code line (not a docstring) appears only in
   ``vllm/release/contract.py``, which names each release boundary once (:func:`release_literals`; issue 25:
   "0.18.0" was written in 19 code lines across 9 files). ``patches/`` is held to it too: its
   declarative modules restate contract facts (native from 0.18.0, Kimi-K2.5 from 0.15.1), so they
   name them (``vllm=KIMI_K25_RELEASES, upstream_from=NATIVE_FROM``) rather than copy them.
6. Inside ``vllm/`` (issue 33), every module stands in a *wing*, a subpackage answering one question
   (:data:`WINGS`), of at most :data:`MAX_WING_MODULES` modules (its ``__init__`` not counted); a wing
   imports only wings of strictly lower rank, inside functions and under ``TYPE_CHECKING`` too (no arrow
   back up; two wings of one rank do not import each other), so there is no cycle between wings.
   An engine whose facts are one wing (:data:`FLAT_WINGS`: ``sglang/``, issue 44) is one folder of at most
   :data:`MAX_WING_MODULES` modules.

Each checker takes a package folder and returns its violations as lines naming the module and the
line; the ``test_rule_*_can_fail`` tests feed each one a small synthetic package in ``tmp_path``.

What is read: every ``import`` statement of every ``.py`` file under the package, at any depth.
An ``from p import name`` where ``p/name.py`` (or ``p/name/``) exists is an import of that module;
importing ``a.b.c`` also runs the ``__init__`` of ``a.b`` (an edge for cycles). Imports guarded by
``if TYPE_CHECKING:`` never run: they count for rule 1 (a dependency is a dependency) but not for
cycles. Imports by string (``importlib.import_module("patchkit.patches")``) are not seen.
``patches/`` (installed as ``patchkit.patches``) is outside ``patchkit/`` and is not checked.
"""

from __future__ import annotations

import ast
import functools
import graphlib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

import patchkit

PACKAGE = Path(patchkit.__file__).resolve().parent

BASE = (
    "__init__",
    "errors",
    "results",
    "plugin_results",
    "settings",
    "interrupt",
    "advice",
    "pending",
    "jsonable",
    "interpreter",
    "distributions",
)
"""The base modules (rank 0): they import nothing of ours but each other, so they are one group."""
TOP = ("entry", "__main__")
"""The entry points (rank 8), one group."""
API = ("api", "api_steps")
"""The API (rank 6): ``api.py`` and the named steps of its writing commands, one group."""
RANKS: dict[str, int] = {
    "base": 0,
    "vllm": 1,
    "sglang": 1,
    "store": 2,
    "codemods": 2,
    "plan": 3,
    "checks": 4,
    "rehearse": 5,
    "guard": 5,
    "watch": 5,
    "api": 6,
    "ui": 7,
    "top": 8,
}
"""Rank of each group, as docs/development.md lists them: a group imports only itself and lower ranks."""

WINGS: dict[str, int] = {
    "release": 0,
    "registry": 1,
    "runner": 1,
    "classes": 2,
    "plugins": 2,
    "stream": 3,
    "checkpoints": 3,
    "chain": 4,
    "shapes": 5,
}
"""Rank of each wing of ``vllm/``, as docs/development.md's "The vLLM wings" draws them: a wing imports
only wings of strictly lower rank (rule 6)."""
MAX_WING_MODULES = 8
"""The issue's "wings of at most 8 modules each" (the wing's ``__init__`` is its face, not counted)."""
FLAT_WINGS = ("sglang",)
"""Engines whose facts are one wing, a folder of at most :data:`MAX_WING_MODULES` modules without sub-folders
(issue 44: SGLang's wing beside ``vllm/``); rank 1 like ``vllm``, so neither imports the other (rule 1)."""

MAX_LINES = 500
"""The issue's "no module over about 500 lines", taken as exactly 500."""
MAX_FUNCTION_LINES = 80
"""Issue 33: no function over 80 lines, its decorators, signature and docstring counted."""
FUNCTION_RULE_SKIPS: tuple[str, ...] = ()
"""Subpackages :func:`long_functions` skips: none (``vllm/``'s long functions were split with its wings)."""

LAZY = re.compile(r"#\s*lazy:\s*\S")


# -- reading the package -------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One imported module of one statement: who imports it, where, and how."""

    importer: str
    target: str
    line: int
    in_function: bool
    type_checking: bool

    def where(self, root: Path) -> str:
        return f"{_relpath(root, self.importer)}:{self.line}"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under the package folder ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _relpath(root: Path, module: str) -> str:
    path = _modules_cached(root)[module]
    return path.relative_to(root.parent).as_posix()


_CACHE: dict[Path, dict[str, Path]] = {}


def _modules_cached(root: Path) -> dict[str, Path]:
    if root not in _CACHE:
        _CACHE[root] = _modules(root)
    return _CACHE[root]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.Module):
    """``(import node, inside a function, under TYPE_CHECKING)`` for every import of the module."""

    def visit(node: ast.AST, in_function: bool, type_checking: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function, type_checking
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, True, type_checking)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), in_function, type_checking)
            else:
                yield from visit(child, in_function, type_checking)

    yield from visit(tree, False, False)


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), str(path))


@functools.lru_cache(maxsize=None)
def _imports(root: Path) -> tuple[Import, ...]:
    return tuple(imports(root))


def imports(root: Path) -> list[Import]:
    """Every import of a module of the package ``root`` by a module of it."""
    modules = _modules_cached(root)
    out: list[Import] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node, in_function, type_checking in _statements(_parsed(path)):
            for target in _targets(node, name, is_package, modules):
                if target != name:
                    out.append(Import(name, target, node.lineno, in_function, type_checking))
    return out


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The modules of the package (keys of ``modules``) one import statement names."""
    root = next(iter(modules)).split(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return [_nearest(n, modules) for n in names if n == root or n.startswith(root + ".") if _nearest(n, modules)]
    if node.level:
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
        if node.module and source not in modules and not any(m.startswith(source + ".") for m in modules):
            # no such module in the tree: a plugin's sibling that exists only where it is installed
            # (guard_plugin's ``from .plugin_file import``, patchkit/store/plugin_file.py there)
            return []
    else:
        source = node.module or ""
    if source != root and not source.startswith(root + "."):
        return []
    found = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        found.append(sub if sub in modules else _nearest(source, modules))
    return sorted({f for f in found if f})


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its nearest enclosing module that is a file of the package."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def group(module: str) -> str | None:
    """The group of a dotted module name (``patchkit.vllm.shapes.classify`` -> ``vllm``), None outside the map."""
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    if head in BASE and len(parts) <= 2:
        return "base"
    if head in TOP and len(parts) == 2:
        return "top"
    if head in API and len(parts) == 2:
        return "api"
    return head if head in RANKS and head not in ("base", "top") else None


# -- the checkers: each returns its violations, one line each --------------------------------------


def unranked(root: Path) -> list[str]:
    """Rule 1: modules that belong to no group of :data:`RANKS`."""
    return [
        f"{_relpath(root, m)}: in no group of the layer map (add it to a subpackage or to RANKS)"
        for m in _modules_cached(root)
        if group(m) is None
    ]


def upward_imports(root: Path) -> list[str]:
    """Rule 1: imports of a group of a higher rank."""
    out = []
    for imp in _imports(root):
        a, b = group(imp.importer), group(imp.target)
        if a is None or b is None or a == b:
            continue
        if RANKS[b] > RANKS[a]:
            out.append(
                f"{imp.where(root)}: {imp.importer} (rank {RANKS[a]}, {a}) imports {imp.target} "
                f"(rank {RANKS[b]}, {b}), a higher layer"
            )
    return out


def sibling_imports(root: Path) -> list[str]:
    """Rule 1: imports between two different groups of the same rank (store/codemods, rehearse/guard)."""
    out = []
    for imp in _imports(root):
        a, b = group(imp.importer), group(imp.target)
        if a is None or b is None or a == b:
            continue
        if RANKS[b] == RANKS[a]:
            out.append(
                f"{imp.where(root)}: {imp.importer} ({a}) imports {imp.target} ({b}), "
                f"a sibling of the same rank {RANKS[a]}"
            )
    return out


def cycles(root: Path) -> list[str]:
    """Rule 2: import cycles, counting imports inside functions (not those under TYPE_CHECKING).

    Each cycle :class:`graphlib.TopologicalSorter` finds is reported with the line of each edge, then
    one of its edges is dropped and the search goes on, so every independent cycle is named.
    """
    modules = _modules_cached(root)
    edges: dict[tuple[str, str], Import] = {}
    for imp in _imports(root):
        if imp.type_checking:
            continue
        # importing a.b.c also runs a/__init__ and a/b/__init__ (those the importer is not inside)
        parts = imp.target.split(".")
        for i in range(1, len(parts) + 1):
            target = ".".join(parts[:i])
            if target in modules and target != imp.importer and not imp.importer.startswith(target + "."):
                edges.setdefault((imp.importer, target), imp)
    out = []
    while True:
        graph: dict[str, set[str]] = {m: set() for m in modules}
        for a, b in edges:
            graph[a].add(b)
        try:
            graphlib.TopologicalSorter(graph).prepare()
            return out
        except graphlib.CycleError as exc:
            # [n0, n1, ..., n0], each a predecessor (a dependency) of the next: reversed, each imports the next
            ring = list(reversed(exc.args[1]))
            steps = []
            for a, b in zip(ring, ring[1:]):
                imp = edges[(a, b)]
                lazy = " (in a function)" if imp.in_function else ""
                steps.append(f"{imp.where(root)}{lazy} {a} -> {b}")
            out.append("import cycle " + " -> ".join(ring) + ": " + "; ".join(steps))
            del edges[(ring[-2], ring[-1])]


def own_package_imports(root: Path) -> list[str]:
    """Rule 2: a module of a subpackage importing that subpackage's own ``__init__`` (or an enclosing
    one's below the root). The root package's ``__init__`` (rank 0: the version) is not a subpackage."""
    top = next(iter(_modules_cached(root))).split(".")[0]
    return [
        f"{imp.where(root)}: {imp.importer} imports its own package's __init__ ({imp.target}); "
        "import the module that holds the name"
        for imp in _imports(root)
        if imp.target != top and imp.importer.startswith(imp.target + ".") and not imp.type_checking
    ]


def unmarked_lazy_imports(root: Path) -> list[str]:
    """Rule 3: imports inside a function without a trailing ``# lazy: <why>`` on one of their lines."""
    out = []
    for name, path in _modules_cached(root).items():
        source = path.read_bytes()
        comments: dict[int, str] = {}
        for tok in tokenize.tokenize(io.BytesIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string
        for node, in_function, _ in _statements(_parsed(path)):
            if not in_function:
                continue
            lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            if not any(LAZY.search(comments.get(n, "")) for n in lines):
                text = source.splitlines()[node.lineno - 1].decode("utf-8", "replace")[node.col_offset :]
                text = text.split(";")[0].split("#")[0].strip()
                out.append(
                    f"{_relpath(root, name)}:{node.lineno}: '{text}' inside a function "
                    "without a trailing '# lazy: <why>'"
                )
    return out


def long_modules(root: Path) -> list[str]:
    """Rule 4: modules over :data:`MAX_LINES` lines."""
    out = []
    for name, path in _modules_cached(root).items():
        n = len(path.read_bytes().splitlines())
        if n > MAX_LINES:
            out.append(f"{_relpath(root, name)}: {n} lines (over {MAX_LINES}): split it along its seams")
    return out


def long_functions(root: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Rule 5: functions (methods and nested functions too) over :data:`MAX_FUNCTION_LINES` lines,
    outside the subpackages in ``skip``."""
    out = []
    for name, path in _modules_cached(root).items():
        if len(name.split(".")) > 2 and name.split(".")[1] in skip:
            continue
        for node in ast.walk(_parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = (node.end_lineno or node.lineno) - first + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(
                        f"{_relpath(root, name)}:{first}: {node.name} is {n} lines (over "
                        f"{MAX_FUNCTION_LINES}): split it into named steps"
                    )
    return out


RELEASE = re.compile(r"(?<![\w.])v?0\.\d{1,2}\.(?:\d+|x)(?![\w])")
"""A vLLM release in a text: ``0.18.0``, ``v0.18.0``, ``0.20.x`` (vLLM's releases are all 0.x)."""
RELEASES_AT_HOME = ("vllm/release/contract.py", "sglang/contract.py")
"""Where release boundaries are named (relative to the package folder): vLLM's, and the SGLang wing's contract."""
MEASURED_ON = ("rehearse/tolerances.py",)
"""Modules whose release numbers say where a tolerance was measured (``Tolerance``'s note, "H200, vLLM
0.20.2"): provenance of a measurement, not a boundary any decision rests on."""


def release_literals(root: Path) -> list[str]:
    """Rule 5: release numbers in the strings of code lines (f-string parts included) outside
    :data:`RELEASES_AT_HOME` and :data:`MEASURED_ON`. Docstrings (a string alone as a statement) are
    words about the code and may cite releases; ``__version__`` is patchkit's own version."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in RELEASES_AT_HOME or rel in MEASURED_ON:
            continue
        tree = _parsed(path)
        words = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        words |= {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["__version__"]
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in words:
                for found in RELEASE.findall(node.value):
                    out.append(
                        f"{root.name}/{rel}:{node.lineno}: release {found} written as a literal; "
                        "name it in vllm/release/contract.py and use the name"
                    )
    return sorted(out)


def wing(module: str) -> str | None:
    """The wing of a dotted module name (``patchkit.vllm.stream.residual`` -> ``stream``), None outside ``vllm/``
    and for ``vllm/``'s own ``__init__``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "vllm" else None


def wingless(root: Path) -> list[str]:
    """Rule 6: modules of ``vllm/`` outside every wing of :data:`WINGS` (a flat module, or an unlisted folder)."""
    return [
        f"{_relpath(root, m)}: in no wing of vllm/ (move it into the wing whose question it answers, "
        "or add the wing to WINGS)"
        for m in _modules_cached(root)
        if m.split(".")[1:2] == ["vllm"] and m != f"{root.name}.vllm" and wing(m) not in WINGS
    ]


def wing_imports(root: Path) -> list[str]:
    """Rule 6: imports from one wing of ``vllm/`` to a wing of the same or a higher rank (lazy ones too)."""
    out = []
    for imp in _imports(root):
        a, b = wing(imp.importer), wing(imp.target)
        if a is None or b is None or a == b or a not in WINGS or b not in WINGS:
            continue
        if WINGS[b] >= WINGS[a]:
            how = "a higher wing" if WINGS[b] > WINGS[a] else "a sibling wing of the same rank"
            lazy = " (in a function)" if imp.in_function else ""
            out.append(
                f"{imp.where(root)}{lazy}: {imp.importer} (wing {a}, rank {WINGS[a]}) imports {imp.target} "
                f"(wing {b}, rank {WINGS[b]}), {how}"
            )
    return out


def crowded_wings(root: Path) -> list[str]:
    """Rule 6: wings of more than :data:`MAX_WING_MODULES` modules, not counting their ``__init__``."""
    count: dict[str, int] = {}
    for m, path in _modules_cached(root).items():
        if wing(m) is not None and path.name != "__init__.py":
            count[wing(m)] = count.get(wing(m), 0) + 1
    return [
        f"{root.name}/vllm/{w}/: {n} modules (over {MAX_WING_MODULES}): split the wing by the question each answers"
        for w, n in sorted(count.items())
        if n > MAX_WING_MODULES
    ]


def crowded_flat_wings(root: Path) -> list[str]:
    """Rule 6 for :data:`FLAT_WINGS`: each is one folder (no sub-package) of at most :data:`MAX_WING_MODULES`
    modules, its ``__init__`` not counted."""
    out = []
    for name in FLAT_WINGS:
        modules = [m for m in _modules_cached(root) if m.split(".")[1:2] == [name]]
        deep = sorted(m for m in modules if len(_modules_cached(root)[m].relative_to(root / name).parts) > 1)
        out.extend(f"{_relpath(root, m)}: {name}/ is one wing; no sub-package" for m in deep)
        count = sum(1 for m in modules if _modules_cached(root)[m].name != "__init__.py")
        if count > MAX_WING_MODULES:
            why = "look for the module that holds the concept"
            out.append(f"{root.name}/{name}/: {count} modules (over {MAX_WING_MODULES}): {why}")
    return out


def _report(violations: list[str]) -> str:
    return f"{len(violations)} violation(s):\n  " + "\n  ".join(violations)


# -- the rules on patchkit/ ----------------------------------------------------------------------


def test_every_module_is_in_a_layer():
    found = unranked(PACKAGE)
    assert not found, _report(found)


def test_imports_go_only_down():
    found = upward_imports(PACKAGE)
    assert not found, _report(found)


def test_same_rank_siblings_do_not_import_each_other():
    found = sibling_imports(PACKAGE)
    assert not found, _report(found)


def test_no_import_cycle():
    found = cycles(PACKAGE)
    assert not found, _report(found)


def test_no_module_imports_its_own_package():
    found = own_package_imports(PACKAGE)
    assert not found, _report(found)


def test_every_import_inside_a_function_says_why():
    found = unmarked_lazy_imports(PACKAGE)
    assert not found, _report(found)


def test_no_module_is_over_the_limit():
    found = long_modules(PACKAGE)
    assert not found, _report(found)


def test_no_function_is_over_the_limit():
    # patchkit/vllm/ is skipped until its own split lands (FUNCTION_RULE_SKIPS); then it is covered too
    found = long_functions(PACKAGE, FUNCTION_RULE_SKIPS)
    assert not found, _report(found)


def test_release_boundaries_are_named_in_the_contract():
    found = release_literals(PACKAGE) + release_literals(PACKAGE.parent / "patches")
    assert not found, _report(found)


def test_every_vllm_module_is_in_a_wing():
    found = wingless(PACKAGE)
    assert not found, _report(found)


def test_vllm_wings_import_only_below():
    found = wing_imports(PACKAGE)
    assert not found, _report(found)


def test_no_vllm_wing_is_over_the_limit():
    found = crowded_wings(PACKAGE)
    assert not found, _report(found)


def test_no_flat_wing_is_over_the_limit():
    found = crowded_flat_wings(PACKAGE)
    assert not found, _report(found)


def test_rule_flat_wings_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {**CLEAN, "sglang/deep/x.py": "", **{f"sglang/m{i}.py": "" for i in range(MAX_WING_MODULES)}},
    )
    assert crowded_flat_wings(root) == [
        "patchkit/sglang/deep/__init__.py: sglang/ is one wing; no sub-package",
        "patchkit/sglang/deep/x.py: sglang/ is one wing; no sub-package",
        f"patchkit/sglang/: {MAX_WING_MODULES + 1} modules (over {MAX_WING_MODULES}): "
        "look for the module that holds the concept",
    ]


def test_the_sglang_wing_does_not_import_the_vllm_wing():
    """The two engines are siblings of rank 1 (rule 1); SGLang reuses only the target-neutral base."""
    edges = {(i.importer, i.target) for i in imports(PACKAGE)}
    assert any(a.startswith("patchkit.sglang.") and b == "patchkit.distributions" for a, b in edges)
    assert not [(a, b) for a, b in edges if a.startswith("patchkit.sglang") and b.startswith("patchkit.vllm")]


def test_the_wing_map_is_the_tree():
    """Every wing of :data:`WINGS` is a folder of ``vllm/`` with its ``__init__`` (no stale entry)."""
    folders = {p.parent.name for p in (PACKAGE / "vllm").glob("*/__init__.py")}
    assert folders == set(WINGS)


def test_the_reader_sees_the_real_graph():
    """The checkers read what is there (guards against a reader that finds nothing, so passes)."""
    modules = _modules_cached(PACKAGE)
    assert {
        "patchkit",
        "patchkit.api",
        "patchkit.codemods",
        "patchkit.codemods.capture",
        "patchkit.vllm.release.contract",
        "patchkit.ui.cli",
    } <= set(modules)
    edges = {(i.importer, i.target) for i in imports(PACKAGE)}
    assert ("patchkit.codemods.capture", "patchkit.codemods.base") in edges  # from patchkit.codemods.base import ...
    assert ("patchkit.codemods.capture", "patchkit.codemods.tree") in edges  # from patchkit.codemods import tree
    assert ("patchkit.codemods.capture", "patchkit.vllm.release.contract") in edges
    assert ("patchkit.codemods", "patchkit.codemods.base") in {
        (i.importer, i.target) for i in imports(PACKAGE) if i.type_checking
    }
    assert len(edges) > 100


# -- each rule can fail: a synthetic package --------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "patchkit"
    for rel, code in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        path.write_text(code)
    return root


CLEAN = {
    "errors.py": "class Error(Exception):\n    pass\n",
    "results.py": "from patchkit.errors import Error\n",
    "vllm/release/contract.py": "from patchkit import errors\n",
    "codemods/base.py": "from patchkit.vllm.release.contract import *\nfrom . import tree\n",
    "codemods/tree.py": "import ast\n",
    "plan/spec.py": "from ..codemods import base\nfrom ..store.journal import x\n",
    "store/journal.py": "from patchkit.vllm.release import contract\n",
    "api.py": (
        "from patchkit.vllm.release import contract\n\n\ndef f():\n    from patchkit.plan import spec  # lazy: a test\n"
    ),
    "ui/cli.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from patchkit.top import x\n"
        "from patchkit import api\n\n\ndef g():\n    import json  # lazy: json is slow\n"
    ),
}


def test_rules_pass_on_a_clean_synthetic_package(tmp_path):
    root = _package(tmp_path, CLEAN)
    assert len(imports(root)) == 11
    assert (
        unranked(root),
        upward_imports(root),
        sibling_imports(root),
        cycles(root),
        own_package_imports(root),
        unmarked_lazy_imports(root),
        long_modules(root),
    ) == ([], [], [], [], [], [], [])


def test_rule_unranked_can_fail(tmp_path):
    root = _package(tmp_path, {**CLEAN, "helpers.py": "", "misc/util.py": ""})
    assert unranked(root) == [
        "patchkit/helpers.py: in no group of the layer map (add it to a subpackage or to RANKS)",
        "patchkit/misc/__init__.py: in no group of the layer map (add it to a subpackage or to RANKS)",
        "patchkit/misc/util.py: in no group of the layer map (add it to a subpackage or to RANKS)",
    ]


def test_rule_upward_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "vllm/shapes/classify.py": "import os\nfrom ...plan.spec import Patch\n",
            "errors.py": "from patchkit.api import f\n",
            "api.py": "def f():\n    from patchkit.ui import cli  # lazy: a lazy import counts too\n",
        },
    )
    found = upward_imports(root)
    assert len(found) == 3, found
    assert "patchkit/api.py:2: patchkit.api (rank 6, api) imports patchkit.ui.cli (rank 7, ui), a higher layer" in found
    assert (
        "patchkit/vllm/shapes/classify.py:2: patchkit.vllm.shapes.classify (rank 1, vllm) imports "
        "patchkit.plan.spec (rank 3, plan), a higher layer" in found
    )
    assert (
        "patchkit/errors.py:1: patchkit.errors (rank 0, base) imports patchkit.api (rank 6, api), a higher layer"
        in found
    )


def test_rule_siblings_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "store/journal.py": "from patchkit.codemods.base import Site\n",
            "guard/guard.py": "def f():\n    import patchkit.rehearse.engine  # lazy: test\n",
            "rehearse/engine.py": "",
        },
    )
    assert sibling_imports(root) == [
        "patchkit/guard/guard.py:2: patchkit.guard.guard (guard) imports patchkit.rehearse.engine (rehearse), "
        "a sibling of the same rank 5",
        "patchkit/store/journal.py:1: patchkit.store.journal (store) imports patchkit.codemods.base (codemods), "
        "a sibling of the same rank 2",
    ]


def test_rule_cycles_can_fail(tmp_path):
    # two cycles: one in a group (allowed by rule 1) through a function, one through a package's __init__
    # (importing patchkit.plan.other runs patchkit/plan/__init__.py first)
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "api.py": "",
            "vllm/a.py": "from . import b\n",
            "vllm/b.py": "def f():\n    from patchkit.vllm.a import x  # lazy: test\n",
            "plan/__init__.py": "from patchkit.checks.a import z\n",
            "plan/other.py": "",
            "checks/a.py": "from patchkit.plan.other import y\n",
            "plan/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import typed2\n",
            "plan/typed2.py": "from . import typed\n",
        },
    )
    found = cycles(root)
    assert len(found) == 2, found
    ab = next(c for c in found if "patchkit.vllm.a" in c)
    assert "patchkit/vllm/a.py:1 patchkit.vllm.a -> patchkit.vllm.b" in ab
    assert "patchkit/vllm/b.py:2 (in a function) patchkit.vllm.b -> patchkit.vllm.a" in ab
    plan = next(c for c in found if "patchkit.checks.a" in c)
    assert "patchkit/plan/__init__.py:1 patchkit.plan -> patchkit.checks.a" in plan
    assert "patchkit/checks/a.py:1 patchkit.checks.a -> patchkit.plan" in plan
    assert not any("typed" in c for c in found), "an import under TYPE_CHECKING never runs"


def test_rule_own_package_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "codemods/capture.py": (
                "from patchkit import errors\nfrom patchkit.codemods import tree\n"
                "def f():\n    from patchkit.codemods import CATALOGUE  # lazy: a test\n"
            ),
            "codemods/deep/x.py": "from .. import y\n",
            "codemods/typed.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from patchkit.codemods import K\n"
            ),
        },
    )
    assert own_package_imports(root) == [
        "patchkit/codemods/capture.py:4: patchkit.codemods.capture imports its own package's __init__ "
        "(patchkit.codemods); import the module that holds the name",
        "patchkit/codemods/deep/x.py:1: patchkit.codemods.deep.x imports its own package's __init__ "
        "(patchkit.codemods); import the module that holds the name",
    ]


def test_rule_release_literals_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "__init__.py": '__version__ = "0.1.0"\n',
            "vllm/release/contract.py": 'NATIVE_FROM = "0.18.0"\n',
            "rehearse/tolerances.py": 'NOTE = "H200, vLLM 0.20.2"\n',
            "plan/engine.py": (
                '"""Native from 0.18.0 (a docstring may cite it)."""\n'
                'X = Version("0.18.0")\n'
                'def f(v):\n    """On 0.10.2."""\n'
                '    return f"vLLM >= 0.18.0 ({v})", "from v0.18.0", "0.20.x", "1.0.18.0"\n'
            ),
        },
    )
    assert release_literals(root) == [
        "patchkit/plan/engine.py:2: release 0.18.0 written as a literal; "
        "name it in vllm/release/contract.py and use the name",
        "patchkit/plan/engine.py:5: release 0.18.0 written as a literal; "
        "name it in vllm/release/contract.py and use the name",
        "patchkit/plan/engine.py:5: release 0.20.x written as a literal; "
        "name it in vllm/release/contract.py and use the name",
        "patchkit/plan/engine.py:5: release v0.18.0 written as a literal; "
        "name it in vllm/release/contract.py and use the name",
    ]


def test_rule_lazy_comment_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "checks/verify.py": (
                "import os  # lazy: at module level the comment is not needed\n"
                "def f():\n"
                "    import json\n"
                "    from patchkit.vllm import (  # lazy: a multi-line import may carry it on its first line\n"
                "        contract,\n"
                "    )\n"
                "    from patchkit.errors import (\n"
                "        Error,\n"
                "    )  # lazy: or on its last\n"
                "    import ast  # lazy:\n"
                "    x = '# lazy: in a string'; import re\n"
                "class C:\n"
                "    def m(self):\n"
                "        g = lambda: __import__('x')\n"
                "        from patchkit import errors  # lazy  without the colon\n"
            ),
        },
    )
    assert unmarked_lazy_imports(root) == [
        "patchkit/checks/verify.py:3: 'import json' inside a function without a trailing '# lazy: <why>'",
        "patchkit/checks/verify.py:10: 'import ast' inside a function without a trailing '# lazy: <why>'",
        "patchkit/checks/verify.py:11: 'import re' inside a function without a trailing '# lazy: <why>'",
        "patchkit/checks/verify.py:15: 'from patchkit import errors' inside a function "
        "without a trailing '# lazy: <why>'",
    ]


def test_rule_long_modules_can_fail(tmp_path):
    root = _package(
        tmp_path, {**CLEAN, "ui/cli.py": "x = 1\n" * MAX_LINES, "ui/render.py": "x = 1\n" * (MAX_LINES + 1)}
    )
    assert long_modules(root) == [
        f"patchkit/ui/render.py: {MAX_LINES + 1} lines (over {MAX_LINES}): split it along its seams"
    ]


def test_rules_of_wings_pass_on_a_clean_synthetic_package(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "vllm/registry/table.py": "from patchkit.vllm.release import contract\n",
            "vllm/shapes/classify.py": "from ..registry import table\n",
        },
    )
    assert (wingless(root), wing_imports(root), crowded_wings(root)) == ([], [], [])


def test_rule_wings_can_fail(tmp_path):
    root = _package(
        tmp_path,
        {
            **CLEAN,
            "vllm/flat.py": "",
            "vllm/attic/old.py": "",
            "vllm/release/source.py": "from patchkit.vllm.registry.table import Registry\n",
            "vllm/registry/table.py": "",
            "vllm/runner/serving.py": "def f():\n    from ..registry import table  # lazy: test\n",
            "vllm/chain/links.py": "from patchkit.vllm.stream import residual\n",
            "vllm/stream/residual.py": "",
            **{f"vllm/classes/m{i}.py": "" for i in range(MAX_WING_MODULES + 1)},
            **{f"vllm/plugins/p{i}.py": "" for i in range(MAX_WING_MODULES)},
        },
    )
    assert wingless(root) == [
        "patchkit/vllm/attic/__init__.py: in no wing of vllm/ (move it into the wing whose question it answers, "
        "or add the wing to WINGS)",
        "patchkit/vllm/attic/old.py: in no wing of vllm/ (move it into the wing whose question it answers, "
        "or add the wing to WINGS)",
        "patchkit/vllm/flat.py: in no wing of vllm/ (move it into the wing whose question it answers, "
        "or add the wing to WINGS)",
    ]
    assert wing_imports(root) == [
        "patchkit/vllm/release/source.py:1: patchkit.vllm.release.source (wing release, rank 0) imports "
        "patchkit.vllm.registry.table (wing registry, rank 1), a higher wing",
        "patchkit/vllm/runner/serving.py:2 (in a function): patchkit.vllm.runner.serving (wing runner, rank 1) imports "
        "patchkit.vllm.registry.table (wing registry, rank 1), a sibling wing of the same rank",
    ]
    assert crowded_wings(root) == [
        f"patchkit/vllm/classes/: {MAX_WING_MODULES + 1} modules (over {MAX_WING_MODULES}): "
        "split the wing by the question each answers"
    ]


def test_rule_long_functions_can_fail(tmp_path):
    body = "    x = 1\n"
    fits = "def fits():\n" + body * (MAX_FUNCTION_LINES - 1)
    over = "@decorated\ndef over():\n" + body * (MAX_FUNCTION_LINES - 1)
    root = _package(tmp_path, {**CLEAN, "ui/cli.py": fits, "ui/render.py": over, "vllm/source.py": over})
    want = (
        f"patchkit/ui/render.py:1: over is {MAX_FUNCTION_LINES + 1} lines (over {MAX_FUNCTION_LINES}): "
        "split it into named steps"
    )
    assert long_functions(root, ("vllm",)) == [want]
    assert sorted(long_functions(root)) == [want, want.replace("ui/render.py", "vllm/source.py")]


# -- the suite's own layout: markers and the network ------------------------------------------------


def test_runtime_engine_cluster_tests_are_release_tests(request):
    """conftest marks them ``release``, so ``-m "not release"`` is the offline suite."""
    heavy = [i for i in request.session.items if {m.name for m in i.iter_markers()} & {"runtime", "engine", "cluster"}]
    unmarked = [i.nodeid for i in heavy if not any(m.name == "release" for m in i.iter_markers())]
    assert not unmarked, unmarked


def test_an_unmarked_test_runs_with_the_network_shut():
    import os
    import socket

    import vllm_release

    assert os.environ.get("PIP_NO_INDEX") == "1" and os.environ.get("UV_OFFLINE") == "1"
    with pytest.raises(RuntimeError, match="mark it @pytest.mark.release"):
        socket.create_connection(("192.0.2.1", 443), timeout=0.1)  # TEST-NET-1: refused before any packet
    with pytest.raises(RuntimeError, match="mark it @pytest.mark.release"):
        vllm_release.pristine_site_packages("0.17.1")
    with socket.socket() as server:  # this machine stays reachable
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass


def test_the_tests_cite_their_rules_from_the_repository():
    """Issue 25: this file cited its layering rule from a file outside the repository, by an absolute
    path (the session's brief). A rule a test enforces is cited from the repository: the rule is
    docs/development.md's "The layering rule", which must exist there."""
    root = PACKAGE.parent
    outside = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted((root / "tests").glob("*.py"))
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<![\w.])/wor[k]/", text)
    ]
    assert not outside, f"absolute paths outside the repository: {outside}"
    assert "docs/development.md" in (__doc__ or "")
    assert "## The layering rule" in (root / "docs" / "development.md").read_text(encoding="utf-8")
