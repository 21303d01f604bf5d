"""A backbone ``forward``'s capture through ``EagleModelMixin._maybe_add_hidden_state`` calls, checked
against the calls vLLM's own classes make and against the residual stream the release's code implies
(:mod:`patchkit.vllm.stream.residual`). Part of the chain check (:mod:`patchkit.vllm.chain`); the
capture ``if`` forms are checked by :mod:`patchkit.vllm.chain.capture`.
"""

from __future__ import annotations

import ast

from patchkit.results import Check
from patchkit.vllm.chain.kinds import FINAL_LAYER_CAPTURED, FINAL_LAYER_CHECK, NOT_FOLLOWED
from patchkit.vllm.classes.composition import is_layer_loop
from patchkit.vllm.classes.loops import Loop, decoder_loop
from patchkit.vllm.release.contract import MAYBE_ADD
from patchkit.vllm.stream.residual import Stream, StreamVerdict


def mixin_capture_checks(forward: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, expected=None) -> list[Check]:
    """Check a backbone ``forward`` that captures through ``EagleModelMixin._maybe_add_hidden_state``.

    Fact (vLLM 0.18.0 - 0.33.0, e.g. ``qwen3_moe.py``): one call before the decoder-layer loop for
    id ``start_layer`` and one after each layer for id ``layer_idx + 1``, with the loop enumerating
    from ``start_layer``; ``forward`` returns ``(hidden_states, aux)`` when something was captured.
    Some native classes count from 0 (safe only without pipeline parallelism): shown as information.
    ``expected`` is as for :func:`patchkit.vllm.chain.capture.capture_checks`: where the stream is
    ``hidden_states`` alone and the layers hand on a residual that is not None, the calls must pass
    ``None`` as the residual (0.33.0 ``muse_glimmer.py`` does), else they capture
    ``hidden_states + residual``, no stream.
    """
    where = f"{relpath}:{forward.lineno}"
    calls = [
        n
        for n in ast.walk(forward)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == MAYBE_ADD
        and len(n.args) >= 2
    ]
    loops = [n for n in forward.body if isinstance(n, ast.For) and is_layer_loop(n)]
    if len(loops) != 1:
        return [
            Check(
                "forward captures aux hidden states",
                False,
                f"expected 1 decoder-layer loop, found {len(loops)}",
                where,
                kind=NOT_FOLLOWED,
            )
        ]
    loop = loops[0]
    in_loop = [c for c in calls if any(c is n for n in ast.walk(loop))]
    before = [c for c in calls if c not in in_loop]
    checks = [_ids_check(forward, loop, in_loop, relpath)]
    checks.append(
        Check(
            "captures the stream entering the stage's first layer",
            bool(before),
            ast.unparse(before[0]) if before else f"no {MAYBE_ADD} call before the loop",
            f"{relpath}:{before[0].lineno}" if before else where,
        )
    )
    after_ok = bool(in_loop) and isinstance(in_loop[0].args[1], ast.BinOp)
    checks.append(
        Check(
            "captures the stream after each layer (id layer_idx + 1)",
            after_ok,
            ast.unparse(in_loop[0]) if in_loop else f"no {MAYBE_ADD} call in the loop",
            f"{relpath}:{in_loop[0].lineno}" if in_loop else where,
        )
    )
    checks += _stream_checks(calls, in_loop, expected, relpath, where)
    returns = [
        r
        for r in ast.walk(forward)
        if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple) and len(r.value.elts) == 2
    ]
    checks.append(
        Check(
            "returns (hidden_states, aux states) when ids were requested",
            bool(returns),
            "" if returns else "the captured states never leave forward",
            f"{relpath}:{returns[0].lineno}" if returns else where,
        )
    )
    checks.append(
        Check(FINAL_LAYER_CHECK, None, "the last layer's call captures id end_layer", None, kind=FINAL_LAYER_CAPTURED)
    )
    return checks


def _ids_check(
    forward: ast.FunctionDef | ast.AsyncFunctionDef, loop: ast.For, in_loop: list[ast.Call], relpath: str
) -> Check:
    """Whether the ids of the calls ``in_loop`` (the decoder-layer ``loop``'s) are global layer indices:
    ``layer_idx + 1`` with the loop enumerating from ``start_layer``."""
    form = decoder_loop(forward)
    index = in_loop[0].args[1] if in_loop and isinstance(in_loop[0].args[1], ast.BinOp) else None
    global_ids = (
        isinstance(form, Loop)
        and form.index is not None
        and index is not None
        and ast.unparse(index.left) == form.index
    )
    return Check(
        "ids are global layer indices",
        True if global_ids else None,
        "enumerate(..., start=self.start_layer)"
        if global_ids
        else "counts from 0 on each stage (upstream's own form; vLLM refuses EAGLE-3 with pipeline parallelism "
        "for such classes)",
        f"{relpath}:{loop.lineno}",
    )


def _stream_checks(calls: list[ast.Call], in_loop: list[ast.Call], expected, relpath: str, where: str) -> list[Check]:
    """Whether the ``_maybe_add_hidden_state`` ``calls`` (``in_loop``: those in the decoder-layer loop) pass
    the residual as the stream ``expected`` says (:func:`mixin_capture_checks`); none when it does not say."""
    if isinstance(expected, StreamVerdict) and expected.stream is Stream.HIDDEN and not expected.residual_none:
        summed = [
            c
            for c in calls
            if len(c.args) >= 4 and not (isinstance(c.args[3], ast.Constant) and c.args[3].value is None)
        ]
        return [
            Check(
                "captures the residual stream (hidden_states alone)",
                not summed,
                f"{ast.unparse(summed[0])} adds the residual, which is not part of the stream: {expected.evidence}"
                if summed
                else "passes None as the residual",
                f"{relpath}:{summed[0].lineno}" if summed else where,
            )
        ]
    elif isinstance(expected, StreamVerdict) and expected.stream is Stream.SUM:
        # after a fused layer, hidden_states alone is the layer's delta: the call must add the residual
        alone = [
            c for c in in_loop if len(c.args) >= 4 and isinstance(c.args[3], ast.Constant) and c.args[3].value is None
        ]
        return [
            Check(
                "captures the residual stream (hidden_states + residual)",
                not alone,
                f"{ast.unparse(alone[0])} leaves the residual out: after a fused layer hidden_states is "
                f"its delta, not the stream: {expected.evidence}"
                if alone
                else "passes the residual",
                f"{relpath}:{alone[0].lineno}" if alone else where,
            )
        ]
    return []
