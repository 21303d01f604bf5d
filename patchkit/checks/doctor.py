"""``doctor``: is a target + draft checkpoint pair ready for EAGLE-3 on this vLLM?

:func:`doctor` reads the ``config.json`` of a target checkpoint (and optionally of an EAGLE-3
draft) from local folders -- it never downloads anything and never imports vLLM -- and checks
them against the installed vLLM's files, read statically:

1. the target architecture and how this vLLM's registry resolves it (or that it is not a native
   model);
2. the text model type (``text_config.model_type`` when the config nests one) against the
   speculative config's EAGLE-3 start-up allow-list;
3. whether EAGLE-3 is in effect for the resolved class (the chain check of :mod:`patchkit.checks.verify`;
   "patched by patchkit" with the journaled patches of this architecture, before "natively"), and if
   not, the command that fixes this target on this release: ``patchkit apply --target vllm --model
   DIR`` with the environment options given (0.10.2 - 0.33.0), planned in this process by the
   planner ``apply`` uses (:func:`patchkit.plan.run.dry_run`) and advised from its outcomes
   (:func:`patchkit.plan.next_steps.after_dry_run`); an architecture vLLM serves through its
   Transformers backend is checked as that route (:mod:`patchkit.vllm.registry.transformers_backend`);
4. for a multimodal target, the EAGLE proposer's image-token mapping, and whether the proposer can
   load a draft through the target's ``get_language_model()`` (:mod:`patchkit.vllm.classes.loadpath`);
5. the draft (:mod:`patchkit.checks.drafts`): the class vLLM builds for it, whether this release loads
   its model type, its vocabulary, the aux layer ids each runner of this release captures (in
   the convention of the field they come from), their order, which of them reach the draft with
   ``--pipeline-parallel-size``, and the draft's input width.

It returns a :class:`DoctorReport` (checks as :class:`~patchkit.results.Check` trees, a verdict,
next steps as :class:`~patchkit.advice.NextStep` values and warnings) and never prints.

Decisions (see the docstrings below, in :mod:`patchkit.checks.drafts` and in :mod:`patchkit.vllm.checkpoints.drafts` for the
vLLM facts behind each):

- An id is in range when ``0 <= id <= n`` (``n`` = the target's ``num_hidden_layers``): id ``k``
  is the residual stream entering layer ``k``, id ``n`` the last layer's output.
- The draft's input width is ``k * W``: ``W`` is the draft's ``target_hidden_size`` or else its
  ``hidden_size``, ``k`` its ``num_aux_hidden_states`` or else 3; the target provides
  ``len(ids) * hidden_size``. Both factors must match.
- A registry entry that dispatches per platform is checked on every branch.
"""

from __future__ import annotations

import json as _json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.checks import verify as verify_mod
from patchkit.checks.doctor_report import DoctorReport
from patchkit.checks.drafts.checklist import draft_checks, final_layer_capture
from patchkit.checks.drafts.context import DraftContext, DraftFacts
from patchkit.errors import ConfigError, UsageError
from patchkit.plan import arch_scope, next_steps
from patchkit.plan.request import Request, not_registered
from patchkit.plan.spec import ClassTarget, check_target, default_architectures, load_patches
from patchkit.results import Check, Outcome
from patchkit.store.journal import journal_for, unfinished_check
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.classes import loadpath
from patchkit.vllm.registry import platforms
from patchkit.vllm.chain import kinds, links
from patchkit.vllm.checkpoints.config import CheckpointConfig, TargetFacts, as_int, read_config, text_config
from patchkit.vllm.release.contract import MULTIMODAL_PROTOCOL, SETTER as SETTER_NAME, Contract, NoAllowList, admits, is_multimodal, read_allow_list
from patchkit.vllm.checkpoints.drafts import read_release
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.release.install import Install
from patchkit.vllm.runner.draft_reads import derive
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.shapes.classify import classify
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.registry.transformers_backend import BackendRoute, backend_route


# -- doctor ----------------------------------------------------------------------------------


def doctor(install: Install, model: Path, draft: Path | None = None, *,
           command_options: Sequence[str] | None = None, distribution: str = "vllm",
           pipeline_parallel_size: int = 1) -> DoctorReport:
    """Check a target checkpoint (and an EAGLE-3 draft) against this vLLM install.

    Reads only the two ``config.json`` files and the install's Python files; writes nothing
    (the ``patchkit apply`` suggestion comes from a dry run).

    Args:
        install: the vLLM install.
        model: the target checkpoint folder (or its ``config.json``).
        draft: the EAGLE-3 draft checkpoint folder (or its ``config.json``), or None.
        command_options: the options that locate this install, repeated in the suggested
            ``patchkit apply`` (default: ``--site-packages <install's site-packages>``).
        distribution: the ``--target`` (``"vllm"``).
        pipeline_parallel_size: the pipeline-parallel size the target will be served with (>= 1).
    Returns:
        A :class:`DoctorReport`; ``ready`` is True only when no check fails.
    Raises:
        ConfigError: a ``config.json`` is missing or unreadable (see :func:`read_config`), or the
            target's ``num_hidden_layers`` is not a positive integer.
        SourceError: a vLLM file on the way does not parse.
        StateError: patchkit's journal in the install cannot be read.
        UsageError: unknown ``distribution``, ``pipeline_parallel_size`` below 1, or a target whose
            ``architectures`` name nothing this registry holds and no shipped patch names (exit 2,
            with the closest registered names: :func:`patchkit.plan.request.not_registered`).
    """
    if pipeline_parallel_size < 1:
        raise UsageError(f"--pipeline-parallel-size {pipeline_parallel_size} is not a stage count",
                         "give the --pipeline-parallel-size vLLM will be served with (1 or more)")
    target_cfg = read_config(model, "--model")
    draft_cfg = read_config(draft, "--draft") if draft is not None else None
    check_target(distribution)
    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    info = contract_mod.install_info(install, contract)
    facts = _target_facts(target_cfg, tree, registry)
    _check_known(facts, registry, install, distribution, command_options)
    route = backend_route(tree, contract, facts.resolution) if facts.resolution is not None else None
    options = tuple(command_options) if command_options else ("--site-packages", str(install.site_packages))
    actions: list[NextStep | str] = []  # a str: an edit only the user can make (the draft checks' advice)

    model_dir = target_cfg.path.parent
    patched = _patched_ids(install, distribution, facts, model_dir, contract)
    target_check = _target_check(facts, install, distribution, actions, route, options)
    allow_check = _allow_list_check(facts, tree, contract)
    if route is not None and route.declares:
        effect_check, chain = _backend_check(facts, route, install, pipeline_parallel_size, actions), None
    else:
        effect_check, chain = _in_effect_check(facts, tree, registry, contract, install, actions, patched)
    proposer_check = _proposer_check(facts, tree, target_cfg.data)
    checks = [target_check, allow_check, effect_check, proposer_check, _runner_check(tree)]
    load_check = _draft_load_check(facts, tree, registry, contract, install, actions)
    if load_check is not None:
        checks.append(load_check)
    _pending_check(checks, actions, install, distribution, options)

    draft_facts = None
    warnings: list[str] = []
    if draft_cfg is not None:
        ctx = DraftContext(facts, tree, registry, install, read_release(tree, install), final_layer_capture(chain),
                           pipeline_parallel_size, actions, warnings)
        draft_facts, more = draft_checks(draft_cfg, ctx)
        checks += more + _backend_id_zero(route, draft_facts, actions)
    else:
        checks.append(Check("EAGLE-3 draft", None, "no --draft given: draft architecture, aux layer ids and width not checked"))

    steps = [a if isinstance(a, NextStep) else NextStep((), a, effect=Effect.EDIT) for a in actions]
    report = DoctorReport(info, facts, draft_facts, checks, steps, warnings=warnings)
    vllm_side = [allow_check, effect_check, proposer_check]
    if (facts.cls is not None and contract.protocol is not None and load_check is None
            and any(c.failures() for c in vllm_side)):
        _suggest_apply(report, install, distribution, options, model_dir)
    return report


def _check_known(facts: TargetFacts, registry: Registry, install: Install, distribution: str,
                 command_options: Sequence[str] | None) -> None:
    """Raises :func:`~patchkit.plan.request.not_registered` for a target architecture this registry lacks and
    patchkit knows from no release (a typo, a remote-code class): exit 2 with the closest names, the
    answer every command gives (issue 32)."""
    if facts.architectures and facts.resolution is None and not any(
            isinstance(p.target, ClassTarget) and p.target.architecture in facts.architectures
            for p in load_patches(distribution)):
        raise not_registered(registry, facts.architectures[0], str(install.version),
                             "--model's config.json architecture", " ".join(command_options or ()), facts.model_type)


def _pending_check(checks: list[Check], actions: list, install: Install, distribution: str,
                   options: tuple[str, ...]) -> None:
    """An unfinished patchkit run first in ``checks`` (the files are a mix of two runs until the next
    apply or revert), and the apply that finishes it in ``actions``."""
    pending = unfinished_check(journal_for(install, distribution))
    if pending is None:
        return
    checks.insert(0, pending)
    if pending.ok is False:
        actions.append(NextStep(patchkit_argv("apply", target=distribution, environment=options),
                                "finish the unfinished patchkit run: apply puts its files back first",
                                effect=Effect.PATCHES))


def _backend_id_zero(route, draft_facts: DraftFacts, actions: list) -> list[Check]:
    """Through vLLM's Transformers backend, a draft's aux id 0 fails when the draft loads: the failing
    check (and the advice), or nothing."""
    if route is not None and route.declares and route.id_zero_breaks and 0 in (draft_facts.aux_layer_ids or ()):
        actions.append("use a draft whose aux layer ids are 1 or more (the backend cannot capture id 0)")
        return [Check("aux id 0 through vLLM's Transformers backend", False,
                      f"the backend's {SETTER_NAME}() indexes layer - 1, so id 0 (the embedding output) fails "
                      "when the draft loads (KeyError: -1)", route.location)]
    return []


def _runner_check(tree: SourceTree) -> Check:
    """The model runner the serve uses (:func:`patchkit.vllm.runner.serving.serving_runner`): passed when
    every fact of it patchkit rests on is in the install, failed with "not checked: ..." when one is not
    (then no verdict of this report rests on what patchkit could not find)."""
    choice = serving_runner(tree)
    label = f"model runner {choice.name}"
    missing = choice.not_checked()
    if missing is not None:
        return Check(label, False, f"{missing}; {choice.reason}")
    return Check(label, True, choice.reason, choice.generation.runner if choice.generation else None)


def _patched_ids(install: Install, distribution: str, facts: TargetFacts, model_dir: Path,
                 contract: Contract) -> tuple[str, ...]:
    """The journaled patch ids this target's architecture needs (empty: patchkit changed nothing for it).

    The ids are derived as ``apply --model DIR`` derives them, on the files as they were before
    patchkit (:func:`patchkit.plan.arch_scope.scope`), and intersected with what the journal holds; so a
    class whose support comes from patchkit is never called native, and another architecture's
    patches are not credited to this one.
    """
    journal = journal_for(install, distribution)
    if not journal.entries or facts.architecture is None or contract.protocol is None:
        return ()
    try:
        found = arch_scope.scope(install, journal, Request(model=model_dir))
    except (UsageError, ConfigError):  # a config file not named config.json: the architecture alone
        found = arch_scope.scope(install, journal, Request((facts.architecture,)))
    need = found.ids.get(facts.architecture, found.all_ids)
    return tuple(sorted(need & arch_scope.journaled_ids(journal)))


def _target_facts(cfg: CheckpointConfig, tree: SourceTree, registry: Registry) -> TargetFacts:
    data = cfg.data
    archs = data.get("architectures")
    architectures = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    text, nested = text_config(data)
    layers = text.get("num_hidden_layers")
    if layers is not None and (as_int(layers) is None or layers < 1):
        where = "text_config.num_hidden_layers" if nested else "num_hidden_layers"
        raise ConfigError(f"{cfg.path}: {where} is {_json.dumps(layers)}, not a positive layer count",
                          "the target's config.json is damaged or was edited; download the checkpoint's config.json again")
    facts = TargetFacts(
        config=str(cfg.path),
        architectures=architectures,
        model_type=data.get("model_type") if isinstance(data.get("model_type"), str) else None,
        text_model_type=text.get("model_type") if isinstance(text.get("model_type"), str) else None,
        text_config=nested,
        num_hidden_layers=as_int(text.get("num_hidden_layers")),
        hidden_size=as_int(text.get("hidden_size")),
        vocab_size=as_int(text.get("vocab_size")) if as_int(text.get("vocab_size")) is not None else as_int(data.get("vocab_size")),
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


def _target_check(facts: TargetFacts, install: Install, distribution: str, actions: list,
                  route: BackendRoute | None, options: Sequence[str]) -> Check:
    if not facts.architectures:
        actions.append("the target's config.json must list its architecture (\"architectures\": [...])")
        return Check("target architecture", False, "config.json lists no architectures", facts.config)
    names = ", ".join(facts.architectures)
    r = facts.resolution
    if r is None:
        known = next((p for p in load_patches(distribution)
                      if isinstance(p.target, ClassTarget) and p.target.architecture in facts.architectures), None)
        # an architecture patchkit knows, from a later vLLM release (any other name is refused first, in doctor())
        first = next_steps.first_release(known)
        actions.append(next_steps.upgrade(install.distribution, first,
                                          f"vLLM {install.version} has no {known.target.architecture}: patchkit's "
                                          f"{known.id} is for vLLM {known.vllm}, and later releases support it natively"))
        return Check(
            f"target architecture {names}", False,
            f"not a native model: not in vLLM {install.version}'s model registry, so vLLM would load it through its "
            "Transformers backend (trust_remote_code) and no edit of vLLM's model files reaches it")
    if route is not None and route.declares:
        return Check(f"target architecture {facts.architecture}", True,
                     f"served by vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}): no native model "
                     "file, nothing for patchkit to patch; the backend declares SupportsEagle3", route.location)
    if r.transformers_backend:
        return Check(f"target architecture {facts.architecture}", False,
                     f"the registry maps it to vLLM's Transformers backend ({r.entry.module}.{r.entry.class_name}): "
                     "no native model file, no EAGLE-3 patch reaches it")
    if r.cls is None:
        return Check(f"target architecture {facts.architecture}", False,
                     f"the registry names {r.entry.module}.{r.entry.class_name}, which patchkit cannot find in this install")
    detail = f"native: resolves to {r.cls.name} ({r.cls.module})"
    if len(facts.architectures) > 1:
        detail += f"; config.json lists {names}, vLLM uses the first native one"
    aliases = [Check("same class for", None, ", ".join(r.aliases))] if len(r.aliases) > 1 else []
    return Check(f"target architecture {facts.architecture}", True, detail, r.cls.location, children=aliases)


def _allow_list_check(facts: TargetFacts, tree: SourceTree, contract: Contract) -> Check:
    mt = facts.text_model_type
    where = "text_config.model_type" if facts.text_config else "model_type"
    if mt is None:
        return Check("text model type", False, f"config.json has no {where}: vLLM's EAGLE-3 start-up check needs it")
    label = f"EAGLE-3 start-up check admits text model type {mt}"
    source = f"from {where}" + (f" (top-level model_type {facts.model_type})" if facts.text_config and facts.model_type else "")
    found = read_allow_list(tree)
    if found is None:
        absent = NoAllowList.of(contract)
        return Check(label, absent.ok, f"{source}; {absent.value}")
    entry = next((e for e in found.entries if admits([e], mt)), None)
    if entry is not None:
        return Check(label, True, f"{source}; {found.name} entry {entry!r} is a substring of {mt!r}", found.location)
    return Check(label, False,
                 f"{source}; no entry of {found.name} {found.entries} is a substring of {mt!r}: vLLM refuses at "
                 "start-up ('... is only supported for [...] models')", found.location)


def _in_scope(tree: SourceTree, registry: Registry, cls: ClassRef) -> bool:
    """True when ``cls`` is, or derives from, a class whose EAGLE-3 chain patchkit's verify knows."""
    roots = set()
    for arch in default_architectures():
        r = registry.resolve(arch)
        if r is not None and r.cls is not None:
            roots.add(r.cls)
    return any(c in roots for c in tree.mro(cls))


def _in_effect_check(facts: TargetFacts, tree: SourceTree, registry: Registry, contract: Contract,
                     install: Install, actions: list[str], patched: tuple[str, ...]) -> tuple[Check, Check | None]:
    cls = facts.cls
    label = "EAGLE-3 in effect" + (f" for {cls.name}" if cls else "")
    if cls is None or facts.resolution is None or facts.resolution.transformers_backend:
        return Check(label, None, "not checked: the target is not a native vLLM model"), None
    if contract.protocol is None:
        actions.append(next_steps.upgrade(install.distribution, contract_mod.EAGLE3_FIRST,
                                          f"EAGLE-3 needs vLLM >= {contract_mod.EAGLE3_FIRST} "
                                          f"(DeepSeek/Kimi-K2.5 natively from {contract_mod.NATIVE_FROM})"))
        return Check(label, False, contract_mod.no_protocol(install.version)), None
    # the whole chain (capture included) is checked for the classes patchkit's patches serve: the
    # default set's, and any architecture patchkit patched here (apply --arch / --model)
    in_scope = bool(patched) or _in_scope(tree, registry, cls)
    chain = links.model_check(tree, registry, contract, cls, follow_setter=in_scope)
    if facts.architecture is not None:  # the verdict scan, apply and verify give (patchkit.vllm.shapes.classify.classify)
        shape = classify(tree, registry, contract, facts.architecture)
        chain = verify_mod.settle(chain, shape)
        shown = verify_mod.runner_shown_check(tree, None, contract, facts.architecture, shape)  # the serve's runner
        if shown is not None:
            chain = _with_child(chain, shown)
            if shown.ok is not True:
                actions.append(f"{facts.architecture}: {shown.detail}")
        lossless = verify_mod.hybrid_check(tree, registry, facts.architecture, shape)  # a hybrid's mixers
        if lossless is not None:
            chain = _with_child(chain, lossless)
            if lossless.ok is not True:
                actions.append(f"{facts.architecture} is a hybrid whose mixers do not keep speculative decoding lossless "
                               f"on vLLM {install.version} ({lossless.detail.split(': ')[0]}: {lossless.location}): serve it "
                               "without speculation, or on a release whose mixers read the accepted count")
    ok, children = chain.ok, chain.children
    if chain.ok:
        if patched:  # before "native": on 0.18.0+ a class patchkit patched is not vLLM's support
            detail = f"patched by patchkit ({', '.join(patched)})"
        elif contract.native:
            detail = f"natively (EAGLE-3 contract {contract.era}, vLLM >= {contract_mod.NATIVE_FROM})"
        else:
            detail = f"this release supports it (contract {contract.era})"
    else:
        detail = "missing: " + "; ".join(c.label for c in chain.failures())
    branches = links.branch_checks(tree, registry, contract, facts.resolution, in_scope)
    if branches:
        children = (Check(f"{kinds.BRANCH_LABEL}{cls.module}.{cls.name} (the first)", chain.ok, "", cls.location,
                          children=chain.children), *branches)
        # branch_checks gives one check per branch after the first, in the order of branches()
        others = platforms.branches(tree, facts.resolution)[1:]
        bad = [b.dotted for b, check in zip(others, branches) if not check.ok]
        if bad:
            ok = False
            detail += "; not in effect on: " + ", ".join(bad)
            actions.append(f"{cls.name} lacks EAGLE-3 on some platforms of this release ({', '.join(bad)}); "
                           "on those, serve without EAGLE-3 or use another release")
        else:
            detail += f"; on all {len(branches) + 1} platform branches"
    if not in_scope:
        detail += " [interface only: the capture chain of classes outside patchkit's patches is not checked]"
    return Check(label, ok, detail, cls.location, children=children), chain if in_scope else None


def _with_child(node: Check, child: Check) -> Check:
    """``node`` with ``child`` after its children, ``ok`` recomputed from them (a new :class:`Check`)."""
    children = (*node.children, child)
    return replace(node, children=children, ok=not any(c.failures() for c in children))


def _proposer_check(facts: TargetFacts, tree: SourceTree, data: dict[str, Any]) -> Check:
    label = "EAGLE proposer with a multimodal target"
    cls = facts.cls
    if cls is None or facts.multimodal is None:
        return Check(label, None, "not checked: the target is not a native vLLM model")
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
        return Check(label, True, f"no branch for {cls.name}: the proposer reads {read}, "
                                  f"which config.json has ({data[field]!r})", fallback.location)
    return Check(label, False, f"no branch for {cls.name}: the proposer reads {read}, "
                               "which this config.json lacks (loading the draft fails with AttributeError)",
                 fallback.location)


def _draft_load_check(facts: TargetFacts, tree: SourceTree, registry: Registry, contract: Contract,
                      install: Install, actions: list[str]) -> Check | None:
    """The proposer's draft loading through this target (see :mod:`patchkit.vllm.classes.loadpath`); None: nothing to say."""
    cls = facts.cls
    if cls is None or not facts.multimodal or contract.protocol is None:
        return None
    fault = loadpath.bare_language_model(tree, registry, cls)
    if fault is None:
        return None
    actions.append(next_steps.upgrade(install.distribution, loadpath.FIXED_IN.get(cls.name, contract_mod.KIMI_K25_LOADABLE_FROM),
                                      f"EAGLE-3 with {cls.name} cannot work on vLLM {install.version} (the proposer fails "
                                      "to load any draft) and patchkit does not patch it here", fault.proposer_at))
    return Check("EAGLE proposer loads a draft for this target", False, fault.reason(), fault.proposer_at)


# -- the Transformers backend ----------------------------------------------------------------


def _backend_check(facts: TargetFacts, route: BackendRoute, install: Install, pipeline_parallel_size: int,
                   actions: list) -> Check:
    """EAGLE-3 through vLLM's Transformers backend (:mod:`patchkit.vllm.registry.transformers_backend`): its own support, and its limits."""
    label = f"EAGLE-3 in effect for {facts.architecture} (vLLM's Transformers backend)"
    if route.usable is False:
        actions.append(NextStep((), f"install a transformers the backend can use ({route.limits()}) in the serving "
                                    "environment", route.location, Effect.EDIT))
        return Check(label, False, route.reason(), route.location)
    if pipeline_parallel_size > 1 and not route.over_pp:
        actions.append(f"serve {facts.architecture} with --pipeline-parallel-size 1: the Transformers backend has no "
                       "pipeline-parallel transport of aux states")
        return Check(label, False, f"{route.reason()}; with --pipeline-parallel-size {pipeline_parallel_size} the aux "
                                   "states of earlier stages never reach the draft", route.location)
    return Check(label, route.usable, route.reason(), route.location)


# -- the apply suggestion --------------------------------------------------------------------


def _suggest_apply(report: DoctorReport, install: Install, distribution: str, options: Sequence[str],
                   model_dir: Path) -> None:
    """Plan ``patchkit apply --model DIR`` for this target, in this process, and put its next step first.

    The command suggested is the one that fixes THIS target on THIS release: ``apply --model DIR``
    plans the patches of the checkpoint's own architectures and model type (the shipped
    DeepSeek/Kimi set for those, :func:`patchkit.plan.selection.arch_selection`), on every release with the
    EAGLE-3 contract (0.10.2 - 0.33.0); a plain ``apply`` writes only the shipped set. The command
    repeats ``options`` (the environment options given, else ``--site-packages``), so run as
    printed it patches the install doctor checked. It is planned by :func:`patchkit.plan.run.dry_run`,
    the planner ``apply`` itself uses (libcst is imported then, only when doctor is not ready),
    and the step is :func:`patchkit.plan.next_steps.after_dry_run` of that plan.
    """
    from patchkit.plan.run import dry_run  # lazy: libcst, only when the vLLM side fails and doctor plans the fix

    folder = str(Path(model_dir).resolve())
    argv = patchkit_argv("apply", target=distribution, environment=options, model=folder)
    if not (Path(model_dir) / "config.json").is_file():  # --model takes the folder of a config.json
        report.next_steps.insert(0, NextStep((), f"'patchkit apply --model' reads DIR/config.json: copy "
                                                 f"{report.target.config} to DIR/config.json, then run: "
                                                 + shlex.join(patchkit_argv("apply", target=distribution,
                                                                            environment=options, model="DIR")),
                                             report.target.config, Effect.EDIT))
        return
    planned = dry_run(install, chain_check=verify_mod.verify, target=distribution, request=Request(model=Path(folder)))
    steps = next_steps.after_dry_run(planned, argv)
    if not steps:
        done = [p.id for p in planned.patches if p.outcome is Outcome.ALREADY_APPLIED]
        why = (f"its patches for this target are applied already ({', '.join(done)}), and the items above still fail"
               if done else "it plans no patch for the failing items above")
        steps = (NextStep((), f"'{shlex.join(argv)}' writes nothing here: {why}; patchkit cannot fix them on vLLM "
                              f"{install.version}", effect=Effect.EDIT),)
    report.next_steps[0:0] = list(steps)


__all__ = ["CheckpointConfig", "DoctorReport", "DraftFacts", "TargetFacts", "doctor", "read_config", "text_config"]
