"""A backbone ``forward``'s capture of the aux hidden states, checked against vLLM's own capture semantics
(:mod:`patchkit.codemods.capture`) and against the residual stream the release's code implies
(:mod:`patchkit.vllm.stream.residual`). Part of the chain check (:mod:`patchkit.vllm.chain`).

The capture ``if`` forms are checked here (:func:`capture_checks`, :func:`split_capture_checks`); the
``EagleModelMixin`` calls by :mod:`patchkit.vllm.chain.mixin_capture`, whose
:func:`~patchkit.vllm.chain.mixin_capture.mixin_capture_checks` this module hands on (``__all__``).
"""

from __future__ import annotations

import ast

from patchkit.results import Check
from patchkit.vllm.chain.kinds import FINAL_LAYER_CAPTURED, FINAL_LAYER_CHECK, FINAL_LAYER_MISSED, NOT_FOLLOWED
from patchkit.vllm.chain.mixin_capture import mixin_capture_checks
from patchkit.vllm.classes.composition import is_layer_loop
from patchkit.vllm.release.contract import ATTR
from patchkit.vllm.classes.loops import Loop, decoder_loop
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.stream.residual import Stream, StreamRefusal, StreamVerdict, residual_stream
from patchkit.vllm.stream.split import SplitVerdict


def expected_stream(tree: SourceTree, registry: Registry, backbone: ClassRef):
    """Which tensor is the residual stream entering each layer of ``backbone``, from the release's code
    (:func:`patchkit.vllm.stream.residual.residual_stream`), or a :class:`patchkit.vllm.stream.residual.StreamRefusal`
    saying why the code does not tell. The capture checks compare what a ``forward`` captures with it."""
    found = tree.find_member(backbone, "forward")
    if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return StreamRefusal(f"{backbone.name} has no forward", backbone.location)
    return residual_stream(tree, registry, found[0], backbone, found[1])


def capture_checks(forward: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, expected=None) -> list[Check]:
    """Check a backbone ``forward`` against the capture semantics (:mod:`patchkit.codemods.capture`).

    The semantics are vLLM's own native capture: vLLM 0.18.0 ``model_executor/models/deepseek_v2.py``
    ``DeepseekV2Model.forward`` (and, for id ``n``, vLLM 0.25.0's same forward).

    Args:
        forward: the function's AST.
        relpath: its file, for locations.
        expected: the stream the capture must take (:func:`expected_stream`: a
            :class:`patchkit.vllm.stream.residual.StreamVerdict` or ``StreamRefusal``), or None: then the loop's
            form alone decides (``hidden_states + residual`` when the layer returns a residual).
    Returns:
        Checks for: global ids, residual-stream capture before each layer, the tuple return,
        and (informational) the final-layer capture.
    """
    where = f"{relpath}:{forward.lineno}"
    found = _capture_site(forward, relpath)
    if isinstance(found, list):
        return found
    form, loop, test = found
    at = f"{relpath}:{loop.lineno}"
    index_name = ast.unparse(test.test.left)
    checks = [_ids_check(index_name, form, at)]
    capture = None
    for i, stmt in enumerate(loop.body):
        if stmt is test:
            capture = (i, stmt)
    if capture is None:
        checks.append(
            Check(
                "captures the residual stream entering each layer",
                False,
                f"no 'if {index_name} in self.{ATTR}' in the decoder-layer loop",
                at,
                kind=NOT_FOLLOWED,
            )
        )
        return checks
    i, stmt = capture
    before_layer = form.call_at is not None and i < form.call_at
    checks.append(_stream_check(_captured_value(stmt), expected, form, before_layer, f"{relpath}:{stmt.lineno}"))
    return checks + _leaving_checks(forward, stmt, relpath, where)


def _capture_site(forward: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str):
    """``forward``'s decoder-layer loop and its capture ``if``: ``(form, loop, the if)``, or the failing checks."""
    where = f"{relpath}:{forward.lineno}"
    form = decoder_loop(forward)
    loops = [n for n in forward.body if isinstance(n, ast.For) and is_layer_loop(n)]
    if not isinstance(form, Loop) or len(loops) != 1:
        return [
            Check(
                "forward captures aux hidden states",
                False,
                form if isinstance(form, str) else "expected 1 decoder-layer loop",
                where,
                kind=NOT_FOLLOWED,
            )
        ]
    loop = loops[0]
    at = f"{relpath}:{loop.lineno}"
    tests = [
        s
        for s in loop.body
        if isinstance(s, ast.If)
        and isinstance(s.test, ast.Compare)
        and len(s.test.ops) == 1
        and isinstance(s.test.ops[0], ast.In)
        and _mentions_self(s.test.comparators[0], ATTR)
    ]
    if not tests:
        return [
            Check(
                "captures the residual stream entering each layer",
                False,
                f"no 'if <layer id> in self.{ATTR}' in the decoder-layer loop",
                at,
                kind=NOT_FOLLOWED,
            )
        ]
    if form.index is None:
        return [
            Check(
                "forward captures aux hidden states",
                False,
                "the decoder-layer loop has no layer index",
                at,
                kind=NOT_FOLLOWED,
            )
        ]
    return form, loop, tests[0]


def _ids_check(index_name: str, form: Loop, at: str) -> Check:
    """Whether the capture's ids are global layer indices (right under pipeline parallelism)."""
    global_ids = index_name == form.index
    return Check(
        "ids are global layer indices",
        True if global_ids else None,
        f"{index_name} is the global layer id"
        if global_ids
        else f"{index_name} counts from 0 on each stage (the global id is {form.index}): right without "
        "pipeline parallelism only (upstream's own form in some releases)",
        at,
    )


def _captured_value(stmt: ast.stmt) -> ast.expr | None:
    """The tensor a capture ``if`` appends (through a local it assigns, if so), or None."""
    appended = [
        c.args[0]
        for c in ast.walk(stmt)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" and c.args
    ]
    # an 'if residual is None: append(hidden_states) else: append(hidden_states + residual)' capture counts as one
    value = next((a for a in appended if _is_residual_stream(a)), appended[0] if appended else None)
    if isinstance(value, ast.Name):  # captured through a local: aux = hidden_states + residual; ...append(aux)
        assigned = [
            n.value
            for n in ast.walk(stmt)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)
        ]
        value = assigned[0] if assigned else value
    return value


def _stream_check(value: ast.expr | None, expected, form: Loop, before_layer: bool, location: str) -> Check:
    """Whether the captured ``value`` is the residual stream entering the layer, taken before the layer runs."""
    stream = expected.stream if isinstance(expected, StreamVerdict) else None
    if stream is None:
        stream = Stream.SUM if form.returns_residual else Stream.HIDDEN
    if stream is Stream.HIDDEN:  # where every layer returns None as the residual, the sum is the same tensor
        right = (isinstance(value, ast.Name) and value.id == "hidden_states") or (
            isinstance(expected, StreamVerdict)
            and expected.residual_none
            and value is not None
            and _is_residual_stream(value)
        )
    else:
        right = value is not None and _is_residual_stream(value)
    ok = value is not None and right and before_layer
    detail = ast.unparse(value) if value is not None else "nothing appended"
    if value is not None and not right:
        detail += f" is not the residual stream ({stream.value})"
        if isinstance(expected, StreamVerdict):
            detail += f": {expected.evidence}"
    elif not before_layer:
        detail += " is taken after the layer runs: that is the next layer's input"
    elif expected is not None and not isinstance(expected, StreamVerdict):
        ok = None if ok else ok
        detail += f" (patchkit cannot tell from the code which tensor is the stream: {expected.reason})"
    return Check("captures the residual stream entering each layer", ok, detail, location)


def _leaving_checks(
    forward: ast.FunctionDef | ast.AsyncFunctionDef, stmt: ast.stmt, relpath: str, where: str
) -> list[Check]:
    """Whether the captured states leave ``forward`` (the tuple return), and (informational) the final-layer capture."""
    final = [
        n
        for n in ast.walk(forward)
        if isinstance(n, ast.If) and _mentions_self(n.test, "end_layer") and _mentions_self(n.test, ATTR)
    ]
    return _leaving(forward, stmt, relpath, where, final, "after the loop, before the norm")


def _capture_test(stmt: ast.stmt) -> ast.Compare | None:
    """The ``<id> in self.aux_hidden_state_layers`` of a capture ``if`` (alone, or one operand of an
    ``and``: 0.34.0 ``MiniMaxM3Model.forward`` adds a pipeline-stage condition), else None."""
    if not isinstance(stmt, ast.If):
        return None
    operands = (
        stmt.test.values if isinstance(stmt.test, ast.BoolOp) and isinstance(stmt.test.op, ast.And) else [stmt.test]
    )
    return next(
        (
            t
            for t in operands
            if isinstance(t, ast.Compare)
            and len(t.ops) == 1
            and isinstance(t.ops[0], ast.In)
            and _mentions_self(t.comparators[0], ATTR)
        ),
        None,
    )


def _is_residual(value: ast.expr | None) -> bool:
    """``residual`` or ``residual.clone()``."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "clone"
        and not value.args
        and not value.keywords
    ):
        value = value.func.value
    return isinstance(value, ast.Name) and value.id == "residual"


def split_capture_checks(forward: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, verdict) -> list[Check]:
    """Check a backbone ``forward`` whose loop runs each layer's input norm apart
    (:class:`patchkit.vllm.classes.loops.SplitLayer`).

    Fact (vLLM 0.34.0 ``models/mistral/mistral_large4/nvidia/model.py`` ``MistralLarge4Model.forward``,
    ``models/minimax_m3/nvidia/model.py`` ``MiniMaxM3Model.forward``): the capture of id ``idx`` is
    ``residual.clone()`` taken after ``layer.<norm>(hidden_states, residual)`` and before the rest of
    the layer runs; that ``residual`` is the stream entering the layer when the norm is a fused
    add-and-norm (``verdict``, :func:`patchkit.vllm.stream.split.split_stream`). Id ``n`` is captured after
    the final fused norm, the same way.

    Args:
        forward: the function's AST; relpath: its file.
        verdict: a :class:`patchkit.vllm.stream.split.SplitVerdict`, or the ``StreamRefusal`` saying why the
            norm could not be shown to be a fused add-and-norm (the capture is then not checked).
    Returns:
        Checks for global ids, the capture, the tuple return and (informational) the final-layer capture.
    """
    where = f"{relpath}:{forward.lineno}"
    if not isinstance(verdict, SplitVerdict):
        return [
            Check(
                "captures the residual stream entering each layer",
                None,
                f"not checked: the loop runs the layer's input norm apart, and {verdict.reason}",
                verdict.location,
                kind=NOT_FOLLOWED,
            )
        ]
    split = verdict.split
    body = split.loop.body
    at = f"{relpath}:{split.loop.lineno}"
    captures = [(i, stmt, _capture_test(stmt)) for i, stmt in enumerate(body) if _capture_test(stmt) is not None]
    if len(captures) != 1:
        return [
            Check(
                "captures the residual stream entering each layer",
                False,
                f"{len(captures)} 'if <layer id> in self.{ATTR}' in the decoder-layer loop, expected 1",
                at,
                kind=NOT_FOLLOWED,
            )
        ]
    i, stmt, test = captures[0]
    index_name = ast.unparse(test.left)
    global_ids = split.index is not None and index_name == split.index
    checks = [
        Check(
            "ids are global layer indices",
            True if global_ids else None,
            f"{index_name} is the global layer id"
            if global_ids
            else f"{index_name} is not the loop's global layer id ({split.index}): right without pipeline "
            "parallelism only",
            at,
        )
    ]
    checks.append(_split_stream_check(stmt, i, verdict, relpath))
    return checks + _split_leaving_checks(forward, stmt, split, relpath, where)


def _split_stream_check(stmt: ast.stmt, i: int, verdict: SplitVerdict, relpath: str) -> Check:
    """Whether the capture ``stmt`` (the ``i``-th statement of the loop) appends ``residual``, after the
    layer's input norm and before the rest of the layer (:func:`split_capture_checks`)."""
    split = verdict.split
    appended = [
        c.args[0]
        for c in ast.walk(stmt)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" and c.args
    ]
    value = appended[0] if len(appended) == 1 else None
    norm = f"layer.{split.norm}(hidden_states, residual)"
    rest = f"layer.{split.rest}(...)" if split.rest else "layer(...)"
    if value is None:
        ok, detail = False, f"{len(appended)} appends in the capture, expected 1"
    elif not _is_residual(value):
        ok, detail = (
            False,
            (
                f"{ast.unparse(value)} is not the residual stream: after {norm} the stream entering "
                f"the layer is residual ({verdict.evidence})"
            ),
        )
    elif i < split.norm_at:
        ok, detail = (
            False,
            (
                f"{ast.unparse(value)} is taken before {norm} adds the previous layer's output: "
                "that is not yet the stream entering the layer"
            ),
        )
    elif i > split.rest_at:
        ok, detail = False, f"{ast.unparse(value)} is taken after {rest} runs: that is the next layer's input"
    else:
        ok, detail = True, f"{ast.unparse(value)} after {norm}, before {rest}: {verdict.evidence}"
    return Check("captures the residual stream entering each layer", ok, detail, f"{relpath}:{stmt.lineno}")


def _split_leaving_checks(
    forward: ast.FunctionDef | ast.AsyncFunctionDef, stmt: ast.stmt, split, relpath: str, where: str
) -> list[Check]:
    """Whether the states captured by ``stmt`` leave ``forward`` (the tuple return), and (informational)
    the capture of ``residual`` after the final fused norm, after ``split``'s loop."""
    after = forward.body[forward.body.index(split.loop) + 1 :]
    final = [
        n
        for s_ in after
        for n in ast.walk(s_)
        if isinstance(n, ast.If)
        and _mentions_self(n.test, "end_layer")
        and _mentions_self(n.test, ATTR)
        and any(
            _is_residual(c.args[0])
            for c in ast.walk(n)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append" and c.args
        )
    ]
    return _leaving(forward, stmt, relpath, where, final, "residual after the final fused norm")


def _leaving(
    forward: ast.FunctionDef | ast.AsyncFunctionDef, stmt: ast.stmt, relpath: str, where: str, final: list, found: str
) -> list[Check]:
    """The two checks on the captured states leaving ``forward``: the tuple return of the list ``stmt``
    appends to, and (informational) the final-layer capture ``final`` found (described as ``found``)."""
    states = appended_list_name(stmt)
    returns = [
        r
        for r in ast.walk(forward)
        if isinstance(r, ast.Return)
        and isinstance(r.value, ast.Tuple)
        and len(r.value.elts) == 2
        and isinstance(r.value.elts[1], ast.Name)
        and r.value.elts[1].id == states
    ]
    return [
        Check(
            "returns (hidden_states, aux states) when ids were requested",
            bool(returns),
            "" if returns else "the captured states never leave forward",
            f"{relpath}:{returns[0].lineno}" if returns else where,
        ),
        Check(
            FINAL_LAYER_CHECK,
            None,
            found if final else "not captured: a draft that asks for id n gets fewer states",
            f"{relpath}:{final[0].lineno}" if final else None,
            kind=FINAL_LAYER_CAPTURED if final else FINAL_LAYER_MISSED,
        ),
    ]


def appended_list_name(stmt: ast.stmt) -> str | None:
    """The name of the list a capture ``if`` appends to (``aux_hidden_states``)."""
    for c in ast.walk(stmt):
        if (
            isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr == "append"
            and isinstance(c.func.value, ast.Name)
        ):
            return c.func.value.id
    return None


def _mentions_self(node: ast.AST, attr: str) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name) and n.value.id == "self"
        for n in ast.walk(node)
    )


def _is_membership(test: ast.expr, index_name: str) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == index_name
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.In)
        and _mentions_self(test.comparators[0], ATTR)
    )


def _is_residual_stream(value: ast.expr) -> bool:
    def is_sum(e: ast.expr) -> bool:
        return (
            isinstance(e, ast.BinOp)
            and isinstance(e.op, ast.Add)
            and {getattr(e.left, "id", None), getattr(e.right, "id", None)} == {"hidden_states", "residual"}
        )

    if is_sum(value):
        return True
    return isinstance(value, ast.IfExp) and (is_sum(value.orelse) or is_sum(value.body))


__all__ = ["appended_list_name", "capture_checks", "expected_stream", "mixin_capture_checks", "split_capture_checks"]
