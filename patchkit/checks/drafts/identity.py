"""The draft's architecture (the draft class vLLM builds) and its model type (can this release load its config)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from patchkit.checks.drafts.context import DraftContext, DraftFacts, DraftFormat
from patchkit.results import Check
from patchkit.vllm.release.contract import MLA_DRAFTS_FROM
from patchkit.vllm.checkpoints.drafts import (
    DFLASH_CONFIG,
    DSPARK_IDS,
    MLA_DRAFT_ARCHITECTURES,
    SPECULATORS_MODEL_TYPE,
    SPECULATORS_TYPE,
    TRANSFORMERS_CHECKED,
    TRANSFORMERS_MODEL_TYPES,
    eagle3_draft_architecture,
    transformers_has,
)
from patchkit.vllm.checkpoints.methods import DFLASH, DSPARK, draft_architecture, path_rule


def architecture_check(facts: DraftFacts, data: dict[str, Any], ctx: DraftContext) -> Check:
    """The draft class vLLM builds for the draft's ``architectures``: with method ``eagle3``, or with the method
    vLLM picks by itself (:attr:`DraftFacts.method`; the name it asks the registry for is
    :func:`patchkit.vllm.checkpoints.methods.draft_architecture`'s).

    Args:
        facts: the draft's facts (``method`` is read; ``vllm_architectures`` and ``draft_class`` are set here).
        data: the draft's ``config.json``.
        ctx: the registry and install; a failure appends an action.
    Returns:
        One :class:`Check` tree, a child per listed architecture (ok when one of them is registered).
    """
    if facts.kind is DraftFormat.SPECULATORS:
        return Check(
            "draft architecture",
            None,
            f"speculators format (speculators_model_type {data.get(SPECULATORS_TYPE)!r}): vLLM's "
            "converter picks the draft class",
        )
    if not facts.architectures:
        ctx.actions.append('the draft\'s config.json must list its architecture ("architectures": [...])')
        return Check("draft architecture", False, "the draft's config.json lists no architectures", facts.config)
    label = "draft architecture " + ", ".join(facts.architectures)
    children: list[Check] = []
    registered = []
    method = facts.method
    for i, arch in enumerate(facts.architectures):
        if method is None:
            name, steps = eagle3_draft_architecture(arch), []
        else:  # the renames of hf_config_override look at the first architecture only
            name, steps = draft_architecture(ctx.tree, method, arch, data if i == 0 else {})
        if name is None:
            children.append(Check(f"{arch} -> ?", None, "not checked: " + "; ".join(steps)))
            continue
        facts.vllm_architectures.append(name)
        entry = ctx.registry.entry(name)
        if entry is not None:
            registered.append(name)
            children.append(
                Check(
                    f"{arch} -> {name}",
                    True,
                    "; ".join([*steps, f"registered: {entry.module}.{entry.class_name}"]),
                    f"{ctx.registry.relpath}:{entry.lineno}",
                )
            )
        else:
            detail = f"vLLM {ctx.install.version} does not register {name}: it cannot build this draft"
            detail = "; ".join([*steps, detail])
            if name in MLA_DRAFT_ARCHITECTURES:
                detail += f" (MLA EAGLE-3 drafts are registered from vLLM {MLA_DRAFTS_FROM})"
            children.append(Check(f"{arch} -> {name}", False, detail, ctx.registry.relpath))
    if registered:
        entry = ctx.registry.entry(registered[0])
        if entry is not None:
            facts.draft_class = f"{entry.module}.{entry.class_name}"
        # one registered name is enough: vLLM uses the first it can build
        children = [replace(child, ok=None) if child.ok is False else child for child in children]
        return Check(label, True, f"vLLM builds {registered[0]}", children=children)
    if any(c.ok is None for c in children) and not any(c.ok is False for c in children):
        return Check(label, None, "not checked: the name vLLM asks its registry for is not known", children=children)
    if method is not None:
        ctx.actions.append(
            f"vLLM {ctx.install.version} registers no {method} draft class for {', '.join(facts.architectures)}: "
            f"use a {method} draft this vLLM can build, or a vLLM that registers this one"
        )
        return Check(label, False, f"no {method} draft class for it in this release", children=children)
    by_path = _picked_by_path(data, ctx)
    if by_path is not None:  # the draft is another method's, which this release picks by the path alone
        ctx.actions.append(by_path)
        return Check(label, False, "no EAGLE-3 draft class for it in this release", children=children)
    mla = any(n in MLA_DRAFT_ARCHITECTURES for n in facts.vllm_architectures)
    ctx.actions.append(
        "use an EAGLE-3 draft this vLLM can build (a Llama-architecture draft -> Eagle3LlamaForCausalLM)"
        + (f", or vLLM >= {MLA_DRAFTS_FROM}, which registers MLA (DeepSeek-architecture) drafts" if mla else "")
    )
    return Check(label, False, "no EAGLE-3 draft class for it in this release", children=children)


def model_type_check(facts: DraftFacts, data: dict[str, Any], ctx: DraftContext) -> Check:
    """Can this release load the draft's config at all (vLLM's config registry, else transformers)?

    Fact (vLLM 0.10.2 - 0.33.0 ``transformers_utils/config.py`` ``HFConfigParser.parse``): a model
    type in ``_CONFIG_REGISTRY`` loads with vLLM's own class; any other goes to transformers'
    ``AutoConfig``, which raises for a type it does not know unless the config's ``auto_map`` points
    at remote code and ``--trust-remote-code`` is given.
    """
    reading = ctx.reading
    mt = data.get("model_type")
    if mt is None and data.get("speculators_config") is not None:
        mt = SPECULATORS_MODEL_TYPE
    if not isinstance(mt, str):
        ctx.actions.append('the draft\'s config.json needs a model_type (a Llama-architecture EAGLE-3 draft: "llama")')
        return Check(
            "draft model type", False, "the draft's config.json has no model_type: vLLM cannot load it", facts.config
        )
    facts.model_type = mt
    label = f"draft model type {mt}"
    if mt in reading.config_types:
        return Check(label, True, f"in vLLM {ctx.install.version}'s own config registry", reading.config_registry)
    spec_text = f"transformers{reading.transformers}" if reading.transformers is not None else "any transformers"
    if mt not in TRANSFORMERS_MODEL_TYPES:
        return Check(
            label,
            None,
            f"not in vLLM {ctx.install.version}'s config registry; whether {spec_text} knows it is not checked",
            reading.config_registry,
        )
    known = transformers_has(reading.transformers, mt)
    absent_below, has = TRANSFORMERS_MODEL_TYPES[mt]
    if known:
        return Check(label, True, f"known to transformers (>= {has}); this release requires {spec_text}")
    if known is None:
        return Check(
            label,
            None,
            f"not in vLLM {ctx.install.version}'s config registry; transformers lacks it before {absent_below} "
            f"and has it from {has}: whether {spec_text} has it is not known",
            reading.config_registry,
        )
    why = (
        f"not in vLLM {ctx.install.version}'s config registry, and no transformers release up to "
        f"{TRANSFORMERS_CHECKED} registers it"
        if has is None
        else f"not in vLLM {ctx.install.version}'s config registry, and no transformers release this release allows "
        f"({spec_text}) registers it (none before {absent_below}; {has} does)"
    )
    if isinstance(data.get("auto_map"), dict):
        ctx.warnings.append(
            f"the draft's model_type {mt!r} loads only through its auto_map remote code: serve with --trust-remote-code"
        )
        return Check(
            label,
            None,
            f"{why}; the config's auto_map names remote code (needs --trust-remote-code)",
            reading.config_registry,
        )
    ctx.actions.append(
        f"vLLM {ctx.install.version} cannot load a draft config of model_type {mt!r}: set the draft's "
        'model_type to one it loads (EAGLE-3 drafts with a Llama layer use "llama"), or use a vLLM '
        "whose config registry has it"
    )
    return Check(label, False, f"{why}: vLLM fails to load the draft config", reading.config_registry)


__all__ = ["architecture_check", "model_type_check"]


def _picked_by_path(data: dict[str, Any], ctx: DraftContext) -> str | None:
    """The advice for a draft that carries another method's ids field (``dflash_config``, DFlash; ``dspark_target_
    layer_ids``, DSpark) served as EAGLE-3 because its path lacks the word by which this release picks that method
    (0.20.2 - 0.33.0: ``config/speculative.py``; :func:`patchkit.vllm.checkpoints.methods.path_rule`); else None."""
    for field, method in ((DFLASH_CONFIG, DFLASH), (DSPARK_IDS, DSPARK)):
        rule = path_rule(ctx.tree, method) if field in data else None
        if rule is not None:
            word, where = rule
            return (
                f"the draft has {field}, a {method} draft: vLLM {ctx.install.version} picks {method} only by the "
                f"draft's path ({where}), so this one is served as EAGLE-3; put it in a folder whose name contains "
                f"{word!r}"
            )
    return None
