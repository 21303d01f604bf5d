"""What the draft checks share: the facts found about the draft, and everything they read besides it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from patchkit.vllm.checkpoints.config import TargetFacts
from patchkit.vllm.checkpoints.drafts import draft_kind
from patchkit.vllm.checkpoints.drafts import ReleaseReading
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree


class DraftFormat(str, Enum):
    """Which exporter's format a draft config has; the value is :func:`patchkit.vllm.checkpoints.drafts.draft_kind`'s
    word and what ``doctor --json`` prints as the draft's ``kind``."""

    SPECULATORS = "speculators"  # RedHatAI speculators: the layer config nested in transformer_layer_config
    EAGLE_CONFIG = "eagle_config"  # SpecForge / SGLang / ModelOpt exports: an eagle_config dict
    PLAIN = "plain"  # the EAGLE repository, lmsys, AngelSlim, TorchSpec: a plain Llama config

    __str__ = str.__str__  # printed as its value
    __format__ = str.__format__

    @classmethod
    def of(cls, data: dict[str, Any]) -> "DraftFormat":
        """The format of draft config ``data``."""
        return cls(draft_kind(data))


class IdsSource(str, Enum):
    """Where the aux layer ids a runner uses come from; the value is what ``doctor --json`` prints as
    ``aux_layer_ids_source``."""

    DRAFT_CONFIG = "draft config"  # the draft's top-level ids
    DRAFT_EAGLE_CONFIG = "draft eagle_config"  # the draft's eagle_config
    DRAFT_DFLASH_CONFIG = "draft dflash_config"  # the draft's dflash_config (DFlash drafts)
    DEFAULT = "default"  # the target's default (2, n // 2, n - 3)

    __str__ = str.__str__
    __format__ = str.__format__


@dataclass
class DraftFacts:
    """What doctor read about the EAGLE-3 draft checkpoint.

    Attributes:
        config: path of the ``config.json`` read.
        architectures: its ``architectures`` list.
        kind: the config's format (:class:`DraftFormat`).
        model_type: the model type vLLM loads the config as.
        vllm_architectures: the names vLLM looks up for them with method ``eagle3``.
        aux_layer_ids: the ids vLLM will use, in vLLM's convention (None when they cannot be known);
            with several runners that disagree, the first runner's.
        aux_layer_ids_source: where they come from (:class:`IdsSource`).
        declared_aux_layer_ids: ids the draft config declares (top level first), as written; None when none.
        intended_aux_layer_ids: the layers the draft was trained on, in vLLM's convention (None: unknown).
        capture_order: the ids in the order their states reach the draft (layer order, each once).
        unreachable_aux_layer_ids: ids whose states never reach the draft with the pipeline size given.
        vocab_size: the draft's (input) vocabulary size.
        draft_vocab_size: the draft head's vocabulary size (None: the same as ``vocab_size``).
        draft_class: ``module.Class`` of the registered draft class vLLM builds (None: none).
        fc_input_width: the width the draft's ``fc`` takes, in elements per token (None: not stated).
        method: the speculative method vLLM picks for the draft by itself when it is one other than
            ``eagle3`` (``"dflash"``, ``"dspark"``; :func:`patchkit.vllm.checkpoints.methods.draft_method`);
            None: none, or ``eagle3``, which the draft checks assume.
    """

    config: str
    architectures: list[str]
    kind: DraftFormat = DraftFormat.PLAIN
    model_type: str | None = None
    vllm_architectures: list[str] = field(default_factory=list)
    aux_layer_ids: list[int] | None = None
    aux_layer_ids_source: IdsSource | None = None
    declared_aux_layer_ids: list[int] | None = None
    intended_aux_layer_ids: list[int] | None = None
    capture_order: list[int] | None = None
    unreachable_aux_layer_ids: list[int] = field(default_factory=list)
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    draft_class: str | None = None
    fc_input_width: int | None = None
    method: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the kinds as their values)."""
        source = self.aux_layer_ids_source
        return {
            **asdict(self),
            "kind": self.kind.value,
            "aux_layer_ids_source": None if source is None else source.value,
        }


@dataclass
class DraftContext:
    """Everything the draft checks read besides the draft itself.

    Attributes:
        target: facts about the target checkpoint.
        tree: the install's sources.
        registry: its model registry.
        install: the install.
        reading: how this release reads drafts (:func:`patchkit.vllm.checkpoints.drafts.read_release`).
        final_capture: whether the target's backbone captures id n (None: not known).
        pipeline_parallel_size: the ``--pipeline-parallel-size`` the user will serve with.
        actions: next steps, appended to.
        warnings: warnings that do not fail the verdict, appended to.
    """

    target: TargetFacts
    tree: SourceTree
    registry: Registry
    install: Install
    reading: ReleaseReading
    final_capture: bool | None
    pipeline_parallel_size: int = 1
    actions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def ids_text(ids: list[int]) -> str:
    """``ids`` as a tuple for messages (one id as ``(k)``)."""
    return str(tuple(ids)) if len(ids) != 1 else f"({ids[0]})"


__all__ = ["DraftContext", "DraftFacts", "DraftFormat", "IdsSource", "ids_text"]
