"""Add model types to the EAGLE-3 start-up allow-list of the speculative config.

Fact (:mod:`patchkit.vllm.release.contract`, the one home of the allow-list's names, modules, releases and
the rule that finds it): ``SpeculativeConfig`` refuses an EAGLE-3 target unless one entry of a list
literal is a substring of ``target_model_config.hf_text_config.model_type``
(:data:`~patchkit.vllm.release.contract.ALLOW_LIST_RELEASES`). This module applies the same rule,
:func:`~patchkit.vllm.release.contract.allow_list_entries`, to libcst nodes, so the codemod and the static
reader (:func:`~patchkit.vllm.release.contract.read_allow_list`) agree on what the list is.
DeepSeek-V3 text configs report ``deepseek_v3``, Kimi-K2 reports ``kimi_k2``.
"""

from __future__ import annotations

import libcst as cst

from patchkit.codemods import tree
from patchkit.codemods.base import Codemod, Presence, Refusal, Site, exactly_one, insert_into_sequence
from patchkit.codemods.kinds import CodemodKind
from patchkit.vllm.release.contract import ALLOW_LIST_NAMES, allow_list_entries

__all__ = ["ExtendAllowList", "find_allow_lists", "list_entries"]


def _element_value(element: cst.BaseElement) -> str | None:
    """The string a list element holds when it is a plain string literal, else None."""
    if isinstance(element, cst.Element) and isinstance(element.value, cst.SimpleString):
        value = element.value.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _is_allow_list(node: cst.CSTNode, names: tuple[str, ...]) -> bool:
    """:func:`patchkit.vllm.release.contract.allow_list_entries` on a libcst statement, narrowed to ``names``."""
    if not (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
        and isinstance(node.value, cst.List)
    ):
        return False
    name = node.targets[0].target.value
    return allow_list_entries(name, [_element_value(e) for e in node.value.elements], names) is not None


def find_allow_lists(module: cst.Module, names: tuple[str, ...] = ALLOW_LIST_NAMES) -> list[cst.Assign]:
    """Every allow-list assignment to one of ``names`` anywhere in ``module``, in source order
    (the rule: :func:`patchkit.vllm.release.contract.allow_list_entries`)."""
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

    kind = CodemodKind.ALLOWLIST

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
