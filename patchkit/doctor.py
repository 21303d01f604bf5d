"""``doctor`` and ``explain``: is a target + draft checkpoint pair ready for EAGLE-3 on this vLLM?

:func:`doctor` reads the ``config.json`` of a target checkpoint (and optionally of an EAGLE-3
draft) from local folders -- it never downloads anything and never imports vLLM -- and checks
them against the installed vLLM's files, read statically:

1. the target architecture and how this vLLM's registry resolves it (or that it is not a native
   model);
2. the text model type (``text_config.model_type`` when the config nests one) against the
   speculative config's EAGLE-3 start-up allow-list;
3. whether EAGLE-3 is in effect for the resolved class (the chain check of :mod:`patchkit.verify`),
   and if not, the ``patchkit apply`` that fixes it;
4. for a multimodal target, the EAGLE proposer's image-token mapping;
5. the draft: the architecture vLLM builds for it and whether this release registers it, the aux
   layer ids vLLM will use and their range, and the draft's input width.

It returns a :class:`DoctorReport` (checks as :class:`~patchkit.results.Check` trees, a verdict and
next actions) and never prints. :func:`explain` describes one patch definition.

Decisions (see the docstrings below for the vLLM facts behind each):

- Explicit aux ids are the draft config's top-level ``eagle_aux_hidden_state_layer_ids``. A
  nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` counts only when this release's runner
  reads it; otherwise vLLM silently uses the target's defaults ``(2, n // 2, n - 3)``.
- An id is in range when ``0 <= id <= n`` (``n`` = the target's ``num_hidden_layers``): id ``k``
  is the residual stream entering layer ``k``, id ``n`` the last layer's output.
- The draft's input width is ``k * W``: ``W`` is the draft's ``target_hidden_size`` or else its
  ``hidden_size``, ``k`` its ``num_aux_hidden_states`` or else 3; the target provides
  ``len(ids) * hidden_size``. Both factors must match.
"""

from __future__ import annotations

import ast
import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from patchkit import api
from patchkit import contract as contract_mod
from patchkit import verify as verify_mod
from patchkit.contract import ALLOW_LIST_MODULES, ALLOW_LIST_NAMES, Contract, admits
from patchkit.errors import ConfigError
from patchkit.install import Install
from patchkit.journal import Journal
from patchkit.registry import Registry, Resolution
from patchkit.results import Check, InstallInfo, Outcome
from patchkit.source import ClassRef, SourceTree
from patchkit.spec import ClassTarget, check_target, load_patches

CONFIG_FILE = "config.json"
"""The file doctor reads in each checkpoint folder."""
IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
"""Draft config field with explicit aux layer ids (vLLM 0.14.1 - 0.33.0, ``v1/worker/gpu_model_runner.py``)."""
EAGLE_CONFIG = "eagle_config"
"""Nested draft config dict some EAGLE-3 exporters write (``use_aux_hidden_state``, sometimes the ids)."""
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
"""Module whose ``_get_eagle3_aux_layers_from_config`` reads the draft's explicit ids."""
MULTIMODAL_PROTOCOL = "SupportsMultiModal"
"""Interface class in ``model_executor/models/interfaces.py`` that multimodal models derive from."""
FC_STATES = 3
"""Aux states the draft's ``fc`` takes unless the draft class reads a count from the config.

Fact: vLLM 0.10.2 - 0.18.0 ``model_executor/models/llama_eagle3.py`` (and 0.18.0
``deepseek_eagle3.py``) build ``fc`` with input ``3 * (target_hidden_size or hidden_size)``; in
0.22.0 and 0.33.0 both files take the count from the config's ``num_aux_hidden_states``, else
from the length of ``eagle_config["eagle_aux_hidden_state_layer_ids"]``, else 3.
"""
FC_COUNT_FIELD = "num_aux_hidden_states"
"""Draft config field with the number of aux states, read by the draft class from vLLM 0.22.0."""
MLA_DRAFT_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
"""EAGLE-3 draft classes for DeepSeek-architecture (MLA) drafts; first registered in vLLM 0.18.0
(``model_executor/models/registry.py``; absent from 0.17.1)."""


# -- reading checkpoint configs ------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointConfig:
    """A checkpoint's ``config.json``.

    Attributes:
        path: the ``config.json`` file read.
        data: its parsed JSON object.
    """

    path: Path
    data: dict[str, Any]


def read_config(location: Path, option: str) -> CheckpointConfig:
    """Read ``config.json`` from a checkpoint folder (or the file itself); never downloads.

    Args:
        location: a local checkpoint folder holding ``config.json``, or the JSON file itself.
        option: the command-line option it came from (``"--model"``, ``"--draft"``), for messages.
    Returns:
        The parsed :class:`CheckpointConfig`.
    Raises:
        ConfigError: the path does not exist, holds no ``config.json``, cannot be read, is not
            valid JSON, or is not a JSON object.
    """
    location = Path(location).expanduser()
    if location.is_dir():
        file = location / CONFIG_FILE
    elif location.is_file():
        file = location
    else:
        text = str(location)
        looks_like_repo = text.count("/") == 1 and not text.startswith((".", "/", "~"))
        hint = (f"doctor reads local files and never downloads; fetch the config first, e.g. "
                f"'huggingface-cli download {text} config.json --local-dir DIR', then {option} DIR"
                if looks_like_repo else f"give the local checkpoint folder that holds {CONFIG_FILE}")
        raise ConfigError(f"{option} {location} does not exist", hint)
    if not file.is_file():
        raise ConfigError(f"{option} {location} has no {CONFIG_FILE}",
                          f"give the checkpoint folder itself (the one with {CONFIG_FILE} and the weights)")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}",
                          "check that the file is readable UTF-8 JSON") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{file} is not valid JSON: {exc}",
                          "the file may be truncated; download the checkpoint's config.json again") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{file} holds a JSON {type(data).__name__}, not an object",
                          f"{option} must point at a Hugging Face model config.json")
    return CheckpointConfig(file, data)


def text_config(data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The text (language-model) part of a model config, as vLLM's ``hf_text_config`` sees it.

    Fact (vLLM 0.17.1 ``transformers_utils/config.py`` ``get_hf_text_config``): vLLM uses the
    Transformers config's ``get_text_config()``, which returns the nested ``text_config`` when a
    (multimodal) config has one, else the config itself. Other nestings (``language_config``) are
    not followed here.

    Args:
        data: a parsed ``config.json``.
    Returns:
        ``(text config dict, "text_config" or None when it is the top level)``.
    """
    nested = data.get("text_config")
    if isinstance(nested, dict):
        return nested, "text_config"
    return data, None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, (list, tuple)) and all(_int(v) is not None for v in value):
        return list(value)
    return None


# -- results ---------------------------------------------------------------------------------


@dataclass
class TargetFacts:
    """What doctor read about the target checkpoint and how this vLLM resolves it.

    Attributes:
        config: path of the ``config.json`` read.
        architectures: its ``architectures`` list.
        architecture: the first of them that resolves to a native vLLM class (None: none does).
        resolution: that architecture's registry row and class.
        model_type: the top-level ``model_type``.
        text_model_type: ``model_type`` of the text config (what the allow-list is matched against).
        text_config: ``"text_config"`` when the text config is nested, else None.
        num_hidden_layers: the text config's layer count ``n`` (None when absent).
        hidden_size: the text config's hidden size, in elements per token (None when absent).
        multimodal: the resolved class derives from ``SupportsMultiModal`` (None: not resolved).
    """

    config: str
    architectures: list[str]
    architecture: str | None = None
    resolution: Resolution | None = None
    model_type: str | None = None
    text_model_type: str | None = None
    text_config: str | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    multimodal: bool | None = None

    @property
    def cls(self) -> ClassRef | None:
        """The resolved native class, or None."""
        return self.resolution.cls if self.resolution is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        cls = self.cls
        return {
            "config": self.config,
            "architectures": self.architectures,
            "architecture": self.architecture,
            "native": cls is not None,
            "class": cls.name if cls else None,
            "file": cls.relpath if cls else None,
            "line": cls.lineno if cls else None,
            "model_type": self.model_type,
            "text_model_type": self.text_model_type,
            "text_config": self.text_config,
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "multimodal": self.multimodal,
        }


@dataclass
class DraftFacts:
    """What doctor read about the EAGLE-3 draft checkpoint.

    Attributes:
        config: path of the ``config.json`` read.
        architectures: its ``architectures`` list.
        vllm_architectures: the names vLLM looks up for them with method ``eagle3``.
        aux_layer_ids: the ids vLLM will use (None when they cannot be known).
        aux_layer_ids_source: where they come from (``"draft config"``, ``"draft eagle_config"``, ``"default"``).
        declared_aux_layer_ids: ids the draft config declares (top level first), None when it declares none.
        draft_class: ``module.Class`` of the registered draft class vLLM builds (None: none).
        fc_input_width: the width the draft's ``fc`` takes, in elements per token (None: not stated).
    """

    config: str
    architectures: list[str]
    vllm_architectures: list[str] = field(default_factory=list)
    aux_layer_ids: list[int] | None = None
    aux_layer_ids_source: str | None = None
    declared_aux_layer_ids: list[int] | None = None
    draft_class: str | None = None
    fc_input_width: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class DoctorReport:
    """Result of :func:`doctor`.

    Attributes:
        install: the vLLM install checked against.
        target: facts about the target checkpoint.
        draft: facts about the draft, or None when no draft was given.
        checks: the checklist, one :class:`Check` tree per item.
        actions: what to do next, one line each (empty when ready).
        apply_command: the exact ``patchkit apply`` command that fixes the vLLM side, or None.
        apply_patches: the patches that command would write.
    """

    install: InstallInfo
    target: TargetFacts
    draft: DraftFacts | None
    checks: list[Check]
    actions: list[str] = field(default_factory=list)
    apply_command: str | None = None
    apply_patches: list[str] = field(default_factory=list)

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
        }


# -- doctor ----------------------------------------------------------------------------------


def doctor(install: Install, model: Path, draft: Path | None = None, *,
           command_options: Sequence[str] | None = None, distribution: str = "vllm") -> DoctorReport:
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
    Returns:
        A :class:`DoctorReport`; ``ready`` is True only when no check fails.
    Raises:
        ConfigError: a ``config.json`` is missing or unreadable (see :func:`read_config`).
        SourceError: a vLLM file on the way does not parse.
        StateError: patchkit's journal in the install cannot be read.
        UsageError: unknown ``distribution``.
    """
    target_cfg = read_config(model, "--model")
    draft_cfg = read_config(draft, "--draft") if draft is not None else None
    check_target(distribution)
    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    info = InstallInfo(str(install.site_packages), str(install.version), contract.era, contract.description)
    facts = _target_facts(target_cfg, tree, registry)
    actions: list[str] = []

    target_check = _target_check(facts, install, distribution, actions)
    allow_check = _allow_list_check(facts, tree, contract)
    effect_check, chain = _in_effect_check(facts, tree, registry, contract, install, distribution, actions)
    proposer_check = _proposer_check(facts, tree, target_cfg.data)
    checks = [target_check, allow_check, effect_check, proposer_check]
    pending = api.unfinished_check(api.journal_for(install, distribution))
    if pending is not None:  # the files are a mix of two runs until the next apply or revert
        checks.insert(0, pending)
        if pending.ok is False:
            actions.append("finish the unfinished patchkit run: 'patchkit apply' (or 'patchkit revert') puts its files back first")

    draft_facts = None
    if draft_cfg is not None:
        draft_facts, draft_checks = _draft_checks(draft_cfg, facts, tree, registry, install, chain, actions)
        checks += draft_checks
    else:
        checks.append(Check("EAGLE-3 draft", None, "no --draft given: draft architecture, aux layer ids and width not checked"))

    report = DoctorReport(info, facts, draft_facts, checks, actions)
    vllm_side = [allow_check, effect_check, proposer_check]
    if facts.cls is not None and contract.patchable and any(c.failures() for c in vllm_side):
        _suggest_apply(report, install, distribution, command_options)
    return report


def _target_facts(cfg: CheckpointConfig, tree: SourceTree, registry: Registry) -> TargetFacts:
    data = cfg.data
    archs = data.get("architectures")
    architectures = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    text, nested = text_config(data)
    facts = TargetFacts(
        config=str(cfg.path),
        architectures=architectures,
        model_type=data.get("model_type") if isinstance(data.get("model_type"), str) else None,
        text_model_type=text.get("model_type") if isinstance(text.get("model_type"), str) else None,
        text_config=nested,
        num_hidden_layers=_int(text.get("num_hidden_layers")),
        hidden_size=_int(text.get("hidden_size")),
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
    for arch in verify_mod.ARCHITECTURES:
        r = registry.resolve(arch)
        if r is not None and r.cls is not None:
            roots.add(r.cls)
    return any(c in roots for c in tree.mro(cls))


def _in_effect_check(facts: TargetFacts, tree: SourceTree, registry: Registry, contract: Contract,
                     install: Install, distribution: str, actions: list[str]) -> tuple[Check, Check | None]:
    cls = facts.cls
    label = "EAGLE-3 in effect" + (f" for {cls.name}" if cls else "")
    if cls is None or facts.resolution is None or facts.resolution.transformers_backend:
        return Check(label, None, "not checked: the target is not a native vLLM model"), None
    if contract.protocol is None:
        actions.append("upgrade vLLM: EAGLE-3 needs vLLM >= 0.10.2 (DeepSeek/Kimi-K2.5 natively from 0.18.0)")
        return Check(label, False, f"vLLM {install.version} has no SupportsEagle3 Protocol (contract {contract.era})"), None
    in_scope = _in_scope(tree, registry, cls)
    chain = verify_mod.model_check(tree, registry, contract, cls, follow_setter=in_scope)
    node = Check(label, chain.ok, "", cls.location, children=chain.children)
    if chain.ok:
        applied = sorted({p for e in Journal(install.site_packages, distribution).entries.values() for p in e.patches})
        if contract.native:
            node.detail = f"natively (EAGLE-3 contract {contract.era}, vLLM >= 0.18.0)"
        elif applied:
            node.detail = f"patched by patchkit ({', '.join(applied)})"
        else:
            node.detail = f"this release supports it (contract {contract.era})"
    else:
        node.detail = "missing: " + "; ".join(c.label for c in chain.failures())
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
    found = verify_mod.find_proposer_fallback(tree)
    if found is None:
        return Check(label, None, "the proposer has no image_token_index fallback in this release: nothing to map")
    line = found.names(cls.name)
    if line is not None:
        return Check(label, True, f"the proposer has a branch for {cls.name}", f"{found.relpath}:{line}")
    if "image_token_index" in data:
        return Check(label, True, f"no branch for {cls.name}: the proposer reads target_model.config.image_token_index, "
                                  f"which config.json has ({data['image_token_index']!r})", f"{found.relpath}:{found.lineno}")
    return Check(label, False, f"no branch for {cls.name}: the proposer reads target_model.config.image_token_index, "
                               "which this config.json lacks (loading the draft fails with AttributeError)",
                 f"{found.relpath}:{found.lineno}")


# -- the draft -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerIds:
    """How this release's model runner reads explicit aux ids from the draft config.

    Fact: ``v1/worker/gpu_model_runner.py`` has ``_get_eagle3_aux_layers_from_config`` reading
    ``hf_config.eagle_aux_hidden_state_layer_ids`` from 0.14.1 (not in 0.10.2, where the target's
    getter alone decides); 0.33.0 also reads ``eagle_config["eagle_aux_hidden_state_layer_ids"]``
    when the top level has none; 0.14.1 - 0.18.0 do not.

    Attributes:
        top_level: the runner reads the draft config's top-level ids (None: runner not found).
        nested: it also reads ``eagle_config``'s ids.
        location: ``file:line`` of the reading function.
    """

    top_level: bool | None
    nested: bool
    location: str | None


def runner_reads_ids(tree: SourceTree) -> RunnerIds:
    """Find, statically, whether the runner reads explicit aux ids (see :class:`RunnerIds`).

    A function of :data:`RUNNER_MODULE` reads them when it contains the string constant
    ``"eagle_aux_hidden_state_layer_ids"``; it reads the nested form when the same function
    also contains ``"eagle_config"``.

    Raises:
        SourceError: the runner module does not parse.
    """
    relpath = tree.relpath_of_module(RUNNER_MODULE)
    if relpath is None:
        return RunnerIds(None, False, None)
    for node in ast.walk(tree.module_tree(RUNNER_MODULE)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            consts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            if IDS_FIELD in consts:
                return RunnerIds(True, EAGLE_CONFIG in consts, f"{relpath}:{node.lineno}")
    return RunnerIds(False, False, None)


def eagle3_draft_architecture(arch: str) -> str:
    """The architecture vLLM looks up for an EAGLE-3 draft that lists ``arch``.

    Fact (vLLM 0.10.2 - 0.33.0, ``transformers_utils/configs/eagle.py`` ``EAGLEConfig`` with
    ``method="eagle3"``): a name that starts or ends with ``Eagle3`` is kept, any other gets the
    prefix ``Eagle3`` (``LlamaForCausalLM`` -> ``Eagle3LlamaForCausalLM``).
    """
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"


def _final_layer_capture(chain: Check | None) -> bool | None:
    """Whether the backbone captures id n, from the chain check (None: not known)."""
    if chain is None or not chain.ok:
        return None
    found: list[Check] = []

    def walk(c: Check) -> None:
        if c.label == verify_mod.FINAL_LAYER_CHECK:
            found.append(c)
        for child in c.children:
            walk(child)

    walk(chain)
    if not found:
        return None
    return all(c.location is not None for c in found)


def _draft_checks(cfg: CheckpointConfig, target: TargetFacts, tree: SourceTree, registry: Registry,
                  install: Install, chain: Check | None, actions: list[str]) -> tuple[DraftFacts, list[Check]]:
    data = cfg.data
    speculators = "speculators_model_type" in data
    layer = data.get("transformer_layer_config") if speculators else data
    layer = layer if isinstance(layer, dict) else data
    archs = data.get("architectures")
    architectures = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    facts = DraftFacts(str(cfg.path), architectures)
    checks: list[Check] = [_draft_architecture_check(facts, speculators, data, registry, install, actions)]

    eagle_config = data.get(EAGLE_CONFIG) if isinstance(data.get(EAGLE_CONFIG), dict) else {}
    if eagle_config.get("use_aux_hidden_state") is False:
        checks.append(Check("aux layer ids", None,
                            "the draft does not use aux hidden states (eagle_config.use_aux_hidden_state is false)"))
        return facts, checks

    ids_check = _aux_ids_check(facts, data, eagle_config, target, tree, chain, install, actions)
    checks.append(ids_check)
    checks.append(_width_check(facts, data, layer, eagle_config, target, tree, actions))
    return facts, checks


def _draft_architecture_check(facts: DraftFacts, speculators: bool, data: dict[str, Any], registry: Registry,
                              install: Install, actions: list[str]) -> Check:
    if speculators:
        return Check("draft architecture", None,
                     f"speculators format (speculators_model_type {data.get('speculators_model_type')!r}): vLLM's "
                     "converter picks the draft class; not checked")
    if not facts.architectures:
        actions.append("the draft's config.json must list its architecture (\"architectures\": [...])")
        return Check("draft architecture", False, "the draft's config.json lists no architectures", facts.config)
    node = Check("draft architecture " + ", ".join(facts.architectures), False, "")
    registered = []
    for arch in facts.architectures:
        name = eagle3_draft_architecture(arch)
        facts.vllm_architectures.append(name)
        entry = registry.entry(name)
        if entry is not None:
            registered.append(name)
            node.children.append(Check(f"{arch} -> {name}", True, f"registered: {entry.module}.{entry.class_name}",
                                       f"{registry.relpath}:{entry.lineno}"))
        else:
            detail = f"vLLM {install.version} does not register {name}: it cannot build this draft"
            if name in MLA_DRAFT_ARCHITECTURES:
                detail += " (MLA EAGLE-3 drafts are registered from vLLM 0.18.0)"
            node.children.append(Check(f"{arch} -> {name}", False, detail, registry.relpath))
    node.ok = bool(registered)
    if registered:
        entry = registry.entry(registered[0])
        assert entry is not None
        facts.draft_class = f"{entry.module}.{entry.class_name}"
        node.detail = f"vLLM builds {registered[0]}"
        for child in node.children:  # one registered name is enough: vLLM uses the first it can build
            if child.ok is False:
                child.ok = None
    else:
        node.detail = "no EAGLE-3 draft class for it in this release"
        mla = any(n in MLA_DRAFT_ARCHITECTURES for n in facts.vllm_architectures)
        actions.append("use an EAGLE-3 draft this vLLM can build (a Llama-architecture draft -> Eagle3LlamaForCausalLM)"
                       + (", or vLLM >= 0.18.0, which registers MLA (DeepSeek-architecture) drafts" if mla else ""))
    return node


def _aux_ids_check(facts: DraftFacts, data: dict[str, Any], eagle_config: dict[str, Any], target: TargetFacts,
                   tree: SourceTree, chain: Check | None, install: Install, actions: list[str]) -> Check:
    n = target.num_hidden_layers
    default = [2, n // 2, n - 3] if n is not None else None
    reads = runner_reads_ids(tree)
    bad = [(f"{IDS_FIELD}", data.get(IDS_FIELD)), (f"{EAGLE_CONFIG}.{IDS_FIELD}", eagle_config.get(IDS_FIELD))]
    for name, value in bad:
        if value is not None and _int_list(value) is None:
            actions.append(f"fix {name} in the draft's config.json: a list of layer ids (integers)")
            return Check("aux layer ids", False, f"the draft's {name} is {value!r}, not a list of integers", facts.config)
    top = _int_list(data.get(IDS_FIELD)) or None  # vLLM treats an empty list as "not given"
    nested = _int_list(eagle_config.get(IDS_FIELD)) or None
    children: list[Check] = []
    facts.declared_aux_layer_ids = top or nested
    default_text = f"the target's default (2, n // 2, n - 3) with n = {n}"

    if top is not None and reads.top_level is not False:
        ids, source = top, "draft config"
        detail = f"explicit: {IDS_FIELD} in the draft's config.json (vLLM uses them verbatim)"
        if nested is not None and nested != top:
            detail += f"; eagle_config's {nested} is ignored"
    elif nested is not None and reads.nested:
        ids, source = nested, "draft eagle_config"
        detail = f"explicit: {EAGLE_CONFIG}.{IDS_FIELD} in the draft's config.json"
    else:
        ids, source = default, "default"
        detail = default_text
        declared, where = (top, IDS_FIELD) if top is not None else (nested, f"{EAGLE_CONFIG}.{IDS_FIELD}")
        if declared is not None:
            why = ("this release's runner reads no explicit ids" if reads.top_level is False
                   else f"this release's runner reads only a top-level {IDS_FIELD}")
            same = default is not None and declared == default
            children.append(Check(f"declared ids {tuple(declared)} ignored", same,
                                  f"{why} ({reads.location or RUNNER_MODULE}); vLLM uses {default_text}"
                                  + (", which are the same" if same else ": the draft gets other layers than it was trained on"),
                                  reads.location))
            if not same and reads.top_level is not False:
                actions.append(f"copy {EAGLE_CONFIG}.{IDS_FIELD} {declared} to a top-level {IDS_FIELD} in the draft's config.json")
            elif not same:
                actions.append(f"vLLM {install.version} cannot use the draft's ids {declared}: upgrade vLLM "
                               f"(0.14.1 and later read {IDS_FIELD})")
    facts.aux_layer_ids, facts.aux_layer_ids_source = ids, source
    if ids is None:
        return Check("aux layer ids", False, f"{detail}: the target's text config has no num_hidden_layers", target.config)

    node = Check(f"aux layer ids {tuple(ids)}", True, detail, children=children)
    if n is None:
        node.children.append(Check("ids in range", False, "the target's text config has no num_hidden_layers: ranges cannot be checked"))
    else:
        final = _final_layer_capture(chain)
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
                        actions.append(f"this vLLM does not capture id {n} (the last layer's output): use ids below {n}, "
                                       "or a patchkit-patched A1 release, which captures it")
            else:
                what = "the embedding output (residual stream entering layer 0)" if k == 0 else f"the residual stream entering layer {k}"
                node.children.append(Check(f"id {k}", True, what))
        if out_of_range:
            actions.append(f"fix the draft's aux layer ids {out_of_range}: the target has {n} layers, so ids must be 0..{n} "
                           "(was the draft trained for another target?)")
        repeated = sorted({k for k in ids if ids.count(k) > 1})
        if repeated:
            node.children.append(Check("ids are distinct", False,
                                       f"{repeated} repeat: the backbone captures each layer once, so the draft gets fewer states than it expects"))
    node.ok = not any(c.failures() for c in node.children)
    return node


def _fc_states(facts: DraftFacts, data: dict[str, Any], eagle_config: dict[str, Any],
               tree: SourceTree) -> tuple[int, str]:
    """How many aux states the draft's fc takes, and why (see :data:`FC_STATES`)."""
    reads_count: bool | None = None
    if facts.draft_class is not None:
        module = facts.draft_class.rpartition(".")[0]
        if tree.relpath_of_module(module) is not None:
            reads_count = any(isinstance(c, ast.Constant) and c.value == FC_COUNT_FIELD
                              for c in ast.walk(tree.module_tree(module)))
    declared = _int(data.get(FC_COUNT_FIELD))
    if reads_count is False:
        return FC_STATES, f"{FC_STATES} states (fixed in {facts.draft_class.rpartition('.')[2] if facts.draft_class else 'the draft class'})"
    if declared is not None:
        return declared, f"{FC_COUNT_FIELD} {declared}"
    nested = _int_list(eagle_config.get(IDS_FIELD))
    if reads_count and nested:
        return len(nested), f"{len(nested)} states (one per eagle_config id)"
    return FC_STATES, f"{FC_STATES} states"


def _width_check(facts: DraftFacts, data: dict[str, Any], layer: dict[str, Any], eagle_config: dict[str, Any],
                 target: TargetFacts, tree: SourceTree, actions: list[str]) -> Check:
    label = "draft input width"
    if _int(data.get("target_hidden_size")) is not None:
        width, width_name = _int(data["target_hidden_size"]), "target_hidden_size"
    elif _int(layer.get("hidden_size")) is not None:
        width, width_name = _int(layer["hidden_size"]), "hidden_size"
    else:
        return Check(label, None, "the draft's config.json gives neither target_hidden_size nor hidden_size: not checked")
    assert width is not None
    k, k_text = _fc_states(facts, data, eagle_config, tree)
    facts.fc_input_width = k * width
    h = target.hidden_size
    ids = facts.aux_layer_ids
    if h is None:
        return Check(label, False, "the target's text config has no hidden_size", target.config)
    if ids is None:
        return Check(label, None, "not checked: the aux layer ids are not known")
    given = len(ids) * h
    takes = f"the draft's fc takes {k_text} x {width_name} {width} = {k * width}"
    if len(ids) == k and width == h:
        return Check(label, True, f"{len(ids)} ids x hidden_size {h} = {given}; {takes}")
    reasons = []
    if width != h:
        reasons.append(f"the draft was built for hidden size {width}, the target has {h}")
    if len(ids) != k:
        reasons.append(f"{len(ids)} aux states are requested, the fc takes {k}")
    actions.append("the draft does not fit this target (" + "; ".join(reasons) + "): use a draft trained for it")
    return Check(label, False, f"the target gives {len(ids)} ids x hidden_size {h} = {given}, but {takes}: " + "; ".join(reasons))


# -- the apply suggestion --------------------------------------------------------------------


def _suggest_apply(report: DoctorReport, install: Install, distribution: str,
                   command_options: Sequence[str] | None) -> None:
    """Dry-run ``patchkit apply`` (all patches, as the command would) and phrase the next step."""
    planned = api.apply(install, dry_run=True, target=distribution)
    refused = [p for p in planned.patches if p.outcome is Outcome.REFUSED]
    would = [p.id for p in planned.patches if p.outcome is Outcome.APPLIED]
    if refused:
        report.actions.insert(0, f"'patchkit apply' would refuse on this install ({refused[0].id}: {refused[0].reason}); "
                                 "see 'patchkit apply --dry-run'")
        return
    if not would:
        report.actions.insert(0, "'patchkit apply' has nothing to write for the failing items: they are outside patchkit's patches")
        return
    options = list(command_options) if command_options else ["--site-packages", str(install.site_packages)]
    report.apply_command = shlex.join(["patchkit", "apply", "--target", distribution, *options])
    report.apply_patches = would
    report.actions.insert(0, f"run: {report.apply_command}  (writes {', '.join(would)}; "
                             "'--dry-run' shows the diff), then run doctor again")


__all__ = [
    "CheckpointConfig", "DoctorReport", "DraftFacts", "RunnerIds", "TargetFacts",
    "doctor", "eagle3_draft_architecture", "read_config", "runner_reads_ids", "text_config",
]
