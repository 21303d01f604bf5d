"""What a rehearsal's figures mean: the verdicts on the aux states, the acceptance and the greedy output.

The engine driver (:mod:`patchkit.rehearse.engine_driver`, in the serving interpreter) measures and
never judges; this module decides, in patchkit's process, on plain numbers (no torch), so the same
decisions run on the figures a GPU recorded (``tests/gpu_records/``) on a machine without one.

1. **Aux states** (:func:`decide_aux`). For each of the draft's ids j and each transformers layer
   index k = 0 .. n, the driver gives the relative distance ``|vLLM - transformers|_2 /
   |transformers|_2`` at every prompt token. The distance of (j, k) is the median over tokens, so a
   few tokens whose MoE router flipped an expert on a near-tie (on a GPU's kernels) do not decide.
   The draft receives the right tensor when, for every id, the distance at that id is within the
   device and dtype's tolerance and every other layer is at least ``separation`` tolerances away.
   Within the tolerance but with another layer nearer than that, the miniature cannot tell a shifted
   capture apart: not decided (:class:`~patchkit.rehearse.tolerances.Undecided`), never failed.
   Otherwise the cause is named from the whole matrix: the nearest layers are the ids shifted by one
   (early or late), another layer, or no layer at all (another tensor than the residual stream).
   The first prompt position attends only to itself, so its states depend on no other position:
   where they match the draft's layers (or their neighbours) but later positions do not, the capture
   took those layers and vLLM's forward itself differs from transformers' after the first position
   (seen on the H200: compiled bf16 OLMoE, with and without speculation), which is named as such.
2. **Acceptance** (:func:`decide_acceptance`). vLLM's own counters, per draft position, against the
   same fitted draft replayed offline on transformers' hidden states along vLLM's tokens. A right
   capture gives a ratio of about 1 at position 1; the check fails below :data:`MIN_RATIO`, and is not
   decided where the draft agrees offline at position 1 below :data:`MIN_OFFLINE` (too rarely to compare).
3. **Greedy output** (:func:`decide_greedy`). Identical with and without speculation, or different
   only from a token where transformers' logits of the two chosen tokens are a near-tie; not decided
   where, before that token, a MoE router chose its experts on a near-tie.
4. **Ranks** (:func:`decide_ranks`, only under a parallel layout). Every rank that holds the draft
   (each tensor-parallel rank of the last pipeline stage) received the same prefill aux states: the
   same shape (a capture sharded along the sequence would not) and within the aux tolerance.

The tolerances (:data:`~patchkit.rehearse.tolerances.TOLERANCES`) were measured per device and dtype; docs/engine.md
("Right on the GPU") gives the figures, their spread and the commands.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import Enum
from typing import Any

from patchkit.rehearse.tolerances import TOLERANCES, Device, Dtype, Tolerance, Undecided, Verdict, fmt, tolerance


MIN_RATIO = 0.5
"""vLLM's first-position acceptance must be at least this fraction of the same draft's offline."""
MIN_OFFLINE = 0.25
"""Below this offline first-position acceptance the fitted draft agrees too rarely to compare."""


class AuxCause(str, Enum):
    """What the id-distance matrix says the draft received."""

    MATCH = "the stream entering each of the draft's layers"
    EARLY = "the ids shifted by one, one layer early"
    LATE = "the ids shifted by one, one layer late"
    OTHER_LAYER = "another layer's stream"
    NO_LAYER = "no layer's residual stream"
    AMBIGUOUS = "layers too alike to tell apart"
    MODEL_DIFFERS = "the right layers, from a forward that differs from transformers' after the first position"
    NO_STATES = "nothing"


@dataclass(frozen=True)
class IdMatch:
    """One of the draft's ids against every layer.

    Attributes:
        id: the transformers ``hidden_states`` index the draft was fitted on.
        distances: the median per-token distance to layer k, for k = 0 .. n.
        nearest: the layer whose stream is nearest.
        outliers: tokens farther than the tolerance at ``id`` (MoE routing near-ties, typically).
    """

    id: int
    distances: tuple[float, ...]
    nearest: int
    outliers: int

    @property
    def at_id(self) -> float:
        return self.distances[self.id]

    @property
    def other(self) -> float:
        """The distance to the nearest layer other than ``id``."""
        return min(d for k, d in enumerate(self.distances) if k != self.id)


def id_matches(aux: dict[str, Any], tol: Tolerance) -> tuple[IdMatch, ...]:
    """The :class:`IdMatch` of each of the draft's ids, from the driver's ``raw["aux"]``."""
    out = []
    for k_id, row in zip(aux["ids"], aux.get("errors") or []):
        meds = tuple(statistics.median(tokens) for tokens in row)
        nearest = min(range(len(meds)), key=meds.__getitem__)
        out.append(IdMatch(int(k_id), meds, nearest, sum(1 for e in row[int(k_id)] if e > tol.aux)))
    return tuple(out)


def decide_aux(aux: dict[str, Any] | None, tol: Tolerance, where: str) -> Verdict:
    """Does the draft receive transformers' stream at its ids? (see the module docstring, 1).

    Args:
        aux: the driver's ``raw["aux"]``: ``ids``, ``n``, ``errors[j][k]`` (per-token distances).
        tol: the device and dtype's tolerance.
        where: ``"cuda bfloat16"`` and the like, for the text.
    Returns:
        A :class:`Verdict` whose ``cause`` is an :class:`AuxCause`; its figures carry the matrix.
    """
    if not aux or not aux.get("errors"):
        why = (
            "the draft's combine_hidden_states was never called"
            if aux is None or aux.get("called") is False
            else f"the draft received {aux.get('width')} values per token, not {len(aux.get('ids', []))} states "
            f"of {aux.get('hidden')}"
        )
        return Verdict(False, why, AuxCause.NO_STATES)
    matches = id_matches(aux, tol)
    figures = _aux_figures(aux, matches, tol)
    head = f"ids {figures['ids']} (transformers hidden_states indices, n={figures['n']})"
    near = all(m.at_id <= tol.aux for m in matches)
    apart = all(m.other >= tol.separation * tol.aux for m in matches)
    shifted = figures["shifted_distance"]
    around = ", ".join(fmt(d) for d in (shifted["minus_one"], shifted["plus_one"]) if d is not None)
    outliers = sum(m.outliers for m in matches)
    if near and apart:
        extra = (
            f"; {outliers} of {len(matches) * int(aux.get('tokens') or 0)} token states beyond it "
            "(MoE routing near-ties)"
            if outliers
            else ""
        )
        return Verdict(
            True,
            f"{head}: median per-token distance {fmt(figures['distance'])} (tolerance "
            f"{tol.aux:.0e} on {where}){extra}; nearest other layer {fmt(figures['nearest_other'])}"
            f" (ids shifted by one: {around})",
            AuxCause.MATCH,
            figures,
        )
    if near:
        return Verdict(
            None,
            f"not decided: {head}: within {tol.aux:.0e} of the draft's layers, but another layer is only "
            f"{fmt(figures['nearest_other'])} away (needs {tol.separation:g} x the tolerance): this "
            f"miniature's layers are too alike on {where} to tell a shifted capture apart",
            AuxCause.AMBIGUOUS,
            figures,
            Undecided.LAYERS_ALIKE,
        )
    return _mismatch(aux, matches, figures, head, tol, where)


def _aux_figures(aux: dict[str, Any], matches: tuple[IdMatch, ...], tol: Tolerance) -> dict[str, Any]:
    """The figures :func:`decide_aux`'s verdict carries: the largest distance at the ids, the nearest other
    layer, the ids shifted by one (None where a shifted id falls outside 0 .. n), the matrix, the outliers
    and the tolerance. Args: the driver's ``raw["aux"]`` (with errors), its :func:`id_matches`, the
    tolerance. Raises nothing."""
    n = int(aux["n"])

    def shifted(delta: int) -> float | None:
        ds = [m.distances[m.id + delta] for m in matches if 0 <= m.id + delta <= n]
        return max(ds) if len(ds) == len(matches) else None

    return {
        "distance": max(m.at_id for m in matches),
        "nearest_other": min(m.other for m in matches),
        "shifted_distance": {"minus_one": shifted(-1), "plus_one": shifted(1)},
        "matrix": [list(m.distances) for m in matches],
        "ids": [m.id for m in matches],
        "n": n,
        "outliers": [m.outliers for m in matches],
        "tokens": aux.get("tokens"),
        "tolerance": tol.aux,
        "separation": tol.separation,
    }


def _mismatch(
    aux: dict[str, Any], matches: tuple[IdMatch, ...], figures: dict[str, Any], head: str, tol: Tolerance, where: str
) -> Verdict:
    """:func:`decide_aux`'s verdict where the draft's ids are not within the tolerance: the cause named
    from the whole matrix (shifted ids, another layer, no layer, or vLLM's forward differing after the
    first position). Args: as :func:`_aux_figures`, its figures, the text's head, the tolerance and the
    device's words. Returns a failing :class:`Verdict`; raises nothing."""
    offsets = {m.nearest - m.id for m in matches if m.distances[m.nearest] <= tol.aux}
    found = ", ".join(f"id {m.id} -> layer {m.nearest} at {fmt(m.distances[m.nearest])}" for m in matches)
    if len(offsets) == 1 and all(m.distances[m.nearest] <= tol.aux for m in matches) and offsets != {0}:
        (delta,) = offsets
        cause = AuxCause.EARLY if delta == -1 else AuxCause.LATE if delta == 1 else AuxCause.OTHER_LAYER
        what = (
            (
                "the states the draft receives are those of the ids shifted by one: every capture is one layer "
                + ("early" if delta == -1 else "late")
            )
            if abs(delta) == 1
            else f"the states the draft receives are those of layers {delta:+d} from its ids"
        )
        return Verdict(
            False,
            f"{head}: {what} ({found}; at the draft's ids: {fmt(figures['distance'])}, tolerance "
            f"{tol.aux:.0e} on {where})",
            cause,
            figures,
        )
    first = _first_position(aux, matches, tol)
    if first is not None:
        delta, worst = first
        later = (
            "later positions differ from transformers' there by "
            f"{fmt(max(m.distances[m.id + delta] for m in matches))} (median)"
        )
        if delta == 0:
            return Verdict(
                False,
                f"{head}: at the first position the draft receives its layers' states (within "
                f"{fmt(worst)}), but {later}: vLLM's forward itself differs from transformers' after "
                f"the first position, with or without the capture (compare --eager; tolerance "
                f"{tol.aux:.0e} on {where})",
                AuxCause.MODEL_DIFFERS,
                figures,
            )
        return Verdict(
            False,
            f"{head}: the states the draft receives are those of the ids shifted by one: every capture "
            f"is one layer {'early' if delta < 0 else 'late'} (decided at the first position, within "
            f"{fmt(worst)}; {later}, so vLLM's forward differs as well; tolerance {tol.aux:.0e} on "
            f"{where})",
            AuxCause.EARLY if delta < 0 else AuxCause.LATE,
            figures,
        )
    if not offsets:
        return Verdict(
            False,
            f"{head}: the states the draft receives are no layer's residual stream (nearest: "
            f"{found}; tolerance {tol.aux:.0e} on {where}): the capture took another tensor, such as "
            "hidden_states + residual where the layer returns the whole stream, or a normed value",
            AuxCause.NO_LAYER,
            figures,
        )
    return Verdict(
        False,
        f"{head}: not the draft's layers ({found}; tolerance {tol.aux:.0e} on {where})",
        AuxCause.OTHER_LAYER,
        figures,
    )


def _first_position(aux: dict[str, Any], matches: tuple[IdMatch, ...], tol: Tolerance) -> tuple[int, float] | None:
    """Where no layer matches over the prompt: the one offset (0, -1 or +1) from the draft's ids to
    the layers the first position's states match within ``tol.aux``, apart from every other layer, and
    the largest such distance; None when the first position decides nothing."""
    rows = [[tokens[0] for tokens in row] for row in aux["errors"]]
    found = set()
    worst = 0.0
    for m, row in zip(matches, rows):
        k = min(range(len(row)), key=row.__getitem__)
        others = [d for i, d in enumerate(row) if i != k]
        if row[k] > tol.aux or (others and min(others) < tol.separation * tol.aux):
            return None
        found.add(k - m.id)
        worst = max(worst, row[k])
    if len(found) == 1 and next(iter(found)) in (-1, 0, 1):
        return next(iter(found)), worst
    return None


class AcceptanceCause(str, Enum):
    """What the per-position acceptance says."""

    AS_OFFLINE = "as the same draft achieves offline"
    COLLAPSED = "collapsed against offline"
    DRAFT_TOO_WEAK = "the fitted draft agrees too rarely to compare"
    NOT_COUNTED = "vLLM counted no drafts"
    NOT_COMPARED = "no offline replay is defined for the draft's method"


def _rates(accepted: list[int], drafts: int) -> list[float]:
    return [a / drafts if drafts else 0.0 for a in accepted]


def decide_acceptance(counters: dict[str, Any] | None, offline: dict[str, Any] | None) -> Verdict:
    """vLLM's per-position acceptance against the same draft's, offline (the module docstring, 2).

    Args:
        counters: the driver's ``raw["counters"]`` (``vllm:spec_decode_num_drafts``,
            ``..._num_draft_tokens``, ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``).
        offline: the driver's ``raw["offline"]`` (``num_drafts``, ``accepted_per_pos``); ``{"compared": False}``
            where no replay is defined (:func:`decide_not_replayed` decides then).
    Returns:
        A :class:`Verdict` whose ``cause`` is an :class:`AcceptanceCause`; figures per position.
    """
    if offline is not None and offline.get("compared") is False:  # a DFlash draft: nothing to compare with
        return decide_not_replayed(counters, offline)
    counters = counters or {}
    drafts = int(counters.get("vllm:spec_decode_num_drafts") or 0)
    per_pos = counters.get("vllm:spec_decode_num_accepted_tokens_per_pos")
    if not drafts or not isinstance(per_pos, list) or not per_pos:
        draft_tokens = counters.get("vllm:spec_decode_num_draft_tokens") or 0
        return Verdict(
            False,
            f"vLLM counted {drafts} drafts, {draft_tokens} draft tokens and no accepted tokens per position",
            AcceptanceCause.NOT_COUNTED,
            {"counters": counters},
        )
    per_pos = [int(v) for v in per_pos]
    vllm_rates = _rates(per_pos, drafts)
    off = offline or {}
    off_drafts = int(off.get("num_drafts") or 0)
    off_rates = _rates([int(v) for v in off.get("accepted_per_pos") or [0] * len(per_pos)], off_drafts)
    ratios = [v / o if o else None for v, o in zip(vllm_rates, off_rates)]
    figures = {
        "counters": counters,
        "offline": off,
        "vllm_rates": vllm_rates,
        "offline_rates": off_rates,
        "ratios": ratios,
    }
    rows = []
    for i, (v, o) in enumerate(zip(vllm_rates, off_rates)):
        ratio = f", ratio {ratios[i]:.2f}" if ratios[i] is not None else ""
        rows.append(f"position {i + 1}: vLLM {v:.2f} ({per_pos[i]} of {drafts} drafts), offline {o:.2f}{ratio}")
    text = "; ".join(rows)
    if len(per_pos) > 1:
        text += (
            " (in the miniature a later position repeats the first proposal, up to a near-tie in the draft's "
            "logits, since its draft layer adds nothing: it is accepted mostly where the target repeats a token)"
        )
    if off_rates[0] < MIN_OFFLINE:
        return Verdict(
            None,
            f"not decided: {text}: the fitted draft agrees with the target at position 1 only "
            f"{off_rates[0]:.2f} of the time offline (below {MIN_OFFLINE:g}), too rarely to compare",
            AcceptanceCause.DRAFT_TOO_WEAK,
            figures,
            Undecided.DRAFT_TOO_WEAK,
        )
    if ratios[0] is None or ratios[0] < MIN_RATIO:
        return Verdict(
            False,
            f"{text}: vLLM accepts at position 1 far less often than the same draft on transformers' "
            f"hidden states (below {MIN_RATIO:g} of it): the draft does not receive the states it "
            "was trained on",
            AcceptanceCause.COLLAPSED,
            figures,
        )
    return Verdict(True, text, AcceptanceCause.AS_OFFLINE, figures)


def decide_not_replayed(counters: dict[str, Any] | None, offline: dict[str, Any]) -> Verdict:
    """Acceptance of a draft with no offline replay (``offline``: the driver's ``{"compared": False, "why"}``):
    "not compared", with vLLM's counters as figures, never passed.

    Returns: ``ok`` False when vLLM counted no drafts or no draft tokens (speculation did not run), else None with
    :attr:`Undecided.NO_OFFLINE_REPLAY` (the outcome is then "not decided"). Raises nothing.
    """
    counters = counters or {}
    drafts = int(counters.get("vllm:spec_decode_num_drafts") or 0)
    tokens = int(counters.get("vllm:spec_decode_num_draft_tokens") or 0)
    accepted = counters.get("vllm:spec_decode_num_accepted_tokens_per_pos")
    figures = {"counters": counters, "offline": offline, "compared": False}
    said = f"vLLM counted {drafts} drafts, {tokens} draft tokens, accepted per position {accepted}"
    if not drafts or not tokens:
        return Verdict(False, f"{said}: the engine did not draft", AcceptanceCause.NOT_COUNTED, figures)
    why = offline.get("why") or "no offline replay is defined for the draft's method"
    return Verdict(
        None, f"not compared: {why} ({said})", AcceptanceCause.NOT_COMPARED, figures, Undecided.NO_OFFLINE_REPLAY
    )


def decide_greedy(greedy: dict[str, Any] | None, tol: Tolerance, hybrid: str | None = None) -> Verdict:
    """Greedy output with speculation against without (the module docstring, 3).

    Args:
        greedy: the driver's ``raw["greedy"]``: ``tokens`` (with speculation), ``plain_tokens``,
            ``difference`` (transformers' relative logit ``gap`` of the two tokens where they first
            differ, or None).
        tol: the device and dtype's tolerance (``logit_tie``).
        hybrid: for a hybrid target, what its mixers do with rejected draft tokens on this release
            (:meth:`patchkit.vllm.stream.hybrids.HybridReading.verdict`), added to a failure's text.
    """
    if not greedy or greedy.get("plain_tokens") is None:
        return Verdict(None, "not run: an earlier step failed")
    spec, plain = greedy["tokens"], greedy["plain_tokens"]
    figures = {
        "tokens": spec,
        "plain_tokens": plain,
        "transformers_tokens": greedy.get("transformers_tokens"),
        "difference": greedy.get("difference"),
    }
    if spec == plain:
        return Verdict(True, f"identical ({len(plain)} tokens)", None, figures)
    diff = greedy.get("difference") or {}
    gap = diff.get("gap")
    i = diff.get("index")
    if gap is not None and gap <= tol.logit_tie:
        return Verdict(
            True,
            f"identical up to token {i}, where the two chosen tokens are a near-tie (transformers' "
            f"logits {gap:.1e} apart relative, tolerance {tol.logit_tie:.0e})",
            None,
            figures,
        )
    router = diff.get("router") or {}
    margin = router.get("margin")
    if margin is not None and margin <= tol.router_tie:
        return Verdict(
            None,
            f"not decided: identical up to token {i}; before it transformers' {router.get('router')} "
            f"chose its experts by {margin:.1e} relative (a routing near-tie, tolerance "
            f"{tol.router_tie:.0e}), so a correct engine may route that token otherwise with or without "
            "speculation",
            None,
            figures,
            Undecided.ROUTER_TIE,
        )
    text = f"first difference at token {i}" + (
        f" (transformers' logits of the two tokens {gap:.1e} apart relative: no near-tie)" if gap is not None else ""
    )
    if hybrid is not None:
        text += f"; the target is a hybrid, its mixers {hybrid}"
    return Verdict(False, text, None, figures)


def decide_ranks(ranks: dict[str, Any] | None, tol: Tolerance, where: str) -> Verdict:
    """Under a parallel layout: does every rank's draft receive the same aux states? (4).

    Args:
        ranks: the driver's ``raw["ranks"]``: ``world``, ``drafters`` and ``per_rank`` (each ``rank``,
            and ``tokens``, ``width``, ``distance`` from the first drafter rank's prefill states, or
            ``draft: False`` on a rank that holds no draft).
        tol: the device and dtype's tolerance (the same as the aux check's).
        where: ``"cpu float32"`` and the like, for the text.
    Returns:
        ``ok`` None ("not checked") when no figures came back; False when a drafter rank received
        states of another shape (a sequence-sharded capture) or farther than the tolerance.
    """
    if not ranks or not ranks.get("per_rank"):
        return Verdict(None, "not checked: no rank's recorded states came back")
    held = [r for r in ranks["per_rank"] if r.get("draft", True)]
    figures = {"world": ranks.get("world"), "drafters": len(held), "per_rank": ranks["per_rank"]}
    first = held[0]
    wrong = [r for r in held[1:] if r.get("distance") is None or r["distance"] > tol.aux]
    if not wrong:
        worst = max((r["distance"] for r in held[1:]), default=0.0)
        return Verdict(
            True,
            f"{len(held)} of {ranks.get('world')} ranks hold the draft; each received "
            f"{first.get('tokens')} x {first.get('width')} prompt states, at most {fmt(worst)} from "
            f"rank {first['rank']}'s (tolerance {tol.aux:.0e} on {where})",
            None,
            figures,
        )
    said = "; ".join(
        f"rank {r['rank']}: {r.get('tokens')} x {r.get('width')}"
        + (f", {fmt(r['distance'])} away" if r.get("distance") is not None else " (another shape)")
        for r in wrong
    )
    return Verdict(
        False,
        f"the ranks' drafts received different aux states: rank {first['rank']}: "
        f"{first.get('tokens')} x {first.get('width')}; {said} (tolerance {tol.aux:.0e} on {where})",
        None,
        figures,
    )


__all__ = [
    "AcceptanceCause",
    "AuxCause",
    "Device",
    "Dtype",
    "IdMatch",
    "MIN_OFFLINE",
    "MIN_RATIO",
    "TOLERANCES",
    "Tolerance",
    "Undecided",
    "Verdict",
    "decide_acceptance",
    "decide_aux",
    "decide_greedy",
    "decide_ranks",
    "id_matches",
    "tolerance",
]
