"""Detect which EAGLE-3 contract an installed vLLM has, from the shape of its files.

Facts (read from release wheels, ``vllm/model_executor/models/interfaces.py``):

- A0 (<= 0.10.1): no ``SupportsEagle3`` Protocol.
- A1 (0.10.2 - 0.17.1): ``SupportsEagle3`` with stub methods ``set_aux_hidden_state_layers`` and
  ``get_eagle3_aux_hidden_state_layers``; A1a (0.10.2 - 0.11.0) derives only from ``Protocol``,
  A1b (0.11.2 - 0.17.1) also from ``SupportsEagleBase``.
- A2 (0.18.0 - 0.32.x): the getter is ``get_eagle3_default_aux_hidden_state_layers`` with default
  method bodies that find the backbone through ``get_language_model()`` / ``language_model`` /
  ``self``, then ``.model``, which must be an ``EagleModelMixin`` (``_maybe_add_hidden_state``);
  DeepSeek-V2/V3 and Kimi-K2.5 support EAGLE-3 natively.
- A3 (0.33.0): A2 plus the mixin's pipeline-parallel transport of aux states
  (``pack_local_aux_hidden_states`` / ``collect_remote_aux_hidden_states``).

This module is the one home of patchkit's EAGLE-3 facts: the era, the names of the Protocol, its
methods, the mixin and the backbone attribute, and the speculative config's allow-list. The era is
read from the file; the version is only a cross-check (see :mod:`patchkit.plan.engine`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from patchkit.vllm.source import ClassRef, SourceTree

A1_RELEASES = SpecifierSet(">=0.10.2,<0.18.0", prereleases=True)
"""Releases with the A1 EAGLE-3 contract (stub Protocol methods; inline capture in each backbone)."""
EAGLE3_RELEASES = SpecifierSet(">=0.10.2", prereleases=True)
"""Releases with a ``SupportsEagle3`` Protocol at all (A1 and later)."""

INTERFACES_MODULE = "vllm.model_executor.models.interfaces"
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
"""Names of the speculative config's EAGLE-3 model-type allow-list: 0.10.2 - 0.16.x, then 0.17.x on."""
ALLOW_LIST_MODULES = ("vllm.config.speculative", "vllm.config")
"""Modules holding it: ``config/speculative.py`` (0.11 on), then ``config/__init__.py`` (0.10.x)."""

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
"""A3 only: a backbone class attribute; vLLM refuses EAGLE-3 with pipeline parallelism without it."""


@dataclass(frozen=True)
class Contract:
    """The EAGLE-3 contract of one install.

    Attributes:
        era: ``"A0"``, ``"A1a"``, ``"A1b"``, ``"A2"`` or ``"A3"``.
        protocol: the ``SupportsEagle3`` class, or None in A0.
        getter: the name of the aux-layer getter the runner calls (None in A0).
        mixin: the ``EagleModelMixin`` class (A2 and A3), else None.
    """

    era: str
    protocol: ClassRef | None
    getter: str | None
    mixin: ClassRef | None = None

    @property
    def pp_transport(self) -> bool:
        """True on A3, where the mixin carries aux states between pipeline stages."""
        return self.era == "A3"

    @property
    def patchable(self) -> bool:
        """True for the A1 eras, the only ones patchkit's EAGLE-3 patches are for."""
        return self.era.startswith("A1")

    @property
    def native(self) -> bool:
        """True from A2 on, where upstream vLLM supports EAGLE-3 for DeepSeek and Kimi-K2.5."""
        return self.era in ("A2", "A3")

    @property
    def description(self) -> str:
        """One line for users."""
        return {
            "A0": "no SupportsEagle3 Protocol (vLLM <= 0.10.1)",
            "A1a": "SupportsEagle3 Protocol with stub methods (vLLM 0.10.2 - 0.11.x)",
            "A1b": "SupportsEagle3(SupportsEagleBase) with stub methods (vLLM 0.11.2 - 0.17.1)",
            "A2": "SupportsEagle3 with default methods and EagleModelMixin (vLLM 0.18.0 - 0.32.x)",
            "A3": "SupportsEagle3, EagleModelMixin and pipeline-parallel aux transport (vLLM >= 0.33.0)",
        }[self.era]


def detect(tree: SourceTree) -> Contract:
    """Read ``interfaces.py`` of ``tree`` and return its EAGLE-3 contract.

    Raises:
        SourceError: ``interfaces.py`` is missing or does not parse.
    """
    tree.module_tree(INTERFACES_MODULE)  # raises SourceError when missing
    protocol = tree.find_class(INTERFACES_MODULE, PROTOCOL)
    if protocol is None:
        return Contract("A0", None, None)
    node = tree.class_node(protocol)
    methods = {s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if GETTER_A2 in methods:
        mixin = tree.find_class(INTERFACES_MODULE, MIXIN)
        transport = mixin is not None and tree.method(mixin, PP_PACK) is not None
        return Contract("A3" if transport else "A2", protocol, GETTER_A2, mixin)
    base_names = {ast.unparse(b) for b in node.bases}
    era = "A1b" if "SupportsEagleBase" in base_names else "A1a"
    return Contract(era, protocol, GETTER_A1)


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
