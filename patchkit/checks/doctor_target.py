"""The target model's checks that ``doctor`` runs: its architecture, the start-up allow-list, EAGLE-3 in
effect for its class, the proposer with a multimodal target, and its route through vLLM's Transformers backend.

Split from :mod:`patchkit.checks.doctor`, which runs them in order (see its docstring for the decisions).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from patchkit.advice import Effect, NextStep
from patchkit.checks import verify as verify_mod
from patchkit.plan import arch_scope, next_steps
from patchkit.plan.spec import ClassTarget, default_architectures, load_patches
from patchkit.results import OWN_MODEL, Check
from patchkit.store.journal import journal_for
from patchkit.vllm.runner.pins import pins
from patchkit.vllm.runner.units import Concern
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.classes import loadpath
from patchkit.vllm.registry import platforms
from patchkit.vllm.chain import kinds, links
from patchkit.vllm.checkpoints.config import CheckpointConfig, TargetFacts, as_int, text_config
from patchkit.vllm.release.contract import (
    MULTIMODAL_PROTOCOL,
    Contract,
    NoAllowList,
    admits,
    is_multimodal,
    read_allow_list,
)
from patchkit.vllm.release.install import Install
from patchkit.vllm.runner.draft_reads import derive
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.shapes.classify import classify
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.registry.transformers_backend import BackendRoute


def target_facts(cfg: CheckpointConfig, tree: SourceTree, registry: Registry) -> TargetFacts:
    """What the target's ``config.json`` says, with the registry's class for it.

    In: the target's config, the install's source tree and its model registry (read statically,
    :mod:`patchkit.vllm.registry`). Out: :class:`TargetFacts` (architecture and resolution: the first
    listed architecture the registry maps to a native class, as vLLM tries them in order; else the first
    it knows at all). The layer count was checked when the config was read
    (:func:`patchkit.vllm.checkpoints.config.check_layer_count`).
    """
    data = cfg.data
    archs = data.get("architectures")
    architectures = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    text, nested = text_config(data)
    # the layer count was checked when the config was read (checkpoints.config.check_layer_count)
    facts = TargetFacts(
        config=str(cfg.path),
        architectures=architectures,
        model_type=data.get("model_type") if isinstance(data.get("model_type"), str) else None,
        text_model_type=text.get("model_type") if isinstance(text.get("model_type"), str) else None,
        text_config=nested,
        num_hidden_layers=as_int(text.get("num_hidden_layers")),
        hidden_size=as_int(text.get("hidden_size")),
        vocab_size=as_int(text.get("vocab_size"))
        if as_int(text.get("vocab_size")) is not None
        else as_int(data.get("vocab_size")),
    )
    # vLLM tries the listed architectures in order; the first native one is the model class.
    for arch in architectures:
        resolution = registry.resolve(arch)
        if resolution is not None and resolution.cls is not None and not resolution.transformers_backend:
            facts.architecture, facts.resolution = arch, resolution
            break
        if facts.resolution is None and resolution is not None:
            facts.architecture, facts.resolution = arch, resolution
    cls = facts.cls  # None for a Transformers-backend row
    if cls is not None:
        facts.multimodal = is_multimodal(tree, cls)
    return facts


def target_check(
    facts: TargetFacts,
    install: Install,
    distribution: str,
    actions: list,
    route: BackendRoute | None,
    options: Sequence[str],
) -> Check:
    """The "target architecture" check: is the target one of vLLM's own models (a model file of its own, not
    its Transformers backend) that patchkit can reach. "native" is kept for EAGLE-3 support from vLLM's own
    code (scan's ``native``), never for this (issue 42, finding 10).

    In: the facts, the install, the patch set's distribution, the list of next steps (appended to when
    the target is an architecture patchkit patches only in another release), the Transformers-backend
    route (``None`` when the install has none) and the command's options. Out: the check (failed for an
    unregistered, backend-only or missing class; passed for vLLM's own class or a backend that declares
    ``SupportsEagle3``). Raises nothing.
    """
    if not facts.architectures:
        actions.append('the target\'s config.json must list its architecture ("architectures": [...])')
        return Check("target architecture", False, "config.json lists no architectures", facts.config)
    names = ", ".join(facts.architectures)
    r = facts.resolution
    if r is None:
        known = next(
            (
                p
                for p in load_patches(distribution)
                if isinstance(p.target, ClassTarget) and p.target.architecture in facts.architectures
            ),
            None,
        )
        # an architecture patchkit knows, from a later vLLM release (any other name is refused first, in doctor())
        first = next_steps.first_release(known)
        actions.append(
            next_steps.upgrade(
                install.distribution,
                first,
                f"vLLM {install.version} has no {known.target.architecture}: patchkit's "
                f"{known.id} is for vLLM {known.vllm}, and later releases support it natively",
            )
        )
        return Check(
            f"target architecture {names}",
            False,
            f"not one of vLLM's own models: not in vLLM {install.version}'s model registry, so vLLM would load it "
            "through its "
            "Transformers backend (trust_remote_code) and no edit of vLLM's model files reaches it",
        )
    if route is not None and route.declares:
        return Check(
            f"target architecture {facts.architecture}",
            True,
            f"served by vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}): no model file of "
            "vLLM's own, nothing for patchkit to patch; the backend declares SupportsEagle3",
            route.location,
        )
    if r.transformers_backend:
        return Check(
            f"target architecture {facts.architecture}",
            False,
            f"the registry maps it to vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}): "
            "no model file of vLLM's own, no EAGLE-3 patch reaches it",
        )
    if r.cls is None:
        return Check(
            f"target architecture {facts.architecture}",
            False,
            f"the registry names {r.entry.module}.{r.entry.class_name}, which patchkit cannot find in this install",
        )
    detail = f"{OWN_MODEL}: resolves to {r.cls.name} ({r.cls.module})"
    if len(facts.architectures) > 1:
        detail += f"; config.json lists {names}, vLLM uses the first of its own models"
    aliases = [Check("same class for", None, ", ".join(r.aliases))] if len(r.aliases) > 1 else []
    return Check(f"target architecture {facts.architecture}", True, detail, r.cls.location, children=aliases)


def allow_list_check(facts: TargetFacts, tree: SourceTree, contract: Contract) -> Check:
    """The start-up allow-list check: does vLLM's EAGLE-3 allow-list admit the target's text model type.

    The list and its substring rule are read from the install (:func:`read_allow_list`, :func:`admits`);
    a release without a list is judged by the contract (:class:`NoAllowList`). Out: the check; raises
    nothing.
    """
    mt = facts.text_model_type
    where = "text_config.model_type" if facts.text_config else "model_type"
    if mt is None:
        return Check("text model type", False, f"config.json has no {where}: vLLM's EAGLE-3 start-up check needs it")
    label = f"EAGLE-3 start-up check admits text model type {mt}"
    source = f"from {where}" + (
        f" (top-level model_type {facts.model_type})" if facts.text_config and facts.model_type else ""
    )
    found = read_allow_list(tree)
    if found is None:
        absent = NoAllowList.of(contract)
        return Check(label, absent.ok, f"{source}; {absent.value}")
    entry = next((e for e in found.entries if admits([e], mt)), None)
    if entry is not None:
        return Check(label, True, f"{source}; {found.name} entry {entry!r} is a substring of {mt!r}", found.location)
    return Check(
        label,
        False,
        f"{source}; no entry of {found.name} {found.entries} is a substring of {mt!r}: vLLM refuses at "
        "start-up ('... is only supported for [...] models')",
        found.location,
    )


def _in_scope(tree: SourceTree, registry: Registry, cls: ClassRef) -> bool:
    """True when ``cls`` is, or derives from, a class whose EAGLE-3 chain patchkit's verify knows."""
    roots = set()
    for arch in default_architectures():
        r = registry.resolve(arch)
        if r is not None and r.cls is not None:
            roots.add(r.cls)
    return any(c in roots for c in tree.mro(cls))


def in_effect_check(
    facts: TargetFacts,
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    install: Install,
    actions: list[str],
    patched: tuple[str, ...],
) -> tuple[Check, Check | None]:
    """Whether EAGLE-3 is in effect for the target's class, on every platform branch of its registry entry.

    Args:
        facts: the target's facts (:func:`target_facts`); tree, registry, contract: the install's.
        install: the vLLM install; actions: where the advice goes.
        patched: the journaled patch ids of this architecture (:func:`patchkit.checks.doctor._patched_ids`).
    Returns:
        The check, and the target class's settled chain check when the whole chain was checked (the
        class is one patchkit's patches serve), else None.
    """
    cls = facts.cls
    label = "EAGLE-3 in effect" + (f" for {cls.name}" if cls else "")
    if cls is None or facts.resolution is None or facts.resolution.transformers_backend:
        return Check(label, None, "not checked: the target is not one of vLLM's own models"), None
    if contract.protocol is None:
        actions.append(
            next_steps.upgrade(
                install.distribution,
                contract_mod.EAGLE3_FIRST,
                f"EAGLE-3 needs vLLM >= {contract_mod.EAGLE3_FIRST} "
                f"(DeepSeek/Kimi-K2.5 natively from {contract_mod.NATIVE_FROM})",
            )
        )
        return Check(label, False, contract_mod.no_protocol(install.version)), None
    # the whole chain (capture included) is checked for the classes patchkit's patches serve: the
    # default set's, and any architecture patchkit patched here (apply --arch / --model)
    in_scope = bool(patched) or _in_scope(tree, registry, cls)
    chain = links.model_check(tree, registry, contract, cls, follow_setter=in_scope)
    if (
        facts.architecture is not None
    ):  # the verdict scan, apply and verify give (patchkit.vllm.shapes.classify.classify)
        # a patched class is held to the shape apply wrote, classified on the bytes before patchkit, as verify
        # does (issue 42, finding 1: a forced Gemma 3 on 0.34.0 was "ready natively" here, failed by verify)
        pristine = arch_scope.pristine_tree(install, journal_for(install)) if patched else None
        chain = _settled(chain, facts.architecture, tree, registry, contract, install, actions, pristine)
    ok, children, detail = chain.ok, chain.children, _in_effect_detail(chain, contract, patched)
    branches = links.branch_checks(tree, registry, contract, facts.resolution, in_scope)
    if branches:
        children = (
            Check(
                f"{kinds.BRANCH_LABEL}{cls.module}.{cls.name} (the first)",
                chain.ok,
                "",
                cls.location,
                children=chain.children,
            ),
            *branches,
        )
        # branch_checks gives one check per branch after the first, in the order of branches()
        others = platforms.branches(tree, facts.resolution)[1:]
        bad = [b.dotted for b, check in zip(others, branches) if not check.ok]
        if bad:
            ok = False
            detail += "; not in effect on: " + ", ".join(bad)
            actions.append(
                f"{cls.name} lacks EAGLE-3 on some platforms of this release ({', '.join(bad)}); "
                "on those, serve without EAGLE-3 or use another release"
            )
        else:
            detail += f"; on all {len(branches) + 1} platform branches"
    if not in_scope:
        detail += " [interface only: the capture chain of classes outside patchkit's patches is not checked]"
    return Check(label, ok, detail, cls.location, children=children), chain if in_scope else None


def _settled(
    chain: Check,
    arch: str,
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    install: Install,
    actions: list[str],
    pristine: SourceTree | None = None,
) -> Check:
    """``chain`` (the target class's chain check; ``arch`` its registry name) with the classifier's verdict
    (:func:`patchkit.checks.verify.settle`), and with the serve's runner showing and a hybrid's mixers as
    children when they apply; their advice goes to ``actions``. ``pristine``: the install before patchkit
    (:func:`patchkit.plan.arch_scope.pristine_tree`) when patchkit patched ``arch``, else None. Returns the new
    :class:`Check`."""
    shape = classify(tree, registry, contract, arch)
    chain = verify_mod.settle(chain, shape)
    shown = verify_mod.runner_shown_check(tree, pristine, contract, arch, shape)  # the serve's runner
    if shown is not None:
        chain = _with_child(chain, shown)
        if shown.ok is not True:
            actions.append(f"{arch}: {shown.detail}")
    lossless = verify_mod.hybrid_check(tree, registry, arch, shape)  # a hybrid's mixers
    if lossless is not None:
        chain = _with_child(chain, lossless)
        if lossless.ok is not True:
            actions.append(
                f"{arch} is a hybrid whose mixers do not keep speculative decoding lossless "
                f"on vLLM {install.version} ({lossless.detail.split(': ')[0]}: {lossless.location}): serve it "
                "without speculation, or on a release whose mixers read the accepted count"
            )
    changed = pins(tree, str(install.version)).not_checked(Concern.CAPTURE)
    return kinds.unpinned(chain, changed) if changed is not None else chain  # nothing decided on unvouched code


def _in_effect_detail(chain: Check, contract: Contract, patched: tuple[str, ...]) -> str:
    """The in-effect check's detail from the target class's settled ``chain``: how EAGLE-3 is in effect
    (patched by patchkit, natively, or supported by this release), or what is missing."""
    if not chain.ok:
        return "missing: " + "; ".join(c.label for c in chain.failures())
    if patched:  # before "native": on 0.18.0+ a class patchkit patched is not vLLM's support
        return f"patched by patchkit ({', '.join(patched)})"
    # scan's 'native', in the one sense patchkit gives the word (issue 42, finding 10)
    return f"natively (EAGLE-3 contract {contract.era}): vLLM's own code supports it (scan: native)"


def _with_child(node: Check, child: Check) -> Check:
    """``node`` with ``child`` after its children, ``ok`` recomputed from them (a new :class:`Check`)."""
    children = (*node.children, child)
    return replace(node, children=children, ok=not any(c.failures() for c in children))


def proposer_check(facts: TargetFacts, tree: SourceTree, data: dict[str, Any]) -> Check:
    """The EAGLE proposer's image-token mapping for a multimodal target.

    In: the facts, the install's source tree and the target's config dict. The proposer's branches and
    its fallback field are read from the install (:func:`derive`'s ``image_token``). Out: the check (not
    checked for a non-native or text-only target; failed when the fallback field is missing from the
    config, where loading the draft raises AttributeError). Raises nothing.
    """
    label = "EAGLE proposer with a multimodal target"
    cls = facts.cls
    if cls is None or facts.multimodal is None:
        return Check(label, None, "not checked: the target is not one of vLLM's own models")
    if not facts.multimodal:
        return Check(label, None, f"{cls.name} is text-only (no {MULTIMODAL_PROTOCOL}): nothing to map")
    image_token = derive(tree, with_aux=False).image_token
    branch = next((b for b in image_token if cls.name in b.classes), None)
    if branch is not None:
        return Check(label, True, f"the proposer has a branch for {cls.name}", branch.location)
    fallback = next((b for b in image_token if not b.classes), None)
    if fallback is None:
        return Check(label, None, "the proposer has no image-token fallback in this release: nothing to map")
    field = fallback.field[-1]
    read = f"target_model.{'.'.join(fallback.field)}"
    if field in data:
        return Check(
            label,
            True,
            f"no branch for {cls.name}: the proposer reads {read}, which config.json has ({data[field]!r})",
            fallback.location,
        )
    return Check(
        label,
        False,
        f"no branch for {cls.name}: the proposer reads {read}, "
        "which this config.json lacks (loading the draft fails with AttributeError)",
        fallback.location,
    )


def draft_load_check(
    facts: TargetFacts, tree: SourceTree, registry: Registry, contract: Contract, install: Install, actions: list[str]
) -> Check | None:
    """The proposer's draft loading through this target (see :mod:`patchkit.vllm.classes.loadpath`); None: nothing to
    say."""
    cls = facts.cls
    if cls is None or not facts.multimodal or contract.protocol is None:
        return None
    fault = loadpath.bare_language_model(tree, registry, cls)
    if fault is None:
        return None
    actions.append(
        next_steps.upgrade(
            install.distribution,
            loadpath.FIXED_IN.get(cls.name, contract_mod.KIMI_K25_LOADABLE_FROM),
            f"EAGLE-3 with {cls.name} cannot work on vLLM {install.version} (the proposer fails "
            "to load any draft) and patchkit does not patch it here",
            fault.proposer_at,
        )
    )
    return Check("EAGLE proposer loads a draft for this target", False, fault.reason(), fault.proposer_at)


def backend_check(
    facts: TargetFacts, route: BackendRoute, install: Install, pipeline_parallel_size: int, actions: list
) -> Check:
    """EAGLE-3 through vLLM's Transformers backend (:mod:`patchkit.vllm.registry.transformers_backend`): its own
    support, and its limits."""
    label = f"EAGLE-3 in effect for {facts.architecture} (vLLM's Transformers backend)"
    if route.usable is False:
        actions.append(
            NextStep(
                (),
                f"install a transformers the backend can use ({route.limits()}) in the serving environment",
                route.location,
                Effect.EDIT,
            )
        )
        return Check(label, False, route.reason(), route.location)
    if pipeline_parallel_size > 1 and not route.over_pp:
        actions.append(
            f"serve {facts.architecture} with --pipeline-parallel-size 1: the Transformers backend has no "
            "pipeline-parallel transport of aux states"
        )
        return Check(
            label,
            False,
            f"{route.reason()}; with --pipeline-parallel-size {pipeline_parallel_size} the aux "
            "states of earlier stages never reach the draft",
            route.location,
        )
    return Check(label, route.usable, route.reason(), route.location)


__all__ = [
    "allow_list_check",
    "backend_check",
    "draft_load_check",
    "in_effect_check",
    "proposer_check",
    "target_check",
    "target_facts",
]
