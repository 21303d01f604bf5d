"""The decoder-layer loop of a backbone ``forward``, read without importing vLLM.

:func:`decoder_loop` reads which form of loop over ``self.layers`` a backbone runs (the facts it
reads are named in its docstring, vLLM 0.10.2 - 0.33.0 model files); the classifier
(:mod:`patchkit.vllm.shapes.classify`), the stream reader (:mod:`patchkit.vllm.stream.residual`), the capture checks
(:mod:`patchkit.vllm.chain.capture`) and the capture codemod (:mod:`patchkit.codemods.capture`) share it.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from patchkit.vllm.classes.composition import is_layer_loop, self_mentions
from patchkit.vllm.release.contract import ATTR, MAYBE_ADD
from patchkit.vllm.release.source import nodes


@dataclass(frozen=True)
class Loop:
    """The decoder-layer loop of a backbone ``forward``.

    Attributes:
        returns_residual: the layer call is ``hidden_states, residual = layer(...)``.
        captures: the loop (or forward) already captures aux hidden states.
        lineno: line of the ``for`` statement (1-based, in the parsed source).
        layer: the name the layer is bound to.
        index: Python expression of the global id of the layer being run, or None when the loop
            has no index and patchkit enumerates it from ``self.start_layer`` itself.
        call_at: position of the layer call among the loop body's statements.
        residual_before: ``residual`` is bound before the loop (else the first layer's input is
            ``hidden_states`` alone and the capture before the loop must not read ``residual``).
        tuple_target: the layer call assigns ``hidden_states, residual`` (also when the layer
            keeps the residual inside and ``hidden_states`` alone is the stream, 0.33.0 ``stablelm.py``).
    """

    returns_residual: bool
    captures: bool
    lineno: int
    layer: str = "layer"
    index: str | None = None
    call_at: int = 0
    residual_before: bool = True
    tuple_target: bool = True


@functools.lru_cache(maxsize=1024)
def decoder_loop(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> Loop | str:
    """Read the decoder-layer loop of a backbone ``forward``, or say why it has no usable one.

    Loop forms read (vLLM 0.10.2 - 0.33.0 model files):

    - ``for layer in <self.layers from self.start_layer>``: no index (patchkit enumerates);
    - ``for i, layer in enumerate(..., start=self.start_layer)``: index ``i``;
    - ``for i, layer in enumerate(<self.layers from self.start_layer>)``: index ``self.start_layer + i``;
    - ``for i in range(self.start_layer, self.end_layer): layer = self.layers[i]``: index ``i``.

    Returns:
        A :class:`Loop`, or a one-line reason (several loops, no layer call, another call shape).
        Remembered per ``forward`` node (scan, the codemods and verify read the same loops).
    """
    loops = [s for s in forward.body if isinstance(s, ast.For) and is_layer_loop(s)]
    if len(loops) != 1:
        nested = [n for n in ast.walk(forward) if isinstance(n, ast.For) and is_layer_loop(n)]
        if len(loops) == 0 and nested:
            return "its decoder-layer loop is nested inside another statement"
        return f"forward has {len(loops)} top-level loops over self.layers, expected 1"
    loop = loops[0]
    captures = _mentions_self(forward, ATTR) or any(
        isinstance(n, ast.Attribute) and n.attr == MAYBE_ADD for n in nodes(forward)
    )
    form = _loop_form(loop)
    if isinstance(form, str):
        if captures:
            return Loop(True, True, loop.lineno)
        return form
    layer_var, index = form
    calls = [
        s
        for s in ast.walk(loop)
        if isinstance(s, ast.Assign)
        and isinstance(s.value, ast.Call)
        and isinstance(s.value.func, ast.Name)
        and s.value.func.id == layer_var
    ]
    if len(calls) == 1 and calls[0] in loop.body:
        call_at = loop.body.index(calls[0])
    else:
        branch = layer_call_branch(loop.body, calls)
        if branch is None:
            return f"its decoder-layer loop calls the layer {len(calls)} times (or under a condition), expected once"
        call_at = loop.body.index(branch)
    targets = calls[0].targets
    if len(targets) != 1:
        return "the layer call assigns to several targets"
    target = targets[0]
    names = (
        [e.id for e in target.elts]
        if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts)
        else None
    )
    if names == ["hidden_states", "residual"]:
        call = calls[0].value
        if not any(
            isinstance(a, ast.Name) and a.id == "residual" for a in [*call.args, *(k.value for k in call.keywords)]
        ):
            # the layer takes no residual: the residual it returns is internal, hidden_states is the stream
            return Loop(False, captures, loop.lineno, layer_var, index, call_at, True, True)
        before = forward.body[: forward.body.index(loop)]
        # a plain or a tuple target (``hidden_states, residual = ...``) binds it
        bound = any(
            isinstance(name, ast.Name) and name.id == "residual"
            for stmt in before
            for n in ast.walk(stmt)
            if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            for name in ast.walk(t)
        )
        return Loop(True, captures, loop.lineno, layer_var, index, call_at, bound)
    if isinstance(target, ast.Name) and target.id == "hidden_states":
        if any(isinstance(n, ast.Name) and n.id == "residual" for n in ast.walk(forward)):
            return "the layer returns hidden_states alone but forward keeps a residual of its own"
        return Loop(False, captures, loop.lineno, layer_var, index, call_at, True, False)
    return f"the layer call assigns {ast.unparse(target)}, not 'hidden_states, residual' or 'hidden_states'"


@dataclass(frozen=True)
class SplitLayer:
    """A decoder-layer loop that runs each layer's input norm apart from the rest of the layer.

    Fact (vLLM 0.34.0 ``models/mistral/mistral_large4/nvidia/model.py`` ``MistralLarge4Model.forward``
    and ``models/minimax_m3/nvidia/model.py`` ``MiniMaxM3Model.forward``): the loop body runs
    ``hidden_states, residual = layer.<norm>(hidden_states, residual)``, then (for the ids asked)
    captures, then ``hidden_states, residual = layer(...)`` or ``layer.<rest>(...)``. Whether
    ``<norm>`` is a fused add-and-norm, and so whether ``residual`` after it is the stream entering
    the layer, is the layer class's to say (:func:`patchkit.vllm.stream.split.split_stream`).

    Attributes:
        loop: the ``for`` statement; layer: the name the layer is bound to; index: the global id's
            expression (as :attr:`Loop.index`), or None.
        norm: the layer method run first (``input_norm``); norm_at: its statement's position in the loop body.
        rest: the method run after it, or None for the layer's own call; rest_at: its position.
    """

    loop: ast.For
    layer: str
    index: str | None
    norm: str
    norm_at: int
    rest: str | None
    rest_at: int


def _pair_assigned(stmt: ast.stmt) -> ast.Call | None:
    """The call of ``hidden_states, residual = <call>(...)`` that also passes ``residual``, else None."""
    if not (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Tuple)
        and [getattr(e, "id", None) for e in stmt.targets[0].elts] == ["hidden_states", "residual"]
        and isinstance(stmt.value, ast.Call)
    ):
        return None
    call = stmt.value
    passed = [a for a in [*call.args, *(k.value for k in call.keywords)] if isinstance(a, ast.Name)]
    return call if {"hidden_states", "residual"} <= {a.id for a in passed} else None


def split_layer(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> SplitLayer | None:
    """The split-layer form of ``forward``'s one decoder-layer loop (:class:`SplitLayer`), or None.

    Read structurally, never by class name: exactly one top-level loop statement binds
    ``hidden_states, residual`` from a method of the layer given both, and exactly one later
    statement binds them from the layer's call or another of its methods.
    """
    loops = [s for s in forward.body if isinstance(s, ast.For) and is_layer_loop(s)]
    if len(loops) != 1:
        return None
    form = _loop_form(loops[0])
    if isinstance(form, str):
        return None
    layer, index = form
    steps = []
    for i, stmt in enumerate(loops[0].body):
        call = _pair_assigned(stmt)
        if call is None:
            continue
        func = call.func
        if isinstance(func, ast.Name) and func.id == layer:
            steps.append((i, None))
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == layer:
            steps.append((i, func.attr))
    if len(steps) != 2 or steps[0][1] is None:
        return None
    (norm_at, norm), (rest_at, rest) = steps
    return SplitLayer(loops[0], layer, index, norm, norm_at, rest, rest_at)


def layer_call_branch(body: list[ast.stmt], calls: list[ast.Assign]) -> ast.If | None:
    """The ``if``/``else`` of ``body`` whose two arms each run the layer once, the same way, or None.

    Fact (vLLM 0.17.1 and 0.33.0 ``nemotron_nas.py``, ``DeciModel.forward``): ``if not
    layer._is_no_op_attention: hidden_states, residual = layer(...); ... else: hidden_states,
    residual = layer(...)``. Exactly one arm runs, so the layer runs once per iteration and a
    capture before or after that statement sees the stream entering and leaving the layer.
    """
    if len(calls) != 2:
        return None
    for stmt in body:
        if (
            isinstance(stmt, ast.If)
            and stmt.orelse
            and calls[0] in stmt.body
            and calls[1] in stmt.orelse
            and ast.dump(calls[0].targets[0]) == ast.dump(calls[1].targets[0])
            and ast.dump(calls[0].value) == ast.dump(calls[1].value)
        ):
            return stmt
    return None


def _loop_form(loop: ast.For) -> tuple[str, str | None] | str:
    """``(layer name, index expression or None)`` of a decoder-layer loop, or why it is not one patchkit reads."""
    it = loop.iter
    if isinstance(loop.target, ast.Name):
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            index = loop.target.id
            for stmt in loop.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(stmt.value, ast.Subscript)
                    and _mentions_self(stmt.value.value, "layers")
                    and isinstance(stmt.value.slice, ast.Name)
                    and stmt.value.slice.id == index
                ):
                    return stmt.targets[0].id, index
            return "its range loop does not bind 'layer = self.layers[i]'"
        if not _mentions_self(it, "start_layer"):
            return "its decoder-layer loop does not follow pipeline stages (no self.start_layer)"
        return loop.target.id, None
    if (
        isinstance(loop.target, ast.Tuple)
        and len(loop.target.elts) == 2
        and all(isinstance(e, ast.Name) for e in loop.target.elts)
        and isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id == "enumerate"
    ):
        index, layer = (e.id for e in loop.target.elts)  # type: ignore[attr-defined]
        if index == "_":
            return "its decoder-layer loop discards its enumerate index"
        start = [kw.value for kw in it.keywords if kw.arg == "start"] + list(it.args[1:2])
        if start:
            if _mentions_self(start[0], "start_layer"):
                return layer, index
            return f"its enumerate starts at {ast.unparse(start[0])}, not self.start_layer"
        if it.args and _mentions_self(it.args[0], "start_layer"):
            return layer, f"self.start_layer + {index}"
        return "its decoder-layer loop does not follow pipeline stages (no self.start_layer)"
    return "its decoder-layer loop does not bind the layer to a plain name"


def final_return_count(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many top-level ``return hidden_states`` statements ``forward`` has (the capture needs one)."""
    return sum(
        1
        for s in forward.body
        if isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and s.value.id == "hidden_states"
    )


def _mentions_self(node: ast.AST, attr: str) -> bool:
    return attr in self_mentions(node)
