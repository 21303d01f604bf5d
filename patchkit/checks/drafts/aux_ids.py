"""The aux layer ids each runner of this release captures, their range, their order, and their pipeline stages.

The id conventions and the release facts behind them are :mod:`patchkit.vllm.checkpoints.drafts`'s.
"""

from __future__ import annotations

from typing import Any

from patchkit.checks.drafts.context import DraftContext, DraftFacts, DraftFormat, IdsSource, ids_text
from patchkit.vllm.checkpoints.pipeline import backbone_transport, last_stage_start
from patchkit.checks.drafts.id_picks import Declared, Pick, declared_ids, intended_ids, pick_ids
from patchkit.results import Check
from patchkit.vllm.release.contract import DRAFT_IDS_READ_FROM
from patchkit.vllm.stream.aux_defaults import DefaultIds, default_ids
from patchkit.vllm.checkpoints.drafts import (
    DFLASH_CONFIG,
    DSPARK_IDS,
    EAGLE_CONFIG,
    IDS_FIELD,
    LAYER_IDS,
    TARGET_LAYER_IDS,
)


def aux_ids_check(facts: DraftFacts, data: dict[str, Any], eagle_config: dict[str, Any], ctx: DraftContext) -> Check:
    """The aux layer ids each runner of this release captures, against the layers the draft was trained on.

    Args:
        facts: the draft's facts (the ids, their source, order and unreachable ids are set here).
        data: the draft's ``config.json``; eagle_config: its ``eagle_config`` dict (empty: none).
        ctx: the target, the install and :attr:`DraftContext.reading`; actions and warnings are appended.
    Returns:
        One :class:`Check` tree: the ids, each runner's pick, their ranges, order and pipeline stages.
    Raises:
        SourceError: a vLLM file on the way does not parse.
    """
    n = ctx.target.num_hidden_layers
    fallback = default_ids(ctx.tree, ctx.target.cls, n) if n is not None else None
    default = fallback.ids if fallback is not None else None
    declared = declared_ids(data, eagle_config)
    beyond = _declared_out_of_range(facts, declared, n, ctx)
    if beyond is not None:
        return beyond
    facts.declared_aux_layer_ids = (
        declared.top
        or declared.nested
        or declared.dflash
        or declared.dspark
        or declared.target_ids
        or declared.layer_ids
        or declared.dflash_layer_ids
    )
    # the top-level ids of a speculators config reach vLLM only through a converter that forwards them
    top_seen = declared.top if (facts.kind is not DraftFormat.SPECULATORS or ctx.reading.speculators_ids) else None
    kept = any(declared.model_type in r.dspark_kept for r in ctx.reading.readers)
    intended, intended_why = intended_ids(declared, default, kept)
    facts.intended_aux_layer_ids = intended
    picks = pick_ids(ctx, declared, top_seen, default, n)
    ids, source = picks[0].ids, picks[0].source
    facts.aux_layer_ids, facts.aux_layer_ids_source = ids, source
    if ids is None:
        return Check(
            "aux layer ids",
            False,
            "the target's text config has no num_hidden_layers: the ids cannot be known",
            ctx.target.config,
        )

    same_everywhere = all(sorted(p.ids or []) == sorted(ids) for p in picks)
    detail = _source_detail(source, same_everywhere, n, top_seen, declared)
    children: list[Check] = []
    wrong = _runner_checks(children, picks, intended, intended_why, facts)
    if wrong and intended is not None:
        ctx.actions.append(_ids_action(ctx, declared, top_seen, intended, default))
    if facts.declared_aux_layer_ids is None and source is IdsSource.DEFAULT and fallback is not None:
        _unrecorded_ids(children, fallback, n, ctx)
    if n is not None and source is IdsSource.DRAFT_CONFIG and default is not None:
        _shifted_default(children, ids, default, ctx)
    _ranges(children, ids, n, ctx)
    _order(children, facts, ids)
    _pipeline(children, facts, ids, n, ctx)
    ok = not any(c.failures() for c in children)
    return Check(f"aux layer ids {ids_text(ids)}", ok, detail, children=children)


def _declared_out_of_range(facts: DraftFacts, declared: Declared, n: int | None, ctx: DraftContext) -> Check | None:
    """The failing check of declared ids outside their field's own range (and the action to fix them), or None.

    Each field is held to its own convention before any id is converted or advised (issue 42, finding
    6: ``eagle_config`` ids ``[1, 29, 500]`` on a 61-layer target were advised as ``[2, 30, 501]``, which
    the next run called out of range, and ``-1`` became ``0`` without a word): vLLM's convention
    (``eagle_config``'s :data:`LAYER_IDS`; the top-level :data:`IDS_FIELD` is checked id by id in
    ``_ranges``) counts the stream entering layer k, ``0..n``;
    the output convention (``eagle_config``'s :data:`IDS_FIELD`, :data:`TARGET_LAYER_IDS`) counts the
    output of layer k, ``0..n - 1``. A negative id is wrong in both.
    """
    fields = (  # the top-level ids are checked id by id where the runner reads them (_ranges)
        (f"{EAGLE_CONFIG}.{IDS_FIELD}", declared.nested, 1),
        (TARGET_LAYER_IDS, declared.target_ids, 1),
        (f"{DFLASH_CONFIG}.{TARGET_LAYER_IDS}", declared.dflash, 1),
        (DSPARK_IDS, declared.dspark, 1),
        (f"{EAGLE_CONFIG}.{LAYER_IDS}", declared.layer_ids, 0),
        (f"{DFLASH_CONFIG}.{LAYER_IDS}", declared.dflash_layer_ids, 0),
    )
    for name, ids, shift in fields:
        top = None if n is None else n - shift
        bad = [k for k in ids or () if k < 0 or (top is not None and k > top)]
        if not bad:
            continue
        span = f"0..{top}" if top is not None else "0 or more"
        counts = "the output of layer k" if shift else "the stream entering layer k"
        layers = f"the target has {n} layers, so " if n is not None else ""
        ctx.actions.append(
            f"fix the draft's {name} {ids}: {layers}its ids ({counts}) go from {span}; {bad} cannot be "
            "captured (was the draft trained for another target?)"
        )
        return Check(
            "aux layer ids",
            False,
            f"the draft's {name} {ids} holds {bad}, outside {span} ({counts}"
            + (f", {n} layers" if n is not None else "")
            + ")",
            facts.config,
        )
    return None


def _source_detail(
    source: IdsSource, same_everywhere: bool, n: int | None, top_seen: list[int] | None, declared: Declared
) -> str:
    """The ids node's detail: where the ids come from."""
    if source is IdsSource.DEFAULT:
        return (
            f"the target's default (2, n // 2, n - 3) with n = {n}"
            if same_everywhere
            else "the runners pick different ids (below)"
        )
    if source is IdsSource.DRAFT_CONFIG:
        field = IDS_FIELD if top_seen is not None else DSPARK_IDS if declared.dspark is not None else TARGET_LAYER_IDS
        return f"explicit: {field} in the draft's config.json"
    if source is IdsSource.DRAFT_DFLASH_CONFIG:
        field = TARGET_LAYER_IDS if declared.dflash is not None else LAYER_IDS
        return f"explicit: {DFLASH_CONFIG}.{field} in the draft's config.json"
    return (
        f"explicit: {EAGLE_CONFIG}.{IDS_FIELD if declared.nested is not None else LAYER_IDS} in the draft's config.json"
    )


def _runner_checks(
    children: list[Check], picks: list[Pick], intended: list[int] | None, intended_why: str, facts: DraftFacts
) -> list[str]:
    """Does every runner capture the layers the draft was trained on? One child per runner worth a line,
    appended to ``children``; returns the runners that do not."""
    wrong = []
    for pick in picks:
        right = intended is not None and pick.ids is not None and sorted(pick.ids) == sorted(intended)
        if (
            len(picks) > 1
            or not right
            or (facts.declared_aux_layer_ids is not None and pick.source is not IdsSource.DRAFT_CONFIG)
        ):
            detail = (
                f"{pick.how}: {ids_text(pick.ids or [])}; the draft was trained on {ids_text(intended or [])} "
                f"({intended_why})"
            )
            children.append(Check(f"{pick.runner} captures the trained layers", right, detail, pick.location))
        if not right:
            wrong.append(pick.runner)
    return wrong


def _ids_action(
    ctx: DraftContext, declared: Declared, top_seen: list[int] | None, intended: list[int], default: list[int] | None
) -> str:
    """What to do when a runner does not capture the layers the draft was trained on."""
    top, nested = declared.top, declared.nested
    readers = ctx.reading.readers
    if top is not None and top_seen is not None:
        return (
            f"vLLM {ctx.install.version} does not use the draft's {IDS_FIELD} {top}: use a vLLM whose "
            f"runner reads them ({DRAFT_IDS_READ_FROM} and later)"
        )
    if top is not None:
        return (
            f"vLLM {ctx.install.version}'s speculators converter drops the draft's ids {top}: use a vLLM "
            f"whose converter forwards them ({DRAFT_IDS_READ_FROM} and later)"
        )
    if readers and any(r.top_level for r in readers) and nested is None:
        return (
            f'add "{IDS_FIELD}": {intended} at the top level of the draft\'s config.json '
            "(every runner of this release that reads draft ids reads it there)"
        )
    if readers and any(r.top_level for r in readers):
        return (
            f'add "{IDS_FIELD}": {intended} at the top level of the draft\'s config.json '
            f"({EAGLE_CONFIG}'s {nested} + 1: vLLM counts the stream entering layer k; do not copy "
            f"{EAGLE_CONFIG}'s ids unchanged)"
        )
    return (
        f"vLLM {ctx.install.version} captures {ids_text(default or [])}, the draft was trained on "
        f"{ids_text(intended)}: use a vLLM whose runner reads {IDS_FIELD} ({DRAFT_IDS_READ_FROM} and later) "
        f'and add "{IDS_FIELD}": {intended} at the top level of the draft\'s config.json'
    )


def _shifted_default(children: list[Check], ids: list[int], default: list[int], ctx: DraftContext) -> None:
    """Ids that look like vLLM's default minus one, given in vLLM's convention: a warning, and a note appended to
    ``children``."""
    if sorted(ids) != [k - 1 for k in default]:
        return
    shifted = [k + 1 for k in sorted(ids)]
    ctx.warnings.append(
        f"the draft's {IDS_FIELD} {ids} are vLLM's default {tuple(default)} minus one: ids exported by "
        f"SpecForge / SGLang / ModelOpt (output of layer k) read in vLLM's convention (stream entering "
        f"layer k) capture one layer early; if the draft was trained with those tools, set {shifted}"
    )
    children.append(
        Check(
            "ids look like vLLM's default minus one",
            None,
            f"{ids} = {tuple(default)} - 1: if they were copied from a SpecForge / SGLang / ModelOpt "
            f"export unchanged, the right ids are {shifted}",
        )
    )


def _unrecorded_ids(children: list[Check], fallback: DefaultIds, n: int, ctx: DraftContext) -> None:
    """A draft that records no aux ids: a warning naming the ids vLLM falls back to, and how to set them (and a note
    appended to ``children``).

    vLLM then captures the target's default layers without a word; a draft trained on other layers
    loads, runs and is accepted almost never (vllm#50170: nvidia's Llama-3.3-70B EAGLE-3 head, 1.21%
    acceptance instead of 58.9%). Where the ids are read is taken from the release
    (:attr:`ReleaseReading.readers` that read the top-level :data:`IDS_FIELD`).
    """
    version = ctx.install.version
    ids = ids_text(fallback.ids)
    if fallback.getter is not None:
        origin = f"{fallback.getter}() ({fallback.getter_location})" + (
            f" for n = {n} layers"
            if fallback.derived
            else f", a delegation patchkit does not follow: (2, n // 2, n - 3) with n = {n} assumed"
        )
    else:
        origin = f"the target's default (2, n // 2, n - 3) with n = {n}"
    called = f", which the runner calls at {fallback.runner_location}" if fallback.runner_location else ""
    readers = [r for r in ctx.reading.readers if r.top_level]
    if readers:
        where = "; ".join(f"{r.runner}: {r.location}" for r in readers)
        how = (
            f'if it was trained on other layers, set "{IDS_FIELD}": [...] at the top level of the draft\'s '
            f"config.json, in vLLM's convention (id k = the stream entering layer k; SpecForge / SGLang / "
            f"ModelOpt ids + 1); vLLM {version} reads it there ({where})"
        )
    else:
        how = (
            f"vLLM {version}'s runner reads no ids from a draft, so only a draft trained on {ids} fits here; "
            f'a vLLM whose runner reads the top-level "{IDS_FIELD}" lets the draft\'s '
            "config.json set them"
        )
    ctx.warnings.append(
        f"the draft's config.json records no aux layer ids ({IDS_FIELD}, top level or in "
        f"{EAGLE_CONFIG}): vLLM {version} will capture {ids}, from {origin}{called}; a draft trained "
        f"on other layers runs without an error and its drafts are almost never accepted "
        f"(vllm#50170); {how}"
    )
    children.append(
        Check(
            "the draft records its aux layer ids",
            None,
            f"no: vLLM {version} falls back to {ids} ({origin}); {how}",
            fallback.getter_location,
        )
    )


def _ranges(children: list[Check], ids: list[int], n: int | None, ctx: DraftContext) -> None:
    if n is None:
        children.append(
            Check("ids in range", False, "the target's text config has no num_hidden_layers: ranges cannot be checked")
        )
        return
    final = ctx.final_capture
    out_of_range = []
    for k in ids:
        if k < 0 or k > n:
            out_of_range.append(k)
            children.append(Check(f"id {k}", False, f"out of range: the target has {n} layers, ids go from 0 to {n}"))
        elif k == n:
            if final is None:
                children.append(
                    Check(f"id {k}", None, "the last layer's output (before the final norm); capture not checked")
                )
            else:
                children.append(
                    Check(
                        f"id {k}",
                        final,
                        "the last layer's output (before the final norm)"
                        + (
                            ""
                            if final
                            else ": this backbone does not capture it, so the draft gets fewer states than it expects"
                        ),
                    )
                )
                if not final:
                    ctx.actions.append(
                        f"this vLLM does not capture id {n} (the last layer's output): use ids below {n}, "
                        "or a patchkit-patched A1 release, which captures it"
                    )
        else:
            what = (
                "the embedding output (residual stream entering layer 0)"
                if k == 0
                else f"the residual stream entering layer {k}"
            )
            children.append(Check(f"id {k}", True, what))
    if out_of_range:
        ctx.actions.append(
            f"fix the draft's aux layer ids {out_of_range}: the target has {n} layers, so ids must be 0..{n} "
            "(was the draft trained for another target?)"
        )
    repeated = sorted({k for k in ids if ids.count(k) > 1})
    if repeated:
        children.append(
            Check(
                "ids are distinct",
                False,
                f"{repeated} repeat: the backbone captures each layer once, so the draft gets fewer states "
                "than it expects",
            )
        )


def _order(children: list[Check], facts: DraftFacts, ids: list[int]) -> None:
    """The states reach the draft in layer order, each layer once (a note appended to ``children`` when not given so).

    Fact: the capture runs inside the decoder loop, which walks the layers in ascending order
    (vLLM 0.10.2 - 0.33.0 native backbones and patchkit's A1 capture); 0.33.0's
    ``EagleModelMixin._set_aux_hidden_state_layers`` also stores ``tuple(sorted(set(layers)))``.
    """
    order = sorted(set(ids))
    facts.capture_order = order
    if order != ids:
        children.append(
            Check(
                "order the states reach the draft",
                None,
                f"layer order {ids_text(order)}, not the order given {ids_text(ids)}: the draft's fc "
                "sees the states concatenated in layer order",
            )
        )


def _pipeline(children: list[Check], facts: DraftFacts, ids: list[int], n: int | None, ctx: DraftContext) -> None:
    pp = ctx.pipeline_parallel_size
    if pp <= 1 or n is None:
        return
    start = last_stage_start(n, pp)
    transport, why = backbone_transport(ctx.tree, ctx.registry, ctx.target.cls, ctx.reading)
    if transport:
        children.append(Check(f"pipeline parallel size {pp}", True, f"every id reaches the draft: {why}"))
        return
    lost = sorted(k for k in set(ids) if k < start)
    facts.unreachable_aux_layer_ids = lost
    if not lost:
        children.append(
            Check(
                f"pipeline parallel size {pp}",
                True,
                f"the last stage owns layers {start}..{n - 1} and every id is in it ({why})",
            )
        )
        return
    children.append(
        Check(
            f"pipeline parallel size {pp}",
            False,
            f"ids {lost} belong to earlier stages (the last stage owns layers {start}..{n - 1}) and never "
            f"reach the draft: {why}",
        )
    )
    ctx.actions.append(
        f"with --pipeline-parallel-size {pp}, aux ids {lost} never reach the draft on vLLM "
        f"{ctx.install.version}: serve with --pipeline-parallel-size 1 (use tensor parallelism instead)"
    )


__all__ = ["aux_ids_check"]
