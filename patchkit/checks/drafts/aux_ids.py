"""The aux layer ids each runner of this release captures, their range, their order, and their pipeline stages.

The id conventions and the release facts behind them are :mod:`patchkit.vllm.checkpoints.drafts`'s.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from patchkit.checks.drafts.context import DraftContext, DraftFacts, ids_text
from patchkit.results import Check
from patchkit.vllm.checkpoints.config import as_int_list
from patchkit.vllm.release.contract import DRAFT_IDS_READ_FROM
from patchkit.vllm.stream.aux_defaults import DefaultIds, default_ids
from patchkit.vllm.checkpoints.drafts import (EAGLE_CONFIG, IDS_FIELD, LAYER_IDS, TARGET_LAYER_IDS, backbone_transport,
                                  last_stage_start)


class _Pick(NamedTuple):
    """The ids one runner picks: ``source`` is ``"draft config"``, ``"draft eagle_config"`` or ``"default"``."""

    runner: str
    location: str | None
    ids: list[int] | None
    source: str
    how: str


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
    reading = ctx.reading
    fallback = default_ids(ctx.tree, ctx.target.cls, n) if n is not None else None
    default = fallback.ids if fallback is not None else None
    for name, value in ((IDS_FIELD, data.get(IDS_FIELD)), (f"{EAGLE_CONFIG}.{IDS_FIELD}", eagle_config.get(IDS_FIELD))):
        if value is not None and as_int_list(value) is None:
            ctx.actions.append(f"fix {name} in the draft's config.json: a list of layer ids (integers)")
            return Check("aux layer ids", False, f"the draft's {name} is {value!r}, not a list of integers", facts.config)
    top = as_int_list(data.get(IDS_FIELD)) or None  # vLLM treats an empty list as "not given"
    nested = as_int_list(eagle_config.get(IDS_FIELD)) or None
    # the fields only some runners read (0.33.0 - 0.34.0's V2: patchkit.vllm.checkpoints.drafts.IdReader)
    layer_ids = as_int_list(eagle_config.get(LAYER_IDS)) or None
    target_ids = as_int_list(data.get(TARGET_LAYER_IDS)) or None
    facts.declared_aux_layer_ids = top or nested or target_ids or layer_ids
    # the top-level ids of a speculators config reach vLLM only through a converter that forwards them
    top_seen = top if (facts.kind != "speculators" or reading.speculators_ids) else None

    # what the draft was trained on, in vLLM's convention
    if top is not None:
        intended = top
        intended_why = f"the draft's top-level {IDS_FIELD} (vLLM's convention: id k = the stream entering layer k)"
    elif nested is not None:
        intended = [k + 1 for k in nested]
        intended_why = (f"{EAGLE_CONFIG}'s {nested} count the output of layer k (SpecForge / SGLang / ModelOpt), "
                        f"the stream entering layer k + 1: {ids_text(intended)} in vLLM's convention")
    elif target_ids is not None:
        intended = [k + 1 for k in target_ids]
        intended_why = (f"the draft's top-level {TARGET_LAYER_IDS} {target_ids} count the output of layer k, the stream "
                        f"entering layer k + 1: {ids_text(intended)} in vLLM's convention")
    elif layer_ids is not None:
        intended = layer_ids
        intended_why = f"{EAGLE_CONFIG}.{LAYER_IDS}, which the runners that read it use verbatim (vLLM's convention)"
    else:
        intended = default
        intended_why = "no ids declared: drafts without ids (EAGLE, lmsys, AngelSlim, TorchSpec) are trained on the default layers"
    facts.intended_aux_layer_ids = intended

    # what each runner picks
    picks: list[_Pick] = []
    for r in reading.readers or (None,):
        if r is not None and top_seen is not None and r.top_level:
            picks.append(_Pick(r.runner, r.location, top_seen, "draft config", f"reads the top-level {IDS_FIELD} verbatim"))
        elif r is not None and top_seen is None and nested is not None and r.nested:
            how = ("adds 1 to eagle_config's ids" if r.nested_offset else
                   f"reads {EAGLE_CONFIG}.{IDS_FIELD} verbatim, as vLLM's convention")
            picks.append(_Pick(r.runner, r.location, [k + r.nested_offset for k in nested], "draft eagle_config", how))
        elif r is not None and top_seen is None and target_ids is not None and r.target_layer_ids:
            picks.append(_Pick(r.runner, r.location, [k + 1 for k in target_ids], "draft config",
                               f"reads the top-level {TARGET_LAYER_IDS} and adds 1"))
        elif r is not None and top_seen is None and layer_ids is not None and r.layer_ids:
            picks.append(_Pick(r.runner, r.location, layer_ids, "draft eagle_config",
                               f"reads {EAGLE_CONFIG}.{LAYER_IDS} verbatim"))
        else:
            if r is None:
                how = "this release's runner reads no ids from the draft: the target's default decides"
            elif top_seen is None and top is not None:
                how = "this release's speculators converter drops the top-level ids: the target's default decides"
            elif nested is not None and not r.nested:
                how = f"reads only a top-level {IDS_FIELD}: eagle_config's ids are ignored, the target's default decides"
            else:
                how = "the target's default (2, n // 2, n - 3)" + (f" with n = {n}" if n is not None else "")
            picks.append(_Pick(r.runner if r else "model runner", r.location if r else None, default, "default", how))

    if len(picks) > 1 and all(sorted(p.ids or []) == sorted(picks[0].ids or []) and p.source == picks[0].source for p in picks):
        picks = [picks[0]._replace(runner="every model runner")]  # they agree: say it once
    ids, source = picks[0].ids, picks[0].source
    facts.aux_layer_ids, facts.aux_layer_ids_source = ids, source
    if ids is None:
        return Check("aux layer ids", False, "the target's text config has no num_hidden_layers: the ids cannot be known",
                     ctx.target.config)

    node = Check(f"aux layer ids {ids_text(ids)}", True, "")
    same_everywhere = all(sorted(p.ids or []) == sorted(ids) for p in picks)
    if source == "default":
        node.detail = (f"the target's default (2, n // 2, n - 3) with n = {n}" if same_everywhere
                       else "the runners pick different ids (below)")
    elif source == "draft config":
        node.detail = f"explicit: {IDS_FIELD if top_seen is not None else TARGET_LAYER_IDS} in the draft's config.json"
    else:
        node.detail = f"explicit: {EAGLE_CONFIG}.{IDS_FIELD if nested is not None else LAYER_IDS} in the draft's config.json"

    # does every runner capture the layers the draft was trained on?
    wrong = []
    for pick in picks:
        right = intended is not None and pick.ids is not None and sorted(pick.ids) == sorted(intended)
        if len(picks) > 1 or not right or (facts.declared_aux_layer_ids is not None and pick.source != "draft config"):
            detail = (f"{pick.how}: {ids_text(pick.ids or [])}; the draft was trained on {ids_text(intended or [])} "
                      f"({intended_why})")
            node.children.append(Check(f"{pick.runner} captures the trained layers", right, detail, pick.location))
        if not right:
            wrong.append(pick.runner)
    if wrong and intended is not None:
        if top is not None and top_seen is not None:
            ctx.actions.append(f"vLLM {ctx.install.version} does not use the draft's {IDS_FIELD} {top}: use a vLLM whose "
                               f"runner reads them ({DRAFT_IDS_READ_FROM} and later)")
        elif top is not None:
            ctx.actions.append(f"vLLM {ctx.install.version}'s speculators converter drops the draft's ids {top}: use a vLLM "
                               f"whose converter forwards them ({DRAFT_IDS_READ_FROM} and later)")
        elif reading.readers and any(r.top_level for r in reading.readers) and nested is None:
            ctx.actions.append(f"add \"{IDS_FIELD}\": {intended} at the top level of the draft's config.json "
                               "(every runner of this release that reads draft ids reads it there)")
        elif reading.readers and any(r.top_level for r in reading.readers):
            ctx.actions.append(f"add \"{IDS_FIELD}\": {intended} at the top level of the draft's config.json "
                               f"({EAGLE_CONFIG}'s {nested} + 1: vLLM counts the stream entering layer k; do not copy "
                               f"{EAGLE_CONFIG}'s ids unchanged)")
        else:
            ctx.actions.append(f"vLLM {ctx.install.version} captures {ids_text(default or [])}, the draft was trained on "
                               f"{ids_text(intended)}: use a vLLM whose runner reads {IDS_FIELD} ({DRAFT_IDS_READ_FROM} and later) "
                               f"and add \"{IDS_FIELD}\": {intended} at the top level of the draft's config.json")

    if facts.declared_aux_layer_ids is None and source == "default" and fallback is not None:
        _unrecorded_ids(node, fallback, n, ctx)

    # ids that look like vLLM's default minus one, given in vLLM's convention
    if n is not None and source == "draft config" and default is not None and sorted(ids) == [k - 1 for k in default]:
        shifted = [k + 1 for k in sorted(ids)]
        ctx.warnings.append(f"the draft's {IDS_FIELD} {ids} are vLLM's default {tuple(default)} minus one: ids exported by "
                            f"SpecForge / SGLang / ModelOpt (output of layer k) read in vLLM's convention (stream entering "
                            f"layer k) capture one layer early; if the draft was trained with those tools, set {shifted}")
        node.children.append(Check("ids look like vLLM's default minus one", None,
                                   f"{ids} = {tuple(default)} - 1: if they were copied from a SpecForge / SGLang / ModelOpt "
                                   f"export unchanged, the right ids are {shifted}"))

    _ranges(node, ids, n, ctx)
    _order(node, facts, ids)
    _pipeline(node, facts, ids, n, ctx)
    node.ok = not any(c.failures() for c in node.children)
    return node


def _unrecorded_ids(node: Check, fallback: DefaultIds, n: int, ctx: DraftContext) -> None:
    """A draft that records no aux ids: a warning naming the ids vLLM falls back to, and how to set them.

    vLLM then captures the target's default layers without a word; a draft trained on other layers
    loads, runs and is accepted almost never (vllm#50170: nvidia's Llama-3.3-70B EAGLE-3 head, 1.21%
    acceptance instead of 58.9%). Where the ids are read is taken from the release
    (:attr:`ReleaseReading.readers` that read the top-level :data:`IDS_FIELD`).
    """
    version = ctx.install.version
    ids = ids_text(fallback.ids)
    if fallback.getter is not None:
        origin = (f"{fallback.getter}() ({fallback.getter_location})" +
                  (f" for n = {n} layers" if fallback.derived else
                   f", a delegation patchkit does not follow: (2, n // 2, n - 3) with n = {n} assumed"))
    else:
        origin = f"the target's default (2, n // 2, n - 3) with n = {n}"
    called = f", which the runner calls at {fallback.runner_location}" if fallback.runner_location else ""
    readers = [r for r in ctx.reading.readers if r.top_level]
    if readers:
        where = "; ".join(f"{r.runner}: {r.location}" for r in readers)
        how = (f"if it was trained on other layers, set \"{IDS_FIELD}\": [...] at the top level of the draft's "
               f"config.json, in vLLM's convention (id k = the stream entering layer k; SpecForge / SGLang / "
               f"ModelOpt ids + 1); vLLM {version} reads it there ({where})")
    else:
        how = (f"vLLM {version}'s runner reads no ids from a draft, so only a draft trained on {ids} fits here; "
               f"a vLLM whose runner reads the top-level \"{IDS_FIELD}\" lets the draft's "
               "config.json set them")
    ctx.warnings.append(f"the draft's config.json records no aux layer ids ({IDS_FIELD}, top level or in "
                        f"{EAGLE_CONFIG}): vLLM {version} will capture {ids}, from {origin}{called}; a draft trained "
                        f"on other layers runs without an error and its drafts are almost never accepted "
                        f"(vllm#50170); {how}")
    node.children.append(Check("the draft records its aux layer ids", None,
                               f"no: vLLM {version} falls back to {ids} ({origin}); {how}",
                               fallback.getter_location))


def _ranges(node: Check, ids: list[int], n: int | None, ctx: DraftContext) -> None:
    if n is None:
        node.children.append(Check("ids in range", False, "the target's text config has no num_hidden_layers: ranges cannot be checked"))
        return
    final = ctx.final_capture
    out_of_range = []
    for k in ids:
        if k < 0 or k > n:
            out_of_range.append(k)
            node.children.append(Check(f"id {k}", False, f"out of range: the target has {n} layers, ids go from 0 to {n}"))
        elif k == n:
            if final is None:
                node.children.append(Check(f"id {k}", None, "the last layer's output (before the final norm); capture not checked"))
            else:
                node.children.append(Check(f"id {k}", final, "the last layer's output (before the final norm)" +
                                           ("" if final else ": this backbone does not capture it, so the draft gets fewer states than it expects")))
                if not final:
                    ctx.actions.append(f"this vLLM does not capture id {n} (the last layer's output): use ids below {n}, "
                                       "or a patchkit-patched A1 release, which captures it")
        else:
            what = "the embedding output (residual stream entering layer 0)" if k == 0 else f"the residual stream entering layer {k}"
            node.children.append(Check(f"id {k}", True, what))
    if out_of_range:
        ctx.actions.append(f"fix the draft's aux layer ids {out_of_range}: the target has {n} layers, so ids must be 0..{n} "
                           "(was the draft trained for another target?)")
    repeated = sorted({k for k in ids if ids.count(k) > 1})
    if repeated:
        node.children.append(Check("ids are distinct", False,
                                   f"{repeated} repeat: the backbone captures each layer once, so the draft gets fewer states than it expects"))


def _order(node: Check, facts: DraftFacts, ids: list[int]) -> None:
    """The states reach the draft in layer order, each layer once.

    Fact: the capture runs inside the decoder loop, which walks the layers in ascending order
    (vLLM 0.10.2 - 0.33.0 native backbones and patchkit's A1 capture); 0.33.0's
    ``EagleModelMixin._set_aux_hidden_state_layers`` also stores ``tuple(sorted(set(layers)))``.
    """
    order = sorted(set(ids))
    facts.capture_order = order
    if order != ids:
        node.children.append(Check("order the states reach the draft", None,
                                   f"layer order {ids_text(order)}, not the order given {ids_text(ids)}: the draft's fc "
                                   "sees the states concatenated in layer order"))


def _pipeline(node: Check, facts: DraftFacts, ids: list[int], n: int | None, ctx: DraftContext) -> None:
    pp = ctx.pipeline_parallel_size
    if pp <= 1 or n is None:
        return
    start = last_stage_start(n, pp)
    transport, why = backbone_transport(ctx.tree, ctx.registry, ctx.target.cls, ctx.reading)
    if transport:
        node.children.append(Check(f"pipeline parallel size {pp}", True, f"every id reaches the draft: {why}"))
        return
    lost = sorted(k for k in set(ids) if k < start)
    facts.unreachable_aux_layer_ids = lost
    if not lost:
        node.children.append(Check(f"pipeline parallel size {pp}", True,
                                   f"the last stage owns layers {start}..{n - 1} and every id is in it ({why})"))
        return
    node.children.append(Check(f"pipeline parallel size {pp}", False,
                               f"ids {lost} belong to earlier stages (the last stage owns layers {start}..{n - 1}) and never "
                               f"reach the draft: {why}"))
    ctx.actions.append(f"with --pipeline-parallel-size {pp}, aux ids {lost} never reach the draft on vLLM "
                       f"{ctx.install.version}: serve with --pipeline-parallel-size 1 (use tensor parallelism instead)")



__all__ = ["aux_ids_check"]
