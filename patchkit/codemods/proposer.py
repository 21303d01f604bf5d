"""Add a branch for one multimodal target to the EAGLE proposer's image-token mapping.

Fact (vLLM 0.15.1 - 0.17.1, ``v1/spec_decode/eagle.py``, ``EagleProposer.load_model``): for a
multimodal target the proposer sets ``self.model.config.image_token_index`` through an
``if``/``elif`` chain on ``self.get_model_name(target_model)``; a model that is not listed falls
into ``else: ... = target_model.config.image_token_index``. Kimi-K2.5's config has
``media_placeholder_token_id`` instead, so the fallback raises. Upstream 0.18.0 added an
``elif`` for ``KimiK25ForConditionalGeneration`` right after the Pixtral branch; this codemod
adds the same branch, reusing the chain's own comparison expression.
"""

from __future__ import annotations

import libcst as cst

from patchkit.codemods import tree
from patchkit.codemods.base import Codemod, Presence, Refusal, Site, exactly_one
from patchkit.codemods.kinds import CodemodKind


def _branch_for(model_name: str):
    """Predicate: an ``if``/``elif`` whose test is ``self.get_model_name(...) == "<model_name>"``."""

    def named(node: object) -> bool:
        return isinstance(node, cst.SimpleString) and node.value.strip("\"'") == model_name

    def branch(node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.If)
            and isinstance(node.test, cst.Comparison)
            and tree.is_self_call(node.test.left, "get_model_name")
            and tree.only_comparison(node.test, cst.Equal, named)
        )

    return branch


def _token_fallback(node: cst.CSTNode) -> bool:
    """An assignment ``... = <expr>.image_token_index``."""
    return (
        isinstance(node, cst.Assign)
        and isinstance(node.value, cst.Attribute)
        and tree.is_name(node.value.attr, "image_token_index")
    )


class AddModelNameBranch(Codemod):
    """Insert ``elif self.get_model_name(target_model) == "<model>": <body>`` after the ``after`` branch.

    Args:
        model: the class name to add a branch for (``KimiK25ForConditionalGeneration``).
        after: the class name of the existing branch to insert after (``PixtralForConditionalGeneration``).
        attribute: the config field to read (``media_placeholder_token_id``).
        patch_id: written into a comment in the branch.
    """

    kind = CodemodKind.PROPOSER_BRANCH

    def __init__(self, model: str, after: str, attribute: str, patch_id: str) -> None:
        self.model = model
        self.after = after
        self.attribute = attribute
        self.patch_id = patch_id
        self.options = {"model": model, "after": after, "attribute": attribute, "patch_id": patch_id}

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        if tree.find(tree.statements(module), _branch_for(self.model)):
            return Presence.PRESENT, f"the proposer has a branch for {self.model}"
        return Presence.ABSENT, f"the proposer has no branch for {self.model}"

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        anchor = exactly_one(
            tree.find(tree.statements(module), _branch_for(self.after)),
            f"'self.get_model_name(...) == \"{self.after}\"' branch",
        )
        assert isinstance(anchor, cst.If)
        fallback = anchor.orelse
        if not isinstance(fallback, cst.Else) or not tree.find(tree.statements(fallback), _token_fallback):
            raise Refusal(f"the {self.after} branch is not followed by the 'else: ... image_token_index' fallback")
        comparison = anchor.test
        assert isinstance(comparison, cst.Comparison)
        target = comparison.comparisons[0]
        test = comparison.with_changes(
            comparisons=[target.with_changes(comparator=cst.SimpleString(f'"{self.model}"'))]
        )
        snippet = cst.parse_statement(
            "if x:\n"
            "    pass\n"
            f"elif x:\n"
            f"    # Added by patchkit ({self.patch_id}): the image token is {self.attribute}.\n"
            "    self.model.config.image_token_index = (\n"
            f"        target_model.config.{self.attribute}\n"
            "    )\n"
        )
        assert isinstance(snippet, cst.If) and isinstance(snippet.orelse, cst.If)
        branch = snippet.orelse.with_changes(test=test, orelse=fallback)
        return tree.replace(module, anchor, anchor.with_changes(orelse=branch))  # type: ignore[return-value]
