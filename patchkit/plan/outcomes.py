"""Each patch's final outcome in an ``apply`` run, decided once, here.

Planning (:func:`patchkit.plan.engine.plan`) gives every patch its own outcome: what the codemod found
in the file. The run then has gates that can stop a planned patch from being written: a patch
named with ``--patch`` that does not apply, a symbolic link, a file whose bytes differ from the
distribution's RECORD or that no RECORD vouches for, and a patched result that would not pass
verify. Each gate returns :class:`Veto` values; :func:`decide` combines the planned results and
the vetoes into the final, frozen results. Nothing else changes an outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from patchkit.results import Outcome, PatchResult


@dataclass(frozen=True)
class Veto:
    """A gate's verdict on one planned patch: it is refused, with the reason (one line)."""

    patch_id: str
    reason: str


def requested_not_applicable(results: Sequence[PatchResult], requested: set[str], version: str) -> tuple[Veto, ...]:
    """Vetoes for patches named with ``--patch`` that are not applicable to this release.

    Writing only the prerequisites of a requested patch would not be what was asked for, so the
    requested patch is refused and with it the whole run.
    """
    return tuple(
        Veto(r.id, f"requested with --patch, but not applicable to vLLM {version}: {r.reason}")
        for r in results
        if r.id in requested and r.outcome is Outcome.NOT_APPLICABLE
    )


def file_gate(results: Sequence[PatchResult], paths: Iterable[str], reason: Callable[[str], str]) -> tuple[Veto, ...]:
    """Vetoes for the planned patches that write one of ``paths``; ``reason(files)`` says why.

    ``files`` is the comma-separated list of the patch's files among ``paths``.
    """
    blocked = set(paths)
    out = []
    for r in results:
        hit = sorted(set(r.files) & blocked)
        if r.outcome is Outcome.APPLIED and hit:
            out.append(Veto(r.id, reason(", ".join(hit))))
    return tuple(out)


def whole_run(results: Sequence[PatchResult], reason: str) -> tuple[Veto, ...]:
    """Vetoes for every planned patch: the run as a whole cannot be written (``reason`` says why)."""
    return tuple(Veto(r.id, reason) for r in results if r.outcome is Outcome.APPLIED)


def decide(results: Sequence[PatchResult], vetoes: Iterable[Veto] = ()) -> tuple[PatchResult, ...]:
    """The final outcome of every patch of a run.

    Args:
        results: the planned results, in run order.
        vetoes: what the gates refused (the first veto of a patch wins).
    Returns:
        The results with each vetoed patch refused (its reason the veto's). When any patch is
        refused, the run writes nothing, so every patch that was ready is ``not written``.
    """
    by_id: dict[str, Veto] = {}
    for v in vetoes:
        by_id.setdefault(v.patch_id, v)
    final = [replace(r, outcome=Outcome.REFUSED, reason=by_id[r.id].reason) if r.id in by_id else r for r in results]
    if any(r.outcome is Outcome.REFUSED for r in final):
        return held_back(final)
    return tuple(final)


def held_back(results: Sequence[PatchResult]) -> tuple[PatchResult, ...]:
    """The results of a run that writes nothing as a whole: every patch that was ready is ``not written``.

    :func:`decide` uses it when a patch of the run is refused; an ``apply --ray`` run uses it for a
    node's plan when another node stops the run (:mod:`patchkit.ui.cluster`). Other outcomes stay.
    """
    return tuple(replace(r, outcome=Outcome.NOT_WRITTEN) if r.outcome is Outcome.APPLIED else r for r in results)


__all__ = ["Veto", "decide", "file_gate", "held_back", "requested_not_applicable", "whole_run"]
