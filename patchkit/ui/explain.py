"""``patchkit explain ID``: one patch definition in words (what, why, where, which releases, upstream)."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any

from patchkit.errors import UsageError
from patchkit.plan.spec import ClassTarget, Patch, load_patches


@dataclass
class ExplainReport:
    """Result of :func:`explain`: one patch definition and the patches that need it.

    Attributes:
        patch: the :class:`~patchkit.plan.spec.Patch`.
        required_by: ids of the patches that list it in ``requires``.
    """

    patch: Patch
    required_by: list[str]

    @property
    def target(self) -> str:
        """Where the patch lands, in words."""
        t = self.patch.target
        if isinstance(t, ClassTarget):
            text = f"class registered as {t.architecture}"
            if t.held:
                text += " -> " + " -> ".join(f"self.{a}" for a in t.held)
            if t.forwards_to:
                text += f" (new methods forward to self.{t.forwards_to})"
            return text
        return "module " + t.describe()

    @property
    def codemod(self) -> tuple[str, str, str]:
        """``(class name, description, first paragraph of its docstring)`` of the patch's codemod."""
        cls = type(self.patch.codemod)
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        return cls.__name__, self.patch.codemod.description, doc

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        p = self.patch
        name, description, doc = self.codemod
        return {
            "command": "explain",
            "id": p.id,
            "summary": p.summary,
            "why": p.why,
            "reference": p.reference,
            "vllm": str(p.vllm),
            "target": p.target.describe(),
            "target_description": self.target,
            "codemod": {"name": name, "description": description, "doc": doc},
            "expects": p.codemod.expects,
            "requires": list(p.requires),
            "required_by": self.required_by,
        }


def explain(patch_id: str, distribution: str = "vllm") -> ExplainReport:
    """Describe one patch: what it changes and why, its vLLM range, target, codemod and reference.

    Args:
        patch_id: a patch id as ``patchkit list`` shows it.
        distribution: the ``--target`` (``"vllm"``).
    Returns:
        An :class:`ExplainReport`.
    Raises:
        UsageError: unknown ``distribution`` or patch id (the hint names the closest ids).
    """
    patches = load_patches(distribution)
    by_id = {p.id: p for p in patches}
    if patch_id not in by_id:
        close = difflib.get_close_matches(patch_id, list(by_id), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(f"unknown patch {patch_id!r}", hint + f"known patches: {', '.join(by_id)} ('patchkit list')")
    return ExplainReport(by_id[patch_id], [p.id for p in patches if patch_id in p.requires])
