"""``patchkit rehearse`` of a DFlash draft: its miniature, the method the engine runs, and what acceptance says.

vLLM serves a DFlash draft with its own speculative method (``dflash``), picked from the draft class or the
draft's path (:func:`patchkit.vllm.checkpoints.methods.draft_method`). The rehearsal of such a draft:

- the miniature target is EAGLE-3's (:func:`patchkit.rehearse.miniature.shrink`), with the draft's ids read
  from ``dflash_config.target_layer_ids`` (the output of layer k) plus what the install's runner adds to them
  (:attr:`patchkit.vllm.checkpoints.drafts.IdReader.dflash_offset`: 1 on 0.22.0 and later, 0 on 0.20.2's V1);
- the miniature draft keeps the user's ``dflash_config`` fields (the ids mapped onto the miniature, the mask
  token moved into the miniature's vocabulary), with the target's width, small heads and at most
  :data:`DRAFT_LAYERS` layers; its weights are random (no fit is defined for DFlash's parallel drafting);
- acceptance is not compared: no offline replay of DFlash's parallel drafting is defined here
  (:func:`patchkit.rehearse.verdict.decide_not_replayed`), so that check is "not compared" and the
  rehearsal's outcome is at best "not decided" (docs/rehearse.md, "DFlash drafts").

vLLM facts (0.32.0 ``config/speculative.py`` ``SpeculativeConfig.__post_init__``: ``dflash`` sets
``parallel_drafting``; ``model_executor/models/qwen3_dflash.py`` ``DFlashQwen3Model``: ``fc`` takes
``len(ids) x target_hidden_size`` (``_get_dflash_fc_input_size``), the mask token comes from
``dflash_config.mask_token_id``, a layer is non-causal unless ``is_causal``, ``dflash_config.causal`` or
``layer_types`` say otherwise (``_dflash_layer_causal``); the same in 0.34.0's ``qwen3_dflash.py``).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

from patchkit.vllm.checkpoints.config import text_config
from patchkit.vllm.checkpoints.drafts import DFLASH_CONFIG, IDS_FIELD, TARGET_LAYER_IDS, read_release
from patchkit.vllm.checkpoints.methods import EAGLE3, draft_method
from patchkit.vllm.registry.table import Registry
from patchkit.errors import RefusedError
from patchkit.vllm.release.install import Install
from patchkit.vllm.release.source import SourceTree
from patchkit.rehearse.miniature import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    MAX_POSITIONS,
    VOCAB,
    Miniature,
    _scaled,
    shrink,
)
from patchkit.rehearse.miniature_ids import IdField
from patchkit.vllm.checkpoints.methods import DFLASH

REHEARSED = frozenset({DFLASH})
"""The methods :func:`patchkit.rehearse.rehearsal.rehearse` runs besides EAGLE-3; DFlash2, DSpark and
hidden-state extraction stay refused (their drafts' classes and weights differ from DFlash's)."""
DRAFT_LAYERS = 2
"""The miniature DFlash draft's layers at most (two: vLLM's fused context projection stacks every layer's)."""


def dflash_offset(source: SourceTree, install: Install) -> int | None:
    """What the install's runner adds to ``dflash_config.target_layer_ids`` (the first reader that reads them),
    or None when no runner reads them (the target's default ids decide). Raises what
    :func:`~patchkit.vllm.checkpoints.drafts.read_release` raises (a file that does not parse)."""
    for reader in read_release(source, install).readers:
        if reader.dflash:
            return reader.dflash_offset
    return None


def shrink_dflash(
    target: dict[str, Any], draft: dict[str, Any], offset: int | None, *, tensor_parallel_size: int = 1
) -> Miniature:
    """The miniature of a DFlash draft and its target (nothing written; the inputs are not changed).

    Args:
        target, draft: the two ``config.json`` objects.
        offset: :func:`dflash_offset` (None: the install reads no DFlash ids; the default ids are used).
        tensor_parallel_size: as :func:`patchkit.rehearse.miniature.shrink`.
    Returns:
        The :class:`Miniature`: the target as for EAGLE-3 with the ids vLLM captures, the DFlash draft
        (:func:`_dflash_draft`); ``id_field`` :attr:`IdField.DFLASH_CONFIG` when the ids come from ``dflash_config``
        (``user_ids`` and ``ids`` in vLLM's convention), else :attr:`IdField.NONE`.
    Raises:
        RefusedError: what :func:`~patchkit.rehearse.miniature.shrink` refuses.
    """
    block = draft.get(DFLASH_CONFIG) if isinstance(draft.get(DFLASH_CONFIG), dict) else {}
    user = block.get(TARGET_LAYER_IDS)
    read = offset is not None and isinstance(user, list) and user
    probe = {k: v for k, v in draft.items() if k != DFLASH_CONFIG}
    if read:
        probe[IDS_FIELD] = [int(k) + offset for k in user]
    mini = shrink(target, probe, tensor_parallel_size=tensor_parallel_size)
    hidden = text_config(mini.target_config)[0].get("hidden_size") or _scaled(HIDDEN, HEADS)
    d = _dflash_draft(draft, mini, hidden, [k - offset for k in mini.ids] if read else None)
    return replace(mini, draft_config=d, id_field=IdField.DFLASH_CONFIG if read else IdField.NONE)


def _dflash_draft(draft: dict[str, Any], mini: Miniature, hidden: int, ids: list[int] | None) -> dict[str, Any]:
    """The miniature DFlash draft config: the user's fields and ``dflash_config`` kept; widths, heads, layers,
    vocabulary and the mask token shrunk; ``ids`` (output-of-layer convention) written where the user's were."""
    d = copy.deepcopy(draft)
    layers = max(1, min(int(draft.get("num_hidden_layers") or 1), DRAFT_LAYERS))
    heads = max(HEADS, hidden // HEAD_DIM)
    d.update(
        {
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": 1,
            "head_dim": HEAD_DIM,
            "intermediate_size": _scaled(INTERMEDIATE, heads),
            "num_hidden_layers": layers,
            "num_target_layers": mini.layers[1],
            "max_position_embeddings": MAX_POSITIONS,
            "vocab_size": VOCAB,
            "torch_dtype": "float32",
        }
    )
    for key in ("target_hidden_size",):
        if d.get(key) is not None:
            d[key] = hidden
    if isinstance(d.get("layer_types"), list) and d["layer_types"]:
        d["layer_types"] = [d["layer_types"][i % len(d["layer_types"])] for i in range(layers)]
    block = dict(d.get(DFLASH_CONFIG) or {})
    block["mask_token_id"] = VOCAB - 1  # inside the miniature's vocabulary, as the user's is inside theirs
    if ids is not None:
        block[TARGET_LAYER_IDS] = ids
    d[DFLASH_CONFIG] = block
    d.pop("draft_vocab_size", None)
    return d


def method_of(install: Install, source: SourceTree, draft_cfg: dict, draft: Path) -> str:
    """The speculative method the rehearsal's engine runs for the draft: :data:`EAGLE3` (vLLM picks none by
    itself, or one without aux states), or one of :data:`REHEARSED` as
    :func:`~patchkit.vllm.checkpoints.methods.draft_method` reads it from the install.

    Raises:
        RefusedError: another aux-state method (DFlash2, DSpark, hidden-state extraction; exit 3), naming the
            method, how vLLM picks it, and doctor.
    """
    pick = draft_method(source, Registry(source), draft_cfg, str(draft))
    if pick is None or pick.method == EAGLE3 or pick.aux is False:
        return EAGLE3
    if pick.method in REHEARSED:
        return pick.method
    raise RefusedError(
        f"rehearse runs EAGLE-3 drafts only: vLLM {install.version} serves this draft with method {pick.method} "
        f"({pick.how}, {pick.location}); the miniature, its draft and the offline replay are EAGLE-3's, so nothing of "
        f"{pick.method} would be checked",
        "'patchkit doctor --model ... --draft ...' reads the class vLLM builds for it, the ids it reads and the "
        "input width its class takes",
    )


__all__ = ["DFLASH", "REHEARSED", "dflash_offset", "method_of", "shrink_dflash"]
