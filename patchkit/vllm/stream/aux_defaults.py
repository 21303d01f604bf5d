"""The aux layer ids a release captures for a target when the draft records none, read from the release.

The ids are in vLLM's convention (id ``k`` is the residual stream entering decoder layer ``k``; see
:mod:`patchkit.vllm.checkpoints.drafts` for the conventions and the fields a draft records them in).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.contract import is_stub
from patchkit.vllm.runner.draft_reads import derive
from patchkit.vllm.release.source import ClassRef, SourceTree


DEFAULT_ID_TERMS = ((0, 1, 2), (1, 2, 0), (1, 1, -3))
"""vLLM's default aux ids as ``(mult, div, add)`` terms, id = ``n * mult // div + add``: ``(2, n // 2, n - 3)``.

Fact: ``get_eagle3_aux_hidden_state_layers`` (A1) / ``get_eagle3_default_aux_hidden_state_layers``
(A2/A3) of native models, vLLM 0.10.2 - 0.33.0 (e.g. ``model_executor/models/llama.py``), and
patchkit's DeepSeek patch. Kept as data so the acceptance watch (:mod:`patchkit.watch`), which runs
without patchkit, computes the same ids from its data file."""


def vllm_default_ids(n: int) -> list[int]:
    """vLLM's default aux ids for a target of ``n`` layers, in vLLM's convention: ``[2, n // 2, n - 3]``
    (:data:`DEFAULT_ID_TERMS`)."""
    return [n * mult // div + add for mult, div, add in DEFAULT_ID_TERMS]


@dataclass(frozen=True)
class DefaultIds:
    """The aux ids vLLM captures for a target when the draft records none, read from the release.

    Attributes:
        ids: the ids, in vLLM's convention.
        getter: ``Class.method`` of the getter the runner calls on the target (None: not found).
        getter_location: ``file:line`` of that method (None: not found).
        runner_location: ``file:line`` where the runner calls it (None: not found).
        derived: True when ``ids`` were computed from the getter's own ``return`` (its tuple of
            integer expressions over ``len(...layers)``, with ``n`` = the target's layer count);
            False when the getter is not of that form (a delegation) and ``ids`` are
            :func:`vllm_default_ids` (the form every native getter of 0.10.2 - 0.33.0 has).
    """

    ids: list[int]
    getter: str | None
    getter_location: str | None
    runner_location: str | None
    derived: bool


def default_ids(tree: SourceTree, cls: ClassRef | None, n: int) -> DefaultIds:
    """The ids this release's runner captures for target class ``cls`` of ``n`` layers without draft ids.

    Facts, read from the release: the runner calls ``<getter>()`` on the target when the draft
    config gives no ids (``v1/worker/gpu_model_runner.py``, 0.10.2 - 0.33.0, and the V2 runner of
    0.33.0; :func:`patchkit.vllm.runner.draft_reads.derive`, ``aux`` sources of kind ``"target"``); the getter
    is ``get_eagle3_aux_hidden_state_layers`` on the A1 releases (0.10.2 - 0.17.1), defined on each
    model class (``llama.py``: ``num_layers = len(self.model.layers); return (2, num_layers // 2,
    num_layers - 3)``), and ``get_eagle3_default_aux_hidden_state_layers`` from 0.18.0, defined once
    on ``SupportsEagle3`` in ``model_executor/models/interfaces.py`` with the same return. The
    getter is looked up in ``cls``'s MRO, else on the Protocol (a class not yet patched).

    Args:
        tree: the install's sources.
        cls: the target's resolved class (None: not a native model).
        n: the target's ``num_hidden_layers`` (>= 1).
    Returns:
        A :class:`DefaultIds`.
    Raises:
        SourceError: a file read does not parse.
    """
    contract = contract_mod.detect(tree)
    name = contract.getter
    runner = next((a.location for a in derive(tree).aux if a.kind == "target" and a.name == name), None)
    found = first = None
    for holder in (cls, contract.protocol):
        if holder is None or name is None:
            continue
        member = tree.find_member(holder, name)
        # the Protocol's stub (an A1 class not patched yet has only that) returns nothing: not a getter
        if (
            member is not None
            and isinstance(member[1], (ast.FunctionDef, ast.AsyncFunctionDef))
            and not is_stub(member[1])
        ):
            first = first or member
            if _eval_ids(member[1], n) is not None:
                found = member
                break
    found = found or first  # the class's own getter, when neither evaluates (a delegation)
    if found is None:
        return DefaultIds(vllm_default_ids(n), None, None, runner, False)
    owner, fn = found
    ids = _eval_ids(fn, n)
    return DefaultIds(
        ids if ids is not None else vllm_default_ids(n),
        f"{owner.name}.{name}",
        f"{owner.relpath}:{fn.lineno}",
        runner,
        ids is not None,
    )


def _eval_ids(fn: ast.FunctionDef | ast.AsyncFunctionDef, n: int) -> list[int] | None:
    """The ids ``fn`` returns for ``n`` layers: its top-level ``X = len(...)`` bind ``n``, then its
    first top-level ``return`` of a tuple/list of integer expressions; None for any other form."""
    env: dict[str, int] = {}
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = stmt.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "len":
                env[stmt.targets[0].id] = n
            else:
                known = _eval_int(value, env)
                if known is not None:
                    env[stmt.targets[0].id] = known
        elif isinstance(stmt, ast.Return):
            if not isinstance(stmt.value, (ast.Tuple, ast.List)):
                return None
            values = [_eval_int(e, env) for e in stmt.value.elts]
            return [v for v in values if v is not None] if all(v is not None for v in values) else None
    return None


def _eval_int(node: ast.expr, env: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _eval_int(node.operand, env)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _eval_int(node.left, env), _eval_int(node.right, env)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.FloorDiv) and b != 0:
            return a // b
    return None


__all__ = ["DefaultIds", "default_ids", "vllm_default_ids"]
