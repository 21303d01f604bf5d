"""Reading an EAGLE-3 draft's ``config.json`` as a given vLLM release will read it.

:func:`draft_checks` is the draft half of ``patchkit doctor``: the draft class vLLM builds, whether
this release can load the draft's ``model_type`` at all, the vocabulary (judged from the sizes, the
draft's ``d2t``/``t2d`` and the tokenizers: :mod:`patchkit.vllm.vocabulary`), the aux layer ids vLLM will
capture (with the id convention of the field they come from), the order the states reach the draft
in, which ids reach the draft under pipeline parallelism, and the draft's input width.

What a release reads is detected once, by shape, from its own files (:func:`read_release`, a
:class:`ReleaseReading`): never from the version number.

Id conventions (the one fact every check below leans on):

- **vLLM**: id ``k`` is the residual stream *entering* decoder layer ``k``; id ``n`` is the last
  layer's output; the default is ``(2, n // 2, n - 3)`` (``get_eagle3_aux_hidden_state_layers`` of
  every native model, 0.10.2 - 0.33.0). A top-level ``eagle_aux_hidden_state_layer_ids`` is in this
  convention: vLLM's runner and the speculators converter pass it through verbatim, and
  speculators (RedHatAI) drafts are trained on states vLLM extracted.
- **SpecForge / SGLang / ModelOpt**: id ``k`` is the *output* of layer ``k`` (the stream entering
  layer ``k + 1``; SpecForge's default ``[1, n // 2 - 1, n - 4]`` is vLLM's default, the same
  physical layers). These tools write their ids inside ``eagle_config``.
- Drafts of the EAGLE repository, lmsys, AngelSlim and TorchSpec carry no ids: they were trained on
  the default layers.

Copying ids from one convention to the other unchanged shifts every capture by one layer and
acceptance collapses without an error (vllm#43671); the advice here always gives the shifted ids.
"""

from __future__ import annotations

import ast
import json
import pickletools
import struct
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.vllm import composition
from patchkit.vllm.chain import kinds
from patchkit.vllm.checkpoint import CheckpointConfig, TargetFacts, as_int, as_int_list
from patchkit.vllm.contract import INTERFACES_MODULE, is_stub
from patchkit.vllm.install import Install
from patchkit.vllm.registry import Registry
from patchkit.results import Check
from patchkit.vllm.source import ClassRef, SourceTree
from patchkit.vllm.vocabulary import DRAFT_TO_TARGET

IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
"""Draft config field with explicit aux layer ids (top level, or inside ``eagle_config``)."""
EAGLE_CONFIG = "eagle_config"
"""Nested draft config dict SpecForge / SGLang / ModelOpt exports write (``use_aux_hidden_state``, the ids)."""
SPECULATORS_TYPE = "speculators_model_type"
"""Top-level field that marks a speculators-format (RedHatAI) draft config."""
RUNNER_MODULES = (
    ("vllm.v1.worker.gpu_model_runner", "model runner"),
    ("vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils", "model runner V2"),
)
"""Modules whose ``*eagle3_aux_layers_from_config`` function picks the ids the target captures.

Fact: ``v1/worker/gpu_model_runner.py`` has ``_get_eagle3_aux_layers_from_config`` from 0.14.1
(0.10.2 has none: the target's getter alone decides); 0.33.0 also has the V2 runner's
``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`` ``get_eagle3_aux_layers_from_config`` (V2 is
vLLM 0.33.0's default where Triton is available; V1 is its fallback), and the two read different
fields (see :class:`IdReader`).
"""
READER_SUFFIX = "eagle3_aux_layers_from_config"
"""Name ending of the runner function that reads the draft's ids."""
SPECULATORS_ALGOS_MODULE = "vllm.transformers_utils.configs.speculators.algos"
"""Module converting a speculators config; it forwards the top-level ids from vLLM 0.14.1 (not 0.10.2)."""
CONFIG_MODULE = "vllm.transformers_utils.config"
"""Module holding vLLM's own ``_CONFIG_REGISTRY`` (model type -> config class)."""
CONFIG_REGISTRY = "_CONFIG_REGISTRY"
"""vLLM's config registry: a ``LazyConfigDict(model_type="ConfigClass", ...)`` in 0.10.2 - 0.33.0.
``kimi_k2`` enters it in 0.18.0 (``DeepseekV3Config``)."""
SPECULATORS_MODEL_TYPE = "speculators"
"""The model type vLLM gives a config with ``speculators_config`` and no ``model_type``
(``transformers_utils/config.py``, 0.10.2 - 0.33.0)."""
PP_TRANSPORT_FLAG = "supports_aux_hidden_states_over_pp"
"""Class attribute of ``EagleModelMixin`` (``model_executor/models/interfaces.py``, 0.33.0; absent
before): a backbone that sets it True carries aux states between pipeline stages. vLLM 0.33.0's V2
runner refuses EAGLE-3 with pipeline parallelism for a backbone without it."""
TRANSFORMERS_CHECKED = "5.24.0"
"""The newest transformers release the table below was checked against."""
TRANSFORMERS_MODEL_TYPES: dict[str, tuple[str | None, str | None]] = {
    "llama": (None, "4.55.2"),
    "mistral": (None, "4.55.2"),
    "qwen2": (None, "4.55.2"),
    "qwen3": (None, "4.55.2"),
    "qwen3_moe": (None, "4.55.2"),
    "deepseek_v2": (None, "4.55.2"),
    "deepseek_v3": (None, "4.55.2"),
    "glm4_moe": (None, "4.55.2"),
    "gpt_oss": (None, "4.55.2"),
    "kimi_k25": ("5.0", "5.20.2"),
    "kimi_k2": ("5.24.1", None),
}
"""Model types EAGLE-3 drafts use -> (every transformers release below this lacks it, the oldest
checked release that has it); None: no such bound / no such release.

Fact: read from the wheels of transformers 4.55.2 (the oldest any vLLM release here allows),
4.57.6 (the last 4.x), 5.20.2 and 5.24.0 (``models/auto/configuration_auto.py``, from 5.x
``models/auto/auto_mappings.py``). ``kimi_k2`` is in none of them (Kimi-K2 checkpoints ship it as
remote code); ``kimi_k25`` is in 5.20.2 and 5.24.0, not in 4.57.6. A model type, once added, stays.
"""
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


def vllm_default_ids(n: int) -> list[int]:
    """vLLM's default aux ids for a target of ``n`` layers, in vLLM's convention: ``[2, n // 2, n - 3]``.

    Fact: ``get_eagle3_aux_hidden_state_layers`` (A1) / ``get_eagle3_default_aux_hidden_state_layers``
    (A2/A3) of native models, vLLM 0.10.2 - 0.33.0 (e.g. ``model_executor/models/llama.py``), and
    patchkit's DeepSeek patch.
    """
    return [2, n // 2, n - 3]


@dataclass(frozen=True)
class DefaultIds:
    """The aux ids vLLM captures for a target when the draft records none, read from the release.

    Attributes:
        ids: the ids, in vLLM's convention.
        getter: ``Class.method`` of the getter the runner calls on the target (None: not found).
        getter_location: ``file:line`` of that method (None: not found).
        runner_location: ``file:line`` where the runner calls it (None: not found).
        derived: True when ``ids`` were computed from the getter's own ``return`` (its tuple of
            integer expressions over ``len(...layers)``, with ``n`` = the target's layer count);
            False when the getter is not of that form (a delegation) and ``ids`` are
            :func:`vllm_default_ids` (the form every native getter of 0.10.2 - 0.33.0 has).
    """

    ids: list[int]
    getter: str | None
    getter_location: str | None
    runner_location: str | None
    derived: bool


def default_ids(tree: SourceTree, cls: ClassRef | None, n: int) -> DefaultIds:
    """The ids this release's runner captures for target class ``cls`` of ``n`` layers without draft ids.

    Facts, read from the release: the runner calls ``<getter>()`` on the target when the draft
    config gives no ids (``v1/worker/gpu_model_runner.py``, 0.10.2 - 0.33.0, and the V2 runner of
    0.33.0; :func:`patchkit.vllm.proposer_paths.derive`, ``aux`` sources of kind ``"target"``); the getter
    is ``get_eagle3_aux_hidden_state_layers`` on the A1 releases (0.10.2 - 0.17.1), defined on each
    model class (``llama.py``: ``num_layers = len(self.model.layers); return (2, num_layers // 2,
    num_layers - 3)``), and ``get_eagle3_default_aux_hidden_state_layers`` from 0.18.0, defined once
    on ``SupportsEagle3`` in ``model_executor/models/interfaces.py`` with the same return. The
    getter is looked up in ``cls``'s MRO, else on the Protocol (a class not yet patched).

    Args:
        tree: the install's sources.
        cls: the target's resolved class (None: not a native model).
        n: the target's ``num_hidden_layers`` (>= 1).
    Returns:
        A :class:`DefaultIds`.
    Raises:
        SourceError: a file read does not parse.
    """
    from patchkit.vllm import contract as contract_mod
    from patchkit.vllm.proposer_paths import derive

    contract = contract_mod.detect(tree)
    name = contract.getter
    runner = next((a.location for a in derive(tree).aux if a.kind == "target" and a.name == name), None)
    found = first = None
    for holder in (cls, contract.protocol):
        if holder is None or name is None:
            continue
        member = tree.find_member(holder, name)
        # the Protocol's stub (an A1 class not patched yet has only that) returns nothing: not a getter
        if (member is not None and isinstance(member[1], (ast.FunctionDef, ast.AsyncFunctionDef))
                and not is_stub(member[1])):
            first = first or member
            if _eval_ids(member[1], n) is not None:
                found = member
                break
    found = found or first  # the class's own getter, when neither evaluates (a delegation)
    if found is None:
        return DefaultIds(vllm_default_ids(n), None, None, runner, False)
    owner, fn = found
    ids = _eval_ids(fn, n)
    return DefaultIds(ids if ids is not None else vllm_default_ids(n), f"{owner.name}.{name}",
                      f"{owner.relpath}:{fn.lineno}", runner, ids is not None)


def _eval_ids(fn: ast.FunctionDef | ast.AsyncFunctionDef, n: int) -> list[int] | None:
    """The ids ``fn`` returns for ``n`` layers: its top-level ``X = len(...)`` bind ``n``, then its
    first top-level ``return`` of a tuple/list of integer expressions; None for any other form."""
    env: dict[str, int] = {}
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = stmt.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "len":
                env[stmt.targets[0].id] = n
            else:
                known = _eval_int(value, env)
                if known is not None:
                    env[stmt.targets[0].id] = known
        elif isinstance(stmt, ast.Return):
            if not isinstance(stmt.value, (ast.Tuple, ast.List)):
                return None
            values = [_eval_int(e, env) for e in stmt.value.elts]
            return [v for v in values if v is not None] if all(v is not None for v in values) else None
    return None


def _eval_int(node: ast.expr, env: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _eval_int(node.operand, env)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _eval_int(node.left, env), _eval_int(node.right, env)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.FloorDiv) and b != 0:
            return a // b
    return None


# -- what a release reads ----------------------------------------------------------------------


@dataclass(frozen=True)
class IdReader:
    """One runner function that picks the aux ids from the draft config.

    Attributes:
        runner: which runner (``"model runner"``, ``"model runner V2"``).
        location: ``file:line`` of the function.
        top_level: it reads a top-level ``eagle_aux_hidden_state_layer_ids``.
        nested: it reads ``eagle_config["eagle_aux_hidden_state_layer_ids"]`` when the top level has none.
        nested_offset: what it adds to the nested ids (0: used verbatim, as vLLM 0.33.0's V1 runner does).
    """

    runner: str
    location: str
    top_level: bool
    nested: bool
    nested_offset: int


@dataclass(frozen=True)
class ReleaseReading:
    """How one vLLM release reads a draft, detected from its files (see :func:`read_release`).

    Attributes:
        readers: the runner functions that read explicit ids (empty: the target's defaults decide).
        speculators_ids: the speculators converter forwards the top-level ids (``speculators/algos.py``).
        config_types: model types in vLLM's own config registry.
        config_registry: ``file:line`` of that registry (None: not found).
        transformers: the transformers requirement of the release's METADATA (``Requires-Dist``), or None.
        pp_transport_flag: ``interfaces.py`` defines :data:`PP_TRANSPORT_FLAG`.
    """

    readers: tuple[IdReader, ...]
    speculators_ids: bool
    config_types: frozenset[str]
    config_registry: str | None
    transformers: SpecifierSet | None
    pp_transport_flag: bool


def read_release(tree: SourceTree, install: Install) -> ReleaseReading:
    """Detect, from the release's files, how it reads a draft (by shape, never by version).

    - A reader is a function of a :data:`RUNNER_MODULES` module whose name ends with
      :data:`READER_SUFFIX`. It reads the top-level ids when it holds the string constant
      :data:`IDS_FIELD` outside a ``.get(...)`` call, the nested ids when it calls
      ``.get("eagle_aux_hidden_state_layer_ids")`` and names ``"eagle_config"``; the statement of
      that call adding ``1`` makes ``nested_offset`` 1.
    - The config registry is the assignment to :data:`CONFIG_REGISTRY` in :data:`CONFIG_MODULE`:
      keyword names of a call, or string keys of a dict.

    Args:
        tree: the install's sources.
        install: the install (its ``dist_info`` METADATA gives the transformers range).
    Returns:
        A :class:`ReleaseReading`.
    Raises:
        SourceError: a file read does not parse.
    """
    readers: list[IdReader] = []
    for module, runner in RUNNER_MODULES:
        relpath = tree.relpath_of_module(module)
        if relpath is None:
            continue
        for node in ast.walk(tree.module_tree(module)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.endswith(READER_SUFFIX):
                readers.append(_reader(node, runner, f"{relpath}:{node.lineno}"))
    algos = tree.relpath_of_module(SPECULATORS_ALGOS_MODULE)
    speculators_ids = algos is not None and any(
        isinstance(c, ast.Constant) and c.value == IDS_FIELD for c in ast.walk(tree.module_tree(SPECULATORS_ALGOS_MODULE)))
    types, where = _config_registry(tree)
    flag = tree.relpath_of_module(INTERFACES_MODULE) is not None and any(
        isinstance(n, (ast.AnnAssign, ast.Assign)) and _assigns(n, PP_TRANSPORT_FLAG)
        for n in ast.walk(tree.module_tree(INTERFACES_MODULE)))
    return ReleaseReading(tuple(readers), speculators_ids, types, where, _transformers_requirement(install), flag)


def _reader(fn: ast.FunctionDef | ast.AsyncFunctionDef, runner: str, location: str) -> IdReader:
    nested = False
    offset = 0
    in_get: set[int] = set()
    names = {c.value for c in ast.walk(fn) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    for stmt in ast.walk(fn):
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Return)):
            continue
        for call in ast.walk(stmt):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "get"
                    and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == IDS_FIELD):
                in_get.add(id(call.args[0]))
                if EAGLE_CONFIG in names:
                    nested = True
                    if any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Add)
                           and isinstance(b.right, ast.Constant) and b.right.value == 1 for b in ast.walk(stmt)):
                        offset = 1
    top = any(isinstance(c, ast.Constant) and c.value == IDS_FIELD and id(c) not in in_get for c in ast.walk(fn))
    return IdReader(runner, location, top, nested, offset)


def _assigns(node: ast.AnnAssign | ast.Assign, name: str) -> bool:
    targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _config_registry(tree: SourceTree) -> tuple[frozenset[str], str | None]:
    relpath = tree.relpath_of_module(CONFIG_MODULE)
    if relpath is None:
        return frozenset(), None
    for node in tree.module_tree(CONFIG_MODULE).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and _assigns(node, CONFIG_REGISTRY) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Call):
                keys = {k.arg for k in value.keywords if k.arg}
                for arg in value.args:
                    if isinstance(arg, ast.Dict):
                        keys |= {k.value for k in arg.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            elif isinstance(value, ast.Dict):
                keys = {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            else:
                continue
            return frozenset(keys), f"{relpath}:{node.lineno}"
    return frozenset(), None


def _transformers_requirement(install: Install) -> SpecifierSet | None:
    """The ``Requires-Dist: transformers...`` specifier of the release's METADATA (markers ignored)."""
    try:
        text = (install.dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.partition(":")[2].strip())
        except InvalidRequirement:
            continue
        if req.name.lower() == "transformers" and (req.marker is None or "extra" not in str(req.marker)):
            return req.specifier
    return None


# -- what doctor found about the draft ---------------------------------------------------------


@dataclass
class DraftFacts:
    """What doctor read about the EAGLE-3 draft checkpoint.

    Attributes:
        config: path of the ``config.json`` read.
        architectures: its ``architectures`` list.
        kind: ``"speculators"`` (speculators format), ``"eagle_config"`` (SpecForge / SGLang /
            ModelOpt export) or ``"plain"`` (EAGLE repository, lmsys, AngelSlim, TorchSpec).
        model_type: the model type vLLM loads the config as.
        vllm_architectures: the names vLLM looks up for them with method ``eagle3``.
        aux_layer_ids: the ids vLLM will use, in vLLM's convention (None when they cannot be known);
            with several runners that disagree, the first runner's.
        aux_layer_ids_source: where they come from (``"draft config"``, ``"draft eagle_config"``, ``"default"``).
        declared_aux_layer_ids: ids the draft config declares (top level first), as written; None when none.
        intended_aux_layer_ids: the layers the draft was trained on, in vLLM's convention (None: unknown).
        capture_order: the ids in the order their states reach the draft (layer order, each once).
        unreachable_aux_layer_ids: ids whose states never reach the draft with the pipeline size given.
        vocab_size: the draft's (input) vocabulary size.
        draft_vocab_size: the draft head's vocabulary size (None: the same as ``vocab_size``).
        draft_class: ``module.Class`` of the registered draft class vLLM builds (None: none).
        fc_input_width: the width the draft's ``fc`` takes, in elements per token (None: not stated).
    """

    config: str
    architectures: list[str]
    kind: str = "plain"
    model_type: str | None = None
    vllm_architectures: list[str] = field(default_factory=list)
    aux_layer_ids: list[int] | None = None
    aux_layer_ids_source: str | None = None
    declared_aux_layer_ids: list[int] | None = None
    intended_aux_layer_ids: list[int] | None = None
    capture_order: list[int] | None = None
    unreachable_aux_layer_ids: list[int] = field(default_factory=list)
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    draft_class: str | None = None
    fc_input_width: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class DraftContext:
    """Everything the draft checks read besides the draft itself.

    Attributes:
        target: facts about the target checkpoint.
        tree: the install's sources.
        registry: its model registry.
        install: the install.
        reading: how this release reads drafts (:func:`read_release`).
        final_capture: whether the target's backbone captures id n (None: not known).
        pipeline_parallel_size: the ``--pipeline-parallel-size`` the user will serve with.
        actions: next steps, appended to.
        warnings: warnings that do not fail the verdict, appended to.
    """

    target: TargetFacts
    tree: SourceTree
    registry: Registry
    install: Install
    reading: ReleaseReading
    final_capture: bool | None
    pipeline_parallel_size: int = 1
    actions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def draft_kind(data: dict[str, Any]) -> str:
    """Which exporter's format a draft config has: ``"speculators"``, ``"eagle_config"`` or ``"plain"``.

    speculators (RedHatAI) configs carry ``speculators_model_type`` and nest the layer config in
    ``transformer_layer_config``; SpecForge / SGLang / ModelOpt exports carry an ``eagle_config``
    dict; the EAGLE repository, lmsys, AngelSlim and TorchSpec write a plain Llama config.
    """
    if SPECULATORS_TYPE in data:
        return "speculators"
    if isinstance(data.get(EAGLE_CONFIG), dict):
        return "eagle_config"
    return "plain"


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
    kind = draft_kind(data)
    layer = data.get("transformer_layer_config") if kind == "speculators" else data
    layer = layer if isinstance(layer, dict) else data
    archs = data.get("architectures")
    architectures = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    facts = DraftFacts(str(cfg.path), architectures, kind=kind)
    checks: list[Check] = [_architecture_check(facts, data, ctx), _model_type_check(facts, data, ctx),
                           _vocab_check(facts, cfg, layer, ctx)]

    eagle_config = data.get(EAGLE_CONFIG) if isinstance(data.get(EAGLE_CONFIG), dict) else {}
    if eagle_config.get("use_aux_hidden_state") is False:
        checks.append(Check("aux layer ids", None,
                            "the draft does not use aux hidden states (eagle_config.use_aux_hidden_state is false)"))
        return facts, checks
    checks.append(_aux_ids_check(facts, data, eagle_config, ctx))
    checks.append(_width_check(facts, data, layer, eagle_config, ctx))
    return facts, checks


# -- architecture and model type ---------------------------------------------------------------


def eagle3_draft_architecture(arch: str) -> str:
    """The architecture vLLM looks up for an EAGLE-3 draft that lists ``arch``.

    Fact (vLLM 0.10.2 - 0.33.0, ``transformers_utils/configs/eagle.py`` ``EAGLEConfig`` with
    ``method="eagle3"``): a name that starts or ends with ``Eagle3`` is kept, any other gets the
    prefix ``Eagle3`` (``LlamaForCausalLM`` -> ``Eagle3LlamaForCausalLM``).
    """
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"


def _architecture_check(facts: DraftFacts, data: dict[str, Any], ctx: DraftContext) -> Check:
    if facts.kind == "speculators":
        return Check("draft architecture", None,
                     f"speculators format (speculators_model_type {data.get(SPECULATORS_TYPE)!r}): vLLM's "
                     "converter picks the draft class")
    if not facts.architectures:
        ctx.actions.append("the draft's config.json must list its architecture (\"architectures\": [...])")
        return Check("draft architecture", False, "the draft's config.json lists no architectures", facts.config)
    node = Check("draft architecture " + ", ".join(facts.architectures), False, "")
    registered = []
    for arch in facts.architectures:
        name = eagle3_draft_architecture(arch)
        facts.vllm_architectures.append(name)
        entry = ctx.registry.entry(name)
        if entry is not None:
            registered.append(name)
            node.children.append(Check(f"{arch} -> {name}", True, f"registered: {entry.module}.{entry.class_name}",
                                       f"{ctx.registry.relpath}:{entry.lineno}"))
        else:
            detail = f"vLLM {ctx.install.version} does not register {name}: it cannot build this draft"
            if name in MLA_DRAFT_ARCHITECTURES:
                detail += " (MLA EAGLE-3 drafts are registered from vLLM 0.18.0)"
            node.children.append(Check(f"{arch} -> {name}", False, detail, ctx.registry.relpath))
    node.ok = bool(registered)
    if registered:
        entry = ctx.registry.entry(registered[0])
        if entry is not None:
            facts.draft_class = f"{entry.module}.{entry.class_name}"
        node.detail = f"vLLM builds {registered[0]}"
        for child in node.children:  # one registered name is enough: vLLM uses the first it can build
            if child.ok is False:
                child.ok = None
    else:
        node.detail = "no EAGLE-3 draft class for it in this release"
        mla = any(n in MLA_DRAFT_ARCHITECTURES for n in facts.vllm_architectures)
        ctx.actions.append("use an EAGLE-3 draft this vLLM can build (a Llama-architecture draft -> Eagle3LlamaForCausalLM)"
                           + (", or vLLM >= 0.18.0, which registers MLA (DeepSeek-architecture) drafts" if mla else ""))
    return node


def _transformers_allows(spec: SpecifierSet | None, since: str) -> bool:
    """Whether some transformers release >= ``since`` satisfies ``spec`` (None: no requirement).

    Only upper bounds and exact pins can exclude every release from ``since`` on.
    """
    if spec is None:
        return True
    floor = Version(since)
    for s in spec:
        if "*" in s.version:
            continue
        bound = Version(s.version)
        if (s.operator == "<" and bound <= floor) or (s.operator == "<=" and bound < floor):
            return False
        if s.operator in ("==", "===") and bound < floor:
            return False
    return True


def _transformers_has(spec: SpecifierSet | None, model_type: str) -> bool | None:
    """Whether a transformers release ``spec`` allows registers ``model_type`` (None: not known).

    From :data:`TRANSFORMERS_MODEL_TYPES`: yes when ``spec`` allows the oldest checked release with
    it or a later one; no when every release it allows lies below the bound without it (releases
    after :data:`TRANSFORMERS_CHECKED`, the newest when the table was read, do not count).
    """
    absent_below, present_from = TRANSFORMERS_MODEL_TYPES[model_type]
    if present_from is not None and _transformers_allows(spec, present_from):
        return True
    if absent_below is None or Version(absent_below) > Version(TRANSFORMERS_CHECKED):
        return False
    return None if _transformers_allows(spec, absent_below) else False


def _model_type_check(facts: DraftFacts, data: dict[str, Any], ctx: DraftContext) -> Check:
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
        ctx.actions.append("the draft's config.json needs a model_type (a Llama-architecture EAGLE-3 draft: \"llama\")")
        return Check("draft model type", False, "the draft's config.json has no model_type: vLLM cannot load it", facts.config)
    facts.model_type = mt
    label = f"draft model type {mt}"
    if mt in reading.config_types:
        return Check(label, True, f"in vLLM {ctx.install.version}'s own config registry", reading.config_registry)
    spec_text = f"transformers{reading.transformers}" if reading.transformers is not None else "any transformers"
    if mt not in TRANSFORMERS_MODEL_TYPES:
        return Check(label, None, f"not in vLLM {ctx.install.version}'s config registry; whether {spec_text} knows it "
                                  "is not checked", reading.config_registry)
    known = _transformers_has(reading.transformers, mt)
    absent_below, has = TRANSFORMERS_MODEL_TYPES[mt]
    if known:
        return Check(label, True, f"known to transformers (>= {has}); this release requires {spec_text}")
    if known is None:
        return Check(label, None, f"not in vLLM {ctx.install.version}'s config registry; transformers lacks it before {absent_below} "
                                  f"and has it from {has}: whether {spec_text} has it is not known",
                     reading.config_registry)
    why = (f"not in vLLM {ctx.install.version}'s config registry, and no transformers release up to "
           f"{TRANSFORMERS_CHECKED} registers it" if has is None else
           f"not in vLLM {ctx.install.version}'s config registry, and no transformers release this release allows "
           f"({spec_text}) registers it (none before {absent_below}; {has} does)")
    if isinstance(data.get("auto_map"), dict):
        ctx.warnings.append(f"the draft's model_type {mt!r} loads only through its auto_map remote code: serve with "
                            "--trust-remote-code")
        return Check(label, None, f"{why}; the config's auto_map names remote code (needs --trust-remote-code)",
                     reading.config_registry)
    ctx.actions.append(f"vLLM {ctx.install.version} cannot load a draft config of model_type {mt!r}: set the draft's "
                       "model_type to one it loads (EAGLE-3 drafts with a Llama layer use \"llama\"), or use a vLLM "
                       "whose config registry has it")
    return Check(label, False, f"{why}: vLLM fails to load the draft config", reading.config_registry)


# -- vocabulary --------------------------------------------------------------------------------


def _weight_names(folder: Path) -> set[str] | None:
    """Tensor names of the draft's weights in ``folder`` (None: no weights patchkit can read there).

    Reads ``model.safetensors.index.json``'s ``weight_map``, or each ``*.safetensors`` header (an
    8-byte little-endian length, then a JSON object), or the pickle of each ``*.bin`` in PyTorch's
    zip format (its string constants, listed with :mod:`pickletools`, which executes nothing).
    Never loads a tensor.
    """
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
            if isinstance(weight_map, dict):
                return set(weight_map)
        names: set[str] = set()
        safetensors = sorted(folder.glob("*.safetensors"))
        for file in safetensors:
            with file.open("rb") as fh:
                head = fh.read(8)
                if len(head) != 8:
                    return None
                (size,) = struct.unpack("<Q", head)
                if size > 100_000_000:
                    return None
                header = json.loads(fh.read(size).decode("utf-8"))
            if not isinstance(header, dict):
                return None
            names |= {k for k in header if k != "__metadata__"}
        if safetensors:
            return names
        pickles = sorted(folder.glob("*.bin"))
        for file in pickles:
            with zipfile.ZipFile(file) as zf:
                member = next((m for m in zf.namelist() if m.endswith("/data.pkl") or m == "data.pkl"), None)
                if member is None:
                    return None
                data = zf.read(member)
            names |= {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}
        return names if pickles else None
    except (OSError, ValueError, UnicodeDecodeError, zipfile.BadZipFile, RecursionError):
        return None


PADDING_ROWS = 1024
"""Largest gap between the draft's and the target's ``vocab_size`` that, with nothing else to go on,
is left undecided (a padded embedding or added tokens) instead of failing as another tokenizer."""


def _judge_vocabulary(node: Check, vocab: int, target_vocab: int, draft_dir: Path, target_dir: Path,
                      ctx: DraftContext) -> None:
    """Which tokenizer the draft was trained for, from the sizes, ``d2t``/``t2d`` and the tokenizers.

    Evidence (:mod:`patchkit.vllm.vocabulary`): the two folders' tokenizers (same vocabulary digest or
    special tokens, or not); the draft's ``t2d`` length (the target vocabulary it was trained against)
    and the highest target id its ``d2t`` proposes. Decision: any evidence of another tokenizer
    fails; an embedding smaller than the ids the target's tokenizer produces fails (those ids have no
    row); a larger one with evidence of the same tokenizer is padding: a note, not a failure (vLLM's
    draft embeds target ids, which never reach the extra rows); sizes that differ with no evidence
    either way are left undecided within :data:`PADDING_ROWS`, and fail beyond it.

    Fact (vLLM 0.10.2 - 0.33.0 ``model_executor/models/llama_eagle3.py``): the draft embeds target
    token ids with ``vocab_size`` rows; its head's ids go through ``d2t`` into a vector of
    ``vocab_size`` logits.
    """
    from patchkit.vllm.vocabulary import read_maps, read_tokenizer

    same: list[str] = []
    other: list[str] = []
    draft_tok, target_tok = read_tokenizer(draft_dir), read_tokenizer(target_dir)
    if draft_tok is not None and target_tok is not None:
        if draft_tok.digest is not None and target_tok.digest is not None:
            if draft_tok.digest == target_tok.digest:
                same.append(f"the draft's and the target's tokenizer.json hold the same vocabulary ({target_tok.size} ids)")
            else:
                other.append(f"the draft's tokenizer.json ({draft_tok.size} ids) is not the target's ({target_tok.size} ids)")
        elif draft_tok.specials and draft_tok.specials == target_tok.specials:
            same.append(f"the same {len(target_tok.specials)} special tokens with the same ids in both tokenizers")
        elif draft_tok.specials and target_tok.specials:
            differ = sorted(set(draft_tok.specials.items()) ^ set(target_tok.specials.items()))[:3]
            other.append("the tokenizers' special tokens differ (" + ", ".join(f"{t!r}: {i}" for t, i in differ) + ")")
    produced = target_tok.size if target_tok is not None and target_tok.size is not None else target_vocab
    maps = read_maps(draft_dir)
    beyond = None
    if maps is not None and maps.t2d_size is not None:
        # SpecForge sizes t2d from the draft's own vocab_size: that length says nothing either way
        if maps.t2d_size in (target_vocab, produced):
            same.append(f"the draft's t2d has {maps.t2d_size} entries: it was trained against a vocabulary of the target's size")
        elif maps.t2d_size != vocab:
            other.append(f"the draft's t2d has {maps.t2d_size} entries: it was trained against a {maps.t2d_size}-id "
                         f"vocabulary, the target has {target_vocab}")
    if maps is not None and maps.highest_target_id is not None:
        if maps.highest_target_id < target_vocab:
            same.append(f"its d2t maps every draft id to a target id below {target_vocab} (the highest is {maps.highest_target_id})")
        else:
            beyond = maps.highest_target_id
    if other:
        node.ok = False
        node.detail = (f"the draft (vocab_size {vocab}) was trained for another tokenizer than the target's (vocab_size "
                       f"{target_vocab}): " + "; ".join(other) + ": it would predict another tokenizer's ids (acceptance near zero)")
        ctx.actions.append("use a draft trained for this target's tokenizer: " + "; ".join(other))
    elif beyond is not None:
        node.ok = False
        node.detail = (f"the draft's d2t maps a draft id to target id {beyond}, beyond the target's vocab_size {target_vocab}: "
                       "the draft proposes a token the target cannot score")
        ctx.actions.append(f"use a draft whose d2t maps into this target's {target_vocab} ids")
    elif vocab == target_vocab:
        node.detail = f"vocab_size {vocab}, the same as the target's" + (f" ({'; '.join(same)})" if same else "")
    elif vocab < produced:
        node.ok = False
        node.detail = (f"the draft's vocab_size is {vocab}, the target's {target_vocab}: the target's tokenizer produces ids up to "
                       f"{produced - 1}, and ids {vocab}..{produced - 1} have no row in the draft's embedding (trained for "
                       "another tokenizer?)")
        ctx.actions.append(f"use a draft whose vocabulary covers this target's ({produced} ids); this one has {vocab} rows")
    elif same:
        node.ok = True
        node.detail = f"vocab_size {vocab}, the target's {target_vocab}: the same tokenizer (" + "; ".join(same) + ")"
        node.children.append(Check(f"padded embedding (+{vocab - target_vocab} rows)", None,
                                   f"the draft's embedding has {vocab - target_vocab} more rows than the target's vocabulary "
                                   "(len(tokenizer) counts added tokens, or the export padded it); target ids never reach them"))
    elif vocab - target_vocab <= PADDING_ROWS:
        node.ok = None
        node.detail = (f"the draft's vocab_size is {vocab}, the target's {target_vocab} (+{vocab - target_vocab}): likely a padded "
                       "embedding or added tokens, but nothing in the folders says which tokenizer the draft was trained "
                       "for (no tokenizer files in both, no d2t/t2d in its weights): not decided")
        ctx.warnings.append(f"the draft's vocab_size {vocab} is the target's {target_vocab} + {vocab - target_vocab}: put the draft's "
                            f"tokenizer.json next to its config.json (and the target's next to its own), or its weights with "
                            f"d2t/t2d, and run doctor again to tell a padded embedding from another tokenizer")
    else:
        node.ok = False
        node.detail = (f"the draft's vocab_size is {vocab}, the target's {target_vocab}: {vocab - target_vocab} rows apart, more than "
                       f"padding ({PADDING_ROWS}), and no tokenizer files or d2t/t2d in the folders show the same tokenizer: "
                       "likely trained for another tokenizer (acceptance near zero)")
        ctx.actions.append(f"use a draft trained for this target's tokenizer (vocab_size {target_vocab}); this one has {vocab}")


def _vocab_check(facts: DraftFacts, cfg: CheckpointConfig, layer: dict[str, Any], ctx: DraftContext) -> Check:
    """The draft's vocabulary against the target's, and its draft-vocabulary map.

    Fact (vLLM 0.10.2 - 0.33.0 ``model_executor/models/llama_eagle3.py``): the draft embeds target
    token ids with ``vocab_size`` rows; its head predicts ``draft_vocab_size`` ids (default
    ``vocab_size``) and maps them through ``d2t`` when the weights hold it, else id ``i`` stays ``i``.
    """
    data = cfg.data
    vocab = as_int(layer.get("vocab_size")) if as_int(layer.get("vocab_size")) is not None else as_int(data.get("vocab_size"))
    draft_vocab = as_int(data.get("draft_vocab_size"))
    if draft_vocab is None:
        draft_vocab = as_int(layer.get("draft_vocab_size"))
    facts.vocab_size, facts.draft_vocab_size = vocab, draft_vocab
    target_vocab = ctx.target.vocab_size
    label = "draft vocabulary"
    node = Check(label, True, "")
    if vocab is None:
        node.ok, node.detail = None, "the draft's config.json gives no vocab_size: not checked"
    elif target_vocab is None:
        node.ok, node.detail = None, f"draft vocab_size {vocab}; the target's text config gives no vocab_size: not compared"
    else:
        _judge_vocabulary(node, vocab, target_vocab, cfg.path.parent, Path(ctx.target.config).parent, ctx)
    if draft_vocab is not None and vocab is not None and draft_vocab != vocab:
        if draft_vocab > vocab:
            node.children.append(Check(f"draft_vocab_size {draft_vocab}", False,
                                       f"larger than vocab_size {vocab}: the map to target ids cannot exist"))
            ctx.actions.append("fix the draft's draft_vocab_size: it cannot exceed vocab_size")
        else:
            names = _weight_names(cfg.path.parent)
            if names is None:
                node.children.append(Check(f"draft_vocab_size {draft_vocab}", None,
                                           f"the head predicts {draft_vocab} of {vocab} ids through the {DRAFT_TO_TARGET} map "
                                           "in the weights; no weights patchkit can read next to config.json: not checked"))
            elif any(n.split(".")[-1] == DRAFT_TO_TARGET for n in names):
                node.children.append(Check(f"draft_vocab_size {draft_vocab}", True,
                                           f"the weights hold the {DRAFT_TO_TARGET} map to the {vocab} target ids"))
            else:
                node.children.append(Check(f"draft_vocab_size {draft_vocab}", False,
                                           f"the weights hold no {DRAFT_TO_TARGET} map: vLLM keeps draft id i as target id i "
                                           "(wrong tokens, acceptance near zero)"))
                ctx.actions.append(f"the draft's weights need its {DRAFT_TO_TARGET} tensor (draft_vocab_size {draft_vocab} "
                                   f"< vocab_size {vocab}): download the complete draft checkpoint")
    if any(c.ok is False for c in node.children):
        node.ok = False
    return node


# -- aux layer ids -----------------------------------------------------------------------------


def _ids_text(ids: list[int]) -> str:
    return str(tuple(ids)) if len(ids) != 1 else f"({ids[0]})"


def last_stage_start(n: int, pp: int) -> int:
    """First layer the last of ``pp`` pipeline stages owns, for a target of ``n`` layers.

    Fact (vLLM 0.10.2 - 0.33.0 ``distributed/utils.py`` ``get_pp_indices``, without
    ``VLLM_PP_LAYER_PARTITION``): each stage gets ``n // pp`` layers; the remainder goes one each to
    the stages before the last, from the second-to-last backwards.
    """
    parts = [n // pp] * pp
    for i in range(2, n % pp + 2):
        parts[-i] += 1
    return sum(parts[:-1])


def _backbone_transport(ctx: DraftContext) -> tuple[bool, str]:
    """Whether the target's backbone carries aux states between pipeline stages, and what was found."""
    if not ctx.reading.pp_transport_flag:
        return False, f"this release has no pipeline-parallel transport of aux states ({PP_TRANSPORT_FLAG} is not in interfaces.py)"
    cls = ctx.target.cls
    if cls is None:
        return False, "the target is not a native model"
    backbone: ClassRef = cls
    try:
        links = composition.chain(ctx.tree, ctx.registry, cls)
    except composition.CompositionError:
        links = []
    if links:
        backbone = links[-1][1]
    else:  # built through a helper (``self.model = self._init_model(...)``): the one backbone its module defines
        found = [ref for node in ctx.tree.module_tree(cls.module).body if isinstance(node, ast.ClassDef)
                 for ref in [ctx.tree.find_class(cls.module, node.name)]
                 if ref is not None and composition.kind_of(ctx.tree, ref) == "backbone"]
        if len(found) == 1:
            backbone = found[0]
    for klass in ctx.tree.mro(backbone):
        for stmt in ctx.tree.class_node(klass).body:
            if (isinstance(stmt, (ast.Assign, ast.AnnAssign)) and _assigns(stmt, PP_TRANSPORT_FLAG)
                    and isinstance(stmt.value, ast.Constant)):
                return bool(stmt.value.value), f"{klass.name}.{PP_TRANSPORT_FLAG} = {stmt.value.value!r} ({klass.relpath}:{stmt.lineno})"
    return False, f"{backbone.name} does not set {PP_TRANSPORT_FLAG}"


class _Pick(NamedTuple):
    """The ids one runner picks: ``source`` is ``"draft config"``, ``"draft eagle_config"`` or ``"default"``."""

    runner: str
    location: str | None
    ids: list[int] | None
    source: str
    how: str


def _aux_ids_check(facts: DraftFacts, data: dict[str, Any], eagle_config: dict[str, Any], ctx: DraftContext) -> Check:
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
    facts.declared_aux_layer_ids = top or nested
    # the top-level ids of a speculators config reach vLLM only through a converter that forwards them
    top_seen = top if (facts.kind != "speculators" or reading.speculators_ids) else None

    # what the draft was trained on, in vLLM's convention
    if top is not None:
        intended = top
        intended_why = f"the draft's top-level {IDS_FIELD} (vLLM's convention: id k = the stream entering layer k)"
    elif nested is not None:
        intended = [k + 1 for k in nested]
        intended_why = (f"{EAGLE_CONFIG}'s {nested} count the output of layer k (SpecForge / SGLang / ModelOpt), "
                        f"the stream entering layer k + 1: {_ids_text(intended)} in vLLM's convention")
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

    node = Check(f"aux layer ids {_ids_text(ids)}", True, "")
    same_everywhere = all(sorted(p.ids or []) == sorted(ids) for p in picks)
    if source == "default":
        node.detail = (f"the target's default (2, n // 2, n - 3) with n = {n}" if same_everywhere
                       else "the runners pick different ids (below)")
    elif source == "draft config":
        node.detail = f"explicit: {IDS_FIELD} in the draft's config.json"
    else:
        node.detail = f"explicit: {EAGLE_CONFIG}.{IDS_FIELD} in the draft's config.json"

    # does every runner capture the layers the draft was trained on?
    wrong = []
    for pick in picks:
        right = intended is not None and pick.ids is not None and sorted(pick.ids) == sorted(intended)
        if len(picks) > 1 or not right or (facts.declared_aux_layer_ids is not None and pick.source != "draft config"):
            detail = (f"{pick.how}: {_ids_text(pick.ids or [])}; the draft was trained on {_ids_text(intended or [])} "
                      f"({intended_why})")
            node.children.append(Check(f"{pick.runner} captures the trained layers", right, detail, pick.location))
        if not right:
            wrong.append(pick.runner)
    if wrong and intended is not None:
        if top is not None and top_seen is not None:
            ctx.actions.append(f"vLLM {ctx.install.version} does not use the draft's {IDS_FIELD} {top}: use a vLLM whose "
                               f"runner reads them (0.14.1 and later)")
        elif top is not None:
            ctx.actions.append(f"vLLM {ctx.install.version}'s speculators converter drops the draft's ids {top}: use a vLLM "
                               "whose converter forwards them (0.14.1 and later)")
        elif reading.readers and any(r.top_level for r in reading.readers):
            ctx.actions.append(f"add \"{IDS_FIELD}\": {intended} at the top level of the draft's config.json "
                               f"({EAGLE_CONFIG}'s {nested} + 1: vLLM counts the stream entering layer k; do not copy "
                               f"{EAGLE_CONFIG}'s ids unchanged)")
        else:
            ctx.actions.append(f"vLLM {ctx.install.version} captures {_ids_text(default or [])}, the draft was trained on "
                               f"{_ids_text(intended)}: use a vLLM whose runner reads {IDS_FIELD} (0.14.1 and later) "
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
    ids = _ids_text(fallback.ids)
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
                                   f"layer order {_ids_text(order)}, not the order given {_ids_text(ids)}: the draft's fc "
                                   "sees the states concatenated in layer order"))


def _pipeline(node: Check, facts: DraftFacts, ids: list[int], n: int | None, ctx: DraftContext) -> None:
    pp = ctx.pipeline_parallel_size
    if pp <= 1 or n is None:
        return
    start = last_stage_start(n, pp)
    transport, why = _backbone_transport(ctx)
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


# -- input width -------------------------------------------------------------------------------


def _fc_states(facts: DraftFacts, data: dict[str, Any], eagle_config: dict[str, Any],
               tree: SourceTree) -> tuple[int, str]:
    """How many aux states the draft's fc takes, and why (see :data:`FC_STATES`)."""
    reads_count: bool | None = None
    if facts.draft_class is not None:
        module = facts.draft_class.rpartition(".")[0]
        if tree.relpath_of_module(module) is not None:
            reads_count = any(isinstance(c, ast.Constant) and c.value == FC_COUNT_FIELD
                              for c in ast.walk(tree.module_tree(module)))
    declared = as_int(data.get(FC_COUNT_FIELD))
    if reads_count is False:
        return FC_STATES, f"{FC_STATES} states (fixed in {facts.draft_class.rpartition('.')[2] if facts.draft_class else 'the draft class'})"
    if declared is not None:
        return declared, f"{FC_COUNT_FIELD} {declared}"
    nested = as_int_list(eagle_config.get(IDS_FIELD))
    if reads_count and nested:
        return len(nested), f"{len(nested)} states (one per eagle_config id)"
    return FC_STATES, f"{FC_STATES} states"


def _width_check(facts: DraftFacts, data: dict[str, Any], layer: dict[str, Any], eagle_config: dict[str, Any],
                 ctx: DraftContext) -> Check:
    label = "draft input width"
    target_hidden = as_int(data.get("target_hidden_size"))
    if target_hidden is not None:
        width, width_name = target_hidden, "target_hidden_size"
    elif as_int(layer.get("hidden_size")) is not None:
        width, width_name = int(layer["hidden_size"]), "hidden_size"
    else:
        return Check(label, None, "the draft's config.json gives neither target_hidden_size nor hidden_size: not checked")
    k, k_text = _fc_states(facts, data, eagle_config, ctx.tree)
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
    return Check(label, False, f"the target gives {count} ids x hidden_size {h} = {given}, but {takes}: " + "; ".join(reasons))


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


__all__ = [
    "DefaultIds", "DraftContext", "DraftFacts", "IdReader", "ReleaseReading", "draft_checks", "draft_kind",
    "default_ids", "eagle3_draft_architecture", "final_layer_capture", "last_stage_start", "read_release", "vllm_default_ids",
]
