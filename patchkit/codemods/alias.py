"""Give a class the name vLLM's EAGLE proposer reads its embedding or head under: a read-only alias.

Fact (``EagleProposer.load_model``: ``v1/spec_decode/eagle.py`` 0.10.2 - 0.18.0, then
``_maybe_share_embeddings`` in ``v1/spec_decode/llm_base_proposer.py`` 0.20 - 0.33.0): with one
pipeline stage the proposer reads ``target_language_model.model.embed_tokens`` (from 0.14:
``.embedding`` when that is missing) and otherwise raises ``AttributeError``, before it decides
whether to share, so a backbone that names its embedding otherwise (``word_embeddings``: Bailing
MoE, Sarvam MoE) makes every draft fail to load. The alias is a property, so nothing is
registered twice (the module's parameters and state dict stay exactly as they are).

The same proposer shares the target's ``lm_head`` with a draft that ships none (``has_own_lm_head``
false, 0.20 - 0.33.0 ``_maybe_share_lm_head``), but only ``if hasattr(target_language_model,
"lm_head")``: a causal LM that calls its head otherwise (``output``: InternLM2) leaves such a draft
with a head that was never loaded, and nothing fails. :class:`AddHeadAlias` names it.
"""

from __future__ import annotations

import libcst as cst

from patchkit.codemods.base import Codemod, Presence, Refusal, Site, parse_members, replace_top_level, top_level_class
from patchkit.codemods.kinds import CodemodKind

_TEMPLATE = """
@property
def {alias}(self):
    # Added by patchkit ({patch_id}):
    # vLLM's EAGLE proposer reads .{alias} to share the target's {what} with the draft;
    # this {holder} calls it {attribute}.
    return self.{attribute}
"""


def _alias_of(cls: cst.ClassDef, alias: str) -> list[cst.CSTNode]:
    """Members of ``cls``'s body named ``alias`` (a def, or a class-level assignment)."""
    out: list[cst.CSTNode] = []
    for stmt in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == alias:
            out.append(stmt)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = (
                    [t.target for t in small.targets]
                    if isinstance(small, cst.Assign)
                    else [small.target]
                    if isinstance(small, cst.AnnAssign)
                    else []
                )
                if any(isinstance(t, cst.Name) and t.value == alias for t in targets):
                    out.append(small)
    return out


def _returns_attribute(fn: cst.FunctionDef, attribute: str) -> bool:
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    returns = [s.body[0] for s in body if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Return)]
    return (
        len(returns) == 1
        and isinstance(returns[0].value, cst.Attribute)
        and isinstance(returns[0].value.value, cst.Name)
        and returns[0].value.value.value == "self"
        and returns[0].value.attr.value == attribute
    )


class AddEmbeddingAlias(Codemod):
    """Add ``@property def <alias>(self): return self.<attribute>`` to the class after ``__init__``.

    Args:
        alias: the name the proposer reads (``embed_tokens``).
        attribute: the backbone's own embedding attribute (``word_embeddings``).
        patch_id: written into a comment in the property.
    """

    kind = CodemodKind.EMBEDDING_ALIAS
    what, holder = "embedding", "backbone"

    def __init__(self, alias: str, attribute: str, patch_id: str) -> None:
        self.alias, self.attribute, self.patch_id = alias, attribute, patch_id
        self.options = {"alias": alias, "attribute": attribute, "patch_id": patch_id}

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        cls = top_level_class(module, self._class(site))
        found = _alias_of(cls, self.alias)
        if not found:
            return Presence.ABSENT, f"{cls.name.value} has no {self.alias}"
        if len(found) == 1 and isinstance(found[0], cst.FunctionDef) and _returns_attribute(found[0], self.attribute):
            return Presence.PRESENT, f"{cls.name.value}.{self.alias} returns self.{self.attribute}"
        return Presence.PARTIAL, f"{cls.name.value} already defines {self.alias} another way"

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        cls = top_level_class(module, self._class(site))
        if _alias_of(cls, self.alias):
            raise Refusal(f"{cls.name.value} already defines {self.alias}")
        members = parse_members(
            _TEMPLATE.format(
                alias=self.alias, attribute=self.attribute, patch_id=self.patch_id, what=self.what, holder=self.holder
            ).lstrip("\n")
        )
        members = [m.with_changes(leading_lines=[cst.EmptyLine(indent=False)]) for m in members]
        body = list(cls.body.body)
        inits = [i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
        if len(inits) != 1:
            raise Refusal(f"expected exactly 1 __init__ in class {cls.name.value}, found {len(inits)}")
        body[inits[0] + 1 : inits[0] + 1] = members
        return replace_top_level(module, cls, cls.with_changes(body=cls.body.with_changes(body=body)))

    def _class(self, site: Site) -> str:
        if not site.class_name:
            raise Refusal(f"{self.kind} patch without a target class")
        return site.class_name


class AddHeadAlias(AddEmbeddingAlias):
    """As :class:`AddEmbeddingAlias`, for a causal LM's head (``lm_head`` -> ``output``)."""

    kind = CodemodKind.HEAD_ALIAS
    what, holder = "head", "class"
