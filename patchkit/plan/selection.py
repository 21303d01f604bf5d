"""The patches an ``--arch``/``--model`` request needs, and the architectures the journal shows patched.

:func:`arch_selection` turns a :class:`~patchkit.plan.request.Request` into the patches to plan (the
shipped set for the architectures it serves, else the per-architecture patches of
:mod:`patchkit.plan.arch_patches`) and the model types the allow-list must admit;
:func:`journaled_architectures` reads back from the journal which architectures an ``--arch`` run
patched, and :func:`reapply_runs` which ``apply`` runs patch replaced files again.
"""

from __future__ import annotations

from typing import Sequence

from patchkit.vllm.release.contract import read_allow_list
from patchkit.plan.spec import TEXT_MODEL_TYPES, default_architectures
from patchkit.plan.arch_patches import (
    PatchKind,
    allow_list_patch,
    architecture_model_types,
    parse_id,
    select_architectures,
    shipped_for,
)
from patchkit.codemods import CodemodKind
from patchkit.plan.request import Request, read_model_config
from patchkit.plan.spec import load_families, load_patches, select
from patchkit.results import Outcome, PatchResult
from patchkit.store.records import Entry, JournalRecords
from patchkit.vllm.release.contract import Contract, admits
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree


def arch_selection(tree: SourceTree, registry: Registry, contract: Contract, request: Request, force: bool = False):
    """The patches, pre-decided results, architectures and model types for an ``--arch``/``--model`` run.

    ``force``: ``apply --force``: a hybrid whose mixers are not lossless here is planned, not refused
    (:func:`patchkit.plan.arch_patches.select_architectures`).

    Returns:
        ``(patches, decided, architectures, model_types)``: the patches to plan (dependencies first),
        results already decided for whole architectures (refused, or native), the architectures asked
        for (``--arch`` names, then ``--model``'s), and the model types the allow-list must admit.
    Raises:
        ConfigError: ``--model`` folder without a readable ``config.json`` (exit 4).
        SourceError: a file on the way does not parse.
    """
    config = read_model_config(request.model) if request.model is not None else None
    archs = list(dict.fromkeys([*request.architectures, *(config.architectures if config else ())]))
    allow = read_allow_list(tree)
    families = load_families()
    # Architectures the shipped patch set serves get exactly those patches (their proposer branch included):
    # by name, or by class on the releases those patches are for (a subclass of a class a shipped
    # interface patch targets, holding the same backbone: 0.16.0 deepseek_v2.py DeepseekForCausalLM,
    # mistral_large_3.py MistralLarge3ForCausalLM; a generic capture of that backbone would collide)
    served = {a: found for a in archs for found in [shipped_for(tree, registry, contract, a)] if found}
    shipped = list({p.id: p for found in served.values() for p in found}.values())
    generic = [a for a in archs if a not in served]
    selection = select_architectures(
        tree, registry, contract, generic, families, config, allow.entries if allow else None, force=force
    )
    decided = []
    for d in selection.decisions:
        if d.refusal is not None:
            decided.append(PatchResult(f"eagle3:{d.architecture}", Outcome.REFUSED, d.refusal, [], d.shape.location))
        elif not d.patch_ids:
            decided.append(
                PatchResult(
                    f"eagle3:{d.architecture}",
                    Outcome.UPSTREAM,
                    f"{d.architecture} {d.shape.reason}; nothing to write",
                    [],
                    d.shape.location,
                )
            )
    types: list[str] = []
    for arch in archs:
        if config is not None and config.model_type and arch in config.architectures:
            types.append(config.model_type)
        else:  # the family entry, else the serving environment's transformers / vLLM's config registry
            resolution = registry.resolve(arch)
            types.extend(architecture_model_types(tree, resolution.cls if resolution else None, arch, families)[0])
    patches = (
        [*select(load_patches(), [p.id for p in shipped]), *selection.patches] if shipped else list(selection.patches)
    )
    if shipped:
        types.extend(TEXT_MODEL_TYPES)
        # a checkpoint of a default-set architecture whose model type neither the release's list nor the
        # shipped entries admit (a fine-tune with its own model_type) gets its own allow-list entry
        shipped_entries = [
            e for p in patches if p.codemod.kind is CodemodKind.ALLOWLIST for e in p.codemod.opts.get("entries", ())
        ]
        if (
            allow is not None
            and config is not None
            and config.model_type
            and set(config.architectures) & set(served)
            and not admits([*allow.entries, *shipped_entries], config.model_type)
        ):
            patches.append(allow_list_patch(config.model_type, config.architectures[0]))
    return patches, tuple(decided), tuple(archs), tuple(dict.fromkeys(types))


def verify_scope(
    tree: SourceTree, registry: Registry, contract: Contract, request: Request, journal: JournalRecords
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], bool]:
    """What ``verify`` checks: ``(architectures, model_types, journaled, requested)``.

    With ``request`` (on a release with the ``SupportsEagle3`` Protocol): its architectures and model
    types (:func:`arch_selection`), ``journaled`` empty. Otherwise the default set's architectures and
    model types (:func:`patchkit.plan.spec.default_architectures`, ``TEXT_MODEL_TYPES``) plus every
    architecture the journal shows an ``--arch`` run patched (:func:`journaled_architectures`), which
    ``journaled`` names. ``requested``: the request chose the architectures (False for the default
    set, and on a release without the Protocol, where the request is moot).

    Raises:
        ConfigError: ``--model`` folder without a readable ``config.json`` (exit 4).
        SourceError: a file on the way does not parse.
    """
    archs, types = default_architectures(), TEXT_MODEL_TYPES
    patched: list[str] = []
    requested = bool(request) and contract.protocol is not None
    if requested:
        _, _, archs, types = arch_selection(tree, registry, contract, request)
    else:
        patched = journaled_architectures(journal, registry)
        if patched:
            _, _, extra, extra_types = arch_selection(tree, registry, contract, Request(tuple(patched)))
            archs = tuple(dict.fromkeys([*archs, *extra]))
            types = tuple(dict.fromkeys([*types, *extra_types]))
    return archs, types, tuple(patched), requested


def journaled_architectures(journal: JournalRecords, registry: Registry) -> list[str]:
    """Registry architectures whose class an ``--arch`` run patched, from the journal's patch ids.

    The interface patch of class ``C`` is journaled as ``eagle3:C:interface``
    (:func:`patchkit.plan.arch_patches.interface_id`); every registry row naming ``C`` counts.
    """
    return architectures_of([pid for e in journal.entries.values() for pid in e.patches], registry)


def architectures_of(patch_ids: Sequence[str], registry: Registry) -> list[str]:
    """Registry architectures whose class one of ``patch_ids`` is the interface patch of (sorted)."""
    parsed = [parse_id(pid) for pid in patch_ids]
    classes = {p[1] for p in parsed if p is not None and p[0] is PatchKind.INTERFACE}
    return sorted(a for a, e in registry.entries.items() if e.class_name in classes)


def reapply_runs(replaced: Sequence[Entry], journal: JournalRecords, registry: Registry) -> tuple[tuple[str, ...], ...]:
    """The ``--arch`` lists of the ``apply`` runs that patch the ``replaced`` journal entries again.

    The journal knows which patches each file held: a shipped patch id belongs to the default set
    (``()``: a plain ``apply``); an ``--arch`` run's patch (``eagle3:...``, :func:`patchkit.plan.arch_patches.parse_id`)
    means an ``--arch`` run: every architecture the journal says such a run patched
    (:func:`journaled_architectures`) is repeated as ``--arch`` (a replaced file may hold only a
    backbone's patch, and ``apply`` says "already applied" for the others). A ``--model`` run is
    journaled by its architectures, not its folder.
    """
    ids = [pid for e in replaced for pid in e.patches]
    runs: list[tuple[str, ...]] = []
    if any(parse_id(pid) is None for pid in ids):
        runs.append(())
    chosen = journaled_architectures(journal, registry) if any(parse_id(pid) for pid in ids) else []
    if chosen:
        runs.append(tuple(chosen))
    return tuple(runs)


def patched_architectures(install, journal: JournalRecords) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(served, chosen)``: the architectures the journaled patches serve, and those an ``--arch`` run chose.

    ``served``: the architectures of the shipped patches journaled (their ``architectures``, from
    ``patches/``) and every registry architecture whose class got an interface patch
    (:func:`journaled_architectures`); ``chosen``: the latter alone (they need ``--arch`` to be
    patched again). Read by the guard's manifest and the watch's data file.

    Args:
        install: the :class:`~patchkit.vllm.release.install.Install` (its site-packages holds the registry).
        journal: its vLLM journal.
    """
    ids = {pid for e in journal.entries.values() for pid in e.patches}
    shipped = [a for p in load_patches() if p.id in ids for a in p.architectures]
    chosen = journaled_architectures(journal, Registry(SourceTree(install.site_packages)))
    return tuple(dict.fromkeys([*shipped, *chosen])), tuple(chosen)


__all__ = [
    "arch_selection",
    "architectures_of",
    "journaled_architectures",
    "patched_architectures",
    "reapply_runs",
    "verify_scope",
]
