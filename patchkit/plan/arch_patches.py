"""The patches one architecture needs in one release, in the shape that release's native classes use.

``apply --arch X`` (or ``--model DIR``) comes here: the architecture is classified from the
release's files (:func:`patchkit.vllm.shapes.classify.classify`) and turned into :class:`~patchkit.plan.spec.Patch`
values the engine plans like any shipped patch. What cannot be patched is decided here, once, as
an immutable :class:`ArchDecision` with a one-line reason; nothing is written for it.

Per era (:mod:`patchkit.vllm.release.contract`):

- A1 (0.10.2 - 0.17.1): the backbone gets the inline capture and ``aux_hidden_state_layers``;
  the class gets ``SupportsEagle3`` and the two A1 methods; the checkpoint's model type goes on
  the start-up allow-list.
- A2/A3 (0.18.0 on): the backbone gets ``EagleModelMixin`` and ``_maybe_add_hidden_state`` calls;
  the class gets ``SupportsEagle3`` and uses the release's default methods; the allow-list
  (0.18 - 0.20.x only) as above.

The patches' ids, and :class:`PatchKind`, are made in :mod:`patchkit.plan.patch_ids`, the alias patches in
:mod:`patchkit.plan.alias_patches`; both are named here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.codemods import CaptureForm, CodemodKind, CodemodRef
from patchkit.plan.alias_patches import (
    NoEmbedding,
    alias_patch,
    embedding_attribute,
    embedding_names,
    head_alias_patch,
    head_attribute,
    head_names,
)
from patchkit.plan.patch_ids import (
    PatchKind,
    alias_id,
    allowlist_id,
    capture_id,
    head_alias_id,
    interface_id,
    parse_id,
)
from patchkit.plan.request import ModelConfig
from patchkit.plan.spec import ClassTarget, Family, ModuleTarget, Patch, load_patches, order
from patchkit.vllm.registry import model_types
from patchkit.vllm.classes.composition import CompositionError, held_class
from patchkit.vllm.release.contract import (
    ALLOW_LIST_MODULES,
    ALLOW_LIST_NAMES,
    ALLOW_LIST_RELEASES,
    EAGLE3_RELEASES,
    GETTER_A1,
    GETTER_A2,
    Contract,
    admits,
    is_multimodal,
)
from patchkit.vllm.stream import hybrids
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.shapes.shown import release_of, showing
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.runner.pins import pins
from patchkit.vllm.runner.units import Concern
from patchkit.vllm.shapes.classify import BACKBONE_ATTR, WRAPPER_ATTR, ArchShape, Shape, State, classify
from patchkit.vllm.release.source import ClassRef, SourceTree


@dataclass(frozen=True)
class ArchDecision:
    """What patchkit will do for one requested architecture.

    Attributes:
        architecture: the name asked for.
        shape: its classification in this release.
        patch_ids: the patches planned for it (empty when native or refused).
        refusal: why nothing is planned (None when planned or native).
    """

    architecture: str
    shape: ArchShape
    patch_ids: tuple[str, ...]
    refusal: str | None = None


@dataclass(frozen=True)
class Selection:
    """The patches and decisions for a set of architectures."""

    patches: tuple[Patch, ...]
    decisions: tuple[ArchDecision, ...]


def shipped_for(tree: SourceTree, registry: Registry, contract: Contract, architecture: str) -> tuple[Patch, ...]:
    """The shipped patches (``patches/``) that serve ``architecture``, or ``()``.

    An architecture is served by name (a patch lists it), or, on the releases those patches are for
    (A1), by class: its class inherits the class a shipped interface patch targets and holds the
    same backbone in ``self.model`` (vLLM 0.16.0 ``deepseek_v2.py``: ``DeepseekForCausalLM``;
    ``mistral_large_3.py``: ``MistralLarge3ForCausalLM``; a multimodal wrapper holding
    ``DeepseekV2ForCausalLM``, ``kimi_vl.py``). A generic capture of that backbone would collide
    with the shipped one, so these get exactly the shipped patches.
    """
    patches = load_patches()
    name = (
        architecture
        if any(architecture in p.architectures for p in patches)
        else (_shipped_parent(tree, registry, architecture, patches) if contract.patchable else None)
    )
    return tuple(p for p in patches if name is not None and name in p.architectures)


def _shipped_parent(tree: SourceTree, registry: Registry, architecture: str, patches) -> str | None:
    resolution = registry.resolve(architecture)
    if resolution is None or resolution.cls is None:
        return None
    mro = tree.mro(resolution.cls)
    for patch in patches:
        target = patch.target
        if (
            patch.codemod.kind is not CodemodKind.INTERFACE
            or not isinstance(target, ClassTarget)
            or target.forwards_to != BACKBONE_ATTR
        ):
            continue
        parent = registry.resolve(target.architecture)
        if parent is None or parent.cls is None or parent.cls not in mro:
            continue
        try:
            if (
                held_class(tree, registry, resolution.cls, BACKBONE_ATTR).cls
                == held_class(tree, registry, parent.cls, BACKBONE_ATTR).cls
            ):
                return target.architecture
        except CompositionError:
            return None
    return None


def select_architectures(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    architectures: list[str],
    families: tuple[Family, ...],
    model: ModelConfig | None = None,
    allow_list: list[str] | None = None,
    force: bool = False,
) -> Selection:
    """Plan the patches for ``architectures`` in this release (nothing is read or written but files).

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        architectures: registry names, in the order asked.
        families: the shipped :class:`Family` entries (model types for the allow-list).
        model: the checkpoint's config when ``--model`` was given.
        allow_list: the release's start-up allow-list entries, or None when it has none
            (:func:`patchkit.vllm.release.contract.read_allow_list`).
        force: plan a hybrid whose mixers do not keep speculative decoding lossless on this release
            (:func:`patchkit.vllm.stream.hybrids.read_architecture`) instead of refusing it.
    Returns:
        A :class:`Selection`: patches in dependency order, one decision per architecture.
    Raises:
        SourceError: a file on the way does not parse.
    """
    patches: dict[str, Patch] = {}
    decisions: list[ArchDecision] = []
    text_arch = model.text_architectures[0] if model and model.text_architectures else None
    for arch in architectures:
        shape = classify(tree, registry, contract, arch, text_arch)
        try:
            planned = _patches_for(tree, registry, contract, shape, families, model, allow_list, force)
        except _Refuse as exc:
            decisions.append(ArchDecision(arch, shape, (), str(exc)))
            continue
        for p in planned:
            patches.setdefault(p.id, p)
        decisions.append(ArchDecision(arch, shape, tuple(p.id for p in planned)))
    return Selection(tuple(order(patches)), tuple(decisions))


class _Refuse(Exception):
    pass


def _patches_for(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    shape: ArchShape,
    families: tuple[Family, ...],
    model: ModelConfig | None,
    allow_list: list[str] | None,
    force: bool = False,
) -> list[Patch]:
    """The patches ``shape``'s architecture needs, each patch's prerequisites before it, the interface last.

    Args:
        tree, registry, contract, families, model, allow_list, force: as :func:`select_architectures`'s.
        shape: the architecture's classification in this release.
    Returns:
        The patches (empty for a native architecture).
    Raises:
        _Refuse: the architecture cannot be patched; the message names it and says why.
        SourceError: a file on the way does not parse.
    """
    arch = shape.architecture
    if shape.state is State.NATIVE:
        return []
    _check_patchable(tree, registry, shape, force)
    assert shape.cls is not None
    a1 = contract.patchable
    out, requires = _aliases(tree, shape)
    if shape.state is State.BROKEN:  # the interface is declared; only the capture is missing
        if shape.backbone is None:
            raise _Refuse(f"{arch}: {shape.reason}")
        out.append(_capture(arch, shape, a1))
        return out
    if shape.shape is Shape.WRAPPER_ONLY:
        inner_patches, inner_requires = _wrapped(tree, registry, contract, shape, families, force)
        out.extend(inner_patches)
        requires.extend(inner_requires)
    elif shape.shape in (Shape.STANDARD, Shape.HIDDEN_ONLY):
        cap = _capture(arch, shape, a1)
        out.append(cap)
        requires.append(cap.id)
    if allow_list is not None:
        out_allow = _allow_list_patches(arch, families, model, allow_list, tree, shape.cls)
        out.extend(out_allow)
        requires.extend(p.id for p in out_allow)
    out.append(_interface(tree, registry, contract, shape, tuple(requires)))
    return out


def _check_patchable(tree: SourceTree, registry: Registry, shape: ArchShape, force: bool) -> None:
    """Refuse an architecture patchkit cannot patch: not patchable, resting on vLLM code changed since the
    qualified releases (:mod:`patchkit.vllm.runner.pins`), a hybrid that is not lossless on this release, or a
    shape not shown to keep greedy output under the serving runner (the last three unless ``force``).

    Raises:
        _Refuse: the architecture and why.
    """
    arch = shape.architecture
    if shape.state is State.NOT_PATCHABLE or shape.shape is None:
        raise _Refuse(f"{arch}: {shape.state.value}: {shape.reason}")
    choice = serving_runner(tree)
    changed = pins(tree).not_checked(Concern.CAPTURE, Concern.RUNNER, Concern.ALLOW_LIST, generation=choice.name)
    if changed is not None and not force:  # first: nothing else is decided on code patchkit cannot vouch for
        raise _Refuse(
            f"{arch}: {changed}; apply writes nothing that rests on it (--force writes it anyway; "
            "then `patchkit rehearse` decides)"
        )
    mixers = hybrids.read_architecture(tree, registry, arch, shape.inner)
    if mixers is not None and mixers.lossless is not True and not force:
        raise _Refuse(f"{arch}: {hybrids.refusal(mixers)}")
    shown = showing(choice, shape.shape, release_of(tree))
    if shown is not None and not shown.shown and not force:
        raise _Refuse(f"{arch}: {shown.detail}")


def _aliases(tree: SourceTree, shape: ArchShape) -> tuple[list[Patch], list[str]]:
    """The alias patches ``shape`` needs so vLLM's EAGLE proposer finds the backbone's embedding and the
    class's head (:func:`embedding_attribute`, :func:`head_attribute`); none for a wrapper or no backbone.

    Returns:
        ``(patches, ids)``: the alias patches, and their ids (prerequisites of the interface patch).
    Raises:
        _Refuse: the proposer would find no embedding and patchkit can name none.
    """
    out: list[Patch] = []
    requires: list[str] = []
    if shape.backbone is not None and shape.shape is not Shape.WRAPPER_ONLY:
        assert shape.cls is not None
        try:
            embedding = embedding_attribute(tree, shape.backbone)
        except NoEmbedding as exc:
            raise _Refuse(f"{shape.architecture}: {exc}") from None
        if embedding is not None:
            out.append(alias_patch(shape.architecture, *embedding, embedding_names(tree)))
            requires.append(out[-1].id)
        head = head_attribute(tree, shape.cls)
        if head is not None:
            out.append(head_alias_patch(shape.architecture, *head, head_names(tree)))
            requires.append(out[-1].id)
    return out, requires


def _wrapped(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    shape: ArchShape,
    families: tuple[Family, ...],
    force: bool,
) -> tuple[list[Patch], list[str]]:
    """The patches a wrapper's language model needs: the shipped ones that serve it (:func:`shipped_for`),
    else its own (:func:`_patches_for`, without the allow-list), none when it is native.

    Returns:
        ``(patches, ids)``: the patches, and the ids of the interface patches among them (the wrapper's
        interface patch requires them).
    Raises:
        _Refuse: the language model the wrapper holds is unknown, or cannot be patched.
    """
    if shape.inner is None:
        raise _Refuse(f"{shape.architecture}: the language model it holds is unknown")
    inner = classify(tree, registry, contract, shape.inner)
    served = shipped_for(tree, registry, contract, shape.inner) if inner.state is not State.NATIVE else ()
    if served:  # the shipped patches give the language model EAGLE-3 (0.16.0 kimi_vl.py: DeepSeek-V2)
        return list(served), [p.id for p in served if p.codemod.kind is CodemodKind.INTERFACE]
    if inner.state is not State.NATIVE:
        inner_patches = _patches_for(tree, registry, contract, inner, families, None, None, force)
        return inner_patches, [p.id for p in inner_patches if p.id.endswith(":interface")]
    return [], []


def _interface(
    tree: SourceTree, registry: Registry, contract: Contract, shape: ArchShape, requires: tuple[str, ...]
) -> Patch:
    """The patch giving ``shape``'s class ``SupportsEagle3``, in the form this release's native classes use.

    Args:
        shape: the architecture's classification (a class is known).
        requires: the ids of the patches it needs first.
    Returns:
        The interface patch: A1's two methods, or (A2/A3) the release's default methods, or methods that
        forward or set the attribute where the defaults would not reach an ``EagleModelMixin``.
    Raises:
        SourceError: a file on the way does not parse.
    """
    assert shape.cls is not None
    arch = shape.architecture
    a1 = contract.patchable
    attr = WRAPPER_ATTR if shape.shape is Shape.WRAPPER_ONLY else BACKBONE_ATTR
    methods, getter = a1, GETTER_A1
    if not a1 and shape.shape is Shape.WRAPPER_ONLY and not _mixin_backbone(tree, registry, contract, shape.inner):
        # vLLM's default methods would go past the language model's own ones to .model, which must be an
        # EagleModelMixin; a language model that captures its own way (0.33.0 deepseek_v2.py) gets forwarding.
        methods, getter = True, GETTER_A2
    if (
        not a1
        and shape.shape is Shape.INTERFACE_ONLY
        and shape.backbone is not None
        and (contract.mixin is None or contract.mixin not in tree.mro(shape.backbone))
    ):
        # a backbone that captures inline without the mixin (0.18.0 qwen3_next.py): vLLM's default methods
        # would assert it is an EagleModelMixin, so the class gets methods that set its attribute directly
        methods, getter = True, GETTER_A2
    return Patch(
        id=interface_id(shape.cls.name),
        summary=f"{shape.cls.name} implements SupportsEagle3" + (" (set/get aux hidden state layers)" if a1 else ""),
        why=(
            f"vLLM's runner asks supports_eagle3(model) and otherwise fails with 'Model does not support EAGLE3 "
            f"interface'. {arch}: {shape.reason}."
        ),
        reference="vLLM's own native EAGLE-3 classes of this release (model_executor/models/interfaces.py)",
        vllm=EAGLE3_RELEASES,
        target=ClassTarget(architecture=arch, forwards_to=attr),
        codemod=CodemodRef.of(
            CodemodKind.INTERFACE, patch_id=interface_id(shape.cls.name), methods=methods, getter=getter
        ),
        requires=requires,
        architectures=(arch,),
    )


def _mixin_backbone(tree: SourceTree, registry: Registry, contract: Contract, architecture: str | None) -> bool:
    """True when ``architecture``'s backbone (``.model``) is an ``EagleModelMixin``, or will be once patched."""
    if architecture is None or contract.mixin is None:
        return False
    inner = classify(tree, registry, contract, architecture)
    if inner.state is State.PATCHABLE and inner.shape in (Shape.STANDARD, Shape.HIDDEN_ONLY):
        return True  # the capture patch adds the mixin
    return inner.backbone is not None and contract.mixin in tree.mro(inner.backbone)


def _capture(arch: str, shape: ArchShape, a1: bool) -> Patch:
    assert shape.backbone is not None
    pid = capture_id(shape.backbone.name)
    residual = shape.shape is not Shape.HIDDEN_ONLY
    return Patch(
        id=pid,
        summary=f"{shape.backbone.name} captures the residual stream entering each requested layer "
        f"({'inline' if a1 else 'EagleModelMixin'} form)",
        why=(
            "EAGLE-3 drafts read hidden states from target layers; this backbone's forward returns only the final "
            "normed state. Id k is the stream entering global layer k; (hidden_states, aux) is returned only when "
            "ids were requested."
        ),
        reference="vLLM's own native EAGLE-3 backbones of this release (llama.py, qwen3_moe.py, granite.py)",
        vllm=EAGLE3_RELEASES,
        target=ClassTarget(architecture=arch, held=(BACKBONE_ATTR,), defining="forward"),
        codemod=CodemodRef.of(
            CodemodKind.CAPTURE,
            patch_id=pid,
            form=(CaptureForm.INLINE if a1 else CaptureForm.MIXIN).value,
            residual=residual,
        ),
        architectures=(arch,),
    )


def allow_list_patch(model_type: str, arch: str | None = None) -> Patch:
    """The patch that puts ``model_type`` on the start-up allow-list, for ``arch``.

    Fact: ``SpeculativeConfig`` (``config/speculative.py``, :data:`~patchkit.vllm.release.contract.ALLOW_LIST_RELEASES`)
    refuses an EAGLE-3 target whose ``hf_text_config.model_type`` contains none of the list's entries.
    """
    return Patch(
        id=allowlist_id(model_type),
        summary=f"the EAGLE-3 start-up allow-list admits {model_type}",
        why=(
            "SpeculativeConfig refuses an EAGLE-3 target whose hf_text_config.model_type contains none of the "
            "allow-list's entries: 'Eagle3 is only supported for [...] models'."
        ),
        reference=f"vLLM config/speculative.py ({ALLOW_LIST_RELEASES})",
        vllm=EAGLE3_RELEASES,
        target=ModuleTarget(modules=ALLOW_LIST_MODULES),
        codemod=CodemodRef.of(CodemodKind.ALLOWLIST, names=ALLOW_LIST_NAMES, entries=(model_type,)),
        architectures=(arch,) if arch else (),
    )


def _allow_list_patches(
    arch: str,
    families: tuple[Family, ...],
    model: ModelConfig | None,
    entries: list[str],
    tree: SourceTree,
    cls: ClassRef | None,
) -> list[Patch]:
    """The allow-list entries ``arch``'s checkpoints need: their model type from ``--model``'s
    config.json, else the family entry, else the serving environment's transformers and vLLM's
    config registry (:func:`patchkit.vllm.registry.model_types.lookup`, read statically).

    Raises:
        _Refuse: none of them names a model type, or the two sources disagree (``--model`` decides).
    """
    if model is not None and model.model_type and arch in model.architectures:
        types: tuple[str, ...] = (model.model_type,)
    else:
        types, why = architecture_model_types(tree, cls, arch, families)
        if not types:
            raise _Refuse(
                f"{arch}: this release's start-up allow-list must admit the checkpoint's model_type, and "
                f"the serving environment does not settle it ({why}); pass --model DIR "
                "(its config.json says it)"
            )
    return [allow_list_patch(t, arch) for t in types if not admits(entries, t)]


def architecture_model_types(
    tree: SourceTree, cls: ClassRef | None, arch: str, families: tuple[Family, ...]
) -> tuple[tuple[str, ...], str]:
    """The ``hf_text_config.model_type`` values of ``arch``'s checkpoints without a ``--model``.

    The shipped family entry first (``patches/eagle3_families.py``), else what the serving
    environment's transformers and vLLM's config registry say (:func:`patchkit.vllm.registry.model_types.lookup`).

    Returns:
        ``(types, why)``: ``why`` says what was consulted when ``types`` is empty.
    Raises:
        SourceError: a vLLM file on the way does not parse.
    """
    types = next((f.model_types for f in families if arch in f.architectures), ())
    if types:
        return types, f"the {arch} family entry"
    answer = model_types.lookup(tree, cls, arch, cls is not None and bool(is_multimodal(tree, cls)))
    return answer.types, answer.reason()


# the ids and the alias patches' readers are named here too: their users import them from this module
__all__ = [
    "ArchDecision",
    "PatchKind",
    "Selection",
    "alias_id",
    "allow_list_patch",
    "allowlist_id",
    "architecture_model_types",
    "capture_id",
    "embedding_attribute",
    "embedding_names",
    "head_alias_id",
    "head_attribute",
    "head_names",
    "interface_id",
    "parse_id",
    "select_architectures",
    "shipped_for",
]
