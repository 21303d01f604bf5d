"""Static verification: is EAGLE-3 in effect for the resolved classes, patched or native?

``verify`` runs, for each registry architecture, the chain check of :mod:`patchkit.vllm.chain`
(the class's chain across modules down to the backbone's ``forward`` capture, every path vLLM's runner
and EAGLE proposer take through the class, and every per-platform branch of its registry name), gives
it the classifier's verdict (:func:`settle`, :func:`patchkit.vllm.shapes.classify.classify`), and checks the
start-up allow-list. Each node carries ``file:line`` evidence.
"""

from __future__ import annotations

from dataclasses import replace

from patchkit.plan.spec import TEXT_MODEL_TYPES, default_architectures
from patchkit.results import Check
from patchkit.vllm.classes import loadpath
from patchkit.vllm.stream import hybrids
from patchkit.vllm.runner import draft_reads
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.shapes.shown import release_of, showing
from patchkit.vllm.chain.kinds import NOT_FOLLOWED, VERDICT, unpinned
from patchkit.vllm.runner.pins import pins
from patchkit.vllm.runner.units import Concern
from patchkit.vllm.chain.links import architecture_chain
from patchkit.vllm.chain.load_path import link_check
from patchkit.vllm.release.contract import Contract, Era, NoAllowList, admits, read_allow_list
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.shapes.classify import ArchShape, State, classify
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.registry.transformers_backend import backend_route

RUNNER_SHOWN_CHECK = "runner-shown-lossless"
"""The ``kind`` of :func:`runner_shown_check`'s node."""


def verify(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    architectures: tuple[str, ...] | None = None,
    model_types: tuple[str, ...] | None = None,
    requested: tuple[str, ...] = (),
    pristine: SourceTree | None = None,
) -> list[Check]:
    """Run every check on ``tree`` (files on disk, or a planned result through overrides).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        architectures: the registry names to check (default: :func:`default_architectures`).
        model_types: the ``hf_text_config.model_type`` values the start-up allow-list must admit
            (default: :data:`TEXT_MODEL_TYPES`).
        requested: architectures the user asked for (``--arch`` / ``--model``): one that patchkit
            does not serve on this release fails, with the broken link (:mod:`patchkit.vllm.runner.draft_reads`);
            in the default set it is shown as not supported.
        pristine: the install's sources before patchkit (journaled files as they were), to tell which
            shape patchkit wrote for an architecture it patched (:func:`runner_shown_check`); None: ``tree``.
    Returns:
        Top-level :class:`Check` nodes: the contract, one per architecture, the allow-list and
        the proposer.
    Raises:
        SourceError: a file on the chain does not parse.
    """
    checks = [
        Check(
            "EAGLE-3 contract",
            contract.era is not Era.A0,
            f"{contract.era}: {contract.description}",
            contract.protocol.location if contract.protocol else None,
        )
    ]
    if contract.protocol is None:
        return checks
    derivation = draft_reads.derive(tree)
    pinned = pins(pristine or tree)
    capture = pinned.not_checked(Concern.CAPTURE)
    for arch in architectures or default_architectures():
        resolution = registry.resolve(arch)
        if resolution is None:
            checks.append(Check(arch, None, "not in this release's model registry; nothing to check"))
            continue
        route = backend_route(tree, contract, resolution)
        if route is not None and route.declares:  # served by vLLM's Transformers backend: its own EAGLE-3
            checks.append(Check(arch, None if route.usable is None else route.usable, route.reason(), route.location))
            continue
        if resolution.cls is None:
            checks.append(
                Check(
                    arch,
                    False,
                    f"the registry names {resolution.entry.module}.{resolution.entry.class_name}, "
                    "which patchkit cannot find",
                )
            )
            continue
        fault = loadpath.bare_language_model(tree, registry, resolution.cls) if not contract.native else None
        if fault is not None:  # patchkit does not patch it here (apply: not applicable); say why
            reason = f"not supported on this release: {fault.reason()}"
            if arch in requested:  # asked for: it cannot work here; the broken link says where
                broken = link_check(tree, registry, resolution.cls, derivation)
                checks.append(Check(arch, False, reason, fault.proposer_at, children=(broken,)))
            else:
                checks.append(Check(arch, None, reason, fault.proposer_at))
            continue
        chain = architecture_chain(tree, registry, contract, resolution, derivation)
        shape = classify(tree, registry, contract, arch)
        node = _finished(settle(chain, shape), tree, registry, contract, shape, pristine, capture)
        label = f"{arch} -> {node.label}" if arch != resolution.cls.name else node.label
        checks.append(replace(node, label=label))
    allow = _allow_list(tree, contract, TEXT_MODEL_TYPES if model_types is None else model_types)
    allow_changed = pinned.not_checked(Concern.ALLOW_LIST)
    checks.append(unpinned(allow, allow_changed) if allow_changed and allow.ok is not None else allow)
    return checks


def _finished(
    node: Check,
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    shape: ArchShape,
    pristine: SourceTree | None,
    capture: str | None,
) -> Check:
    """One architecture's settled ``node`` with its hybrid and runner-shown checks as children, and "not
    checked" (:func:`patchkit.vllm.chain.kinds.unpinned`) when ``capture`` says the capture's vLLM code changed."""
    arch = shape.architecture
    for lossless in (
        hybrid_check(tree, registry, arch, shape),
        runner_shown_check(tree, pristine, contract, arch, shape),
    ):
        if lossless is not None:
            children = (*node.children, lossless)
            node = replace(node, children=children, ok=not any(c.failures() for c in children))
    return unpinned(node, capture) if capture is not None else node


def hybrid_check(tree: SourceTree, registry: Registry, arch: str, shape: ArchShape) -> Check | None:
    """For a hybrid: whether its mixers keep speculative decoding lossless on this release
    (:func:`patchkit.vllm.stream.hybrids.read_architecture`); fails when not, and when patchkit cannot tell
    (not checked fails closed). None for an architecture that is not a hybrid."""
    reading = hybrids.read_architecture(tree, registry, arch, shape.inner)
    if reading is None or not reading.hybrid:
        return None
    evidence = next((m.evidence for m in (reading.lossy or reading.mixers)), reading.location)
    return Check(
        "speculative decoding keeps greedy output (hybrid mixers)",
        reading.lossless is True,
        f"{reading.verdict()}: {reading.explain()}" if reading.lossless is not True else reading.verdict(),
        evidence,
        kind=hybrids.HYBRID_CHECK,
    )


def runner_shown_check(
    tree: SourceTree, pristine: SourceTree | None, contract: Contract, arch: str, shape: ArchShape
) -> Check | None:
    """Whether the shape patchkit writes (or wrote) for ``arch`` is shown to keep greedy output on the runner
    the serve uses (:func:`patchkit.vllm.shapes.shown.showing`); fails when not (apply refuses it there
    without ``--force``). None when patchkit writes nothing for it (native, not patchable) or the runner
    needs no showing (V1).

    The shape is ``shape``'s when patchable here, else, for a class patchkit patched, the pristine
    tree's (``pristine``: what ``apply`` classified before writing)."""
    applied = shape
    if shape.shape is None and pristine is not None and pristine is not tree:
        applied = classify(pristine, Registry(pristine), contract, arch)
    if applied.shape is None or applied.state not in (State.PATCHABLE, State.BROKEN):
        return None
    found = showing(serving_runner(tree), applied.shape, release_of(tree))
    if found is None:
        return None
    return Check(
        f"greedy output kept under vLLM's {found.runner} runner ({applied.shape.value})",
        found.shown,
        found.detail,
        found.record if found.shown else None,
        kind=RUNNER_SHOWN_CHECK,
    )


def settle(node: Check, shape: ArchShape) -> Check:
    """Give one architecture's chain check the classifier's verdict, so verify and doctor say what scan and apply say.

    Args:
        node: the architecture's chain check (:func:`architecture_chain` or :func:`model_check`); not changed.
        shape: :func:`patchkit.vllm.shapes.classify.classify` of the same architecture (an ``ArchShape``).
    Returns:
        ``node`` settled, a new :class:`Check`: when the verdict is patchable, an informational first child (ok None)
        says so: it is what apply can fix, not one more problem, and the failed links under ``node`` are the problems;
        when it is otherwise not native (not patchable, declared but broken, or patchable with no failed link),
        a failed first child says so with the classifier's reason; when it is native, a link patchkit could not
        follow (:data:`NOT_FOLLOWED`) is shown as not checked (None), not failed: the classifier calls no
        class broken on a link it cannot read. Its ``ok`` is recomputed.
    """
    children = node.children
    if shape.state is State.PATCHABLE and any(c.failures() for c in node.children):
        # good news, not a problem: the failed links below are what apply writes (issue 32)
        verdict = Check(
            f"patchkit's verdict: {shape.state.value}",
            None,
            f"{shape.reason}; apply writes what is missing below",
            shape.location,
            kind=VERDICT,
        )
        children = (verdict, *children)
    elif shape.state is not State.NATIVE:
        verdict = Check(f"patchkit's verdict: {shape.state.value}", False, shape.reason, shape.location, kind=VERDICT)
        children = (verdict, *children)
    else:
        children = _not_followed_unchecked(node)[0].children
    return replace(node, children=children, ok=not any(c.failures() for c in children))


def _not_followed_unchecked(node: Check) -> tuple[Check, bool]:
    """Show :data:`NOT_FOLLOWED` failures under ``node`` as not checked (None), and a parent that failed only
    through them as not checked too. Returns ``node`` so shown (a new :class:`Check` when something under it
    changed, else ``node`` itself) and True when something under ``node`` changed."""
    settled = [_not_followed_unchecked(child) for child in node.children]
    changed = any(c for _, c in settled)
    if changed:
        node = replace(node, children=tuple(child for child, _ in settled))
    if node.ok is False and node.kind == NOT_FOLLOWED:
        detail = node.detail + " (patchkit cannot follow this link statically; not checked, not called broken)"
        return replace(node, ok=None, detail=detail), True
    if changed and node.ok is False and not any(c.failures() for c in node.children):
        node = replace(node, ok=None)
    return node, changed


def _allow_list(tree: SourceTree, contract: Contract, model_types: tuple[str, ...]) -> Check:
    found = read_allow_list(tree)
    if found is not None:
        if not model_types:
            return Check(
                "speculative-config allow-list", None, "no model type to check (pass --model DIR)", found.location
            )
        refused = [t for t in model_types if not admits(found.entries, t)]
        return Check(
            "speculative-config allow-list admits " + ", ".join(model_types),
            not refused,
            f"{found.name} lacks an entry for {', '.join(refused)}" if refused else f"{found.name} = {found.entries}",
            found.location,
        )
    absent = NoAllowList.of(contract)
    return Check("speculative-config allow-list", absent.ok, absent.value)
