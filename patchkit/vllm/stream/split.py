"""The split-layer capture: which tensor is the stream entering a layer whose input norm the backbone runs
apart from the rest of the layer (vLLM 0.34.0 ``models/mistral/mistral_large4/nvidia/model.py``
``MistralLarge4Model.forward``, ``models/minimax_m3/nvidia/model.py`` ``MiniMaxM3Model.forward``).

The loop (:class:`patchkit.vllm.classes.loops.SplitLayer`) runs ``hidden_states, residual =
layer.<norm>(hidden_states, residual)``, captures, then runs the rest of the layer. When ``<norm>`` is a
fused add-and-norm (vLLM's ``RMSNorm.forward(x, residual)`` returns ``(norm(x + residual), x + residual)``,
0.34.0 ``model_executor/layers/layernorm.py``), the ``residual`` it returns is ``hidden_states + residual``:
the stream entering the layer (:mod:`patchkit.vllm.stream.residual` says why that sum is the stream). Read from
the code's structure, never from class names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.vllm.classes.ast_reads import assigned_names, returns_in
from patchkit.vllm.classes.layer_classes import layer_classes
from patchkit.vllm.classes.loops import SplitLayer, split_layer
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.stream.residual import StreamRefusal, Tail, tail_of


@dataclass(frozen=True)
class SplitVerdict:
    """In a split-layer loop (:class:`patchkit.vllm.classes.loops.SplitLayer`), ``residual`` after the layer's
    input norm is the stream entering the layer.

    Attributes:
        split: the loop's form; evidence: one line for users; location: ``file:line`` of the norm method.
    """

    split: SplitLayer
    evidence: str
    location: str


def _is_none_test(test: ast.expr, name: str) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == name
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _fuses(call: ast.AST, h: str, r: str) -> bool:
    """A call given both ``h`` and ``r`` as plain names (``norm(hidden_states, residual)``,
    ``self.residual_norm(self.input_layernorm, hidden_states, residual)``): the fused add-and-norm
    (the same reading as :func:`tail_of`'s fused call)."""
    return isinstance(call, ast.Call) and {h, r} <= {
        a.id for a in [*call.args, *(k.value for k in call.keywords)] if isinstance(a, ast.Name)
    }


def fused_add_norm(method: ast.FunctionDef | ast.AsyncFunctionDef, h: str, r: str) -> str | None:
    """Why ``method(h, r)`` is not a fused add-and-norm whose second result is ``h + r``, or None when it is.

    It is one when every ``return`` gives either a call fusing ``h`` and ``r`` (:func:`_fuses`), or
    ``(x, r)`` where every binding of ``r`` is ``..., r = <a call fusing h and r>`` or, under
    ``if r is None``, ``r = h``; or, under ``if r is None``, ``(x, h)`` with ``h`` the input.
    (vLLM's fused ``RMSNorm.forward(x, residual)`` returns ``(norm(x + residual), x + residual)``:
    0.34.0 ``model_executor/layers/layernorm.py``.)
    """
    none_branch: set[int] = set()
    for node in ast.walk(method):
        if isinstance(node, ast.If) and _is_none_test(node.test, r):
            none_branch.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(method):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and r in (
            assigned_names(node) if not isinstance(node, ast.AugAssign) else {getattr(node.target, "id", None)}
        ):
            fused = isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and _fuses(node.value, h, r)
            handed = (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name)
                and node.value.id == h
                and id(node) in none_branch
            )
            if not (fused or handed):
                return f"line {node.lineno} binds {r} to something other than a fused add-and-norm of {h} and {r}"
    returns = returns_in(method)
    if not returns:
        return f"{method.name} returns nothing"
    h_rebound = [
        n.lineno
        for n in ast.walk(method)
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        and h in (assigned_names(n) if not isinstance(n, ast.AugAssign) else {getattr(n.target, "id", None)})
    ]
    for ret in returns:
        v = ret.value
        if _fuses(v, h, r):
            continue
        if isinstance(v, ast.Tuple) and len(v.elts) == 2 and isinstance(v.elts[1], ast.Name):
            second = v.elts[1].id
            if second == r:
                continue
            if second == h and id(ret) in none_branch and not any(line < ret.lineno for line in h_rebound):
                continue
        return f"line {ret.lineno} returns {ast.unparse(v) if v is not None else 'None'}, not ({h} normed, {h} + {r})"
    return None


def split_stream(tree: SourceTree, registry: Registry, backbone: ClassRef) -> SplitVerdict | StreamRefusal | None:
    """Decide whether ``residual`` after the input norm of ``backbone``'s split-layer loop is the stream.

    Args:
        tree, registry: the install's sources and model registry.
        backbone: the backbone class.
    Returns:
        None when ``backbone.forward`` has no split-layer loop (:func:`patchkit.vllm.classes.loops.split_layer`);
        a :class:`SplitVerdict` when every decoder-layer class's norm method is a fused add-and-norm
        (:func:`fused_add_norm`) and the backbone ends with a fused norm or the sum; else a
        :class:`StreamRefusal` naming what does not hold.
    """
    found = tree.find_member(backbone, "forward")
    if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    owner, forward = found
    split = split_layer(forward)
    if split is None:
        return None
    norm_stmt = split.loop.body[split.norm_at]
    call = norm_stmt.value  # type: ignore[attr-defined]
    positions = {a.id: i for i, a in enumerate(call.args) if isinstance(a, ast.Name)}
    classes = layer_classes(tree, backbone)
    if isinstance(classes, str):
        return StreamRefusal(f"the split-layer loop's norm is not checked: {classes}", backbone.location)
    read: list[str] = []
    location = f"{owner.relpath}:{norm_stmt.lineno}"
    for cls in classes:
        member = tree.find_member(cls, split.norm)
        if member is None or not isinstance(member[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return StreamRefusal(
                f"{cls.name} has no method {split.norm}, which the loop calls ({owner.relpath}:{norm_stmt.lineno})",
                cls.location,
            )
        defining, method = member
        params = [a.arg for a in [*method.args.posonlyargs, *method.args.args]][1:]
        names = {kw.arg: kw.value.id for kw in call.keywords if kw.arg and isinstance(kw.value, ast.Name)}
        by_name = {v: k for k, v in names.items()}
        h = by_name.get("hidden_states") or (
            params[positions["hidden_states"]] if positions.get("hidden_states", 99) < len(params) else None
        )
        r = by_name.get("residual") or (
            params[positions["residual"]] if positions.get("residual", 99) < len(params) else None
        )
        at = f"{defining.relpath}:{method.lineno}"
        if h is None or r is None:
            return StreamRefusal(
                f"{defining.name}.{split.norm} takes no parameters for hidden_states and residual ({at})", at
            )
        why = fused_add_norm(method, h, r)
        if why is not None:
            return StreamRefusal(f"{defining.name}.{split.norm} is not a fused add-and-norm: {why} ({at})", at)
        read.append(f"{defining.name}.{split.norm} adds {r} to {h} and norms ({at})")
        location = location if len(read) > 1 else at
    tail, tail_line, _ = tail_of(forward, split.loop)
    if tail not in (Tail.FUSED, Tail.SUM):
        return StreamRefusal(
            f"the split-layer loop's backbone ends with {tail.value} ({owner.relpath}:{tail_line}), "
            "not with the fused norm of hidden_states and residual",
            location,
        )
    return SplitVerdict(
        split,
        "; ".join(read) + f", so residual after it is the stream entering the layer; "
        f"the backbone ends with {tail.value} ({owner.relpath}:{tail_line})",
        location,
    )
