"""``doctor``: is a target + draft checkpoint pair ready for EAGLE-3 on this vLLM?

:func:`doctor` reads the ``config.json`` of a target checkpoint (and optionally of an EAGLE-3
draft) from local folders -- it never downloads anything and never imports vLLM -- and checks
them against the installed vLLM's files, read statically:

1. the target architecture and how this vLLM's registry resolves it (or that it is not one of vLLM's own
   models);
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

Decisions (see the docstrings below, in :mod:`patchkit.checks.drafts` and in :mod:`patchkit.vllm.checkpoints.drafts` for
the vLLM facts behind each):

- An id is in range when ``0 <= id <= n`` (``n`` = the target's ``num_hidden_layers``): id ``k``
  is the residual stream entering layer ``k``, id ``n`` the last layer's output.
- The draft's input width is ``k * W``: ``W`` is the draft's ``target_hidden_size`` or else its
  ``hidden_size``, ``k`` its ``num_aux_hidden_states`` or else 3; the target provides
  ``len(ids) * hidden_size``. Both factors must match.
- A registry entry that dispatches per platform is checked on every branch.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.checks import verify as verify_mod
from patchkit.checks.doctor_report import DoctorReport
from patchkit.checks.doctor_target import (
    allow_list_check,
    backend_check,
    draft_load_check,
    in_effect_check,
    proposer_check,
    target_check,
    target_facts,
)
from patchkit.checks.drafts.checklist import draft_checks, final_layer_capture
from patchkit.checks.drafts.context import DraftContext, DraftFacts
from patchkit.errors import ConfigError, PatchkitError, UsageError
from patchkit.plan import arch_scope, next_steps
from patchkit.plan.request import Request, not_registered
from patchkit.plan.spec import ClassTarget, check_target, load_patches
from patchkit.vllm.chain import kinds
from patchkit.results import Check, InstallInfo, Outcome
from patchkit.store.journal import journal_for, unfinished_check
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.checkpoints.config import CheckpointConfig, TargetFacts, read_config, text_config
from patchkit.vllm.release.contract import SETTER as SETTER_NAME, Contract
from patchkit.vllm.checkpoints.drafts import read_release
from patchkit.vllm.runner.pins import exercised, pins
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.registry.transformers_backend import BackendRoute, backend_route


# -- doctor ----------------------------------------------------------------------------------


def doctor(
    install: Install,
    model: Path,
    draft: Path | None = None,
    *,
    command_options: Sequence[str] | None = None,
    distribution: str = "vllm",
    pipeline_parallel_size: int = 1,
) -> DoctorReport:
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
        raise UsageError(
            f"--pipeline-parallel-size {pipeline_parallel_size} is not a stage count",
            "give the --pipeline-parallel-size vLLM will be served with (1 or more)",
        )
    target_cfg = read_config(model, "--model")
    draft_cfg = read_config(draft, "--draft") if draft is not None else None
    check_target(distribution)
    probe, settled, trouble = _units_probe(install)
    with exercised(settled):  # a changed unit the serving environment ran as patchkit assumes is settled
        report = _checked(install, target_cfg, draft_cfg, distribution, command_options, pipeline_parallel_size)
    if probe is not None:
        report.checks.append(probe)
    if trouble is not None:
        report.warnings.append(trouble)
    return report


def _units_probe(install: Install) -> tuple[Check | None, list[str], str | None]:
    """With ``--python`` and a declared vLLM unit whose code matches no qualified release
    (:func:`patchkit.vllm.runner.pins.pins`): the units exercised in that interpreter
    (:func:`patchkit.checks.runtime.run_units`) and the keys of those that did what patchkit assumes.

    Returns ``(None, [], None)`` otherwise (a qualified release: no subprocess, same speed), and
    ``(None, [], why)`` when the interpreter cannot run them (the units stay not checked).
    """
    if install.python is None or not pins(SourceTree(install.site_packages)).changed():
        return None, [], None
    from patchkit.checks.runtime import exercised_units, run_units  # lazy: start-up; only a changed unit runs it

    try:
        probe = run_units(install.python, SourceTree(install.site_packages))
    except PatchkitError as exc:
        return None, [], f"the changed vLLM units could not be exercised with {install.python}: {exc.message}"
    return probe, [key for key, ok in exercised_units(probe).items() if ok], None


def _checked(
    install: Install,
    target_cfg: CheckpointConfig,
    draft_cfg: CheckpointConfig | None,
    distribution: str,
    command_options: Sequence[str] | None,
    pipeline_parallel_size: int,
) -> DoctorReport:
    """:func:`doctor`'s checklist, its advice and its warnings (the units settled so far are in effect)."""
    at = _setting(install, target_cfg, distribution, command_options, pipeline_parallel_size)
    model_dir = target_cfg.path.parent
    patched = _patched_ids(install, distribution, at.facts, model_dir, at.contract)
    checks, vllm_side, load_check, chain = _vllm_checks(at, target_cfg, patched)
    _pending_check(checks, at.actions, install, distribution, at.options)

    warnings: list[str] = []
    draft_facts, more = _draft_checks(at, draft_cfg, chain, warnings)
    checks += more

    steps = [a if isinstance(a, NextStep) else NextStep((), a, effect=Effect.EDIT) for a in at.actions]
    report = DoctorReport(at.info, at.facts, draft_facts, checks, steps, warnings=warnings)
    if (
        at.facts.cls is not None
        and at.contract.protocol is not None
        and load_check is None
        and any(c.failures() for c in vllm_side)
        and not all(f.kind == kinds.UNPINNED for c in vllm_side for f in c.failures())
    ):  # an apply is advised only for a failure patchkit established, not for code it cannot vouch for
        _suggest_apply(report, install, distribution, at.options, model_dir)
    return report


@dataclass(frozen=True)
class _Setting:
    """What every step of one doctor run reads: the install's sources, contract and registry, the target's facts
    and its Transformers-backend route (or None), the environment options to repeat, and the advice so far
    (``actions``, appended to: a str is an edit only the user can make, the draft checks' advice)."""

    install: Install
    distribution: str
    tree: SourceTree
    contract: Contract
    registry: Registry
    info: InstallInfo
    facts: TargetFacts
    route: BackendRoute | None
    options: tuple[str, ...]
    pipeline_parallel_size: int
    actions: list[NextStep | str]


def _setting(
    install: Install,
    target_cfg: CheckpointConfig,
    distribution: str,
    command_options: Sequence[str] | None,
    pipeline_parallel_size: int,
) -> _Setting:
    """Read the install and the target's ``config.json`` into a :class:`_Setting` (no action yet).

    Raises:
        ConfigError, SourceError: as :func:`doctor`; UsageError: an architecture no registry or patch knows.
    """
    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    info = contract_mod.install_info(install, contract)
    facts = target_facts(target_cfg, tree, registry)
    _check_known(facts, registry, install, distribution, command_options)
    route = backend_route(tree, contract, facts.resolution) if facts.resolution is not None else None
    options = tuple(command_options) if command_options else ("--site-packages", str(install.site_packages))
    return _Setting(
        install, distribution, tree, contract, registry, info, facts, route, options, pipeline_parallel_size, []
    )


def _vllm_checks(
    at: _Setting, target_cfg: CheckpointConfig, patched: tuple[str, ...]
) -> tuple[list[Check], list[Check], Check | None, Check | None]:
    """The target's checks against this vLLM (:mod:`patchkit.checks.doctor_target`), in the order doctor shows
    them; their advice goes to ``at.actions``. ``patched``: the journaled patch ids of the target's architecture.

    Returns:
        The checks; the vLLM side of them (allow-list, in effect, proposer: what ``apply`` may fix); the draft
        loading check (None when there is nothing to say); and the target class's settled chain check when the
        whole chain was checked (:func:`patchkit.checks.doctor_target.in_effect_check`), else None.
    """
    facts, tree, registry, contract, install, route = at.facts, at.tree, at.registry, at.contract, at.install, at.route
    target = target_check(facts, install, at.distribution, at.actions, route, at.options)
    allow = allow_list_check(facts, tree, contract)
    if route is not None and route.declares:
        effect, chain = backend_check(facts, route, install, at.pipeline_parallel_size, at.actions), None
    else:
        effect, chain = in_effect_check(facts, tree, registry, contract, install, at.actions, patched)
    proposer = proposer_check(facts, tree, target_cfg.data)
    checks = [target, allow, effect, proposer, _runner_check(tree)]
    load = draft_load_check(facts, tree, registry, contract, install, at.actions)
    if load is not None:
        checks.append(load)
    return checks, [allow, effect, proposer], load, chain


def _draft_checks(
    at: _Setting, draft_cfg: CheckpointConfig | None, chain: Check | None, warnings: list[str]
) -> tuple[DraftFacts | None, list[Check]]:
    """The draft's checks (:func:`patchkit.checks.drafts.checklist.draft_checks`) and facts, given its config
    (None without ``--draft``: one informational check says so, and no facts); ``chain``: the target class's
    settled chain check or None; the warnings go to ``warnings``, the advice to ``at.actions``."""
    if draft_cfg is None:
        return None, [
            Check("EAGLE-3 draft", None, "no --draft given: draft architecture, aux layer ids and width not checked")
        ]
    ctx = DraftContext(
        at.facts,
        at.tree,
        at.registry,
        at.install,
        read_release(at.tree, at.install),
        final_layer_capture(chain),
        at.pipeline_parallel_size,
        at.actions,
        warnings,
    )
    draft_facts, more = draft_checks(draft_cfg, ctx)
    return draft_facts, more + _backend_id_zero(at.route, draft_facts, at.actions)


def _check_known(
    facts: TargetFacts, registry: Registry, install: Install, distribution: str, command_options: Sequence[str] | None
) -> None:
    """Raises :func:`~patchkit.plan.request.not_registered` for a target architecture this registry lacks and
    patchkit knows from no release (a typo, a remote-code class): exit 2 with the closest names, the
    answer every command gives (issue 32)."""
    if (
        facts.architectures
        and facts.resolution is None
        and not any(
            isinstance(p.target, ClassTarget) and p.target.architecture in facts.architectures
            for p in load_patches(distribution)
        )
    ):
        raise not_registered(
            registry,
            facts.architectures[0],
            str(install.version),
            "--model's config.json architecture",
            " ".join(command_options or ()),
            facts.model_type,
        )


def _pending_check(
    checks: list[Check], actions: list, install: Install, distribution: str, options: tuple[str, ...]
) -> None:
    """An unfinished patchkit run first in ``checks`` (the files are a mix of two runs until the next
    apply or revert), and the apply that finishes it in ``actions``."""
    pending = unfinished_check(journal_for(install, distribution))
    if pending is None:
        return
    checks.insert(0, pending)
    if pending.ok is False:
        actions.append(
            NextStep(
                patchkit_argv("apply", target=distribution, environment=options),
                "finish the unfinished patchkit run: apply puts its files back first",
                effect=Effect.PATCHES,
            )
        )


def _backend_id_zero(route, draft_facts: DraftFacts, actions: list) -> list[Check]:
    """Through vLLM's Transformers backend, a draft's aux id 0 fails when the draft loads: the failing
    check (and the advice), or nothing."""
    if route is not None and route.declares and route.id_zero_breaks and 0 in (draft_facts.aux_layer_ids or ()):
        actions.append("use a draft whose aux layer ids are 1 or more (the backend cannot capture id 0)")
        return [
            Check(
                "aux id 0 through vLLM's Transformers backend",
                False,
                f"the backend's {SETTER_NAME}() indexes layer - 1, so id 0 (the embedding output) fails "
                "when the draft loads (KeyError: -1)",
                route.location,
            )
        ]
    return []


def _runner_check(tree: SourceTree) -> Check:
    """The model runner the serve uses (:func:`patchkit.vllm.runner.serving.serving_runner`): passed when
    every fact of it patchkit rests on is in the install, failed with "not checked: ..." when one is not
    (then no verdict of this report rests on what patchkit could not find)."""
    choice = serving_runner(tree)
    label = f"model runner {choice.name}"
    missing = choice.not_checked()
    if missing is not None:
        return Check(label, False, f"{missing}; {choice.reason}", kind=kinds.UNPINNED)
    return Check(label, True, choice.reason, choice.generation.runner if choice.generation else None)


def _patched_ids(
    install: Install, distribution: str, facts: TargetFacts, model_dir: Path, contract: Contract
) -> tuple[str, ...]:
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


# -- the apply suggestion --------------------------------------------------------------------


def _suggest_apply(
    report: DoctorReport, install: Install, distribution: str, options: Sequence[str], model_dir: Path
) -> None:
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
        report.next_steps.insert(
            0,
            NextStep(
                (),
                f"'patchkit apply --model' reads DIR/config.json: copy "
                f"{report.target.config} to DIR/config.json, then run: "
                + shlex.join(patchkit_argv("apply", target=distribution, environment=options, model="DIR")),
                report.target.config,
                Effect.EDIT,
            ),
        )
        return
    request = Request(model=Path(folder))
    planned = dry_run(install, chain_check=verify_mod.verify, target=distribution, request=request)
    steps = next_steps.after_dry_run(planned, argv)
    journal = journal_for(install)
    if planned.refused and journal.entries:  # written with --force: apply only refuses again (issue 42, finding 1)
        forced = arch_scope.scope(install, journal, request).forced
        if forced:
            steps = (next_steps.for_forced(sorted(forced), request),)
    if not steps:
        done = [p.id for p in planned.patches if p.outcome is Outcome.ALREADY_APPLIED]
        why = (
            f"its patches for this target are applied already ({', '.join(done)}), and the items above still fail"
            if done
            else "it plans no patch for the failing items above"
        )
        steps = (
            NextStep(
                (),
                f"'{shlex.join(argv)}' writes nothing here: {why}; patchkit cannot fix them on vLLM {install.version}",
                effect=Effect.EDIT,
            ),
        )
    report.next_steps[0:0] = list(steps)


__all__ = ["CheckpointConfig", "DoctorReport", "DraftFacts", "TargetFacts", "doctor", "read_config", "text_config"]
