"""The draft's input width: the aux states its ``fc`` takes times their width, against what the target gives."""

from __future__ import annotations

from typing import Any

from patchkit.checks.drafts.context import DraftContext, DraftFacts
from patchkit.results import Check
from patchkit.vllm.checkpoints.config import as_int, as_int_list
from patchkit.checks.drafts.context import IdsSource
from patchkit.vllm.checkpoints.drafts import FC_COUNT_FIELD, FC_STATES, IDS_FIELD, reads_aux_count
from patchkit.vllm.checkpoints.methods import sizes_by_ids
from patchkit.vllm.release.source import SourceTree


def _fc_states(
    facts: DraftFacts, data: dict[str, Any], eagle_config: dict[str, Any], tree: SourceTree
) -> tuple[int | None, str]:
    """How many aux states the draft's fc takes, and why (see :data:`patchkit.vllm.checkpoints.drafts.FC_STATES`
    and :func:`patchkit.vllm.checkpoints.methods.sizes_by_ids`); ``(None, why)`` when patchkit does not read how
    the draft class of a method other than EAGLE-3 sizes it."""
    sized = sizes_by_ids(tree, facts.draft_class)
    if sized is not None:
        if facts.aux_layer_ids_source is IdsSource.DEFAULT or facts.aux_layer_ids_source is None:
            layers = as_int(data.get("num_hidden_layers"))
            if layers is None:
                return None, f"the reader gives no ids, and the draft's config has no num_hidden_layers ({sized})"
            return layers, f"num_hidden_layers {layers} states (the reader gives no ids; {sized})"
        count = len(facts.aux_layer_ids or [])
        return count, f"{count} states (one per id the runner reads; {sized})"
    if facts.method is not None:
        return None, (
            f"not checked: {facts.draft_class or 'the draft class'} ({facts.method}) sizes its input neither by the "
            "runner's ids nor by a count patchkit reads"
        )
    reads_count = reads_aux_count(tree, facts.draft_class)
    declared = as_int(data.get(FC_COUNT_FIELD))
    if reads_count is False:
        return (
            FC_STATES,
            f"{FC_STATES} states "
            f"(fixed in {facts.draft_class.rpartition('.')[2] if facts.draft_class else 'the draft class'})",
        )
    if declared is not None:
        return declared, f"{FC_COUNT_FIELD} {declared}"
    nested = as_int_list(eagle_config.get(IDS_FIELD))
    if reads_count and nested:
        return len(nested), f"{len(nested)} states (one per eagle_config id)"
    return FC_STATES, f"{FC_STATES} states"


def width_check(
    facts: DraftFacts, data: dict[str, Any], layer: dict[str, Any], eagle_config: dict[str, Any], ctx: DraftContext
) -> Check:
    """The width the draft's ``fc`` takes against what the target gives (``len(set(ids)) * hidden_size``).

    Args:
        facts: the draft's facts so far (``aux_layer_ids`` and ``draft_class`` are read,
            ``fc_input_width`` is set).
        data: the draft's ``config.json``; layer: its layer config (``transformer_layer_config`` of a
            speculators config, else ``data``); eagle_config: its ``eagle_config`` dict (empty: none).
        ctx: the target and the install; a misfit appends an action.
    Returns:
        One :class:`Check` (None: not checked).
    Raises:
        SourceError: the draft class's module does not parse.
    """
    label = "draft input width"
    target_hidden = as_int(data.get("target_hidden_size"))
    if target_hidden is not None:
        width, width_name = target_hidden, "target_hidden_size"
    elif as_int(layer.get("hidden_size")) is not None:
        width, width_name = int(layer["hidden_size"]), "hidden_size"
    else:
        return Check(
            label, None, "the draft's config.json gives neither target_hidden_size nor hidden_size: not checked"
        )
    k, k_text = _fc_states(facts, data, eagle_config, ctx.tree)
    if k is None:
        return Check(label, None, k_text)
    facts.fc_input_width = k * width
    h = ctx.target.hidden_size
    ids = facts.aux_layer_ids
    if h is None:
        return Check(label, False, "the target's text config has no hidden_size", ctx.target.config)
    if ids is None:
        return Check(label, None, "not checked: the aux layer ids are not known")
    count = len(set(ids))
    given = count * h
    takes = f"the draft's fc takes {k_text} x {width_name} {width} = {k * width}"
    if count == k and width == h:
        return Check(label, True, f"{count} ids x hidden_size {h} = {given}; {takes}")
    reasons = []
    if width != h:
        reasons.append(f"the draft was built for hidden size {width}, the target has {h}")
    if count != k:
        reasons.append(f"{count} aux states are requested, the fc takes {k}")
    ctx.actions.append("the draft does not fit this target (" + "; ".join(reasons) + "): use a draft trained for it")
    return Check(
        label, False, f"the target gives {count} ids x hidden_size {h} = {given}, but {takes}: " + "; ".join(reasons)
    )


__all__ = ["width_check"]
