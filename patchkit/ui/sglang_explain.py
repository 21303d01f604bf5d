"""``explain --target sglang``: SGLang's patch in words, and what it would do to one class of the install (issue 44).

Two kinds of id:

- the shipped patch id, ``eagle3-sglang-capture`` (``patches/eagle3_sglang.py``): its definition, no install read;
- ``eagle3-sglang-capture:<Architecture>``, the id the journal and ``status`` show for one class: the definition, and
  on the install (``--site-packages`` / ``--python``) the class's registry entry and chain
  (:func:`patchkit.checks.sglang_resolve.resolve`), what ``apply`` would do for it, planned as ``apply --dry-run``
  plans it (:func:`patchkit.plan.sglang_apply.apply`; nothing written), the lines it would add and remove, and
  whether the journal already holds it.

Nothing is written and no lock is taken.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from patchkit.errors import UsageError
from patchkit.plan.sglang_apply import SglangPatch, journal_of, load_patch
from patchkit.sglang import contract as c
from patchkit.sglang.install import SglangInstall


@dataclass(frozen=True)
class ClassPlan:
    """What the patch does for one class of the install: its module and chain (``role class file:line``), what a
    dry-run apply says (``applied``, ``native``, ``refused``, ``already applied``) and why, the lines it adds and
    removes, and whether the journal holds the patch for it."""

    architecture: str
    module: str
    state: str | None
    chain: tuple[str, ...]
    outcome: str
    reason: str
    added: int
    removed: int
    journaled: bool

    def to_dict(self) -> dict:
        return {
            "architecture": self.architecture,
            "module": self.module,
            "state": self.state,
            "chain": list(self.chain),
            "outcome": self.outcome,
            "reason": self.reason,
            "lines_added": self.added,
            "lines_removed": self.removed,
            "journaled": self.journaled,
        }


@dataclass(frozen=True)
class SglangExplainReport:
    """``explain --target sglang``'s result: the patch, the install's version (None for the shipped id alone) and,
    for an ``<id>:<Architecture>`` id, the :class:`ClassPlan`."""

    patch: SglangPatch
    version: str | None = None
    plan: ClassPlan | None = None

    @property
    def heading(self) -> str:
        name = f"{self.patch.id}:{self.plan.architecture}" if self.plan else self.patch.id
        return f"{name}: EAGLE-3 for SGLang classes of the standard shape that lack it"

    def rows(self) -> list[tuple[str, str]]:
        p = self.patch
        qualified = ", ".join(c.QUALIFIED)
        rows = [
            ("SGLang", f"qualified on {qualified}" + (f"; this install: {self.version}" if self.version else "")),
            ("writes", p.summary),
            ("codemod", p.codemod),
            ("copies", f"{p.reference[0]} ({', '.join(p.reference[1])}) of the installed release"),
            ("upstream", p.upstream),
        ]
        if self.version and self.version not in c.QUALIFIED:
            rows.append(("note", f"SGLang {self.version} is not a qualified release: its files were read as they are"))
        if self.plan:
            k = self.plan
            rows += [
                ("class", f"{k.architecture} in {k.module} (scan: {k.state})"),
                *[("chain", link) for link in k.chain],
                ("dry run", f"apply would say {k.outcome}: {k.reason}"),
                ("diff", f"+{k.added} -{k.removed} lines (apply --dry-run with this --arch shows them)"),
                ("journal", "holds it (patchkit revert --target sglang --arch restores it)" if k.journaled else "-"),
            ]
        return rows

    def to_dict(self) -> dict:
        return {
            "command": "explain",
            "target": c.DISTRIBUTION,
            "id": self.patch.id,
            "summary": self.patch.summary,
            "codemod": self.patch.codemod,
            "reference": [self.patch.reference[0], list(self.patch.reference[1])],
            "upstream": self.patch.upstream,
            "qualified": list(c.QUALIFIED),
            "version": self.version,
            "class": self.plan.to_dict() if self.plan else None,
        }


def needs_install(patch_id: str) -> bool:
    """True for an ``<id>:<Architecture>`` id (read on the install); False for the shipped id or an unknown one."""
    return patch_id.startswith(f"{load_patch().id}:")


def explain(patch_id: str, install: SglangInstall | None = None) -> SglangExplainReport:
    """Describe SGLang's patch, or what it would do to one class of ``install``.

    Args:
        patch_id: ``eagle3-sglang-capture`` or ``eagle3-sglang-capture:<Architecture>``.
        install: the SGLang install an ``<id>:<Architecture>`` id is read on (None for the shipped id).
    Returns:
        a frozen :class:`SglangExplainReport`.
    Raises:
        UsageError: an unknown id (the closest one suggested), or an architecture SGLang's registry does not hold.
        SourceError: a file on the way does not parse.
    """
    from patchkit.checks.sglang_resolve import resolve  # lazy: the checks layer, only for a class's id
    from patchkit.plan.sglang_apply import apply  # lazy: as above (libcst only when a class is planned)

    patch = load_patch()
    if patch_id == patch.id:
        return SglangExplainReport(patch)
    if not needs_install(patch_id) or install is None:
        close = difflib.get_close_matches(patch_id, [patch.id], n=1, cutoff=0.5)
        raise UsageError(
            f"unknown SGLang patch {patch_id!r}",
            (f"did you mean {close[0]}? " if close else "")
            + f"SGLang's patch is {patch.id}, or {patch.id}:<Architecture> as 'patchkit status --target sglang' shows",
        )
    arch = patch_id.split(":", 1)[1]
    found = resolve(install, arch)
    if found.module is None:
        close = f"did you mean {', '.join(found.suggestions)}? " if found.suggestions else ""
        raise UsageError(
            f"{arch!r} is not in SGLang {install.version}'s registry",
            close + "'patchkit scan --target sglang' lists it",
        )
    planned = apply(install, [arch], dry_run=True)
    (outcome,) = planned.outcomes
    diff = planned.diff.splitlines()
    journal = journal_of(install)
    plan = ClassPlan(
        arch,
        found.module,
        found.state,
        tuple(f"{k.role} {k.cls} {k.file}:{k.line}" for k in found.chain),
        outcome.status.value,
        outcome.reason,
        sum(1 for line in diff if line.startswith("+") and not line.startswith("+++")),
        sum(1 for line in diff if line.startswith("-") and not line.startswith("---")),
        any(patch.record(arch) in e.patches for e in journal.entries.values()),
    )
    return SglangExplainReport(patch, str(install.version), plan)


__all__ = ["ClassPlan", "SglangExplainReport", "explain", "needs_install"]
