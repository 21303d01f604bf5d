"""The bytes ``apply`` plans, in upstream vLLM's style: patchkit's comments out, long lines wrapped, as a git diff.

``patchkit export`` (:mod:`patchkit.plan.export`) takes the engine's planned bytes of each file and its original
bytes, and makes them what a vLLM pull request would hold:

1. every comment block patchkit wrote (a comment line starting with :data:`MARKER`, written by the codemods in
   :mod:`patchkit.codemods`, and the comment lines right after it at its indentation) is taken out;
2. every line the patch added that is longer than vLLM's line length
   (:data:`patchkit.vllm.release.contract.UPSTREAM_LINE_LENGTH`) is wrapped as ruff's formatter (black's style)
   wraps it: the last bracket pair split off, its content on one line when that fits, else one element per line
   with a trailing comma; a ``from ... import`` gets parentheses and one name per line; the content of a bracket
   opened on an earlier line (a class's bases written on a line of their own) goes one element per line; an
   ``if``/``elif``/``while`` condition not ending in a bracket is wrapped in parentheses, split before ``and``/``or``.
   A line that cannot be
   wrapped so is left as it is (the export's ``long_lines`` names it);
3. :func:`git_diff` writes the change as ``git apply`` reads it.

Lines the release already had are never touched. Pure text work: no libcst, no vLLM import.
"""

from __future__ import annotations

import difflib
import io
import tokenize

MARKER = "# Added by patchkit ("
"""How every comment patchkit writes into vLLM's files starts (:mod:`patchkit.codemods`: capture, interface, alias,
proposer)."""

_OPEN, _CLOSE = "([{", ")]}"
_CONDITIONALS = ("if ", "elif ", "while ")
"""Statements whose condition the formatter wraps in parentheses of its own when it splits it."""


def upstream_text(original: str, planned: str, line_length: int) -> str:
    """``planned`` (the engine's bytes of one file, decoded) without patchkit's comments, its added lines wrapped.

    Args:
        original: the file as the release ships it.
        planned: the file as ``apply`` would write it.
        line_length: the longest line upstream allows (vLLM's ruff ``line-length``).
    Returns:
        The file as the export writes it; the lines of ``original`` are kept byte for byte.
    """
    old, new = original.splitlines(keepends=True), planned.splitlines(keepends=True)
    added = _added(old, new)
    kept = _without_markers(new, added)
    out: list[str] = []
    for line, is_new in kept:
        body = line.rstrip("\r\n")
        if is_new and len(body) > line_length and not body.lstrip().startswith("#"):
            ending = line[len(body) :]
            out.extend(part + ending for part in wrap(body, line_length))
        else:
            out.append(line)
    return "".join(out)


def _added(old: list[str], new: list[str]) -> list[bool]:
    """Per line of ``new``: True when the diff from ``old`` adds it."""
    added = [False] * len(new)
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            added[j1:j2] = [True] * (j2 - j1)
    return added


def _without_markers(new: list[str], added: list[bool]) -> list[tuple[str, bool]]:
    """The lines of ``new`` (each with whether it is added) less patchkit's comment blocks: an added line
    starting with :data:`MARKER` and the added comment lines that follow it at its indentation."""
    out: list[tuple[str, bool]] = []
    block: str | None = None  # the indentation of the marker block being dropped
    for line, is_new in zip(new, added):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if is_new and stripped.startswith(MARKER):
            block = indent
            continue
        if block is not None and is_new and indent == block and stripped.startswith("#"):
            continue
        block = None
        out.append((line, is_new))
    return out


def wrap(line: str, line_length: int) -> list[str]:
    """One logical line written on one physical line, wrapped as ruff's formatter wraps it (see the module).

    Args:
        line: the line, its indentation included, no line ending.
        line_length: the limit.
    Returns:
        The physical lines (``[line]`` when it fits, or when no split below makes its first line fit).
    """
    if len(line) <= line_length:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    code = line.strip()
    tokens = _tokens(code)
    if tokens is None:
        return [line]
    if code.startswith("from ") and " import " in code and "(" not in code:
        head, _, names = code.partition(" import ")
        parts = [name.strip() for name in names.split(",") if name.strip()]
        return [f"{indent}{head} import (", *(f"{indent}    {name}," for name in parts), f"{indent})"]
    keyword = next((k for k in _CONDITIONALS if code.startswith(k)), None)
    if keyword is not None and code.endswith(":") and not code[:-1].rstrip().endswith(tuple(_CLOSE)):
        return _parenthesized(indent, keyword, code[len(keyword) : -1].strip(), line_length)
    pair = _last_pair(tokens)
    if pair is None:  # the hugged content of a bracket opened on an earlier line: one element per line
        parts = _split_commas(code)
        if len(parts) < 2:
            return [line]
        return [out for part in parts for out in wrap(f"{indent}{part},", line_length)]
    opened, closed = pair
    head, body, tail = code[: opened + 1], code[opened + 1 : closed].strip(), code[closed:]
    if not body or len(indent) + len(head) > line_length:
        return [line]
    inner = indent + "    "
    if not body.endswith(",") and len(inner) + len(body) <= line_length:
        return [indent + head, inner + body, indent + tail]
    elements = _split_commas(body)
    lines = [indent + head]
    for element in elements:
        lines.extend(wrap(f"{inner}{element},", line_length))
    return [*lines, indent + tail]


def _parenthesized(indent: str, keyword: str, condition: str, line_length: int) -> list[str]:
    """``if <condition>:`` split inside the parentheses the formatter adds around the condition: the condition on
    one line when it fits, else one operand of its top-level ``and``/``or`` per line, the operator leading."""
    inner = indent + "    "
    if len(inner) + len(condition) <= line_length:
        body = [inner + condition]
    else:
        body = [inner + part for part in _split_boolean(condition)]
    return [f"{indent}{keyword}(", *body, f"{indent}):"]


def _split_boolean(condition: str) -> list[str]:
    """``a and b or c`` as ``["a", "and b", "or c"]``: split before each top-level ``and``/``or``."""
    parts, depth, start = [], 0, 0
    for tok in _tokens(condition) or []:
        if tok.type == tokenize.OP and tok.string in _OPEN:
            depth += 1
        elif tok.type == tokenize.OP and tok.string in _CLOSE:
            depth -= 1
        elif tok.type == tokenize.NAME and tok.string in ("and", "or") and depth == 0:
            parts.append(condition[start : tok.start[1]].strip())
            start = tok.start[1]
    return [*parts, condition[start:].strip()]


def _tokens(code: str) -> list[tokenize.TokenInfo] | None:
    """The tokens of one line of code (None when it does not tokenize on its own)."""
    try:
        return [
            t
            for t in tokenize.generate_tokens(io.StringIO(code + "\n").readline)
            if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.COMMENT)
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _last_pair(tokens: list[tokenize.TokenInfo]) -> tuple[int, int] | None:
    """The columns of the last top-level bracket pair: the last closing bracket and its opener."""
    depth, opener, pair = 0, None, None
    for tok in tokens:
        if tok.type != tokenize.OP:
            continue
        if tok.string in _OPEN:
            if depth == 0:
                opener = tok.start[1]
            depth += 1
        elif tok.string in _CLOSE:
            depth -= 1
            if depth == 0 and opener is not None:
                pair = (opener, tok.start[1])
    return pair


def _split_commas(body: str) -> list[str]:
    """``body`` split at its top-level commas, each part stripped, a trailing empty part dropped."""
    parts, depth, start = [], 0, 0
    tokens = _tokens(body) or []
    for tok in tokens:
        if tok.type != tokenize.OP:
            continue
        if tok.string in _OPEN:
            depth += 1
        elif tok.string in _CLOSE:
            depth -= 1
        elif tok.string == "," and depth == 0:
            parts.append(body[start : tok.start[1]].strip())
            start = tok.end[1]
    rest = body[start:].strip()
    return [*parts, *([rest] if rest else [])]


def git_diff(path: str, old: str, new: str) -> str:
    """The change of one file as ``git diff`` writes it (``diff --git a/PATH b/PATH``, three lines of context).

    Args:
        path: the file's path relative to the root the patch applies in (``vllm/...``).
        old, new: its text before and after.
    Returns:
        The diff text, "" when nothing changed; a side without a final newline is marked as git marks it.
    """
    if old == new:
        return ""
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=f"a/{path}", tofile=f"b/{path}"
        )
    )
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


__all__ = ["MARKER", "git_diff", "upstream_text", "wrap"]
