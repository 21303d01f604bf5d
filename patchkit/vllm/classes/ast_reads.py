"""Small statement-level AST reads shared by the stream reader (:mod:`patchkit.vllm.stream.residual`) and the
layer-class finder (:mod:`patchkit.vllm.classes.layer_classes`)."""

from __future__ import annotations

import ast


def names_loaded(node: ast.AST, name: str) -> bool:
    """True when ``node`` loads the name ``name`` anywhere inside it."""
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


def assigned_names(stmt: ast.stmt) -> set[str]:
    """The plain names an ``=`` or annotated assignment ``stmt`` binds (tuple targets unpacked)."""
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    out: set[str] = set()
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                out.add(n.id)
    return out


def body_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """``fn``'s statements without its docstring."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body


def returns_in(fn: ast.AST) -> list[ast.Return]:
    """Every ``return`` in ``fn``, not counting nested functions, lambdas and classes."""
    out: list[ast.Return] = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out
