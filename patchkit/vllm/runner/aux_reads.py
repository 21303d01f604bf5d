"""Where vLLM's model runner takes the EAGLE-3 aux-state layer ids from, read from the runner's bytes.

Fact (every ``.py`` under ``vllm/v1/worker`` naming ``set_aux_hidden_state_layers``; 0.10.2 - 0.16.0:
``gpu_model_runner.py``; 0.18.0 on also ``gpu/spec_decode/eagle/eagle3_utils.py`` or
``gpu/model_runner.py``): each call ``X.set_aux_hidden_state_layers(ids)``, with ``ids`` from
``X.<getter>()`` or from a config reader. The runner is large (0.28 MB), so only the functions that
hold the calls are cut out of its bytes and parsed (:func:`_setter_functions`, a byte-level function
cutter), falling back to the whole file when they cannot be cut exactly; both give the same result.
Used by :func:`patchkit.vllm.runner.draft_reads.derive`.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from patchkit.vllm.release.contract import SETTER
from patchkit.vllm.release.source import SourceTree

WORKER_PACKAGE = "vllm/v1/worker"
"""Folder of vLLM's model runners (where the aux ids are set on the target)."""


@dataclass(frozen=True)
class AuxSource:
    """Where the runner takes the aux-state layer ids from before calling the setter.

    Attributes:
        kind: ``"target"`` (a getter called on the model the setter is called on) or ``"config"``.
        name: the getter's or reader's name.
        location: ``file:line`` of the call.
    """

    kind: str
    name: str
    location: str


def aux_sources(tree: SourceTree) -> list[AuxSource]:
    """Every :class:`AuxSource` under :data:`WORKER_PACKAGE` of ``tree``, in file and line order, each once.

    Raises nothing for a runner that does not parse (it contributes nothing).
    """
    root = tree.site_packages / WORKER_PACKAGE
    out: list[AuxSource] = []
    for dirpath, _, files in sorted(os.walk(root)):
        for fname in sorted(files):
            if not fname.endswith(".py"):
                continue
            relpath = os.path.relpath(os.path.join(dirpath, fname), tree.site_packages).replace(os.sep, "/")
            source = tree.read_bytes(relpath)
            if SETTER.encode() not in source:
                continue
            key = (relpath, source)
            if key not in _AUX_BY_FILE:
                _AUX_BY_FILE[key] = _aux_in_file(source, relpath)
            for found in _AUX_BY_FILE[key]:
                if found not in out:
                    out.append(found)
    return out


_AUX_BY_FILE: dict[tuple[str, bytes], tuple[AuxSource, ...]] = {}
"""The aux sources of one runner file, by its path and bytes (a run reads the same runner in several views)."""


def _aux_in_file(source: bytes, relpath: str) -> tuple[AuxSource, ...]:
    """The aux sources of one runner file: each ``X.set_aux_hidden_state_layers(ids)`` call and where
    ``ids`` comes from (a call, or the calls assigned to that name in the enclosing function).

    Only the functions that hold the calls are parsed (:func:`_setter_functions`; the runner,
    ``gpu_model_runner.py``, is 0.28 MB and one method of it holds the call), or the whole file
    when they cannot be cut out exactly. Both give the same result.
    """
    functions = _setter_functions(source)
    if functions is not None:
        roots: list[ast.AST] = list(functions)
    else:
        try:
            roots = [ast.parse(source)]
        except (SyntaxError, ValueError):
            return ()
    return _aux_in_trees(roots, relpath)


def _setter_lines(source: bytes) -> list[int]:
    """0-based indexes of the lines naming the setter, comment lines left out (a line whose first
    character is ``#`` is a comment or inside a string: never a call)."""
    needle = SETTER.encode()
    out: list[int] = []
    at = source.find(needle)
    while at != -1:
        start = source.rfind(b"\n", 0, at) + 1
        if not source[start:at].lstrip(b" ").startswith(b"#"):
            out.append(source.count(b"\n", 0, at))
        stop = source.find(b"\n", at)
        at = -1 if stop == -1 else source.find(needle, stop)
    return out


def _indent(line: bytes) -> int | None:
    """Columns of leading spaces; None for a line that neither opens nor closes a block: blank,
    comment-only, or starting with a closing bracket (the end of a statement begun above, such as a
    signature's ``) -> None:``)."""
    body = line.lstrip(b" ")
    return None if not body.strip() or body.startswith((b"#", b")", b"]", b"}")) else len(line) - len(body)


def _setter_functions(source: bytes) -> list[ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The outermost functions holding the setter's calls, each parsed from its own lines; None when
    that cannot be done exactly (the caller then parses the whole file).

    A line's block is opened by the nearest line above it that is indented less; going up so
    reaches the outermost ``def`` around a call, whose body ends at the next line indented as
    little as its ``def``. That text reading can be fooled by continuation lines and strings, so
    each cut is accepted only if it parses alone (parsed at its own line numbers, inside ``if 1:``
    when indented) as one function whose body has a call of the setter on the line the text named.
    Files with tabs, form feeds or an encoding declaration, and a call outside any function, are
    parsed whole.
    """
    head = b"\n".join(source.split(b"\n", 2)[:2])
    if b"\t" in source or b"\x0c" in source or b"coding" in head or source.startswith(b"\xef\xbb\xbf"):
        return None
    wanted = _setter_lines(source)
    if not wanted:
        return []
    lines = source.split(b"\n")
    cuts: dict[int, int] = {}  # first line index of an outermost def -> index past its last line
    for i in wanted:
        if i in cuts or any(start < i < end for start, end in cuts.items()):
            continue
        threshold, outer = _indent(lines[i]), None
        if threshold is None:
            return None
        for j in range(i - 1, -1, -1):
            ind = _indent(lines[j])
            if ind is None or ind >= threshold:
                continue
            threshold = ind
            if lines[j].lstrip(b" ").startswith((b"def ", b"async def ")):
                outer = j
            if ind == 0:
                break
        if outer is None:
            return None
        depth = _indent(lines[outer])
        end = next(
            (k for k in range(outer + 1, len(lines)) if (ind := _indent(lines[k])) is not None and ind <= depth),
            len(lines),
        )
        if end <= i:
            return None
        cuts[outer] = end
    out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for start, end in sorted(cuts.items()):
        # parsed at its own line numbers: blank lines first, then (for a method) an `if 1:` to hold it
        opener = b"\n" * start if not _indent(lines[start]) else b"\n" * (start - 1) + b"if 1:\n"
        text = opener + b"\n".join(lines[start:end])
        try:
            body = ast.parse(text).body
        except (SyntaxError, ValueError):
            return None
        fn = (
            body[0].body[0]
            if len(body) == 1 and isinstance(body[0], ast.If) and len(body[0].body) == 1
            else body[0]
            if len(body) == 1
            else None
        )
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.lineno != start + 1:
            return None
        out.append(fn)
    found = {
        n.func.end_lineno - 1
        for fn in out
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == SETTER
    }
    return out if found >= set(wanted) else None


def _aux_in_trees(roots: list[ast.AST], relpath: str) -> tuple[AuxSource, ...]:
    """:func:`_aux_in_file` on parsed code: a whole module, or the functions that hold the calls."""
    out: list[AuxSource] = []
    calls: list[tuple[ast.Call, ast.AST]] = []  # each setter call with its innermost enclosing function
    stack: list[tuple[ast.AST, ast.AST | None]] = [(root, None) for root in roots]
    while stack:
        node, fn = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == SETTER
            and len(node.args) == 1
            and isinstance(node.args[0], (ast.Name, ast.Call))
            and fn is not None
        ):
            calls.append((node, fn))
        stack.extend((child, fn) for child in ast.iter_child_nodes(node))
    for call, fn in sorted(calls, key=lambda c: c[0].lineno):
        receiver = ast.unparse(call.func.value)
        arg = call.args[0]
        made = (
            [(arg, call.lineno)]
            if isinstance(arg, ast.Call)
            else [
                (a.value, a.lineno)
                for a in ast.walk(fn)
                if isinstance(a, ast.Assign)
                and isinstance(a.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == arg.id for t in a.targets)
            ]
        )
        for value, lineno in made:
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name is None:
                continue
            on_target = isinstance(func, ast.Attribute) and ast.unparse(func.value) == receiver
            found = AuxSource("target" if on_target else "config", name, f"{relpath}:{lineno}")
            if found not in out:
                out.append(found)
    return tuple(out)
