"""Add model types to the EAGLE-3 start-up allow-list of the speculative config.

Fact (vLLM 0.10.2 - 0.17.1): ``SpeculativeConfig`` refuses an EAGLE-3 target unless one entry
of a list literal is a substring of ``target_model_config.hf_text_config.model_type``. The list
is assigned to ``eagle3_target_supported`` (``config/__init__.py`` on 0.10.x,
``config/speculative.py`` on 0.11 - 0.16) or ``aux_hidden_states_supported`` (0.17.x).
DeepSeek-V3 text configs report ``deepseek_v3``, Kimi-K2 reports ``kimi_k2``.
"""

from __future__ import annotations

import libcst as cst

from patchkit.codemods import tree
from patchkit.codemods.base import Codemod, Presence, Refusal, Site, exactly_one, insert_into_sequence
from patchkit.vllm.contract import ALLOW_LIST_MODULES, ALLOW_LIST_NAMES, admits

__all__ = ["ALLOW_LIST_MODULES", "ALLOW_LIST_NAMES", "ExtendAllowList", "admits", "find_allow_lists", "list_entries"]


def _is_allow_list(node: cst.CSTNode, names: tuple[str, ...]) -> bool:
    return (isinstance(node, cst.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name) and node.targets[0].target.value in names
            and isinstance(node.value, cst.List)
            and all(isinstance(e, cst.Element) and isinstance(e.value, cst.SimpleString) for e in node.value.elements))


def find_allow_lists(module: cst.Module, names: tuple[str, ...]) -> list[cst.Assign]:
    """Every ``NAME = ["...", ...]`` assignment to one of ``names`` anywhere in ``module``, in source order."""
    return tree.find(tree.statements(module), lambda n: _is_allow_list(n, names))  # type: ignore[return-value]


def list_entries(node: cst.Assign) -> list[str]:
    """The string values of an allow-list assignment's elements."""
    assert isinstance(node.value, cst.List)
    return [e.value.evaluated_value for e in node.value.elements if isinstance(e.value, cst.SimpleString)]  # type: ignore[misc]


class ExtendAllowList(Codemod):
    """Append string entries to the allow-list assigned to one of ``names``.

    Args:
        names: variable names the list may have (one per era).
        entries: the strings to add, in order; entries already there are not repeated.
    """

    kind = "allowlist"

    def __init__(self, names: tuple[str, ...], entries: tuple[str, ...]) -> None:
        self.names = tuple(names)
        self.entries = tuple(entries)
        self.options = {"names": self.names, "entries": self.entries}

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        found = find_allow_lists(module, self.names)
        node = exactly_one(found, f"allow-list assignment to {' or '.join(self.names)}")
        present = list_entries(node)
        missing = [e for e in self.entries if e not in present]
        if not missing:
            return Presence.PRESENT, f"the allow-list has {', '.join(self.entries)}"
        return Presence.ABSENT, f"the allow-list lacks {', '.join(missing)}"

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        node = exactly_one(find_allow_lists(module, self.names), f"allow-list assignment to {' or '.join(self.names)}")
        value = node.value
        assert isinstance(value, cst.List)
        elements = list(value.elements)
        quote = '"'
        if elements and isinstance(elements[-1].value, cst.SimpleString):
            quote = elements[-1].value.quote
        present = list_entries(node)
        for entry in self.entries:
            if entry not in present:
                if quote not in ('"', "'"):
                    raise Refusal(f"the allow-list uses {quote} strings")
                new = cst.Element(value=cst.SimpleString(f"{quote}{entry}{quote}"))
                elements = insert_into_sequence(elements, len(elements), new)
        return tree.replace(module, value, value.with_changes(elements=elements))  # type: ignore[return-value]
