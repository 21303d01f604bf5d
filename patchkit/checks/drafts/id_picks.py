"""Which ids each runner of the release picks from a draft's config: the fields the draft declares, the layers
it was trained on, and each reader's pick in its own order (:class:`patchkit.vllm.checkpoints.drafts.IdReader`).

The id conventions and the release facts behind them are :mod:`patchkit.vllm.checkpoints.drafts`'s.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from patchkit.checks.drafts.context import DraftContext, IdsSource, ids_text
from patchkit.vllm.checkpoints.config import as_int_list
from patchkit.vllm.checkpoints.drafts import (
    DFLASH_CONFIG,
    DSPARK_IDS,
    EAGLE_CONFIG,
    IDS_FIELD,
    LAYER_IDS,
    TARGET_LAYER_IDS,
)


class Pick(NamedTuple):
    """The ids one runner picks, and where they come from."""

    runner: str
    location: str | None
    ids: list[int] | None
    source: IdsSource
    how: str


class Declared(NamedTuple):
    """The ids the draft's config.json declares, each as written (None: not given)."""

    top: list[int] | None  # the top-level IDS_FIELD (vLLM's convention)
    nested: list[int] | None  # eagle_config's IDS_FIELD (output of layer k)
    layer_ids: list[int] | None  # eagle_config's LAYER_IDS, read by only some runners (0.33.0 - 0.34.0's V2)
    target_ids: list[int] | None  # the top-level TARGET_LAYER_IDS (output of layer k)
    dflash: list[int] | None = None  # dflash_config's TARGET_LAYER_IDS (output of layer k)
    dspark: list[int] | None = None  # the top-level DSPARK_IDS (output of layer k)
    dflash_layer_ids: list[int] | None = None  # dflash_config's LAYER_IDS (read verbatim)
    model_type: str | None = None  # the draft's model_type (a DSpark reader keeps the ids of some as they are)


def declared_ids(data: dict[str, Any], eagle_config: dict[str, Any]) -> Declared:
    """The ids the draft declares (vLLM treats an empty list as "not given", and reads ``dflash_config`` only
    when it is a dict)."""
    dflash = data.get(DFLASH_CONFIG)
    dflash = dflash if isinstance(dflash, dict) else {}
    model_type = data.get("model_type")
    return Declared(
        top=as_int_list(data.get(IDS_FIELD)) or None,
        nested=as_int_list(eagle_config.get(IDS_FIELD)) or None,
        layer_ids=as_int_list(eagle_config.get(LAYER_IDS)) or None,
        target_ids=as_int_list(data.get(TARGET_LAYER_IDS)) or None,
        dflash=as_int_list(dflash.get(TARGET_LAYER_IDS)) or None,
        dspark=as_int_list(data.get(DSPARK_IDS)) or None,
        dflash_layer_ids=as_int_list(dflash.get(LAYER_IDS)) or None,
        model_type=model_type if isinstance(model_type, str) else None,
    )


def intended_ids(declared: Declared, default: list[int] | None, kept: bool = False) -> tuple[list[int] | None, str]:
    """What the draft was trained on, in vLLM's convention, and why patchkit reads it so (``kept``: the
    release's reader keeps this draft model type's DSpark ids as they are, the layers' inputs)."""
    top, nested, layer_ids, target_ids = declared[:4]
    if top is not None:
        return top, f"the draft's top-level {IDS_FIELD} (vLLM's convention: id k = the stream entering layer k)"
    if declared.dflash is None and declared.dspark is not None and kept:
        return declared.dspark, (
            f"the draft's {DSPARK_IDS} for model_type {declared.model_type!r} name the layers whose inputs it "
            "reads (vLLM's convention)"
        )
    for name, ids in ((f"{DFLASH_CONFIG}.{TARGET_LAYER_IDS}", declared.dflash), (DSPARK_IDS, declared.dspark)):
        if ids is not None:
            intended = [k + 1 for k in ids]
            return intended, (
                f"the draft's {name} {ids} count the output of layer k (DFlash / DSpark training reads the target's "
                f"hidden states after layer k), the stream entering layer k + 1: {ids_text(intended)} in vLLM's "
                "convention"
            )
    if nested is not None:
        intended = [k + 1 for k in nested]
        return intended, (
            f"{EAGLE_CONFIG}'s {nested} count the output of layer k (SpecForge / SGLang / ModelOpt), "
            f"the stream entering layer k + 1: {ids_text(intended)} in vLLM's convention"
        )
    if target_ids is not None:
        intended = [k + 1 for k in target_ids]
        return intended, (
            f"the draft's top-level {TARGET_LAYER_IDS} {target_ids} count the output of layer k, the stream "
            f"entering layer k + 1: {ids_text(intended)} in vLLM's convention"
        )
    if layer_ids is not None:
        return layer_ids, f"{EAGLE_CONFIG}.{LAYER_IDS}, which the runners that read it use verbatim (vLLM's convention)"
    return (
        default,
        "no ids declared: drafts without ids (EAGLE, lmsys, AngelSlim, TorchSpec) are trained on the default layers",
    )


def pick_ids(
    ctx: DraftContext, declared: Declared, top_seen: list[int] | None, default: list[int] | None, n: int | None
) -> list[Pick]:
    """What each runner of the release picks (one pick for every runner when they agree)."""
    picks = [_pick(r, declared, top_seen, default, n) for r in ctx.reading.readers or (None,)]
    if len(picks) > 1 and all(
        sorted(p.ids or []) == sorted(picks[0].ids or []) and p.source is picks[0].source for p in picks
    ):
        picks = [picks[0]._replace(runner="every model runner")]  # they agree: say it once
    return picks


def _pick(r: Any, declared: Declared, top_seen: list[int] | None, default: list[int] | None, n: int | None) -> Pick:
    """The ids runner ``r`` (an :class:`~patchkit.vllm.checkpoints.drafts.IdReader`; None: the release reads none)
    picks: the first field it reads, in its own order (:attr:`IdReader.order`), that the draft declares."""
    top, nested = declared.top, declared.nested
    for key in r.order if r is not None else ():
        found = _field_pick(r, key, declared, top_seen)
        if found is not None:
            return found
    if r is None:
        how = "this release's runner reads no ids from the draft: the target's default decides"
    elif top_seen is None and top is not None:
        how = "this release's speculators converter drops the top-level ids: the target's default decides"
    elif nested is not None and not r.nested:
        how = f"reads only a top-level {IDS_FIELD}: eagle_config's ids are ignored, the target's default decides"
    else:
        how = "the target's default (2, n // 2, n - 3)" + (f" with n = {n}" if n is not None else "")
    return Pick(r.runner if r else "model runner", r.location if r else None, default, IdsSource.DEFAULT, how)


def _field_pick(r: Any, key: str, declared: Declared, top_seen: list[int] | None) -> Pick | None:
    """What reader ``r`` picks from field ``key`` (:data:`patchkit.vllm.checkpoints.drafts.FIELD_KEYS`), or None
    when it does not read that field or the draft does not declare it (the fields below the top level count only
    when the top level gives no ids)."""
    if key == "top":
        if top_seen is None or not r.top_level:
            return None
        return Pick(r.runner, r.location, top_seen, IdsSource.DRAFT_CONFIG, f"reads the top-level {IDS_FIELD} verbatim")
    if top_seen is not None:
        return None
    if key == "nested" and declared.nested is not None and r.nested:
        how = (
            "adds 1 to eagle_config's ids"
            if r.nested_offset
            else f"reads {EAGLE_CONFIG}.{IDS_FIELD} verbatim, as vLLM's convention"
        )
        ids = [k + r.nested_offset for k in declared.nested]
        return Pick(r.runner, r.location, ids, IdsSource.DRAFT_EAGLE_CONFIG, how)
    if key == "dflash" and declared.dflash is not None and r.dflash:
        name = f"{DFLASH_CONFIG}.{TARGET_LAYER_IDS}"
        how = f"reads {name} and adds 1" if r.dflash_offset else f"reads {name} verbatim"
        ids = [k + r.dflash_offset for k in declared.dflash]
        return Pick(r.runner, r.location, ids, IdsSource.DRAFT_DFLASH_CONFIG, how)
    if key == "dspark" and declared.dspark is not None and r.dspark:
        if declared.model_type in r.dspark_kept:
            how = f"reads the top-level {DSPARK_IDS} as they are (model_type {declared.model_type!r})"
            return Pick(r.runner, r.location, list(declared.dspark), IdsSource.DRAFT_CONFIG, how)
        ids = [k + 1 for k in declared.dspark]
        return Pick(r.runner, r.location, ids, IdsSource.DRAFT_CONFIG, f"reads the top-level {DSPARK_IDS} and adds 1")
    if key == "target" and declared.target_ids is not None and r.target_layer_ids:
        ids = [k + 1 for k in declared.target_ids]
        how = f"reads the top-level {TARGET_LAYER_IDS} and adds 1"
        return Pick(r.runner, r.location, ids, IdsSource.DRAFT_CONFIG, how)
    if key == "layer_ids":
        for section, ids, reads in (
            (DFLASH_CONFIG, declared.dflash_layer_ids, r.dflash_layer_ids),
            (EAGLE_CONFIG, declared.layer_ids, r.layer_ids),
        ):
            if ids is not None and reads:
                source = IdsSource.DRAFT_DFLASH_CONFIG if section == DFLASH_CONFIG else IdsSource.DRAFT_EAGLE_CONFIG
                return Pick(r.runner, r.location, ids, source, f"reads {section}.{LAYER_IDS} verbatim")
    return None


__all__ = ["Declared", "Pick", "declared_ids", "intended_ids", "pick_ids"]
