"""``scan``: every registered architecture of one release with its EAGLE-3 state, read statically.

Each row says native, declared but broken (the broken link named), patchable (with which shape),
patched by patchkit (the journal's interface patch is in the file), or not patchable, with a
one-line reason and ``file:line`` evidence (:mod:`patchkit.vllm.shapes.classify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from patchkit.plan.arch_patches import PatchKind, parse_id
from patchkit.plan.arch_scope import pristine_tree
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.stream import hybrids
from patchkit.vllm.release.install import Install
from patchkit.store.journal import Journal
from patchkit.vllm.registry.table import TARGET_GROUPS, Registry
from patchkit.results import FORCED, InstallInfo
from patchkit.vllm.release.contract import install_info
from patchkit.vllm.runner.pins import pins
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.runner.units import Concern
from patchkit.vllm.shapes.classify import State, classify
from patchkit.vllm.shapes.shown import release_of, showing
from patchkit.vllm.release.source import SourceTree

NOT_CHECKED = "not checked"
"""A row's state when its verdict rests on vLLM code changed since the qualified releases
(:mod:`patchkit.vllm.runner.pins`): neither native, broken nor patchable."""
_WRITTEN = (State.PATCHABLE, State.BROKEN)
"""The states, read before patchkit, of a shape ``apply`` writes patches for (as
:func:`patchkit.checks.verify.runner_shown_check` reads a patched class)."""
GROUPS = TARGET_GROUPS
"""The registry dicts scanned (:data:`patchkit.vllm.registry.table.TARGET_GROUPS`)."""


@dataclass(frozen=True)
class ScanRow:
    """One architecture: its registry group, class, state, shape and reason."""

    architecture: str
    group: str
    cls: str | None
    state: str
    shape: str | None
    reason: str
    location: str | None
    lossless: str | None = None
    """For a hybrid: :meth:`patchkit.vllm.stream.hybrids.HybridReading.verdict` (``lossless: ...``, ``not
    lossless: <mixer> (<file:line>)``, ``not checked: ...``); None for an architecture that is not one."""
    needs_force: bool = False
    """``apply`` refuses it without ``--force`` (a hybrid whose mixers are not lossless here, or a shape not
    shown to keep greedy output under the serve's runner): the gates of :mod:`patchkit.plan.arch_patches`."""
    forced: bool = False
    """Patched by patchkit with ``apply --force``: ``needs_force`` for the shape apply wrote (classified on the
    bytes before patchkit), so ``verify`` and ``doctor`` fail it, and ``status`` says ``forced`` (issue 42,
    finding 1: scan called a forced Gemma 3 on 0.34.0 "patched by patchkit", supported, and nothing more)."""


@dataclass(frozen=True)
class ScanReport:
    """Result of ``scan``: one row per registered text or multimodal architecture, registry order."""

    install: InstallInfo
    rows: tuple[ScanRow, ...]

    def counts(self) -> dict[str, int]:
        """Rows per state."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.state] = out.get(r.state, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "command": "scan",
            "install": vars(self.install),
            "counts": self.counts(),
            "architectures": [vars(r) for r in self.rows],
        }


def scan(install: Install) -> ScanReport:
    """Classify every text-generation and multimodal architecture of ``install``.

    Raises:
        SourceError: the registry or ``interfaces.py`` is missing or does not parse.
    """
    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    journal = Journal(install.site_packages)
    pristine = pristine_tree(install, journal) if journal.entries else None
    ids = [parse_id(pid) for e in journal.entries.values() for pid in e.patches]
    patched = {name for kind, name in filter(None, ids) if kind is PatchKind.INTERFACE}
    rows = []
    capture = pins(tree, str(install.version)).not_checked(Concern.CAPTURE)
    for arch in registry.entries:
        group = registry.group_of(arch, GROUPS)  # a name also in a pooling dict is still a target
        if group is not None:
            rows.append(scan_row(tree, registry, contract, arch, group, patched, capture, pristine))
    return ScanReport(install_info(install, contract), tuple(rows))


def scan_row(
    tree: SourceTree,
    registry: Registry,
    contract: contract_mod.Contract,
    arch: str,
    group: str,
    patched: set[str],
    capture: str | None = None,
    pristine: SourceTree | None = None,
) -> ScanRow:
    """One architecture's row: its classification, a hybrid's verdict, and whether ``apply`` refuses it
    without ``--force`` (``patched``: the class names the journal's interface patches name; ``capture``: the
    "not checked" line when the capture's vLLM code changed since the qualified releases, which makes a
    native, broken, patchable or patched row :data:`NOT_CHECKED`; ``pristine``: the install before patchkit
    (:func:`patchkit.plan.arch_scope.pristine_tree`), where a patched row's shape is read as apply read it, so
    one written with ``apply --force`` is :attr:`ScanRow.forced`, as ``status`` and ``verify`` read it)."""
    runner = serving_runner(tree)  # cached per tree
    shape = classify(tree, registry, contract, arch)
    state = shape.state
    if state is State.NATIVE and shape.cls is not None and shape.cls.name in patched:
        state = State.PATCHED
    applied = shape  # the shape apply writes (patchable) or wrote (patched: read on the bytes before patchkit)
    if state is State.PATCHED and pristine is not None:
        applied = classify(pristine, Registry(pristine), contract, arch)
    reason, lossless, why = shape.reason, None, []  # why: what makes apply refuse it without --force
    if state in (State.PATCHABLE, State.PATCHED, State.NATIVE, State.BROKEN):
        reading = hybrids.read_architecture(tree, registry, arch, applied.inner)
        if reading is not None and reading.hybrid:
            lossless = reading.verdict()
            if state is not State.NATIVE:
                why += [f"hybrid, {lossless}"] if reading.lossless is not True else []
                refuses = "; apply refuses it without --force" if why else ""
                reason = f"hybrid, {lossless}{refuses}; {reason}"
    written = state is State.PATCHABLE or (state is State.PATCHED and applied.state in _WRITTEN)
    shown = showing(runner, applied.shape, release_of(tree)) if written and applied.shape else None
    if shown is not None and not shown.shown:  # apply's own gate (issue 42, finding 3)
        if not why:
            reason = f"apply refuses it without --force: not shown under vLLM's {shown.runner} runner; {reason}"
        why.append(f"{applied.shape.value} not shown under vLLM's {shown.runner} runner")
    forced = bool(why)
    if state is State.PATCHED and forced:  # as status and verify read it (issue 42, finding 1)
        reason = f"{FORCED}: {'; '.join(why)}"
    shown_state = state.value
    if capture is not None and state in (State.NATIVE, State.BROKEN, State.PATCHABLE, State.PATCHED):
        shown_state, reason = NOT_CHECKED, f"{capture} (statically: {state.value})"
        forced = state is State.PATCHABLE
    return ScanRow(
        arch,
        group,
        shape.cls.name if shape.cls else None,
        shown_state,
        applied.shape.value if applied.shape else None,
        reason,
        shape.location,
        lossless,
        forced,
        forced and state is State.PATCHED and shown_state != NOT_CHECKED,
    )
