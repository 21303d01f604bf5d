"""``patchkit explain`` for an ``eagle3:<...>`` id (the ids ``apply --arch`` prints), read on one release.

The shape of the class (:func:`patchkit.vllm.shapes.classify.classify`), the class and file the patch is
written into (planned by :func:`patchkit.plan.engine.plan`, as ``apply`` plans it, nothing written)
and who decided each part of its form, with the evidence (:class:`ArchExplainReport`). Shipped patch
ids are explained by :mod:`patchkit.ui.explain`, which imports this module only for an ``eagle3:`` id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patchkit.codemods import CATALOGUE
from patchkit.errors import UsageError
from patchkit.plan import arch_patches, arch_scope
from patchkit.plan.arch_patches import PatchKind
from patchkit.plan.spec import ClassTarget, Patch, load_families
from patchkit.results import Outcome, PatchResult
from patchkit.store.journal import Journal, journal_for
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.shapes.classify import ArchShape, Shape, classify
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.stream.residual import StreamVerdict


def id_form(kind: PatchKind) -> str:
    """The id form of ``kind``, as :data:`ID_FORMS` writes it."""
    return kind.patch_id(
        "<Backbone>" if kind.on_backbone else "<model_type>" if kind is PatchKind.ALLOWLIST else "<Class>"
    )


ID_FORMS = tuple(id_form(k) for k in PatchKind)
"""The ``eagle3:`` id forms ``apply --arch`` prints (:mod:`patchkit.plan.arch_patches`)."""


@dataclass(frozen=True)
class Decision:
    """One part of an ``eagle3:`` patch's form and who decided it.

    Attributes:
        what: the part (``shape``, ``capture form``, ``residual stream``, ``written into``, ...).
        answer: what was decided, in words.
        by: the patchkit module and function that decides it (``patchkit/vllm/stream/residual.py residual_stream``).
        evidence: the vLLM ``file:line`` (and signals) the decision rests on, or None.
    """

    what: str
    answer: str
    by: str
    evidence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"what": self.what, "answer": self.answer, "by": self.by, "evidence": self.evidence}


@dataclass
class ArchExplainReport:
    """Result of :func:`explain` for an ``eagle3:`` id on one release.

    Attributes:
        id: the id asked for.
        kind: what it patches.
        apply_id: the id ``apply`` prints for it (differs from ``id`` when ``id`` named an architecture).
        version: the release (``install.version``).
        era: its EAGLE-3 contract.
        architectures: the registry architectures it serves, in registry order (empty for an allow-list entry).
        shape: the first architecture's classification, or None (allow-list entries).
        patch: the patch ``apply --arch`` plans for it, or None when it plans none (native, refused,
            or served by the shipped patches: see ``note``).
        result: its planned outcome (``target`` is ``file:line Class``), or None when no patch is planned.
        decisions: each part of the form and who decided it.
        note: one line when ``apply`` does something else than plan ``patch`` (shipped patches, native, refused).
        applied_in: the files patchkit's journal holds ``apply_id`` in (it was applied); empty when it holds
            none. The form above is then read from the release's own bytes (the journal's originals), as
            ``apply`` planned it, never from patchkit's edit.
    """

    id: str
    kind: PatchKind
    apply_id: str
    version: str
    era: contract_mod.Era
    architectures: tuple[str, ...]
    shape: ArchShape | None
    patch: Patch | None
    result: PatchResult | None
    decisions: list[Decision] = field(default_factory=list)
    note: str | None = None
    applied_in: tuple[str, ...] = ()

    @property
    def heading(self) -> str:
        """The first line: the id, the release and the summary."""
        summary = self.patch.summary if self.patch is not None else "apply plans no such patch here (see note)"
        note = f"; {self.newer_than_qualified}" if self.newer_than_qualified else ""
        return f"{self.apply_id} on vLLM {self.version} (EAGLE-3 contract {self.era}{note}): {summary}"

    @property
    def newer_than_qualified(self) -> str | None:
        """The note for a release newer than any patchkit was qualified on
        (:func:`patchkit.vllm.release.contract.beyond_qualified`)."""
        return contract_mod.beyond_qualified(self.version)

    def rows(self) -> list[tuple[str, str]]:
        """``(label, text)`` rows for the text form: the decisions, then the patch's why and codemod."""
        rows: list[tuple[str, str]] = []
        if self.apply_id != self.id:
            rows.append(("apply id", f"{self.apply_id} (what 'apply' prints for {self.id})"))
        if self.architectures:
            rows.append(("for", ", ".join(self.architectures)))
        if self.applied_in:
            rows.append(
                (
                    "outcome",
                    f"applied: patchkit wrote it into {', '.join(self.applied_in)} "
                    "('patchkit status' lists it, 'patchkit revert' takes it out)",
                )
            )
        elif self.result is not None:
            outcome = "would apply" if self.result.outcome is Outcome.APPLIED else self.result.outcome.value
            rows.append(("outcome", f"{outcome}: {self.result.reason}"))
        for d in self.decisions:
            rows.append((d.what, f"{d.answer}  [decided by {d.by}" + (f"; {d.evidence}]" if d.evidence else "]")))
        if self.note:
            rows.append(("note", self.note))
        if self.patch is not None:
            ref = self.patch.codemod
            rows.append(
                ("codemod", f"{ref.name} ({CATALOGUE[ref.kind].module.replace('.', '/')}.py): {ref.description}")
            )
            rows.append(("why", self.patch.why))
            rows.append(("reference", self.patch.reference))
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        shape = self.shape
        return {
            "command": "explain",
            "id": self.id,
            "apply_id": self.apply_id,
            "kind": self.kind.value,
            "vllm_version": self.version,
            "newer_than_qualified": self.newer_than_qualified,
            "era": str(self.era),
            "architectures": list(self.architectures),
            "shape": None
            if shape is None
            else {
                "architecture": shape.architecture,
                "state": shape.state.value,
                "shape": shape.shape.value if shape.shape else None,
                "reason": shape.reason,
                "class": shape.cls.name if shape.cls else None,
                "backbone": shape.backbone.name if shape.backbone else None,
                "location": shape.location,
            },
            "summary": self.patch.summary if self.patch else None,
            "why": self.patch.why if self.patch else None,
            "codemod": None
            if self.patch is None
            else {
                "name": self.patch.codemod.name,
                "kind": self.patch.codemod.kind.value,
                "options": {k: v for k, v in self.patch.codemod.options},
            },
            "outcome": self.result.outcome.value if self.result else None,
            "applied_in": list(self.applied_in),
            "target": self.result.target if self.result else None,
            "files": list(self.result.files) if self.result else [],
            "decisions": [d.to_dict() for d in self.decisions],
            "note": self.note,
        }


def explain_arch_id(patch_id: str, kind: PatchKind, name: str, install: Install) -> ArchExplainReport:
    """The :class:`ArchExplainReport` of ``eagle3:`` id ``patch_id`` (kind ``kind``, class or model type ``name``).

    Raises:
        UsageError: this release has no class (or allow-list) the id can name.
        SourceError: a vLLM file on the way does not parse.
    """
    journal = journal_for(install)
    # the release's own bytes: patchkit's edit is not the release's native support (issue 32)
    tree = arch_scope.pristine_tree(install, journal) if journal.entries else SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    if contract.era is contract_mod.Era.A0:  # no EAGLE-3 at all: no class has a form to explain
        report = ArchExplainReport(patch_id, kind, patch_id, str(install.version), contract.era, (), None, None, None)
        report.note = contract_mod.no_protocol(install.version)
        return report
    if kind is PatchKind.ALLOWLIST:
        return _allow_list_report(patch_id, name, install, tree, contract, registry)
    found = _architectures_for(tree, registry, contract, kind, name)
    if not found:
        raise UsageError(
            f"no class {name!r} for {patch_id!r} in vLLM {install.version}",
            f"give the class as 'apply --arch' prints it ({id_form(kind)}), or a registry "
            "architecture ('patchkit scan' lists them)",
        )
    shape = found[0]
    target = shape.backbone if kind.on_backbone else shape.cls
    report = ArchExplainReport(
        patch_id,
        kind,
        kind.patch_id(target.name) if target else patch_id,
        str(install.version),
        contract.era,
        tuple(s.architecture for s in found),
        shape,
        None,
        None,
    )
    report.decisions.append(
        Decision(
            "shape",
            f"{shape.shape.value if shape.shape else '-'} ({shape.state.value}): {shape.reason}",
            "patchkit/vllm/shapes/classify.py classify",
            shape.location,
        )
    )
    if shape.backbone is not None:
        report.decisions.append(
            Decision(
                "backbone",
                f"{shape.backbone.name} ({shape.backbone.location}), held as self.{arch_patches.BACKBONE_ATTR}",
                "patchkit/vllm/classes/composition.py held_class",
            )
        )
    report.decisions.append(
        Decision(
            "era",
            f"{contract.era}: {contract.description}",
            "patchkit/vllm/release/contract.py detect",
            contract.protocol.location if contract.protocol else None,
        )
    )
    if target is None:  # no class of that kind to write into (not native, no backbone found)
        report.note = f"{shape.architecture}: {shape.state.value}: {shape.reason}"
        return report
    return _with_plan(report, install, journal, tree, contract, registry, shape)


def _with_plan(
    report: ArchExplainReport,
    install: Install,
    journal: Journal,
    tree: SourceTree,
    contract: contract_mod.Contract,
    registry: Registry,
    shape: ArchShape,
) -> ArchExplainReport:
    """``report`` (an id's report whose class ``shape`` has a target to write into) completed with
    what ``apply`` would do there: the shipped patches that serve it instead, the refusal, or the
    planned patch, the files ``journal`` says it is applied in, its planned result and form; returns
    ``report``."""
    kind = report.kind
    shipped = arch_patches.shipped_for(tree, registry, contract, shape.architecture)
    if shipped:
        same = next((p for p in shipped if p.codemod.kind is kind.codemod), shipped[0])
        report.note = (
            f"apply serves {shape.architecture} with the shipped patches {', '.join(p.id for p in shipped)} "
            f"('patchkit explain {same.id}'), not with {report.apply_id}"
        )
        return report
    selection = arch_patches.select_architectures(tree, registry, contract, [shape.architecture], load_families())
    decision = selection.decisions[0]
    patch = next((p for p in selection.patches if p.id == report.apply_id), None)
    if patch is None:
        report.note = (
            decision.refusal
            if decision.refusal is not None
            else f"apply plans no {kind.value} for {shape.architecture} here"
            + (f" (it plans {', '.join(decision.patch_ids)})" if decision.patch_ids else f": {shape.reason}")
        )
        return report
    report.patch = patch
    report.applied_in = tuple(sorted(path for path, e in journal.entries.items() if patch.id in e.patches))
    report.result = _planned(install, tree, contract, registry, list(selection.patches), patch.id)
    report.decisions.extend(_form(kind, patch, shape, contract))
    if report.result is not None and report.result.target:
        report.decisions.append(
            Decision(
                "written into", report.result.target, "patchkit/plan/engine.py _resolve_target", _target_words(patch)
            )
        )
    return report


def _architectures_for(
    tree: SourceTree, registry: Registry, contract: contract_mod.Contract, kind: PatchKind, name: str
) -> list[ArchShape]:
    """The classifications of the registry architectures an id's class part names, in registry order.

    ``name`` is a registry architecture, or the class ``apply`` names in the id: the registry class
    (interface, head alias) or the decoder backbone (capture, embedding alias). Only the
    architectures whose model file mentions ``name`` are classified (reading bytes is cheap,
    classifying every architecture is a ``scan``); the match is then on the classified class.
    """
    if registry.entry(name) is not None:
        return [classify(tree, registry, contract, name)]
    wanted = name.encode()
    mentions: dict[str, bool] = {}
    out: list[ArchShape] = []
    for arch, entry in registry.entries.items():
        if entry.module not in mentions:
            relpath = tree.relpath_of_module(entry.module)
            mentions[entry.module] = relpath is not None and wanted in tree.read_bytes(relpath)
        if not mentions[entry.module]:
            continue
        shape = classify(tree, registry, contract, arch)
        cls: ClassRef | None = shape.backbone if kind.on_backbone else shape.cls
        if cls is not None and cls.name == name:
            out.append(shape)
    return out


def _form(kind: PatchKind, patch: Patch, shape: ArchShape, contract: contract_mod.Contract) -> list[Decision]:
    """Who decided the form of ``patch`` (its codemod options), with the evidence."""
    opts = patch.codemod.opts
    out: list[Decision] = []
    if kind is PatchKind.CAPTURE:
        form = (
            "inline (aux_hidden_state_layers in the backbone)"
            if contract.patchable
            else f"{contract_mod.MIXIN} ({contract_mod.MAYBE_ADD} calls)"
        )
        out.append(
            Decision(
                "capture form",
                f"{opts.get('form')}: {form}, the form of contract {contract.era}",
                "patchkit/plan/arch_patches.py _capture, from the era (patchkit/vllm/release/contract.py)",
            )
        )
        stream = shape.stream
        if isinstance(stream, StreamVerdict):
            out.append(
                Decision(
                    "residual stream",
                    f"{stream.stream.value} entering each requested layer",
                    "patchkit/vllm/stream/residual.py residual_stream",
                    stream.evidence,
                )
            )
        else:
            captured = "hidden_states" if shape.shape is Shape.HIDDEN_ONLY else "hidden_states + residual"
            out.append(
                Decision(
                    "residual stream",
                    f"{captured} entering each requested layer",
                    "patchkit/vllm/shapes.py classify (the layer call's form)",
                    shape.location,
                )
            )
    elif kind is PatchKind.INTERFACE:
        methods = (
            f"its own {contract_mod.SETTER} and {opts.get('getter')}"
            if opts.get("methods")
            else "the release's default SupportsEagle3 methods"
        )
        out.append(
            Decision(
                "interface form",
                f"SupportsEagle3 with {methods} (contract {contract.era})",
                "patchkit/plan/arch_patches.py _patches_for, from the era and the shape",
            )
        )
    else:
        out.append(
            Decision(
                "alias",
                f"{opts.get('alias')} -> self.{opts.get('attribute')}",
                "patchkit/plan/alias_patches.py embedding_attribute / head_attribute, from the proposer's "
                "reads (patchkit/vllm/runner/draft_reads.py derive)",
            )
        )
    return out


def _target_words(patch: Patch) -> str | None:
    """How the engine walks from the registry class to the class it writes into, in words."""
    t = patch.target
    if not isinstance(t, ClassTarget):
        return None
    steps = [t.architecture, *(f"self.{a}" for a in t.held)]
    if t.defining:
        steps.append(f"the class defining {t.defining} in its MRO")
    return " -> ".join(steps)


def _planned(
    install: Install,
    tree: SourceTree,
    contract: contract_mod.Contract,
    registry: Registry,
    patches: list[Patch],
    patch_id: str,
) -> PatchResult | None:
    """The outcome ``apply`` plans for ``patch_id`` among ``patches`` (nothing is written)."""
    from patchkit.plan import engine  # lazy: imports libcst; explain of a shipped id must not (tests/test_startup.py)

    planned = engine.plan(install, tree, contract, registry, journal_for(install), patches)
    return next((r for r in planned.results if r.id == patch_id), None)


def _allow_list_report(
    patch_id: str,
    model_type: str,
    install: Install,
    tree: SourceTree,
    contract: contract_mod.Contract,
    registry: Registry,
) -> ArchExplainReport:
    """The report of ``eagle3:allowlist:<model_type>``: the release's list, and whether it admits the type."""
    report = ArchExplainReport(
        patch_id, PatchKind.ALLOWLIST, patch_id, str(install.version), contract.era, (), None, None, None
    )
    found = contract_mod.read_allow_list(tree)
    if found is None:
        report.note = contract_mod.NoAllowList.of(contract).value
        return report
    report.decisions.append(
        Decision(
            "allow-list",
            f"{found.name}: {len(found.entries)} entries",
            "patchkit/vllm/release/contract.py read_allow_list",
            found.location,
        )
    )
    rule = "patchkit/vllm/release/contract.py admits (an entry that is a substring of the model type)"
    entry = next((e for e in found.entries if contract_mod.admits([e], model_type)), None)
    if entry is not None:
        report.decisions.append(Decision("admits", f"yes: entry {entry!r} is a substring of {model_type!r}", rule))
        report.note = f"nothing to add: this release's list already admits {model_type}"
        return report
    report.decisions.append(Decision("admits", f"no entry of {found.name} is a substring of {model_type!r}", rule))
    patch = arch_patches.allow_list_patch(model_type)
    report.patch = patch
    report.result = _planned(install, tree, contract, registry, [patch], patch.id)
    if report.result is not None and report.result.target:
        report.decisions.append(
            Decision(
                "written into",
                report.result.target,
                "patchkit/plan/engine.py _resolve_target",
                " | ".join(contract_mod.ALLOW_LIST_MODULES),
            )
        )
    return report


__all__ = ["ID_FORMS", "ArchExplainReport", "Decision", "explain_arch_id", "id_form"]
