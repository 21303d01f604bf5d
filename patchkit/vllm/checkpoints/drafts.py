"""How a given vLLM release reads an EAGLE-3 draft: read-only facts from the release's own files.

What a release reads is detected once, by shape, from its own files (:func:`read_release`, a
:class:`ReleaseReading`): never from the version number. This module also holds the facts about
draft configs every release shares (their fields and formats, :func:`draft_kind`), the draft
architectures vLLM looks up (:func:`eagle3_draft_architecture`), the ids a target captures when
the draft records none (:mod:`patchkit.vllm.stream.aux_defaults`), the pipeline stages (:func:`last_stage_start`,
:func:`backbone_transport`), and which transformers releases know a draft's model type
(:data:`TRANSFORMERS_MODEL_TYPES`, :func:`transformers_has`). The checks that use them are
:mod:`patchkit.checks.drafts`.

Id conventions (the one fact every draft check leans on):

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
acceptance collapses without an error (vllm#43671); the advice in doctor always gives the shifted ids.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.jsonable import as_written, json_kind
from patchkit.vllm.checkpoints.config import as_int_list
from patchkit.vllm.release.contract import INTERFACES_MODULE, PP_FLAG
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.model_types import config_registry
from patchkit.vllm.runner.generations import V1, V2
from patchkit.vllm.release.source import SourceTree

IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
"""Draft config field with explicit aux layer ids (top level, or inside ``eagle_config``)."""
EAGLE_CONFIG = "eagle_config"
"""Nested draft config dict SpecForge / SGLang / ModelOpt exports write (``use_aux_hidden_state``, the ids)."""
SPECULATORS_TYPE = "speculators_model_type"
"""Top-level field that marks a speculators-format (RedHatAI) draft config."""
RUNNER_MODULES = (
    (V1.aux_setter[:-3].replace("/", "."), "model runner"),
    (V2.aux_setter[:-3].replace("/", "."), "model runner V2"),
)
"""Modules whose ``*eagle3_aux_layers_from_config`` function picks the ids the target captures.

Fact: ``v1/worker/gpu_model_runner.py`` has ``_get_eagle3_aux_layers_from_config`` from 0.14.1
(0.10.2 has none: the target's getter alone decides); 0.33.0 also has the V2 runner's
``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`` ``get_eagle3_aux_layers_from_config`` (V2 is
vLLM 0.33.0's default where Triton is available; V1 is its fallback), and the two read different
fields (see :class:`IdReader`).
"""
READER_SUFFIX = "eagle3_aux_layers_from_config"
LAYER_IDS = "layer_ids"
"""Key of ``eagle_config`` that vLLM 0.34.0's V2 runner reads verbatim when the top level names no ids
(``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`` ``get_eagle3_aux_layers_from_config``)."""
TARGET_LAYER_IDS = "target_layer_ids"
"""Top-level draft config field vLLM 0.34.0's V2 runner reads next, adding 1 to each id (DSpark's
"output of layer k" convention; same function). Also the key of ``dflash_config`` holding DFlash's ids."""
DFLASH_CONFIG = "dflash_config"
"""Nested draft config dict of DFlash drafts (z-lab, SpecForge): ``target_layer_ids`` (output of layer k),
``mask_token_id``. vLLM's readers add 1 from 0.22.0 (V1) and 0.25.0 (V2); 0.20.2's V1 reads it verbatim
(``gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config``)."""
DSPARK_IDS = "dspark_target_layer_ids"
"""Top-level draft config field of DSpark drafts (output of layer k); vLLM 0.25.0 - 0.34.0's V2 reader adds 1,
and from 0.32.0 keeps them as they are for the model types it compares ``model_type`` with (``deepseek_v41``)."""
SPECULATORS_ALGOS_MODULE = "vllm.transformers_utils.configs.speculators.algos"
"""Module converting a speculators config; it forwards the top-level ids from vLLM 0.14.1 (not 0.10.2)."""
SPECULATORS_MODEL_TYPE = "speculators"
"""The model type vLLM gives a config with ``speculators_config`` and no ``model_type``
(``transformers_utils/config.py``, 0.10.2 - 0.33.0)."""
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
        layer_ids: it reads ``eagle_config["layer_ids"]`` verbatim (:data:`LAYER_IDS`; 0.34.0's V2 runner).
        target_layer_ids: it reads a top-level :data:`TARGET_LAYER_IDS`, adding 1 (0.34.0's V2 runner).
        dflash: it reads ``dflash_config["target_layer_ids"]`` (:data:`DFLASH_CONFIG`).
        dflash_offset: what it adds to them (0.20.2's V1: 0; 0.22.0 on: 1).
        dspark: it reads a top-level :data:`DSPARK_IDS`, adding 1.
        dspark_kept: the draft model types for which it keeps the DSpark ids as they are (0.32.0 on:
            ``deepseek_v41``), read from its ``model_type == "..."`` tests.
        dflash_layer_ids: it reads ``dflash_config["layer_ids"]`` verbatim (0.32.0 - 0.34.0's V2).
        order: the fields it reads, first read first (keys of :data:`FIELD_KEYS`), by where the reader
            first names each field.
    """

    runner: str
    location: str
    top_level: bool
    nested: bool
    nested_offset: int
    layer_ids: bool = False
    target_layer_ids: bool = False
    dflash: bool = False
    dflash_offset: int = 0
    dspark: bool = False
    dspark_kept: tuple[str, ...] = ()
    dflash_layer_ids: bool = False
    order: tuple[str, ...] = ("top", "nested", "target", "layer_ids")


FIELD_KEYS = ("top", "nested", "dflash", "dspark", "target", "layer_ids")
"""The draft config fields a reader may read: the top-level :data:`IDS_FIELD`, ``eagle_config``'s, DFlash's
``dflash_config.target_layer_ids``, :data:`DSPARK_IDS`, the top-level :data:`TARGET_LAYER_IDS`, and the
``layer_ids`` of ``eagle_config`` / ``dflash_config``."""


@dataclass(frozen=True)
class ReleaseReading:
    """How one vLLM release reads a draft, detected from its files (see :func:`read_release`).

    Attributes:
        readers: the runner functions that read explicit ids (empty: the target's defaults decide).
        speculators_ids: the speculators converter forwards the top-level ids (``speculators/algos.py``).
        config_types: model types in vLLM's own config registry.
        config_registry: ``file:line`` of that registry (None: not found).
        transformers: the transformers requirement of the release's METADATA (``Requires-Dist``), or None.
        pp_transport_flag: ``interfaces.py`` defines :data:`patchkit.vllm.release.contract.PP_FLAG`.
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
    - The config registry is :func:`patchkit.vllm.registry.model_types.config_registry` (the assignment to
      ``_CONFIG_REGISTRY`` in ``transformers_utils/config.py``): its model types.

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
        isinstance(c, ast.Constant) and c.value == IDS_FIELD
        for c in ast.walk(tree.module_tree(SPECULATORS_ALGOS_MODULE))
    )
    entries, where = config_registry(tree)
    types = frozenset(model_type for model_type, _ in entries)
    flag = tree.relpath_of_module(INTERFACES_MODULE) is not None and any(
        isinstance(n, (ast.AnnAssign, ast.Assign)) and assigns(n, PP_FLAG)
        for n in ast.walk(tree.module_tree(INTERFACES_MODULE))
    )
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
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "get"
                and call.args
                and isinstance(call.args[0], ast.Constant)
                and call.args[0].value == IDS_FIELD
            ):
                in_get.add(id(call.args[0]))
                if EAGLE_CONFIG in names:
                    nested = True
                    if any(
                        isinstance(b, ast.BinOp)
                        and isinstance(b.op, ast.Add)
                        and isinstance(b.right, ast.Constant)
                        and b.right.value == 1
                        for b in ast.walk(stmt)
                    ):
                        offset = 1
    top = any(isinstance(c, ast.Constant) and c.value == IDS_FIELD and id(c) not in in_get for c in ast.walk(fn))
    gets = {id(call.args[0]) for call in _constant_gets(fn)}
    layer_ids = EAGLE_CONFIG in names and any(
        isinstance(c, ast.Constant) and c.value == LAYER_IDS and id(c) in gets for c in ast.walk(fn)
    )
    target_ids = any(
        isinstance(c, ast.Constant) and c.value == TARGET_LAYER_IDS and id(c) not in gets for c in ast.walk(fn)
    )
    dflash, dflash_offset, dflash_line = _dflash_read(fn)
    dspark_lines = [c.lineno for c in ast.walk(fn) if isinstance(c, ast.Constant) and c.value == DSPARK_IDS]
    kept = tuple(
        c.comparators[0].value
        for c in ast.walk(fn)
        if isinstance(c, ast.Compare)
        and len(c.ops) == 1
        and isinstance(c.ops[0], ast.Eq)
        and isinstance(c.left, ast.Call)
        and any(isinstance(a, ast.Constant) and a.value == "model_type" for a in c.left.args)
        and isinstance(c.comparators[0], ast.Constant)
        and isinstance(c.comparators[0].value, str)
    )
    dflash_layer_ids = DFLASH_CONFIG in names and any(
        isinstance(c, ast.Constant) and c.value == LAYER_IDS and id(c) in gets for c in ast.walk(fn)
    )
    lines = {
        "top": _first_line(fn, IDS_FIELD, lambda c: id(c) not in in_get) if top else None,
        "nested": _first_line(fn, IDS_FIELD, lambda c: id(c) in in_get) if nested else None,
        "dflash": dflash_line if dflash else None,
        "dspark": min(dspark_lines) if dspark_lines else None,
        "target": _first_line(fn, TARGET_LAYER_IDS, lambda c: id(c) not in gets) if target_ids else None,
        "layer_ids": _first_line(fn, LAYER_IDS, lambda c: id(c) in gets) if layer_ids or dflash_layer_ids else None,
    }
    order = tuple(k for k, _ in sorted(((k, v) for k, v in lines.items() if v is not None), key=lambda kv: kv[1]))
    found = (top, nested, offset, layer_ids, target_ids, dflash, dflash_offset, bool(dspark_lines), kept)
    return IdReader(runner, location, *found, dflash_layer_ids, order)


def _first_line(fn: ast.AST, value: str, keep) -> int | None:
    """The first line of ``fn`` holding the string constant ``value`` that ``keep`` accepts."""
    return min(
        (c.lineno for c in ast.walk(fn) if isinstance(c, ast.Constant) and c.value == value and keep(c)), default=None
    )


def _dflash_read(fn: ast.AST) -> tuple[bool, int, int | None]:
    """Whether ``fn`` reads ``dflash_config``'s :data:`TARGET_LAYER_IDS` (a ``.get("target_layer_ids")`` in a
    function naming :data:`DFLASH_CONFIG`), what the statement holding it adds (``+ 1``), and its line."""
    if not any(isinstance(c, ast.Constant) and c.value == DFLASH_CONFIG for c in ast.walk(fn)):
        return False, 0, None
    for stmt in ast.walk(fn):
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Return)):
            continue
        gets = [call for call in _constant_gets(stmt) if call.args[0].value == TARGET_LAYER_IDS]
        if gets:
            plus = any(
                isinstance(b, ast.BinOp)
                and isinstance(b.op, ast.Add)
                and isinstance(b.right, ast.Constant)
                and b.right.value == 1
                for b in ast.walk(stmt)
            )
            return True, int(plus), stmt.lineno
    return False, 0, None


def _constant_gets(node: ast.AST) -> list[ast.Call]:
    """The ``X.get("name", ...)`` calls under ``node`` whose key is a constant (how vLLM's readers take a field)."""
    return [
        call
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "get"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    ]


def assigns(node: ast.AnnAssign | ast.Assign, name: str) -> bool:
    targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


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


# -- draft configs -----------------------------------------------------------------------------


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


def draft_shape_problem(data: dict[str, Any]) -> str | None:
    """What in a draft config no release can read, in words, or None: the one check of the draft's
    ``eagle_config`` and ids, shared by ``doctor`` (a failing check) and ``rehearse`` (a refusal; issue 42,
    findings 2 and 10).

    - ``eagle_config`` set and not an object (a list, a string): vLLM's EAGLE-3 drafts read it as
      ``getattr(config, "eagle_config", None) or {}`` and call ``.get()`` on it (0.34.0
      ``model_executor/models/llama_eagle3.py``, ``qwen3_eagle3.py``, ``deepseek_eagle3.py``), so an
      empty one is ignored and any other raises ``AttributeError`` when the draft is built.
    - :data:`IDS_FIELD` at the top level or in ``eagle_config`` that is not a list of JSON integers
      (``["2", "30"]``, ``true``): the runner indexes layers with them as they are, never as text.
    """
    nested = data.get(EAGLE_CONFIG)
    if nested and not isinstance(nested, dict):
        return (
            f"the draft's {EAGLE_CONFIG} is a JSON {json_kind(nested)}, not an object: vLLM's EAGLE-3 draft "
            f"calls .get() on it and fails while it is built"
        )
    for name, value in (
        (IDS_FIELD, data.get(IDS_FIELD)),
        (f"{EAGLE_CONFIG}.{IDS_FIELD}", (nested or {}).get(IDS_FIELD)),
    ):
        if value is not None and as_int_list(value) is None:
            return f"the draft's {name} is {as_written(value)}, not a list of integers"
    return None


def eagle3_draft_architecture(arch: str) -> str:
    """The architecture vLLM looks up for an EAGLE-3 draft that lists ``arch``.

    Fact (vLLM 0.10.2 - 0.33.0, ``transformers_utils/configs/eagle.py`` ``EAGLEConfig`` with
    ``method="eagle3"``): a name that starts or ends with ``Eagle3`` is kept, any other gets the
    prefix ``Eagle3`` (``LlamaForCausalLM`` -> ``Eagle3LlamaForCausalLM``).
    """
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"


def transformers_allows(spec: SpecifierSet | None, since: str) -> bool:
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


def transformers_has(spec: SpecifierSet | None, model_type: str) -> bool | None:
    """Whether a transformers release ``spec`` allows registers ``model_type`` (None: not known).

    From :data:`TRANSFORMERS_MODEL_TYPES`: yes when ``spec`` allows the oldest checked release with
    it or a later one; no when every release it allows lies below the bound without it (releases
    after :data:`TRANSFORMERS_CHECKED`, the newest when the table was read, do not count).
    """
    absent_below, present_from = TRANSFORMERS_MODEL_TYPES[model_type]
    if present_from is not None and transformers_allows(spec, present_from):
        return True
    if absent_below is None or Version(absent_below) > Version(TRANSFORMERS_CHECKED):
        return False
    return None if transformers_allows(spec, absent_below) else False


def reads_aux_count(tree: SourceTree, draft_class: str | None) -> bool | None:
    """Whether the module of draft class ``draft_class`` (``module.Class``) reads :data:`FC_COUNT_FIELD`.

    True: the draft's ``fc`` takes its count of aux states from the config (vLLM 0.22.0 on, see
    :data:`FC_STATES`); False: it takes :data:`FC_STATES`; None: no class, or its module is not in
    this release.

    Raises:
        SourceError: the module does not parse.
    """
    if draft_class is None:
        return None
    module = draft_class.rpartition(".")[0]
    if tree.relpath_of_module(module) is None:
        return None
    return any(isinstance(c, ast.Constant) and c.value == FC_COUNT_FIELD for c in ast.walk(tree.module_tree(module)))


__all__ = [
    "DFLASH_CONFIG",
    "DSPARK_IDS",
    "EAGLE_CONFIG",
    "FIELD_KEYS",
    "FC_COUNT_FIELD",
    "FC_STATES",
    "IDS_FIELD",
    "MLA_DRAFT_ARCHITECTURES",
    "SPECULATORS_MODEL_TYPE",
    "SPECULATORS_TYPE",
    "TRANSFORMERS_CHECKED",
    "TRANSFORMERS_MODEL_TYPES",
    "IdReader",
    "ReleaseReading",
    "draft_kind",
    "draft_shape_problem",
    "eagle3_draft_architecture",
    "read_release",
    "reads_aux_count",
    "transformers_allows",
    "transformers_has",
]
