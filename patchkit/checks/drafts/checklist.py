"""The draft's checklist (:func:`draft_checks`), and what verify's chain check says about id n."""

from __future__ import annotations

from patchkit.checks.drafts.aux_ids import aux_ids_check
from patchkit.checks.drafts.context import DraftContext, DraftFacts, DraftFormat
from patchkit.checks.drafts.identity import architecture_check, model_type_check
from patchkit.checks.drafts.vocab import vocab_check
from patchkit.checks.drafts.width import width_check
from patchkit.results import Check
from patchkit.vllm.chain import kinds
from patchkit.vllm.checkpoints.config import CheckpointConfig
from patchkit.vllm.checkpoints.drafts import EAGLE_CONFIG, draft_shape_problem
from patchkit.vllm.checkpoints.methods import DFLASH, EAGLE3, MethodPick, draft_method
from patchkit.vllm.runner.pins import pins
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.runner.units import Concern


def draft_checks(cfg: CheckpointConfig, ctx: DraftContext) -> tuple[DraftFacts, list[Check]]:
    """The draft's checklist as this release will read it.

    Args:
        cfg: the draft's ``config.json``.
        ctx: the target, the install and what this release reads (see :class:`DraftContext`).
    Returns:
        ``(facts, checks)``: one :class:`Check` tree per item; failures make doctor's verdict "not ready".
    Raises:
        SourceError: a vLLM file on the way does not parse.
    """
    data = cfg.data
    kind = DraftFormat.of(data)
    layer = data.get("transformer_layer_config") if kind is DraftFormat.SPECULATORS else data
    layer = layer if isinstance(layer, dict) else data
    archs = data.get("architectures")
    architectures = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    facts = DraftFacts(str(cfg.path), architectures, kind=kind)
    pick = draft_method(ctx.tree, ctx.registry, data, str(cfg.path.parent))
    method = method_check(facts, pick) if pick is not None and pick.method != EAGLE3 and pick.aux is not False else None
    if method is not None and method.ok is False:
        ctx.actions.append(
            f"patchkit cannot tell whether vLLM {ctx.install.version} serves {pick.method} with the target's aux "
            "states: check the serve's log for 'Using Eagle3 auxiliary layers' and its acceptance"
        )
    checks: list[Check] = [
        *([method] if method is not None else []),
        architecture_check(facts, data, ctx),
        model_type_check(facts, data, ctx),
        vocab_check(facts, cfg, layer, ctx),
    ]
    changed_method = pins(ctx.tree).not_checked(Concern.METHOD) if facts.method is not None else None
    if changed_method is not None:  # the method, its class and (below) its width rest on changed vLLM code
        checks[:2] = [kinds.unpinned(c, changed_method) for c in checks[:2]]

    problem = draft_shape_problem(data)
    if problem is not None:  # what no release reads: never "ready" (issue 42, finding 2)
        ctx.actions.append(f"fix the draft's config.json: {problem}")
        checks.append(Check("aux layer ids", False, problem, facts.config))
        return facts, checks
    eagle_config = data.get(EAGLE_CONFIG) or {}
    if eagle_config.get("use_aux_hidden_state") is False:
        checks.append(
            Check(
                "aux layer ids",
                None,
                "the draft does not use aux hidden states (eagle_config.use_aux_hidden_state is false)",
            )
        )
        return facts, checks
    ids = aux_ids_check(facts, data, eagle_config, ctx)
    changed = pins(ctx.tree).not_checked(Concern.IDS, generation=serving_runner(ctx.tree).name)
    checks.append(kinds.unpinned(ids, changed) if changed is not None else ids)
    width = width_check(facts, data, layer, eagle_config, ctx)
    checks.append(kinds.unpinned(width, changed_method) if changed_method is not None else width)
    return facts, checks


def method_check(facts: DraftFacts, pick: MethodPick) -> Check:
    """The speculative method vLLM picks for the draft by itself, other than EAGLE-3, and whether it makes the
    runner capture the target's aux states (sets :attr:`DraftFacts.method`).

    Args:
        facts: the draft's facts; pick: :func:`patchkit.vllm.checkpoints.methods.draft_method`'s answer.
    Returns:
        One :class:`Check`: ok when the method's config turns ``uses_aux_hidden_states`` on (the runner then sets
        the target's aux layers through the EAGLE-3 interface), None when that is not read on this release.
    """
    facts.method = pick.method
    label = f"speculative method {pick.method}"
    if pick.aux is None:  # unknown is not success: never "ready" on it
        rehearse = (  # rehearse runs DFlash drafts in the engine (patchkit.rehearse.dflash), no other method
            "`patchkit rehearse` runs this draft in the engine and shows whether the capture is right"
            if pick.method == DFLASH
            else f"`patchkit rehearse` cannot run a {pick.method} draft either"
        )
        return Check(
            label,
            False,
            f"not checked: {pick.how}; whether it makes the runner capture aux states is not read: patchkit reads "
            "that from the method's speculator config (v1/worker/gpu/spec_decode/*/config.py), which this release "
            f"lacks; {rehearse}",
            pick.location,
        )
    return Check(
        label,
        True,
        f"{pick.how}; {pick.config_class.rpartition('.')[2] if pick.config_class else 'its config'} turns "
        "uses_aux_hidden_states on: the runner sets the target's aux layers through the EAGLE-3 interface, as for "
        "an EAGLE-3 draft",
        pick.location,
    )


def final_layer_capture(chain: Check | None) -> bool | None:
    """Whether the target's backbone captures id n, from verify's chain check (None: not known)."""
    if chain is None or not chain.ok:
        return None
    found: list[Check] = []

    def walk(c: Check) -> None:
        if c.kind in (kinds.FINAL_LAYER_CAPTURED, kinds.FINAL_LAYER_MISSED):
            found.append(c)
        for child in c.children:
            walk(child)

    walk(chain)
    if not found:
        return None
    return all(c.kind == kinds.FINAL_LAYER_CAPTURED for c in found)


__all__ = ["draft_checks", "final_layer_capture", "method_check"]
