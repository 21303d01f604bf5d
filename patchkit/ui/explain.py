"""``patchkit explain ID``: one patch in words (what, why, where, which releases, upstream).

Two kinds of id:

- a shipped patch id (``patchkit list``): the definition in ``patches/``, no install needed
  (:class:`ExplainReport`);
- an ``eagle3:<...>`` id of the form ``apply --arch`` prints (:mod:`patchkit.plan.arch_patches`:
  ``eagle3:<Backbone>:capture``, ``eagle3:<Class>:interface``, ``eagle3:<Backbone>:embedding-alias``,
  ``eagle3:<Class>:head-alias``, ``eagle3:allowlist:<model_type>``), read on one release
  (``--python`` / ``--site-packages``, as every command): the EAGLE-3 shape of the class
  (:func:`patchkit.vllm.shapes.classify.classify`), the class and file the patch is written into (planned by
  :func:`patchkit.plan.engine.plan`, as ``apply`` plans it, nothing written) and who decided each part
  of its form, with the evidence (:class:`ArchExplainReport`). The class part may also name a
  registry architecture (``eagle3:OlmoeForCausalLM:capture``): the report then gives the id
  ``apply`` prints for it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patchkit.errors import UsageError
from patchkit.plan.spec import ClassTarget, Patch, load_patches

if TYPE_CHECKING:
    from patchkit.ui.explain_arch import ArchExplainReport
    from patchkit.vllm.release.install import Install


@dataclass
class ExplainReport:
    """Result of :func:`explain` for a shipped patch: its definition and the patches that need it.

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
        """``(class name, description, one sentence on the kind)`` of the patch's codemod
        (:data:`patchkit.codemods.CATALOGUE`; the class is not imported)."""
        ref = self.patch.codemod
        return ref.name, ref.description, ref.doc

    @property
    def heading(self) -> str:
        """The first line: the id and the summary."""
        return f"{self.patch.id}: {self.patch.summary}"

    def rows(self) -> list[tuple[str, str]]:
        """``(label, text)`` rows for the text form."""
        p = self.patch
        name, description, doc = self.codemod
        return [
            ("vLLM", str(p.vllm)),
            ("target", self.target),
            ("codemod", f"{name}: {description}" + (f" ({doc})" if doc else "")),
            ("expects", p.codemod.expects),
            ("requires", ", ".join(p.requires) or "-"),
            ("needed by", ", ".join(self.required_by) or "-"),
            ("why", p.why),
            ("reference", p.reference),
        ]

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


def needs_install(patch_id: str, distribution: str = "vllm") -> bool:
    """True when ``patch_id`` is an ``eagle3:`` id of a known form (:data:`patchkit.ui.explain_arch.ID_FORMS`), read on
    a release; False for a shipped patch id or an unknown one (no install is looked for).

    Raises:
        UsageError: unknown ``distribution``.
    """
    if patch_id in {p.id for p in load_patches(distribution)}:
        return False
    from patchkit.plan.arch_patches import parse_id  # lazy: start-up, a shipped id reads no planning code

    return parse_id(patch_id) is not None


def explain(
    patch_id: str, distribution: str = "vllm", install: Install | None = None
) -> "ExplainReport | ArchExplainReport":
    """Describe one patch: a shipped one from its definition, an ``eagle3:`` one on ``install``'s release.

    Args:
        patch_id: a patch id as ``patchkit list`` shows it, or an ``eagle3:<...>`` id
            (:data:`patchkit.ui.explain_arch.ID_FORMS`).
        distribution: the ``--target`` (``"vllm"``).
        install: the release an ``eagle3:`` id is read on (not used for a shipped id); None: the
            id is a shipped one or unknown.
    Returns:
        An :class:`ExplainReport` (shipped id) or an :class:`ArchExplainReport` (``eagle3:`` id).
    Raises:
        UsageError: unknown ``distribution`` or patch id, an ``eagle3:`` id of no known form, or one
            whose class (or model type) this release does not have (the hint names the closest ids).
        SourceError: a vLLM file on the way does not parse.
    """
    patches = load_patches(distribution)
    by_id = {p.id: p for p in patches}
    if patch_id in by_id:
        return ExplainReport(by_id[patch_id], [p.id for p in patches if patch_id in p.requires])
    from patchkit.plan.arch_patches import parse_id  # lazy: start-up, a shipped id reads no planning code
    from patchkit.ui import explain_arch  # lazy: start-up, a shipped id reads no release

    parsed = parse_id(patch_id)
    if parsed is None or install is None:
        close = difflib.get_close_matches(patch_id, list(by_id), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(
            f"unknown patch {patch_id!r}",
            hint + f"known patches: {', '.join(by_id)} ('patchkit list'), "
            f"or an id 'apply --arch' prints: {', '.join(explain_arch.ID_FORMS)}",
        )
    return explain_arch.explain_arch_id(patch_id, parsed[0], parsed[1], install)


__all__ = ["ExplainReport", "explain", "needs_install"]
