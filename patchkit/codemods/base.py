"""What every codemod is: a check of its post-condition and a transform that refuses when unsure.

A codemod works on one libcst module and never touches the disk. The engine asks
:meth:`Codemod.check` first; only when the post-condition is :attr:`Presence.ABSENT` does it
call :meth:`Codemod.transform`, which either returns the rewritten module or raises
:class:`Refusal` naming the anchor it looked for and how often it found it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Sequence, TypeVar

import libcst as cst

from patchkit.codemods.kinds import CodemodKind
from patchkit.vllm.classes.composition import Holder


class Presence(Enum):
    """State of a codemod's post-condition in a file."""

    ABSENT = "absent"
    """Nothing of the change is there: the transform may run."""
    PRESENT = "present"
    """The whole post-condition holds: nothing to write."""
    PARTIAL = "partial"
    """Part of it is there, or something foreign in its place: refuse, never guess."""


class Refusal(Exception):
    """A codemod cannot make its change safely; the message says what it looked for and found."""


@dataclass(frozen=True)
class Site:
    """Where a codemod works: the file, its module, and the resolved class (if any).

    Attributes:
        relpath: file path relative to site-packages.
        module: dotted module name of the file.
        class_name: the class the patch edits (None for module-level patches).
        holder: for interface patches, what the class holds and forwards to.
    """

    relpath: str
    module: str
    class_name: str | None = None
    holder: Holder | None = None


class Codemod(ABC):
    """One structural rewrite with an exact anchor and a checkable post-condition.

    Subclasses set ``kind`` (a key of :data:`patchkit.codemods.CATALOGUE`) and keep their
    constructor options in ``self.options``. Their texts (what the codemod changes, the file shape
    it expects) are the catalogue's, read through the patch's :class:`patchkit.codemods.CodemodRef`
    (``description``, ``expects``): this module does not import its package's catalogue, which
    names this module's subclasses (issue 25: that was the last import cycle).
    """

    kind: "CodemodKind"
    options: dict

    @abstractmethod
    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        """Return the post-condition's state in ``module`` and a one-line explanation."""

    @abstractmethod
    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        """Return ``module`` with the change made.

        Raises:
            Refusal: an anchor was found zero times or more than once, or has an unexpected shape.
        """


# -- helpers shared by the codemods ------------------------------------------------------

N = TypeVar("N", bound=cst.CSTNode)


def exactly_one(found: Sequence[N], what: str) -> N:
    """Return the single element of ``found``.

    Raises:
        Refusal: ``found`` has zero or several elements; the message names ``what``.
    """
    if len(found) != 1:
        raise Refusal(f"expected exactly 1 {what}, found {len(found)}")
    return found[0]


def top_level_class(module: cst.Module, name: str) -> cst.ClassDef:
    """The module-level ``class name`` statement (exactly one).

    Raises:
        Refusal: zero or several such classes.
    """
    found = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name]
    return exactly_one(found, f"module-level class {name}")  # type: ignore[return-value]


def replace_top_level(module: cst.Module, old: cst.CSTNode, new: cst.CSTNode) -> cst.Module:
    """Replace a module-level statement (or the statement line holding ``old``) without a full walk.

    ``with_deep_changes`` searches the whole tree; for a node directly in ``module.body`` (or a
    small statement of a line there) this is a list edit.
    """
    body = list(module.body)
    for i, stmt in enumerate(body):
        if stmt is old:
            body[i] = new  # type: ignore[assignment]
            return module.with_changes(body=body)
        if isinstance(stmt, cst.SimpleStatementLine) and any(small is old for small in stmt.body):
            body[i] = stmt.with_changes(body=[new if small is old else small for small in stmt.body])
            return module.with_changes(body=body)
    return module.deep_replace(old, new)  # type: ignore[return-value]


def method_of(cls: cst.ClassDef, name: str) -> list[cst.FunctionDef]:
    """Every ``def name`` directly in the body of ``cls``."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name]


def insert_into_sequence(items: Sequence[N], index: int, new: N) -> list[N]:
    """Insert ``new`` into a comma-separated sequence (list elements, bases, import names).

    The separators already in the sequence are reused, so single-line and one-per-line layouts
    (with or without a trailing comma) keep their style.
    """
    items = list(items)
    if not items:
        return [new]
    simple_comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    separator = items[0].comma if len(items) >= 2 else simple_comma  # type: ignore[attr-defined]
    if isinstance(separator, cst.MaybeSentinel):
        separator = simple_comma
    if index >= len(items):
        last = items[-1]
        trailing = last.comma  # type: ignore[attr-defined]
        if len(items) == 1 and isinstance(trailing, cst.Comma) and _is_multiline(trailing):
            separator = trailing
        return items[:-1] + [last.with_changes(comma=separator), new.with_changes(comma=trailing)]
    return items[:index] + [new.with_changes(comma=separator)] + items[index:]


def _is_multiline(comma: cst.Comma) -> bool:
    return isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


def parse_members(code: str) -> list[cst.BaseStatement]:
    """Parse class-body statements written at column 0 into libcst nodes (blank lines kept)."""
    return list(cst.parse_module(code).body)
