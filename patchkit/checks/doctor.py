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
   DIR`` with the environment options given (0.10.2 - 0.33.0; planned by a dry run of that command);
4. for a multimodal target, the EAGLE proposer's image-token mapping, and whether the proposer can
   load a draft through the target's ``get_language_model()`` (:mod:`patchkit.vllm.loadpath`);
5. the draft (:mod:`patchkit.checks.drafts`): the class vLLM builds for it, whether this release loads
   its model type, its vocabulary, the aux layer ids each runner of this release captures (in
   the convention of the field they come from), their order, which of them reach the draft with
   ``--pipeline-parallel-size``, and the draft's input width.

It returns a :class:`DoctorReport` (checks as :class:`~patchkit.results.Check` trees, a verdict,
next actions and warnings) and never prints.

Decisions (see the docstrings below and in :mod:`patchkit.checks.drafts` for the vLLM facts behind each):

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from patchkit.vllm import loadpath
from patchkit.vllm import platforms
from patchkit.vllm.chain import kinds, links
from patchkit.vllm import contract as contract_mod
from patchkit.checks import verify as verify_mod
from patchkit.vllm.checkpoint import CheckpointConfig, TargetFacts, as_int, read_config, text_config
from patchkit.vllm.contract import ALLOW_LIST_MODULES, ALLOW_LIST_NAMES, Contract, admits
from patchkit.checks.drafts import DraftContext, DraftFacts, draft_checks, final_layer_capture, read_release
from patchkit.errors import ConfigError, UsageError
from patchkit.vllm.install import Install
from patchkit.vllm.registry import Registry
from patchkit.results import Check, InstallInfo, Outcome
from patchkit.vllm.source import ClassRef, SourceTree
from patchkit.plan.request import Request
from patchkit.plan.spec import ClassTarget, check_target, default_architectures, load_patches
from patchkit.store.journal import journal_for, unfinished_check

MULTIMODAL_PROTOCOL = "SupportsMultiModal"
"""Interface class in ``model_executor/models/interfaces.py`` that multimodal models derive from."""


# -- results ---------------------------------------------------------------------------------


@dataclass
class DoctorReport:
    """Result of :func:`doctor`.

    Attributes:
        install: the vLLM install checked against.
        target: facts about the target checkpoint.
        draft: facts about the draft, or None when no draft was given.
        checks: the checklist, one :class:`Check` tree per item.
        actions: what to do next, one line each (empty when ready).
        apply_command: the exact ``patchkit apply --target vllm --model DIR ...`` command that fixes
            the vLLM side for this target, or None.
        apply_patches: the patches that command would write.
        warnings: what may be wrong without failing the verdict, one line each.
    """

    install: InstallInfo
    target: TargetFacts
    draft: DraftFacts | None
    checks: list[Check]
    actions: list[str] = field(default_factory=list)
    apply_command: str | None = None
    apply_patches: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """True when no check fails."""
        return not any(c.failures() for c in self.checks)

    @property
    def verdict(self) -> str:
        """``"ready"`` or ``"not ready"``."""
        return "ready" if self.ready else "not ready"

    @property
    def missing(self) -> list[str]:
        """``"label: detail"`` of every failing check."""
        return [f"{c.label}: {c.detail}" for top in self.checks for c in top.failures()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``--json`` schema)."""
        return {
            "command": "doctor",
            "install": asdict(self.install),
            "ready": self.ready,
            "verdict": self.verdict,
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict() if self.draft else None,
            "checks": [asdict(c) for c in self.checks],
            "missing": self.missing,
            "actions": self.actions,
            "apply_command": self.apply_command,
            "apply_patches": self.apply_patches,
            "warnings": self.warnings,
        }


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
        UsageError: unknown ``distribution``, or ``pipeline_parallel_size`` below 1.
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
    info = InstallInfo(str(install.site_packages), str(install.version), contract.era, contract.description,
                       contract.patchable, contract.native)
    facts = _target_facts(target_cfg, tree, registry)
    actions: list[str] = []

    model_dir = target_cfg.path.parent
    patched = _patched_ids(install, distribution, facts, model_dir, contract)
    target_check = _target_check(facts, install, distribution, actions)
    allow_check = _allow_list_check(facts, tree, contract)
    effect_check, chain = _in_effect_check(facts, tree, registry, contract, install, actions, patched)
    proposer_check = _proposer_check(facts, tree, target_cfg.data)
    checks = [target_check, allow_check, effect_check, proposer_check]
    load_check = _draft_load_check(facts, tree, registry, contract, install, actions)
    if load_check is not None:
        checks.append(load_check)
    pending = unfinished_check(journal_for(install, distribution))
    if pending is not None:  # the files are a mix of two runs until the next apply or revert
        checks.insert(0, pending)
        if pending.ok is False:
            actions.append("finish the unfinished patchkit run: 'patchkit apply' (or 'patchkit revert') puts its files back first")

    draft_facts = None
    warnings: list[str] = []
    if draft_cfg is not None:
        ctx = DraftContext(facts, tree, registry, install, read_release(tree, install), final_layer_capture(chain),
                           pipeline_parallel_size, actions, warnings)
        draft_facts, more = draft_checks(draft_cfg, ctx)
        checks += more
    else:
        checks.append(Check("EAGLE-3 draft", None, "no --draft given: draft architecture, aux layer ids and width not checked"))

    report = DoctorReport(info, facts, draft_facts, checks, actions, warnings=warnings)
    vllm_side = [allow_check, effect_check, proposer_check]
    if (facts.cls is not None and contract.protocol is not None and load_check is None
            and any(c.failures() for c in vllm_side)):
        _suggest_apply(report, install, distribution, command_options, model_dir)
    return report


def _patched_ids(install: Install, distribution: str, facts: TargetFacts, model_dir: Path,
                 contract: Contract) -> tuple[str, ...]:
    """The journaled patch ids this target's architecture needs (empty: patchkit changed nothing for it).

    The ids are derived as ``apply --model DIR`` derives them, on the files as they were before
    patchkit (:func:`patchkit.plan.arch_scope.scope`), and intersected with what the journal holds; so a
    class whose support comes from patchkit is never called native, and another architecture's
    patches are not credited to this one.
    """
    from patchkit.plan import arch_scope

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
        protocol = tree.find_class(contract_mod.INTERFACES_MODULE, MULTIMODAL_PROTOCOL)
        facts.multimodal = None if protocol is None else protocol in tree.mro(cls)
    return facts


def _target_check(facts: TargetFacts, install: Install, distribution: str, actions: list[str]) -> Check:
    if not facts.architectures:
        actions.append("the target's config.json must list its architecture (\"architectures\": [...])")
        return Check("target architecture", False, "config.json lists no architectures", facts.config)
    names = ", ".join(facts.architectures)
    r = facts.resolution
    if r is None:
        known = next((p for p in load_patches(distribution)
                      if isinstance(p.target, ClassTarget) and p.target.architecture in facts.architectures), None)
        if known is not None:  # an architecture patchkit knows, from a later vLLM release
            actions.append(f"vLLM {install.version} has no {known.target.architecture}: patchkit's {known.id} is for "
                           f"vLLM {known.vllm}, and later releases support it natively; upgrade vLLM")
        else:
            actions.append(
                "use a checkpoint whose config.json names a native vLLM architecture (Kimi-K2 text checkpoints list "
                "DeepseekV3ForCausalLM, Kimi-K2.5 lists KimiK25ForConditionalGeneration); "
                "'patchkit resolve NAME' shows how this vLLM resolves a name")
        return Check(
            f"target architecture {names}", False,
            f"not a native model: not in vLLM {install.version}'s model registry, so vLLM would load it through its "
            "Transformers backend (trust_remote_code) and no edit of vLLM's model files reaches it")
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
    node = Check(f"target architecture {facts.architecture}", True, detail, r.cls.location)
    if len(r.aliases) > 1:
        node.children.append(Check("same class for", None, ", ".join(r.aliases)))
    return node


def _allow_list_check(facts: TargetFacts, tree: SourceTree, contract: Contract) -> Check:
    mt = facts.text_model_type
    where = "text_config.model_type" if facts.text_config else "model_type"
    if mt is None:
        return Check("text model type", False, f"config.json has no {where}: vLLM's EAGLE-3 start-up check needs it")
    label = f"EAGLE-3 start-up check admits text model type {mt}"
    source = f"from {where}" + (f" (top-level model_type {facts.model_type})" if facts.text_config and facts.model_type else "")
    found = verify_mod.read_allow_list(tree)
    if found is None:
        if contract.native:
            return Check(label, None, f"{source}; this release has no model-type allow-list")
        if contract.era == "A0":
            return Check(label, None, f"{source}; no EAGLE-3 allow-list in this release (no EAGLE-3 contract)")
        return Check(label, False, f"{source}; no {' or '.join(ALLOW_LIST_NAMES)} list found in {', '.join(ALLOW_LIST_MODULES)}")
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
        actions.append("upgrade vLLM: EAGLE-3 needs vLLM >= 0.10.2 (DeepSeek/Kimi-K2.5 natively from 0.18.0)")
        return Check(label, False, f"vLLM {install.version} has no SupportsEagle3 Protocol (contract {contract.era})"), None
    # the whole chain (capture included) is checked for the classes patchkit's patches serve: the
    # default set's, and any architecture patchkit patched here (apply --arch / --model)
    in_scope = bool(patched) or _in_scope(tree, registry, cls)
    chain = links.model_check(tree, registry, contract, cls, follow_setter=in_scope)
    if facts.architecture is not None:  # the verdict scan, apply and verify give (patchkit.vllm.shapes.classify)
        from patchkit.vllm.shapes import classify

        verify_mod.settle(chain, classify(tree, registry, contract, facts.architecture))
    node = Check(label, chain.ok, "", cls.location, children=chain.children)
    if chain.ok:
        if patched:  # before "native": on 0.18.0+ a class patchkit patched is not vLLM's support
            node.detail = f"patched by patchkit ({', '.join(patched)})"
        elif contract.native:
            node.detail = f"natively (EAGLE-3 contract {contract.era}, vLLM >= 0.18.0)"
        else:
            node.detail = f"this release supports it (contract {contract.era})"
    else:
        node.detail = "missing: " + "; ".join(c.label for c in chain.failures())
    branches = links.branch_checks(tree, registry, contract, facts.resolution, in_scope)
    if branches:
        node.children = [Check(f"{kinds.BRANCH_LABEL}{cls.module}.{cls.name} (the first)", chain.ok, "", cls.location,
                               children=chain.children), *branches]
        # branch_checks gives one check per branch after the first, in the order of branches()
        others = platforms.branches(tree, facts.resolution)[1:]
        bad = [b.dotted for b, check in zip(others, branches) if not check.ok]
        if bad:
            node.ok = False
            node.detail += "; not in effect on: " + ", ".join(bad)
            actions.append(f"{cls.name} lacks EAGLE-3 on some platforms of this release ({', '.join(bad)}); "
                           "on those, serve without EAGLE-3 or use another release")
        else:
            node.detail += f"; on all {len(branches) + 1} platform branches"
    if not in_scope:
        node.detail += " [interface only: the capture chain of classes outside patchkit's patches is not checked]"
    return node, chain if in_scope else None


def _proposer_check(facts: TargetFacts, tree: SourceTree, data: dict[str, Any]) -> Check:
    label = "EAGLE proposer with a multimodal target"
    cls = facts.cls
    if cls is None or facts.multimodal is None:
        return Check(label, None, "not checked: the target is not a native vLLM model")
    if not facts.multimodal:
        return Check(label, None, f"{cls.name} is text-only (no {MULTIMODAL_PROTOCOL}): nothing to map")
    from patchkit.vllm.proposer_paths import derive

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
    """The proposer's draft loading through this target (see :mod:`patchkit.vllm.loadpath`); None: nothing to say."""
    cls = facts.cls
    if cls is None or not facts.multimodal or contract.protocol is None:
        return None
    fault = loadpath.bare_language_model(tree, registry, cls)
    if fault is None:
        return None
    actions.append(f"EAGLE-3 with {cls.name} cannot work on vLLM {install.version} (the proposer fails to load any draft); "
                   f"patchkit does not patch it here: upgrade to vLLM >= {loadpath.FIRST_FIXED}")
    return Check("EAGLE proposer loads a draft for this target", False, fault.reason(), fault.proposer_at)


# -- the apply suggestion --------------------------------------------------------------------


def _suggest_apply(report: DoctorReport, install: Install, distribution: str,
                   command_options: Sequence[str] | None, model_dir: Path) -> None:
    """Dry-run ``patchkit apply --model DIR`` for this target and phrase the next step.

    The command suggested is the one that fixes THIS target on THIS release: ``apply --model DIR``
    plans the patches of the checkpoint's own architectures and model type (the shipped
    DeepSeek/Kimi set for those, :func:`patchkit.plan.selection.arch_selection`), on every release with the
    EAGLE-3 contract (0.10.2 - 0.33.0); a plain ``apply`` writes only the shipped set. The command
    repeats ``command_options`` (the environment options given), so run as printed it patches the
    install doctor checked.

    The dry run is planned in a child ``python -m patchkit`` process: planning needs libcst, and
    doctor, a read-only command, never imports it itself.
    """
    import json
    import subprocess
    import sys

    folder = str(Path(model_dir).resolve())
    options = list(command_options) if command_options else ["--site-packages", str(install.site_packages)]
    command = shlex.join(["patchkit", "apply", "--target", distribution, "--model", folder, *options])
    if not (Path(model_dir) / "config.json").is_file():  # --model takes the folder of a config.json
        report.actions.insert(0, f"'patchkit apply --model' reads DIR/config.json: copy {report.target.config} to "
                                 f"DIR/config.json, then run: " + shlex.join(["patchkit", "apply", "--target", distribution,
                                                                               "--model", "DIR", *options]))
        return
    dry = shlex.join(["patchkit", "apply", "--dry-run", "--target", distribution, "--model", folder, *options])
    proc = subprocess.run([sys.executable, "-m", "patchkit", "apply", "--dry-run", "--json", "--target", distribution,
                           "--model", folder, "--site-packages", str(install.site_packages)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    try:
        planned = json.loads(proc.stdout)["patches"]
    except (ValueError, KeyError, TypeError):
        report.actions.insert(0, f"'{dry}' could not plan on this install; run it to see why")
        return
    refused = [p for p in planned if p["outcome"] == Outcome.REFUSED.value]
    would = [p["id"] for p in planned if p["outcome"] == Outcome.APPLIED.value]
    if refused:
        report.actions.insert(0, f"'{command}' would refuse on this install ({refused[0]['id']}: {refused[0]['reason']}); "
                                 f"'{dry}' shows why")
        return
    if not would:
        done = [p["id"] for p in planned if p["outcome"] == Outcome.ALREADY_APPLIED.value]
        why = (f"its patches for this target are applied already ({', '.join(done)}), and the items above still fail"
               if done else "it plans no patch for the failing items above")
        report.actions.insert(0, f"'{command}' writes nothing here: {why}; patchkit cannot fix them on vLLM {install.version}")
        return
    report.apply_command = command
    report.apply_patches = would
    report.actions.insert(0, f"run: {command}  (writes {', '.join(would)}; "
                             "'--dry-run' shows the diff), then run doctor again")


__all__ = ["CheckpointConfig", "DoctorReport", "DraftFacts", "TargetFacts", "doctor", "read_config", "text_config"]
