"""Text output of the CLI: lines that break only between words, tables and check trees.

Rules (issue 11):

- A line is broken only at a space, and never inside a quoted span: an advised command
  (``run 'patchkit apply ...'``) is one word, so a paste from a narrow terminal runs it whole (issue 42,
  finding 4). An identifier, path, ``file:line``, patch id or timestamp
  never contains one, so it is never split; a single word wider than the terminal is written
  whole on its own line (the terminal may fold it on screen, the bytes stay whole).
- On a terminal, lines are fitted to its width (``shutil.get_terminal_size``, which honours
  ``COLUMNS``); a table whose fixed columns leave too little room for its last column is shown
  one record per block instead. Piped or redirected output is never wrapped.
- No line ends in a space.
- ANSI colours only on a terminal, and never with ``NO_COLOR`` set (no-color.org) or ``TERM=dumb``.

This module imports nothing but the standard library, so every command starts fast.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Iterable, Sequence, Union

if TYPE_CHECKING:
    from patchkit.results import Check

_SGR = {"green": "32", "red": "31", "yellow": "33", "cyan": "36", "blue": "34", "dim": "2", "bold": "1"}

Piece = Union[str, "tuple[str, str | None]"]
"""Text, or ``(text, style)`` with a style name from ``_SGR`` (or None)."""

MIN_LAST_COLUMN = 24
"""A table is laid out as columns only when its last column gets at least this many characters."""


@dataclass(frozen=True)
class _Word:
    text: str
    style: str | None
    gap: str
    """The spaces before the word on its line (dropped when the word starts a new line)."""


_QUOTES = ("'", '"')
_AFTER_QUOTE = ").,;:"
"""What may follow a closing quote in the same word (``'patchkit verify'),``)."""


def _quoted(chunks: list[str]) -> list[str]:
    """``chunks`` with each quoted span (``'patchkit apply --model DIR'``) joined back into one chunk.

    A span opens at a chunk that starts with a quote and closes at the first chunk that ends with the
    same quote (before ``)``, ``,``, ``;``, ``.`` or ``:``); a quote that never closes opens nothing.
    An advised command is quoted (:meth:`patchkit.advice.NextStep.line`), so it is never broken by a
    real newline: pasted from an 80-column terminal it stays one command (issue 42, finding 4).
    """
    out: list[str] = []
    i = 0
    while i < len(chunks):
        chunk, end = chunks[i], i
        quote = chunk[:1]
        if quote in _QUOTES and not (len(chunk) > 1 and chunk.rstrip(_AFTER_QUOTE).endswith(quote)):
            end = next((j for j in range(i + 1, len(chunks)) if chunks[j].rstrip(_AFTER_QUOTE).endswith(quote)), i)
        out.append(" ".join(chunks[i : end + 1]))
        i = end + 1
    return out


def _words(pieces: Iterable[Piece]) -> list[_Word]:
    """Split styled pieces at spaces outside quotes (:func:`_quoted`); each word keeps the spaces that
    preceded it."""
    words: list[_Word] = []
    gap = ""
    for piece in pieces:
        text, style = (piece, None) if isinstance(piece, str) else piece
        for i, chunk in enumerate(_quoted(text.split(" "))):
            if i:
                gap += " "
            if chunk:
                words.append(_Word(chunk, style, gap))
                gap = ""
    return words


class Writer:
    """Writes lines to one stream, fitted to its width when it is a terminal.

    Args:
        stream: the text stream (``sys.stdout`` or ``sys.stderr``).
        width: columns to fit lines in; None: never wrap (a pipe or a file).
        color: whether to emit ANSI styles.
    """

    def __init__(self, stream: IO[str], width: int | None, color: bool) -> None:
        self.stream = stream
        self.width = width
        self.color = color

    @classmethod
    def for_stream(cls, stream: IO[str]) -> "Writer":
        """A writer that wraps and colours only when ``stream`` is a terminal."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        if not tty:
            return cls(stream, None, False)
        color = not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        return cls(stream, max(shutil.get_terminal_size().columns, 20), color)

    # -- lines ------------------------------------------------------------------------------

    def _paint(self, text: str, style: str | None) -> str:
        if not self.color or not style:
            return text
        return f"\x1b[{';'.join(_SGR[s] for s in style.split())}m{text}\x1b[0m"

    def fit(
        self, pieces: Sequence[Piece], first: str = "", rest: str | None = None, first_width: int | None = None
    ) -> list[str]:
        """Lay ``pieces`` out as lines: ``first`` prefixes the first line, ``rest`` the others.

        Words are never split; breaks fall only where the text has a space. ``first_width`` is
        the visible width of ``first`` when it holds ANSI styles. Returns the lines, styled,
        without trailing spaces.
        """
        first_width = len(first) if first_width is None else first_width
        rest = " " * first_width if rest is None else rest
        words = _words(pieces)
        lines: list[str] = []
        current, used = first, first_width
        start = True
        for w in words:
            gap = "" if start else w.gap
            if not start and self.width is not None and used + len(gap) + len(w.text) > self.width:
                lines.append(current.rstrip())
                current, used, gap = rest, len(rest), ""
            current += gap + self._paint(w.text, w.style)
            used += len(gap) + len(w.text)
            start = False
        lines.append(current.rstrip())
        return lines

    def line(self, *pieces: Piece, indent: str = "", hang: str = "  ") -> None:
        """Write one logical line; on a terminal its continuation lines start with ``indent + hang``."""
        self.write_lines(self.fit(pieces, indent, indent + hang))

    def write_lines(self, lines: Iterable[str]) -> None:
        """Write lines as they are (each gets a newline)."""
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()

    def raw(self, text: str) -> None:
        """Write text verbatim (a diff): no wrapping, no styling."""
        self.stream.write(text)
        self.stream.flush()

    # -- tables -----------------------------------------------------------------------------

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Piece]], show_header: bool = True) -> None:
        """Write a table: every column but the last is as wide as its widest cell; the last wraps.

        On a terminal too narrow for that (the last column would get fewer than
        :data:`MIN_LAST_COLUMN` characters, or less than its longest word), each row becomes a
        block: its first cell, then one ``header: value`` line per other cell.
        """
        cells = [[(c, None) if isinstance(c, str) else c for c in row] for row in rows]
        fixed = [
            max([len(headers[i]) if show_header else 0, *(len(r[i][0]) for r in cells)])
            for i in range(len(headers) - 1)
        ]
        offset = sum(fixed) + 2 * len(fixed)
        longest = max((len(w) for r in cells for w in r[-1][0].split(" ")), default=0)
        if self.width is not None and self.width - offset < max(MIN_LAST_COLUMN, longest):
            self._blocks(headers, cells)
            return
        lines: list[str] = []
        if show_header:
            head = "".join(self._paint(h.ljust(w), "bold") + "  " for h, w in zip(headers, fixed))
            lines.append((head + self._paint(headers[-1], "bold")).rstrip())
        for row in cells:
            lead = "".join(self._paint(text, style) + " " * (w - len(text) + 2) for (text, style), w in zip(row, fixed))
            lines.extend(self.fit([row[-1]], lead, " " * offset, first_width=offset))
        self.write_lines(lines)

    def _blocks(self, headers: Sequence[str], cells: list[list[tuple[str, str | None]]]) -> None:
        lines: list[str] = []
        for row in cells:
            lines.extend(self.fit([row[0]]))
            for header, (text, style) in zip(headers[1:], row[1:]):
                if text:
                    lines.extend(self.fit([(f"{header}:", "dim"), " ", (text, style)], "  ", "      "))
        self.write_lines(lines)

    # -- trees ------------------------------------------------------------------------------

    def tree(self, label: Sequence[Piece], children: Sequence["Node"], *, guide: str = "") -> None:
        """Write a node and its subtree with ``├──``/``└──`` guides; long nodes continue under their text."""
        lines = self.fit(label, guide, guide + ("│   " if children else "    "))
        self.write_lines(lines)
        self._children(children, guide)

    def _children(self, children: Sequence["Node"], guide: str) -> None:
        for i, node in enumerate(children):
            last = i == len(children) - 1
            branch = guide + ("└── " if last else "├── ")
            below = guide + ("    " if last else "│   ")
            self.write_lines(self.fit(node.label, branch, below + ("│   " if node.children else "    ")))
            self._children(node.children, below)


@dataclass(frozen=True)
class Node:
    """One node of a tree to draw: its text pieces and its children."""

    label: tuple[Piece, ...]
    children: tuple["Node", ...] = ()


MARKS = {True: ("✓", "green"), False: ("✗", "red"), None: ("·", "dim")}
"""The mark before a check: passed, failed, information."""


def check_nodes(checks: Sequence["Check"]) -> list[Node]:
    """Tree nodes for checks; a subtree already drawn (same label and place) is referred back to.

    Args:
        checks: :class:`patchkit.results.Check` values (anything with ``label``, ``ok``,
            ``detail``, ``location``, ``children``).
    """
    shown: set[tuple[str, str | None]] = set()

    def node(check, top: bool) -> Node:
        pieces: list[Piece] = [MARKS[check.ok], " ", check.label]
        key = (check.label, check.location)
        repeat = bool(check.children) and key in shown and not top
        if repeat:
            pieces += ["  ", ("(as above)", "dim")]
        elif check.detail:
            pieces += ["  ", (check.detail, "dim")]
        if check.location:
            pieces += ["  ", (check.location, "blue")]
        if repeat:
            return Node(tuple(pieces))
        if check.children:
            shown.add(key)
        return Node(tuple(pieces), tuple(node(c, False) for c in check.children))

    return [node(c, True) for c in checks]
