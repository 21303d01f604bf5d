"""Cheap searches and edits over libcst trees, for the codemods (issue 11: ``apply``'s speed).

libcst's matcher searches (``libcst.matchers.findall``) and ``with_deep_changes`` run a visitor
over the whole module, rebuilding every node they pass; on ``v1/spec_decode/eagle.py`` and
``config/speculative.py`` that was most of ``apply``'s time (about 5 of 10 s under a profiler),
and importing ``libcst.matchers`` alone cost 0.24 s (one ``python -X importtime`` run, load 1.5). The helpers here read
the nodes' dataclass fields directly and, where the wanted node is a statement, descend only through statements (a
statement never sits inside an expression), so they find the same nodes a full search finds.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Sequence

import libcst as cst

_FIELDS: dict[type, tuple[str, ...]] = {}

_STATEMENT_PARTS = (
    cst.BaseSuite,
    cst.BaseStatement,
    cst.BaseSmallStatement,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Else,
    cst.Finally,
    cst.MatchCase,
)
"""What a statement's field may hold that can contain (or be) a statement."""


def _fields(node: cst.CSTNode) -> tuple[str, ...]:
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The direct child nodes of ``node``, in the order of its dataclass fields."""
    for name in _fields(node):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (tuple, list)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node under it, parents before children (children in field order, which
    is not always source order: a class's decorators come after its body)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(children(current))))


_BODY = ("body",)
_STATEMENT_FIELDS: dict[type, tuple[str, ...]] = {
    cst.Module: _BODY,
    cst.SimpleStatementLine: _BODY,
    cst.IndentedBlock: _BODY,
    cst.SimpleStatementSuite: _BODY,
    cst.FunctionDef: _BODY,
    cst.ClassDef: _BODY,
    cst.With: _BODY,
    cst.Else: _BODY,
    cst.Finally: _BODY,
    cst.ExceptHandler: _BODY,
    cst.ExceptStarHandler: _BODY,
    cst.MatchCase: _BODY,
    cst.If: ("body", "orelse"),
    cst.For: ("body", "orelse"),
    cst.While: ("body", "orelse"),
    cst.Try: ("body", "handlers", "orelse", "finalbody"),
    cst.TryStar: ("body", "handlers", "orelse", "finalbody"),
    cst.Match: ("cases",),
}
"""The fields of each statement-level node that hold statements, suites or clauses."""


def _statement_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    names = _STATEMENT_FIELDS.get(type(node))
    if names is None:
        if isinstance(node, cst.BaseSmallStatement):  # holds expressions only
            return []
        return [c for c in children(node) if isinstance(c, _STATEMENT_PARTS)]  # a node kind not listed
    out: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            out.append(value)
        elif isinstance(value, (tuple, list)):
            out.extend(value)
    return out


def statements(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every statement-level node under it (compound and small statements, suites,
    ``else``/``except``/``finally`` clauses), in source order, never descending into expressions."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(_statement_children(current)))


def find(nodes: Iterator[cst.CSTNode], predicate: Callable[[cst.CSTNode], bool]) -> list[cst.CSTNode]:
    """The nodes of ``nodes`` for which ``predicate`` holds, in order."""
    return [n for n in nodes if predicate(n)]


def replace(root: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """``root`` with the node ``old`` (by identity) replaced by ``new``; the rest is the same objects.

    ``old`` must be a statement-level node of ``root`` or a direct child of one (the codemods'
    anchors); otherwise this falls back to libcst's ``deep_replace`` (a full walk, same result).
    """
    path = _path(root, old)
    if path is None:
        return root.deep_replace(old, new)  # type: ignore[return-value]
    for parent, name, index in reversed(path):
        value = getattr(parent, name)
        if index is None:
            new = parent.with_changes(**{name: new})
        else:
            items = list(value)
            items[index] = new
            new = parent.with_changes(**{name: type(value)(items) if isinstance(value, tuple) else items})
    return new


def _path(root: cst.CSTNode, target: cst.CSTNode) -> list[tuple[cst.CSTNode, str, int | None]] | None:
    """The (parent, field, index) steps from ``root`` down to ``target``, searching through statements."""
    if root is target:
        return []
    for name in _fields(root):
        value = getattr(root, name)
        items: Sequence = (
            (value,) if isinstance(value, cst.CSTNode) else value if isinstance(value, (tuple, list)) else ()
        )
        for i, item in enumerate(items):
            if not isinstance(item, cst.CSTNode):
                continue
            index = None if isinstance(value, cst.CSTNode) else i
            if item is target:
                return [(root, name, index)]
            if isinstance(item, _STATEMENT_PARTS):
                sub = _path(item, target)
                if sub is not None:
                    return [(root, name, index), *sub]
    return None


# -- predicates standing for the matchers the codemods used ------------------------------


def is_name(node: object, value: str) -> bool:
    """``node`` is the name ``value``."""
    return isinstance(node, cst.Name) and node.value == value


def is_self_attr(node: object, attr: str) -> bool:
    """``node`` is ``self.<attr>``."""
    return isinstance(node, cst.Attribute) and is_name(node.value, "self") and is_name(node.attr, attr)


def is_self_call(node: object, method: str) -> bool:
    """``node`` is a call ``self.<method>(...)``."""
    return isinstance(node, cst.Call) and is_self_attr(node.func, method)


def names_tuple(node: object, *names: str) -> bool:
    """``node`` is a tuple of exactly these plain names (``hidden_states, residual``)."""
    return (
        isinstance(node, cst.Tuple)
        and len(node.elements) == len(names)
        and all(type(e) is cst.Element and is_name(e.value, n) for e, n in zip(node.elements, names))
    )


def only_comparison(node: object, operator: type, comparator: Callable[[object], bool]) -> bool:
    """``node`` is a comparison ``<anything> <operator> <comparator>`` with exactly one operator."""
    return (
        isinstance(node, cst.Comparison)
        and len(node.comparisons) == 1
        and isinstance(node.comparisons[0].operator, operator)
        and comparator(node.comparisons[0].comparator)
    )
