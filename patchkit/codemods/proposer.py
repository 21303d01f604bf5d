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
from libcst import matchers as m

from patchkit.codemods.base import Codemod, Presence, Refusal, Site, exactly_one

_GET_MODEL_NAME = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name("get_model_name")))


def _branch_for(model_name: str) -> m.If:
    return m.If(
        test=m.Comparison(
            left=_GET_MODEL_NAME,
            comparisons=[
                m.ComparisonTarget(
                    operator=m.Equal(),
                    comparator=m.SimpleString(value=m.MatchIfTrue(lambda v: v.strip("\"'") == model_name)),
                )
            ],
        )
    )


class AddModelNameBranch(Codemod):
    """Insert ``elif self.get_model_name(target_model) == "<model>": <body>`` after the ``after`` branch.

    Args:
        model: the class name to add a branch for (``KimiK25ForConditionalGeneration``).
        after: the class name of the existing branch to insert after (``PixtralForConditionalGeneration``).
        attribute: the config field to read (``media_placeholder_token_id``).
        patch_id: written into a comment in the branch.
    """

    kind = "proposer-branch"

    def __init__(self, model: str, after: str, attribute: str, patch_id: str) -> None:
        self.model = model
        self.after = after
        self.attribute = attribute
        self.patch_id = patch_id
        self.options = {"model": model, "after": after, "attribute": attribute, "patch_id": patch_id}

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        if m.findall(module, _branch_for(self.model)):
            return Presence.PRESENT, f"the proposer has a branch for {self.model}"
        return Presence.ABSENT, f"the proposer has no branch for {self.model}"

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        anchor = exactly_one(
            list(m.findall(module, _branch_for(self.after))),  # type: ignore[arg-type]
            f"'self.get_model_name(...) == \"{self.after}\"' branch",
        )
        assert isinstance(anchor, cst.If)
        fallback = anchor.orelse
        if not isinstance(fallback, cst.Else) or not m.findall(
            fallback, m.Assign(value=m.Attribute(attr=m.Name("image_token_index")))
        ):
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
        return module.with_deep_changes(anchor, orelse=branch)
