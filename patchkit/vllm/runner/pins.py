"""The declared units' code pinned to the releases patchkit was qualified on: fingerprints and their check.

Input: an install's sources (:class:`~patchkit.vllm.release.source.SourceTree`). Output: a :class:`Pins`,
each declared unit (:mod:`patchkit.vllm.runner.units`) found, absent, or *changed*: present, but its
code matches no fingerprint recorded for a qualified release (``unit_prints.json`` beside this module,
written by ``benchmarks/qualify.py``). A changed unit makes every verdict resting on it "not checked"
(:meth:`Pins.not_checked`); an absent one is left to the checks that look for its name
(:mod:`patchkit.vllm.runner.serving`), which already say "not checked" when a name is missing.

A fingerprint is of the normalised code: the unit's syntax tree without docstrings, comments, formatting
or line numbers (:func:`fingerprint`), serialised field by field so that the Python version patchkit
runs under does not change it (empty fields and ``type_params``/``type_comment``/``kind`` are left out).
Nothing here raises for a missing or unparsable file: it is absent.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from patchkit.vllm.release.install import from_site_packages
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.runner.units import UNITS, Concern, Unit

PRINTS_FILE = Path(__file__).with_name("unit_prints.json")
"""The recorded fingerprints: ``{"units": {key: {fingerprint: [release, ...]}}, "files": {file hash: {key:
[fingerprint, line] or null}}}``; ``files`` lets a qualified file's units be known without parsing it."""
_SKIPPED = {"type_params", "type_comment", "kind", "lineno", "col_offset", "end_lineno", "end_col_offset"}


@dataclass(frozen=True)
class Found:
    """One unit as an install holds it.

    Attributes:
        unit: the declared unit.
        relpath: the file it was found in (None: absent).
        line: the line of its first statement (0 when absent).
        print: its fingerprint ("" when absent).
        known: the qualified releases with the same fingerprint (empty: changed, or absent).
    """

    unit: Unit
    relpath: str | None
    line: int
    print: str
    known: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """True when the unit is present and its code matches no qualified release."""
        return self.relpath is not None and not self.known

    @property
    def location(self) -> str:
        """``file:line`` of the unit (the file alone when absent)."""
        return f"{self.relpath}:{self.line}" if self.relpath else self.unit.places[0][0]


@dataclass(frozen=True)
class Pins:
    """Every declared unit of one install, found or not.

    Attributes:
        version: the install's release, as its metadata says ("" unknown), for the messages.
        found: one :class:`Found` per declared unit, in declaration order.
    """

    version: str
    found: tuple[Found, ...]

    def changed(self, *concerns: Concern, generation: str | None = None) -> tuple[Found, ...]:
        """The changed units resting on any of ``concerns`` (none: every concern); with ``generation``
        (``"V1"``/``"V2"``), a unit of the other generation is left out."""
        return tuple(
            f
            for f in self.found
            if f.changed
            and f.unit.key not in _EXERCISED
            and (not concerns or f.unit.concern in concerns)
            and (generation is None or f.unit.generation in ("", generation))
        )

    def not_checked(self, *concerns: Concern, generation: str | None = None) -> str | None:
        """``"not checked: vLLM X changed <unit> (file:line) since the releases patchkit was qualified on
        (patchkit assumes: ...)"`` for the changed units of ``concerns``, or None when none changed."""
        lacking = self.changed(*concerns, generation=generation)
        if not lacking:
            return None
        release = f"vLLM {self.version}" if self.version else "this vLLM"
        units = "; ".join(f"{f.unit.what} ({f.location}; patchkit assumes it {f.unit.assumes})" for f in lacking)
        return f"not checked: {release} changed {units} since the releases patchkit was qualified on"


_EXERCISED: set[str] = set()
"""Units the serving environment ran and found doing what patchkit assumes (:func:`exercised`)."""


@contextmanager
def exercised(keys: Iterable[str]) -> Iterator[None]:
    """Within the block, the units ``keys`` count as settled: ``verify --runtime`` ran each in the serving
    environment and it did what patchkit assumes (:mod:`patchkit.checks.probe`'s ``probe_units``), so a
    changed fingerprint of theirs is no longer "not checked". The runtime report says which verdict rests
    on the exercise."""
    before = set(_EXERCISED)
    _EXERCISED.update(keys)
    try:
        yield
    finally:
        _EXERCISED.clear()
        _EXERCISED.update(before)


def fingerprint(
    source: bytes, name: str, anchors: tuple[str, ...] = (), entries_free: bool = False, without: tuple[str, ...] = ()
) -> tuple[str, int] | None:
    """The fingerprint of the unit ``name`` in one file's ``source``, and its line; None when absent.

    Args:
        source: the file's bytes.
        name: ``Class``, ``Class.method``, ``function``, ``dict[KEY]`` or a module-level annotated name
            (:attr:`patchkit.vllm.runner.units.Unit.places`).
        anchors: when given, only the statements of the unit that read one of these names count.
        entries_free: leave out the strings of list and tuple literals (a list of entries ``apply`` extends).
        without: the members of a class left out (units of their own).
    Returns:
        ``(sha256 hex of the normalised code, first line)``; None when the file does not parse, the name is
        not in it, or (with ``anchors``) no statement of it reads them.
    """
    try:
        module = _parsed(source)
    except (SyntaxError, ValueError):
        return None
    nodes = _locate(module, name)
    if nodes and anchors:
        nodes = [s for n in nodes for s in _anchored(n, anchors)]
    if not nodes:
        return None
    if without:
        nodes = [_without(n, without) for n in nodes]
    text = "\n".join(_serial(_undocumented(n), entries_free) for n in nodes)
    return hashlib.sha256(text.encode()).hexdigest()[:20], getattr(nodes[0], "lineno", 0)


def recorded() -> dict[str, dict]:
    """The recorded data (:data:`PRINTS_FILE`): ``units`` and ``files``; both empty when the file is missing."""
    if not _RECORDED:
        try:
            data = json.loads(PRINTS_FILE.read_text())
            _RECORDED.update(units=dict(data["units"]), files=dict(data.get("files", {})))
        except (OSError, ValueError, KeyError, TypeError):
            _RECORDED.update(units={}, files={})
    return _RECORDED


def file_hash(source: bytes) -> str:
    """The key of a file's bytes in the recorded ``files``."""
    return hashlib.sha256(source).hexdigest()[:20]


def place_hit(u: Unit, relpath: str, source: bytes) -> tuple[str, int] | None:
    """:func:`fingerprint` of unit ``u`` in the file ``relpath`` (its bytes ``source``): from the record when
    the bytes are a qualified release's (no parse), else computed over ``u``'s names for that file."""
    known = recorded()["files"].get(file_hash(source))
    if known is not None and u.key in known:
        hit = known[u.key]
        return (hit[0], hit[1]) if hit else None
    for place, name in u.places:
        if place == relpath:
            hit = fingerprint(source, name, u.anchors, u.entries_free, u.without)
            if hit is not None:
                return hit
    return None


_RECORDED: dict[str, dict] = {}
_PINS: "weakref.WeakKeyDictionary[SourceTree, Pins]" = weakref.WeakKeyDictionary()


def pins(tree: SourceTree, version: str = "") -> Pins:
    """Every declared unit of ``tree`` against the recorded fingerprints (cached per tree).

    Args:
        tree: the install's sources (overrides are read too: a planned apply's bytes).
        version: the install's release, for the messages ("" reads it from the tree's dist-info).
    """
    if tree in _PINS:
        return _PINS[tree]
    prints = recorded()["units"]
    out = []
    for u in UNITS:
        found = Found(u, None, 0, "", ())
        for relpath in dict.fromkeys(p for p, _ in u.places):
            try:
                source = tree.read_bytes(relpath)
            except Exception:  # noqa: BLE001 - a missing or unreadable file holds no unit
                continue
            hit = place_hit(u, relpath, source)
            if hit is not None:
                known = tuple(prints.get(u.key, {}).get(hit[0], ()))
                found = Found(u, relpath, hit[1], hit[0], known)
                break
        out.append(found)
    result = Pins(version or _version(tree), tuple(out))
    _PINS[tree] = result
    return result


def _version(tree: SourceTree) -> str:
    """The release of the ``vllm`` distribution beside ``tree``'s files, from its metadata
    (:func:`patchkit.vllm.release.install.from_site_packages`); "" when it cannot be read."""
    try:
        return str(from_site_packages(Path(tree.site_packages)).version)
    except Exception:  # noqa: BLE001 - no readable vLLM metadata: the messages say "this vLLM"
        return ""


_PARSED: dict[bytes, ast.Module] = {}


def _parsed(source: bytes) -> ast.Module:
    """``source`` parsed once per run (the runner files are large and several units share them)."""
    if source not in _PARSED:
        if len(_PARSED) >= 8:  # a long process (the tests, a cluster run) reads many releases: keep a few
            _PARSED.clear()
        _PARSED[source] = ast.parse(source)
    return _PARSED[source]


def _module_statements(module: ast.Module) -> list[ast.stmt]:
    """Module-level statements, those under a module-level ``if`` (``if TYPE_CHECKING:``) included."""
    out: list[ast.stmt] = []
    for stmt in module.body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out.extend(stmt.body + stmt.orelse)
    return out


def _locate(module: ast.Module, name: str) -> list[ast.AST]:
    """The nodes of ``name`` in ``module`` (every definition of it: overloads and property setters too)."""
    top = _module_statements(module)
    if name.endswith("]") and "[" in name:
        var, _, key = name[:-1].partition("[")
        return [v for s in top if _assigns(s, var) for v in _dict_entry(s, key)]
    head, _, member = name.partition(".")
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    found = [s for s in top if isinstance(s, defs) and s.name == head]
    if member:
        classes = [c for c in found if isinstance(c, ast.ClassDef)]
        return [s for c in classes for s in c.body if isinstance(s, defs) and s.name == member]
    return found or [s for s in top if isinstance(s, ast.AnnAssign) and _assigns(s, head)]


def _without(node: ast.AST, members: tuple[str, ...]) -> ast.AST:
    """A class ``node`` without its methods named in ``members`` (a copy; any other node unchanged)."""
    if not isinstance(node, ast.ClassDef):
        return node
    kept = [s for s in node.body if not (isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in members)]
    out = copy.copy(node)
    out.body = kept or [ast.Pass()]
    return out


def _assigns(stmt: ast.stmt, var: str) -> bool:
    """Whether ``stmt`` assigns the module-level name ``var``."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return any(isinstance(t, ast.Name) and t.id == var for t in targets)


def _dict_entry(stmt: ast.stmt, key: str) -> list[ast.AST]:
    """The value of ``key`` in the dict literal ``stmt`` assigns (empty when there is none)."""
    value = getattr(stmt, "value", None)
    if not isinstance(value, ast.Dict):
        return []
    return [v for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant) and k.value == key]


def _anchored(node: ast.AST, anchors: tuple[str, ...]) -> list[ast.stmt]:
    """The outermost statements under ``node`` whose own header reads an anchor (an ``if``'s test, a loop's
    target and iterable, a ``with``'s items, or a simple statement as a whole), with their bodies."""
    out: list[ast.stmt] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if _reads(_header(stmt), anchors):
                out.append(stmt)
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list):
                    visit([s for s in inner if isinstance(s, ast.stmt)] + _handler_bodies(inner))
            for case in getattr(stmt, "cases", []):
                visit(case.body)

    visit(list(getattr(node, "body", [])))
    return out


def _handler_bodies(items: list) -> list[ast.stmt]:
    """The statements of ``except`` handlers in ``items``."""
    return [s for h in items if isinstance(h, ast.ExceptHandler) for s in h.body]


def _header(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of ``stmt`` that are its own, not its nested statements'."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return list(stmt.items)
    if isinstance(stmt, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or hasattr(stmt, "cases"):
        return []
    return [stmt]


def _reads(parts: list[ast.AST], anchors: tuple[str, ...]) -> bool:
    """Whether any of ``parts`` names an anchor (a name, an attribute, a keyword or a string)."""
    for part in parts:
        for n in ast.walk(part):
            if (
                (isinstance(n, ast.Name) and n.id in anchors)
                or (isinstance(n, ast.Attribute) and n.attr in anchors)
                or (isinstance(n, ast.Constant) and n.value in anchors)
            ):
                return True
    return False


def _undocumented(node: ast.AST) -> ast.AST:
    """``node`` without the docstrings of itself and every function and class in it (a copy)."""
    copy = ast.parse(ast.unparse(node)) if not isinstance(node, ast.expr) else node
    for n in ast.walk(copy):
        body = getattr(n, "body", None)
        if (
            isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            n.body = body[1:] or [ast.Pass()]
    return copy


def _serial(node, entries_free: bool = False) -> str:
    """A serialisation of ``node`` that names every non-empty field and no position, stable across Pythons;
    with ``entries_free``, the strings of list and tuple literals are left out."""
    if isinstance(node, ast.AST):
        fields = []
        for field in node._fields:
            if field in _SKIPPED:
                continue
            value = getattr(node, field, None)
            if entries_free and isinstance(node, (ast.List, ast.Tuple)) and field == "elts":
                value = [v for v in value if not (isinstance(v, ast.Constant) and isinstance(v.value, str))]
            if value is None or value == []:
                continue
            fields.append(f"{field}={_serial(value, entries_free)}")
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_serial(v, entries_free) for v in node) + "]"
    return repr(node)
