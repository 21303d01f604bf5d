"""Static verification: is EAGLE-3 in effect for the resolved classes, patched or native?

``verify`` runs, for each registry architecture, the chain check of :mod:`patchkit.vllm.chain`
(the class's chain across modules down to the backbone's ``forward`` capture, every path vLLM's runner
and EAGLE proposer take through the class, and every per-platform branch of its registry name), gives
it the classifier's verdict (:func:`settle`, :func:`patchkit.vllm.shapes.classify`), and checks the
start-up allow-list. Each node carries ``file:line`` evidence.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.plan.spec import TEXT_MODEL_TYPES, default_architectures
from patchkit.results import Check
from patchkit.vllm import loadpath, proposer_paths
from patchkit.vllm.chain.kinds import NOT_FOLLOWED
from patchkit.vllm.chain.links import architecture_chain
from patchkit.vllm.chain.load_path import link_check
from patchkit.vllm.contract import ALLOW_LIST_MODULES, ALLOW_LIST_NAMES, Contract, admits
from patchkit.vllm.registry import Registry
from patchkit.vllm.shapes import ArchShape, State, classify
from patchkit.vllm.source import SourceTree


def verify(tree: SourceTree, registry: Registry, contract: Contract,
           architectures: tuple[str, ...] | None = None,
           model_types: tuple[str, ...] | None = None, requested: tuple[str, ...] = ()) -> list[Check]:
    """Run every check on ``tree`` (files on disk, or a planned result through overrides).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        architectures: the registry names to check (default: :func:`default_architectures`).
        model_types: the ``hf_text_config.model_type`` values the start-up allow-list must admit
            (default: :data:`TEXT_MODEL_TYPES`).
        requested: architectures the user asked for (``--arch`` / ``--model``): one that patchkit
            does not serve on this release fails, with the broken link (:mod:`patchkit.vllm.proposer_paths`);
            in the default set it is shown as not supported.
    Returns:
        Top-level :class:`Check` nodes: the contract, one per architecture, the allow-list and
        the proposer.
    Raises:
        SourceError: a file on the chain does not parse.
    """
    checks = [
        Check(
            "EAGLE-3 contract",
            contract.era != "A0",
            f"{contract.era}: {contract.description}",
            contract.protocol.location if contract.protocol else None,
        )
    ]
    if contract.protocol is None:
        return checks
    derivation = proposer_paths.derive(tree)
    for arch in architectures or default_architectures():
        resolution = registry.resolve(arch)
        if resolution is None:
            checks.append(Check(arch, None, "not in this release's model registry; nothing to check"))
            continue
        if resolution.cls is None:
            checks.append(Check(arch, False, f"the registry names {resolution.entry.module}.{resolution.entry.class_name}, which patchkit cannot find"))
            continue
        fault = loadpath.bare_language_model(tree, registry, resolution.cls) if not contract.native else None
        if fault is not None:  # patchkit does not patch it here (apply: not applicable); say why
            node = Check(arch, None, f"not supported on this release: {fault.reason()}", fault.proposer_at)
            if arch in requested:  # asked for: it cannot work here; the broken link says where
                node.ok, node.children = False, [link_check(tree, registry, resolution.cls, derivation)]
            checks.append(node)
            continue
        node = architecture_chain(tree, registry, contract, resolution, derivation)
        settle(node, classify(tree, registry, contract, arch))
        node.label = f"{arch} -> {node.label}" if arch != resolution.cls.name else node.label
        checks.append(node)
    checks.append(_allow_list(tree, contract, TEXT_MODEL_TYPES if model_types is None else model_types))
    return checks


def settle(node: Check, shape: ArchShape) -> Check:
    """Give one architecture's chain check the classifier's verdict, so verify and doctor say what scan and apply say.

    Args:
        node: the architecture's chain check (:func:`architecture_chain` or :func:`model_check`), changed in place.
        shape: :func:`patchkit.vllm.shapes.classify` of the same architecture (an ``ArchShape``).
    Returns:
        ``node``: when the verdict is not native (patchable, not patchable, declared but broken), a failed
        first child says so with the classifier's reason; when it is native, a link patchkit could not
        follow (:data:`NOT_FOLLOWED`) is shown as not checked (None), not failed: the classifier calls no
        class broken on a link it cannot read. ``node.ok`` is recomputed.
    """
    if shape.state is not State.NATIVE:
        node.children.insert(0, Check(f"patchkit's verdict: {shape.state.value}", False, shape.reason, shape.location))
    else:
        _not_followed_unchecked(node)
    node.ok = not any(c.failures() for c in node.children)
    return node


def _not_followed_unchecked(node: Check) -> bool:
    """Show :data:`NOT_FOLLOWED` failures under ``node`` as not checked (None), and a parent that failed only
    through them as not checked too. Returns True when something under ``node`` changed."""
    changed = False
    for child in node.children:
        changed = _not_followed_unchecked(child) or changed
    if node.ok is False and node.kind == NOT_FOLLOWED:
        node.ok = None
        node.detail += " (patchkit cannot follow this link statically; not checked, not called broken)"
        return True
    if changed and node.ok is False and not any(c.failures() for c in node.children):
        node.ok = None
    return changed



@dataclass(frozen=True)
class AllowList:
    """The speculative config's EAGLE-3 model-type allow-list, read statically.

    Attributes:
        name: the variable (``eagle3_target_supported`` or ``aux_hidden_states_supported``).
        entries: its string entries; vLLM admits a model type when an entry is a substring of it.
        location: ``file:line`` of the assignment.
    """

    name: str
    entries: list[str]
    location: str


def read_allow_list(tree: SourceTree) -> AllowList | None:
    """The first allow-list assignment found in :data:`ALLOW_LIST_MODULES`, or None when there is none.

    Fact: see :mod:`patchkit.codemods.allowlist` (vLLM 0.10.2 - 0.18.0; later releases have no list).
    Raises:
        SourceError: a module holding it does not parse.
    """
    for module in ALLOW_LIST_MODULES:
        relpath = tree.relpath_of_module(module)
        if relpath is None:
            continue
        for node in ast.walk(tree.module_tree(module)):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in ALLOW_LIST_NAMES and isinstance(node.value, ast.List)):
                entries = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                return AllowList(node.targets[0].id, entries, f"{relpath}:{node.lineno}")
    return None


def _allow_list(tree: SourceTree, contract: Contract, model_types: tuple[str, ...]) -> Check:
    found = read_allow_list(tree)
    if found is not None:
        if not model_types:
            return Check("speculative-config allow-list", None, "no model type to check (pass --model DIR)", found.location)
        refused = [t for t in model_types if not admits(found.entries, t)]
        return Check(
            "speculative-config allow-list admits " + ", ".join(model_types),
            not refused,
            f"{found.name} lacks an entry for {', '.join(refused)}" if refused else f"{found.name} = {found.entries}",
            found.location,
        )
    if contract.native:
        return Check("speculative-config allow-list", None, "no model-type allow-list in this release")
    return Check("speculative-config allow-list", False, f"no {' or '.join(ALLOW_LIST_NAMES)} list found in {', '.join(ALLOW_LIST_MODULES)}")


