"""Which architectures a command is about, and the patches they need: ``--arch`` and ``--model``.

A :class:`Request` holds what the command line asked for; :func:`check_requested` refuses a name the
release's registry does not hold (a usage error, on every command); :func:`arch_selection` turns the
request into the patches to plan (the shipped set for the architectures it serves, else the
per-architecture patches of :mod:`patchkit.plan.arch_patches`) and the model types the allow-list
must admit; :func:`journaled_architectures` reads back from the journal which architectures an
``--arch`` run patched.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

# upward (plan -> checks): the allow-list reader and the default set's model types are vLLM facts
# that belong in vllm/ (issue 19's "facts" step moves them); checks.verify imports nothing of plan/ at
# module level, so this is no cycle.
from patchkit.checks.verify import TEXT_MODEL_TYPES, read_allow_list
from patchkit.errors import UsageError
from patchkit.plan.arch_patches import (
    allow_list_patch,
    architecture_model_types,
    parse_id,
    read_model_config,
    select_architectures,
    shipped_for,
)
from patchkit.plan.spec import load_families, load_patches, select
from patchkit.results import Outcome, PatchResult
from patchkit.store.records import Entry, JournalRecords
from patchkit.vllm.contract import Contract, admits
from patchkit.vllm.registry import Registry
from patchkit.vllm.source import SourceTree


@dataclass(frozen=True)
class Request:
    """Which architectures a command is about: ``--arch`` names and ``--model DIR``.

    Attributes:
        architectures: registry names given with ``--arch`` (repeatable).
        model: a checkpoint folder given with ``--model`` (its ``config.json`` names architectures,
            ``text_config`` included, and the model type).
    """

    architectures: tuple[str, ...] = ()
    model: Path | None = None

    def __bool__(self) -> bool:
        return bool(self.architectures) or self.model is not None


def arch_selection(tree: SourceTree, registry: Registry, contract: Contract, request: Request):
    """The patches, pre-decided results, architectures and model types for an ``--arch``/``--model`` run.

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
    selection = select_architectures(tree, registry, contract, generic, families, config, allow.entries if allow else None)
    decided = []
    for d in selection.decisions:
        if d.refusal is not None:
            decided.append(PatchResult(f"eagle3:{d.architecture}", Outcome.REFUSED, d.refusal, [], d.shape.location))
        elif not d.patch_ids:
            decided.append(PatchResult(f"eagle3:{d.architecture}", Outcome.UPSTREAM,
                                       f"{d.architecture} {d.shape.reason}; nothing to write", [], d.shape.location))
    types: list[str] = []
    for arch in archs:
        if config is not None and config.model_type and arch in config.architectures:
            types.append(config.model_type)
        else:  # the family entry, else the serving environment's transformers / vLLM's config registry
            resolution = registry.resolve(arch)
            types.extend(architecture_model_types(tree, resolution.cls if resolution else None, arch, families)[0])
    patches = [*select(load_patches(), [p.id for p in shipped]), *selection.patches] if shipped else list(selection.patches)
    if shipped:
        types.extend(TEXT_MODEL_TYPES)
        # a checkpoint of a default-set architecture whose model type neither the release's list nor the
        # shipped entries admit (a fine-tune with its own model_type) gets its own allow-list entry
        shipped_entries = [e for p in patches if p.codemod.kind == "allowlist" for e in p.codemod.opts.get("entries", ())]
        if (allow is not None and config is not None and config.model_type
                and set(config.architectures) & set(served)
                and not admits([*allow.entries, *shipped_entries], config.model_type)):
            patches.append(allow_list_patch(config.model_type, config.architectures[0]))
    return patches, tuple(decided), tuple(archs), tuple(dict.fromkeys(types))


def check_architecture(architecture: str) -> None:
    """Raise :class:`UsageError` for an architecture name that cannot be one (empty, or with spaces).

    vLLM's registry keys are Python class names (``DeepseekV2ForCausalLM``).
    """
    if not architecture.strip() or any(ch.isspace() for ch in architecture):
        raise UsageError(f"{architecture!r} is not an architecture name",
                         "give a class name from the checkpoint's config.json \"architectures\", "
                         "e.g. DeepseekV3ForCausalLM")


def suggestions(registry: Registry, architecture: str) -> list[str]:
    """Registry names close to ``architecture``: a case slip, a one-letter typo or stray spaces.

    Returns:
        Up to three registered names, closest first (empty when none is that close).
    """
    by_lower = {a.lower(): a for a in registry.entries}
    close = difflib.get_close_matches(architecture.strip().lower(), list(by_lower), n=3, cutoff=0.9)
    return [by_lower[c] for c in close]


def check_requested(registry: Registry, request: Request, version: str) -> None:
    """Raise :class:`UsageError` for an ``--arch`` name this release's registry does not hold.

    ``apply``, ``verify``, ``status`` and ``revert`` call it before they plan or read anything
    else, so a typo (``DeepseekV3ForCausalLm``, a trailing space, an empty name) is a usage error
    on every command (exit 2, with the closest registered names), never a check that passes
    because there was nothing to check. Names from ``--model``'s config.json are the
    checkpoint's, not a typo on the command line: they are not checked here.

    Args:
        registry: the install's model registry (``vllm/model_executor/models/registry.py``, read statically).
        request: the ``--arch`` names, and ``--model``: its ``config.json`` is read here, so a bad one
            is the same error on every command (even ``revert`` with nothing to revert).
        version: the vLLM release, for the message.
    Raises:
        UsageError: an ``--arch`` name the registry does not hold.
        ConfigError: ``--model``'s ``config.json`` is missing or unreadable (exit 4).
    """
    if request.model is not None:  # read first: a bad config.json is the same error on every command
        read_model_config(request.model)
    for name in request.architectures:
        if registry.resolve(name) is not None:
            continue
        if not name.strip():
            raise UsageError("--arch '' is not an architecture name",
                             "give a class name from the checkpoint's config.json \"architectures\", "
                             "e.g. DeepseekV3ForCausalLM")
        raise not_registered(registry, name, version, "--arch")


def not_registered(registry: Registry, name: str, version: str, given: str, env: str = "") -> UsageError:
    """The error for an architecture name this release's registry does not hold (exit 2).

    One message for every command: ``--arch`` names (:func:`check_requested`) and the
    ``architectures`` of ``rehearse --model``'s ``config.json``.

    Args:
        registry: the install's model registry (``vllm/model_executor/models/registry.py``, read statically).
        name: the architecture name as given.
        version: the vLLM release, for the message.
        given: where the name came from (``--arch``, ``--model's config.json architectures``).
        env: the environment options the user gave (`` --python PY``), repeated in the hint.
    Returns:
        A :class:`UsageError` naming ``name``, with the closest registered names (:func:`suggestions`).
    """
    close = suggestions(registry, name)
    hint = (f"did you mean {' or '.join(close)}? " if close else "") + \
        f"'patchkit scan{env}' lists the architectures this vLLM registers"
    return UsageError(f"{given} {name!r} is not in vLLM {version}'s model registry", hint)


def journaled_architectures(journal: JournalRecords, registry: Registry) -> list[str]:
    """Registry architectures whose class an ``--arch`` run patched, from the journal's patch ids.

    The interface patch of class ``C`` is journaled as ``eagle3:C:interface``
    (:func:`patchkit.plan.arch_patches.interface_id`); every registry row naming ``C`` counts.
    """
    return architectures_of([pid for e in journal.entries.values() for pid in e.patches], registry)


def architectures_of(patch_ids: Sequence[str], registry: Registry) -> list[str]:
    """Registry architectures whose class one of ``patch_ids`` is the interface patch of (sorted)."""
    parsed = [parse_id(pid) for pid in patch_ids]
    classes = {p[1] for p in parsed if p is not None and p[0] == "interface"}
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


__all__ = ["Request", "arch_selection", "architectures_of", "check_architecture", "check_requested",
           "journaled_architectures", "not_registered", "reapply_runs", "suggestions"]
