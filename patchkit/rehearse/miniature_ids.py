"""The draft's aux ids on the miniature: the layers the draft was trained on, and how many layers the miniature keeps.

:func:`trained_ids` reads the draft's ids in vLLM's convention; :func:`layer_count` picks the fewest
layers (4 to :data:`MAX_LAYERS`) the ids map onto distinctly (:func:`map_ids`). Used by
:func:`patchkit.rehearse.miniature.shrink`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from patchkit.errors import RefusedError
from patchkit.vllm.checkpoints.drafts import EAGLE_CONFIG, IDS_FIELD, draft_shape_problem
from patchkit.vllm.stream.aux_defaults import vllm_default_ids

MAX_LAYERS = 12


class IdField(str, Enum):
    """Where the draft keeps its aux ids (:func:`trained_ids`); the value is what ``rehearse --json`` prints as
    ``id_field``. The field names are :mod:`patchkit.vllm.checkpoints.drafts`'s."""

    TOP_LEVEL = "top level"  # a top-level eagle_aux_hidden_state_layer_ids: vLLM's convention, verbatim
    EAGLE_CONFIG = EAGLE_CONFIG  # eagle_config's ids: they count a layer's output (+ 1)
    NONE = "none"  # no ids: the target's default layers
    DFLASH_CONFIG = "dflash_config"  # a DFlash draft's dflash_config.target_layer_ids: a layer's output (+ 1)

    __str__ = str.__str__
    __format__ = str.__format__


def trained_ids(draft: dict[str, Any], n: int) -> tuple[tuple[int, ...], IdField]:
    """The layers the draft was trained on, in vLLM's convention, and where its ids are kept.

    The conventions are :mod:`patchkit.vllm.checkpoints.drafts`'s: a top-level ``eagle_aux_hidden_state_layer_ids``
    is vLLM's (verbatim); ``eagle_config``'s ids count a layer's output (SpecForge / SGLang /
    ModelOpt: + 1); no ids means the default layers ``(2, n // 2, n - 3)``.

    Raises:
        RefusedError: what :func:`~patchkit.vllm.checkpoints.drafts.draft_shape_problem` names (an
            ``eagle_config`` that is not an object, ids that are not integers), exit 3.
    """
    problem = draft_shape_problem(draft)
    if problem is not None:  # doctor's own check: no string id becomes an integer here (issue 42, finding 10)
        raise RefusedError(problem, "fix the draft's config.json; 'patchkit doctor' names what vLLM reads there")
    top = draft.get(IDS_FIELD)
    nested = (draft.get(EAGLE_CONFIG) or {}).get(IDS_FIELD)
    if top:
        return tuple(top), IdField.TOP_LEVEL
    if nested:
        return tuple(k + 1 for k in nested), IdField.EAGLE_CONFIG
    return tuple(vllm_default_ids(n)), IdField.NONE


def map_ids(ids: tuple[int, ...], n: int, m: int) -> tuple[int, ...] | None:
    """``ids`` of an ``n``-layer target placed proportionally on ``m`` layers, or None when two collide.

    An inner id (0 < k < n) stays inner (1 .. m - 1), so the layers either side of it exist in
    the miniature too (the shifted-by-one comparison needs them); 0 and n stay 0 and m.
    """
    mapped = tuple(k if k in (0,) else m if k == n else min(m - 1, max(1, round(k * m / n))) for k in ids)
    return mapped if len(set(mapped)) == len(set(ids)) else None


def layer_count(user_ids: tuple[int, ...], field: IdField, n: int) -> tuple[int, tuple[int, ...]]:
    """The miniature's layer count and the draft's aux ids on it.

    Args: the draft's ids on the target's ``n`` layers and the field they came from (:attr:`IdField.NONE`: vLLM's
    default).
    Returns: ``(m, ids)``: the fewest layers from 4 to :data:`MAX_LAYERS` the ids map onto distinctly, else
    ``(n, user_ids)`` (a small target is kept as it is). Raises nothing.
    """
    for size in range(4, MAX_LAYERS + 1):
        if size > n:
            break
        if field is IdField.NONE:
            mapped = tuple(vllm_default_ids(size))
            ok = len(set(mapped)) == len(mapped)
        else:
            mapped = map_ids(user_ids, n, size)
            ok = mapped is not None
        if ok:
            return size, mapped
    return n, user_ids  # a small target already: kept as it is


__all__ = ["MAX_LAYERS", "layer_count", "map_ids", "trained_ids"]
