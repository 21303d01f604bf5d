"""Which tensor is the residual stream entering a decoder layer, derived from the release's own code.

vLLM's usual decoder layer is *fused-residual* (0.33.0 ``llama.py`` ``LlamaDecoderLayer.forward``):
it takes ``(hidden_states, residual)``, folds the residual it is given into its first norm
(``self.input_layernorm(hidden_states, residual)``), returns ``(delta, stream so far)``, and the
backbone ends with the fused ``self.norm(hidden_states, residual)``. The stream entering layer k is
then ``hidden_states + residual``.

Not every layer keeps that contract (0.33.0 and 0.15.1 ``exaone4.py`` ``Exaone4DecoderLayer.forward``:
its first line is ``residual = hidden_states``, it adds the residual back itself and returns the
full stream as ``hidden_states``; ``Exaone4Model.forward`` ends with ``self.norm(hidden_states)``).
There the stream is ``hidden_states`` alone and ``hidden_states + residual`` is no stream at all.

A third form runs each layer's input norm apart from the rest of the layer (0.34.0
``MistralLarge4Model.forward`` and ``MiniMaxM3Model.forward``, :class:`patchkit.vllm.classes.loops.SplitLayer`):
the input norm is a fused add-and-norm of ``(hidden_states, residual)``, so the ``residual`` it
returns is ``hidden_states + residual``, the stream entering the layer, and ``residual.clone()``
taken after it (before the rest of the layer) is that stream. :func:`patchkit.vllm.stream.split.split_stream`
decides it.

This module reads three signals, never a list of names:

1. the layer's ``forward`` (every decoder-layer class the backbone's ``__init__`` builds into
   ``self.layers``): does it *read* the residual it is given, or *overwrite* it before any read;
2. what it returns: ``(a, b)`` where ``a`` is a delta, or ``a`` re-adds the residual (the stream);
   or one tensor;
3. how the backbone's ``forward`` combines ``hidden_states`` and ``residual`` after the loop: a fused
   norm call with both, an explicit sum, or ``hidden_states`` alone.

:func:`residual_stream` turns them into a :class:`Stream` when they agree and refuses (a one-line
reason naming ``file:line``) when the code does not say or the signals disagree. The transformers
reference for the same fact: ``hidden_states[k]`` of ``output_hidden_states=True`` is the stream
entering layer k (``modeling_exaone4.py``: ``residual = hidden_states; ...; hidden_states =
residual + hidden_states`` inside the layer, the stream is what the layer returns).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from patchkit.vllm.classes.ast_reads import assigned_names, body_of, names_loaded, returns_in
from patchkit.vllm.classes.composition import CompositionError, held_class, is_layer_loop
from patchkit.vllm.classes.layer_classes import layer_classes
from patchkit.vllm.classes.loops import Loop, decoder_loop
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree


class Stream(Enum):
    """The expression that is the residual stream entering a layer, in the backbone's loop."""

    SUM = "hidden_states + residual"
    HIDDEN = "hidden_states"


class Tail(Enum):
    """How the backbone's ``forward`` combines the two tensors after the decoder-layer loop."""

    FUSED = "a fused norm call with hidden_states and residual"
    SUM = "an explicit hidden_states + residual"
    ALONE = "hidden_states alone"
    NONE = "nothing (no use of hidden_states after the loop patchkit can read)"


class Entry(Enum):
    """What a layer's ``forward`` does with the residual the backbone passes it."""

    READS = "reads the residual it is given"
    OVERWRITES = "overwrites the residual it is given before reading it"
    UNUSED = "never reads the residual it is given"
    NOT_GIVEN = "is not given a residual"


class Exit(Enum):
    """What a layer's ``forward`` returns."""

    DELTA = "returns (delta, residual)"
    STREAM = "returns (hidden_states + residual added inside, residual): the full stream first"
    NO_RESIDUAL = "returns (hidden_states, None): the full stream and no residual"
    SINGLE = "returns one tensor"
    OTHER = "returns something patchkit cannot read"


@dataclass(frozen=True)
class LayerSignals:
    """What one decoder-layer class's ``forward`` says (signals 1 and 2).

    Attributes:
        cls: the layer class.
        entry, exit: see :class:`Entry` and :class:`Exit`.
        location: ``file:line`` of the statement that decided ``entry`` (or of ``forward``).
    """

    cls: ClassRef
    entry: Entry
    exit: Exit
    location: str


@dataclass(frozen=True)
class StreamVerdict:
    """The residual stream entering each layer, with the evidence.

    Attributes:
        stream: the expression to capture for id k.
        evidence: one line for users: the signals that agree.
        location: ``file:line`` of the decisive layer statement.
        residual_none: every layer returns ``None`` as its residual (``hidden_states + residual``
            and ``hidden_states`` are then the same tensor).
    """

    stream: Stream
    evidence: str
    location: str
    residual_none: bool = False


@dataclass(frozen=True)
class StreamRefusal:
    """The code does not say which tensor is the stream, or its signals disagree.

    Attributes:
        reason: one line for users, naming ``file:line``.
        location: ``file:line`` of the evidence.
    """

    reason: str
    location: str


def entry_of(forward: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str | None) -> tuple[Entry, int]:
    """Signal 1: what ``forward`` does with its parameter ``parameter`` (the residual it is given).

    Statements are read in order at the top level of the body: the first that reads the name
    decides ``READS`` (a condition such as ``if residual is None`` is a read); an unconditional
    assignment to it before any read decides ``OVERWRITES``.

    Returns:
        ``(entry, line)``; ``NOT_GIVEN`` when ``parameter`` is None or not a parameter of ``forward``.
    """
    args = forward.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    if parameter is None or parameter not in names:
        return Entry.NOT_GIVEN, forward.lineno
    for stmt in body_of(forward):
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == parameter:
            return Entry.READS, stmt.lineno
        if names_loaded(stmt, parameter):
            return Entry.READS, stmt.lineno
        if parameter in assigned_names(stmt) and isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            return Entry.OVERWRITES, stmt.lineno
    return Entry.UNUSED, forward.lineno


def exit_of(forward: ast.FunctionDef | ast.AsyncFunctionDef, method=None, _depth: int = 0) -> Exit:
    """Signal 2: what ``forward`` returns (every ``return`` must say the same).

    - ``return a, b``: ``STREAM`` when the last top-level assignment to ``a`` before it adds ``b``
      (``hidden_states = residual + hidden_states``, 0.33.0 ``exaone4.py``), else ``DELTA``;
      ``return self.mlp(h), residual`` (a sub-module's output, 0.33.0 ``lfm2.py``) is ``DELTA``;
    - ``return a, None``: ``NO_RESIDUAL`` (0.33.0 ``minicpm.py``, ``gemma4.py``): the residual the
      next layer gets is None, so the stream is ``a``;
    - ``return a``: ``SINGLE``;
    - ``return self._m(...)``: what method ``_m`` returns (0.33.0 ``models/flint/model.py``), through
      ``method(name) -> FunctionDef | None``;
    - anything else, or returns that disagree: ``OTHER``.
    """
    returns = returns_in(forward)
    if not returns:
        return Exit.OTHER
    body = body_of(forward)
    exits: set[Exit] = set()
    for r in returns:
        v = r.value
        if (
            isinstance(v, ast.Call)
            and isinstance(v.func, ast.Attribute)
            and isinstance(v.func.value, ast.Name)
            and v.func.value.id == "self"
            and method is not None
            and _depth < 3
        ):
            callee = method(v.func.attr)
            exits.add(exit_of(callee, method, _depth + 1) if callee is not None else Exit.OTHER)
        elif isinstance(v, ast.Name):
            exits.add(Exit.SINGLE)
        elif isinstance(v, ast.Tuple) and len(v.elts) == 2:
            first, second = v.elts
            if isinstance(second, ast.Constant) and second.value is None:
                exits.add(Exit.NO_RESIDUAL)
            elif not isinstance(second, ast.Name):
                exits.add(Exit.OTHER)
            elif isinstance(first, ast.Call):
                exits.add(Exit.STREAM if names_loaded(first, second.id) else Exit.DELTA)
            elif isinstance(first, ast.Name):
                last = None
                for stmt in body:
                    if first.id in assigned_names(stmt) or (
                        isinstance(stmt, ast.AugAssign) and getattr(stmt.target, "id", None) == first.id
                    ):
                        last = stmt
                adds = (
                    isinstance(last, (ast.Assign, ast.AnnAssign))
                    and isinstance(last.value, ast.BinOp)
                    and isinstance(last.value.op, ast.Add)
                    and names_loaded(last.value, second.id)
                ) or (
                    isinstance(last, ast.AugAssign)
                    and isinstance(last.op, ast.Add)
                    and names_loaded(last.value, second.id)
                )
                exits.add(Exit.STREAM if adds else Exit.DELTA)
            else:
                exits.add(Exit.OTHER)
        else:
            exits.add(Exit.OTHER)
    return exits.pop() if len(exits) == 1 else Exit.OTHER


def tail_of(forward: ast.FunctionDef | ast.AsyncFunctionDef, loop: ast.For) -> tuple[Tail, int, str | None]:
    """Signal 3: how the backbone's ``forward`` combines ``hidden_states`` and ``residual`` after ``loop``.

    Read: a call ``f(hidden_states, residual, ...)`` (fused: ``self.norm(hidden_states, residual)``;
    0.33.0 ``models/step5/nvidia/model.py``: ``layer._add_for_residual(hidden_states, residual)``),
    ``hidden_states + residual`` (sum), a call with ``hidden_states`` alone and no read of
    ``residual`` after the loop (alone). ``IntermediateTensors({...})`` (pipeline hand-over) and
    ``residual is None`` tests are no combination.

    Returns:
        ``(tail, line, attr)``: ``attr`` is ``x`` when the fused call is ``self.x(...)``; a fused call
        or a sum wins over ``alone`` (an ``else`` arm for a None residual).
    """
    body = forward.body
    after = body[body.index(loop) + 1 :] if loop in body else []
    fused = summed = alone = None
    fused_attr: str | None = None
    reads_residual = False
    for stmt in after:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "IntermediateTensors":
                continue
            if isinstance(node, ast.Call):
                names = [a.id for a in node.args if isinstance(a, ast.Name)]
                if sorted(names[:2]) == ["hidden_states", "residual"] and len(names) >= 2 and not fused:
                    fused = node.lineno
                    func = node.func
                    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                        fused_attr = func.attr
                elif names == ["hidden_states"] and len(node.args) == 1:
                    alone = alone or node.lineno
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Add)
                and {getattr(node.left, "id", None), getattr(node.right, "id", None)} == {"hidden_states", "residual"}
            ):
                summed = summed or node.lineno
        if _residual_read_outside_handover(stmt):
            reads_residual = True
    if fused:
        return Tail.FUSED, fused, fused_attr
    if summed:
        return Tail.SUM, summed, None
    if alone and not reads_residual:
        return Tail.ALONE, alone, None
    return Tail.NONE, loop.lineno, None


def passes_through(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A two-argument norm ``forward(x, residual)`` that only hands ``residual`` back, unread
    (0.33.0 ``commandr.py`` ``LayerNorm.forward``: ``return hidden_states, residuals``): its
    "fused" call combines nothing."""
    positional = [a.arg for a in [*forward.args.posonlyargs, *forward.args.args]][1:]
    if len(positional) < 2:
        return False
    name = positional[1]
    bare = {
        id(e)
        for r in returns_in(forward)
        if isinstance(r.value, ast.Tuple)
        for e in r.value.elts
        if isinstance(e, ast.Name) and e.id == name
    }
    reads = [n for n in ast.walk(forward) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return bool(reads) and all(id(n) in bare for n in reads)


def _residual_read_outside_handover(stmt: ast.stmt) -> bool:
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "IntermediateTensors":
            continue
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "residual":
            continue  # ``if residual is None`` tests, does not combine
        if isinstance(node, ast.Name) and node.id == "residual" and isinstance(node.ctx, ast.Load):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def layer_signals(tree: SourceTree, cls: ClassRef, parameter: str | None, position: int | None) -> LayerSignals | str:
    """Signals 1 and 2 of one decoder-layer class.

    Args:
        cls: the layer class.
        parameter: the keyword the backbone passes ``residual`` as, or None.
        position: its positional index in the layer call (``self`` excluded), or None.
    Returns:
        :class:`LayerSignals`, or why its ``forward`` cannot be read.
    """
    found = tree.find_member(cls, "forward")
    if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{cls.name} has no forward method"
    owner, forward = found
    name = parameter
    if name is None and position is not None:
        positional = [a.arg for a in [*forward.args.posonlyargs, *forward.args.args]][1:]
        name = positional[position] if position < len(positional) else None
    if (parameter is not None or position is not None) and name is None:
        return f"{owner.name}.forward takes no parameter for the residual passed at position {position}"
    entry, line = entry_of(forward, name)

    def method(name: str):
        member = tree.find_member(cls, name)
        return (
            member[1] if member is not None and isinstance(member[1], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        )

    return LayerSignals(cls, entry, exit_of(forward, method), f"{owner.relpath}:{line}")


def residual_passed(call: ast.Call) -> tuple[str | None, int | None] | None:
    """How a layer call passes ``residual``: ``(keyword, None)``, ``(None, position)``, or None (not passed)."""
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Name) and a.id == "residual":
            return None, i
    for kw in call.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id == "residual":
            return kw.arg, None
    return None


def residual_stream(
    tree: SourceTree,
    registry: Registry,
    owner: ClassRef,
    backbone: ClassRef,
    forward: ast.FunctionDef | ast.AsyncFunctionDef,
) -> StreamVerdict | StreamRefusal:
    """Decide which tensor is the residual stream entering each layer of ``backbone`` (see the module docstring).

    Args:
        tree, registry: the install's sources and model registry (:class:`patchkit.vllm.registry.table.Registry`).
        owner: the class defining ``forward`` (where a capture is written).
        backbone: the backbone class (its ``__init__`` builds the layers).
        forward: ``owner``'s ``forward``.
    Returns:
        A :class:`StreamVerdict` when the three signals agree, else a :class:`StreamRefusal`.
    Decision:
        - loop ``hidden_states, residual = layer(..., residual)``: every layer reads the residual it
          is given and returns ``(delta, residual)``, and the backbone ends fused or with the sum:
          ``SUM``; every layer overwrites it, returns the full stream first, and the backbone ends
          with ``hidden_states`` alone: ``HIDDEN``; anything else refuses.
        - loop ``hidden_states, residual = layer(...)`` without passing ``residual`` (0.33.0
          ``stablelm.py``): the layer keeps its residual inside; ``HIDDEN`` when the backbone ends
          with ``hidden_states`` alone and every layer returns the stream first.
        - loop ``hidden_states = layer(...)``: ``HIDDEN`` when every layer returns one tensor.
    """
    call = _layer_call(owner, forward)
    if isinstance(call, StreamRefusal):
        return call
    loop, node, passed = call
    signals = _signals_of_layers(tree, backbone, passed)
    if isinstance(signals, StreamRefusal):
        return signals
    tail, tail_text, tail_at = _backbone_tail(tree, registry, owner, backbone, forward, node)
    return _decide(loop, passed, signals, tail, tail_text, tail_at)


def _layer_call(owner: ClassRef, forward: ast.FunctionDef | ast.AsyncFunctionDef):
    """``forward``'s one decoder-layer loop: ``(loop, its For node, how it passes residual)``, or a refusal."""
    where = f"{owner.relpath}:{forward.lineno}"
    loop = decoder_loop(forward)
    if not isinstance(loop, Loop):
        return StreamRefusal(f"{owner.name}.forward: {loop} ({where})", where)
    loops = [s for s in forward.body if isinstance(s, ast.For) and is_layer_loop(s)]
    if len(loops) != 1:
        return StreamRefusal(f"{owner.name}.forward has no single decoder-layer loop ({where})", where)
    node = loops[0]
    calls = [
        s.value
        for s in ast.walk(node)
        if isinstance(s, ast.Assign)
        and isinstance(s.value, ast.Call)
        and isinstance(s.value.func, ast.Name)
        and s.value.func.id == loop.layer
    ]
    if not calls:
        return StreamRefusal(f"{owner.name}.forward: no layer call in its loop ({owner.relpath}:{node.lineno})", where)
    return loop, node, residual_passed(calls[0])


def _signals_of_layers(
    tree: SourceTree, backbone: ClassRef, passed: tuple[str | None, int | None] | None
) -> list[LayerSignals] | StreamRefusal:
    """The entry and exit signals of every decoder-layer class ``backbone`` builds, or a refusal."""
    classes = layer_classes(tree, backbone)
    if isinstance(classes, str):
        return StreamRefusal(f"which tensor is the residual stream is not said: {classes}", backbone.location)
    signals: list[LayerSignals] = []
    for cls in classes:
        s = layer_signals(tree, cls, *(passed or (None, None)))
        if isinstance(s, str):
            return StreamRefusal(f"which tensor is the residual stream is not said: {s} ({cls.location})", cls.location)
        signals.append(s)
    return signals


def _backbone_tail(
    tree: SourceTree,
    registry: Registry,
    owner: ClassRef,
    backbone: ClassRef,
    forward: ast.FunctionDef | ast.AsyncFunctionDef,
    node: ast.For,
) -> tuple[Tail, str, str]:
    """How the backbone ends after the loop ``node``: ``(tail, its words, file:line)``. A fused final norm whose
    class hands the residual back unread ends with ``hidden_states`` alone."""
    tail, tail_line, fused_attr = tail_of(forward, node)
    tail_at = f"{owner.relpath}:{tail_line}"
    tail_text = tail.value
    if tail is Tail.FUSED and fused_attr is not None:
        try:
            norm = held_class(tree, registry, backbone, fused_attr).cls
        except CompositionError:
            norm = None
        found_norm = tree.find_member(norm, "forward") if norm is not None else None
        if (
            found_norm is not None
            and isinstance(found_norm[1], (ast.FunctionDef, ast.AsyncFunctionDef))
            and passes_through(found_norm[1])
        ):
            tail = Tail.ALONE
            tail_text = (
                f"self.{fused_attr}(hidden_states, residual), whose class {norm.name} hands the residual "
                f"back unread ({found_norm[0].relpath}:{found_norm[1].lineno}): hidden_states alone"
            )
    return tail, tail_text, tail_at


def _decide(
    loop: Loop,
    passed: tuple[str | None, int | None] | None,
    signals: list[LayerSignals],
    tail: Tail,
    tail_text: str,
    tail_at: str,
) -> StreamVerdict | StreamRefusal:
    """The decision of :func:`residual_stream` (its docstring) from the loop, the layers' signals and the tail."""
    layer_text = "; ".join(f"{s.cls.name}.forward {s.entry.value} and {s.exit.value} ({s.location})" for s in signals)
    first = signals[0].location

    def refuse(why: str) -> StreamRefusal:
        return StreamRefusal(f"which tensor is the residual stream is unclear: {why}", first)

    if loop.tuple_target and passed is not None:
        if all(s.entry is Entry.READS and s.exit is Exit.DELTA for s in signals):
            if tail in (Tail.FUSED, Tail.SUM):
                return StreamVerdict(Stream.SUM, f"{layer_text}; the backbone ends with {tail_text} ({tail_at})", first)
            return refuse(f"{layer_text}, but the backbone ends with {tail_text} ({tail_at})")
        if all(s.entry in (Entry.OVERWRITES, Entry.UNUSED) and s.exit is Exit.NO_RESIDUAL for s in signals):
            # the residual after every layer is None: whatever the backbone does with it, the stream is hidden_states
            return StreamVerdict(
                Stream.HIDDEN,
                f"{layer_text}; the backbone ends with {tail_text} ({tail_at}), with a residual that is None",
                first,
                residual_none=True,
            )
        if all(
            s.entry in (Entry.OVERWRITES, Entry.UNUSED) and s.exit in (Exit.STREAM, Exit.NO_RESIDUAL) for s in signals
        ):
            if tail is Tail.ALONE:
                return StreamVerdict(
                    Stream.HIDDEN, f"{layer_text}; the backbone ends with {tail_text} ({tail_at})", first
                )
            return refuse(f"{layer_text}, but the backbone ends with {tail_text} ({tail_at})")
        return refuse(f"{layer_text}: the layers disagree with the fused-residual contract or with each other")
    if loop.tuple_target:  # the layer is given no residual: the one it returns is its own
        if all(s.exit is Exit.STREAM for s in signals) and tail is Tail.ALONE:
            return StreamVerdict(Stream.HIDDEN, f"{layer_text}; the backbone ends with {tail_text} ({tail_at})", first)
        return refuse(f"the loop passes no residual; {layer_text}; the backbone ends with {tail_text} ({tail_at})")
    if all(s.exit is Exit.SINGLE for s in signals) and tail in (Tail.ALONE, Tail.NONE):
        return StreamVerdict(Stream.HIDDEN, f"{layer_text}; the backbone ends with {tail_text} ({tail_at})", first)
    return refuse(f"the loop binds hidden_states alone; {layer_text}; the backbone ends with {tail_text} ({tail_at})")
