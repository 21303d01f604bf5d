"""What ``patchkit rehearse`` found: immutable results (:func:`patchkit.rehearse.rehearsal.rehearse` returns them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from patchkit.advice import NextStep
from patchkit.errors import ExitCode
from patchkit.rehearse.tolerances import Undecided


class Outcome(str, Enum):
    """A rehearsal's outcome, and its exit code (:attr:`exit_code`)."""

    PASSED = "passed"
    """Every check ran and passed (exit 0)."""
    FAILED = "failed"
    """A check failed, or did not run (exit 1): something was shown wrong, or the rehearsal could not show it right."""
    NOT_DECIDED = "not decided"
    """No check failed, and one could not tell right from wrong on this miniature (an :class:`Undecided`;
    exit 5). Its next steps name what would decide it (:mod:`patchkit.rehearse.deciders`)."""

    @property
    def exit_code(self) -> ExitCode:
        return {
            Outcome.PASSED: ExitCode.OK,
            Outcome.FAILED: ExitCode.NOT_IN_EFFECT,
            Outcome.NOT_DECIDED: ExitCode.NOT_DECIDED,
        }[self]


class CheckName(str, Enum):
    """The checks of a rehearsal, in the order they are reported."""

    VOCABULARY = "draft and target share a vocabulary"
    IDS = "the release captures the layers the draft was trained on"
    STARTED = "engine started with EAGLE-3"
    DRAFT_LOADED = "draft loaded, target embedding shared"
    PLAIN = "engine without speculation"
    GREEDY = "greedy output with speculation equals without"
    AUX = "aux states equal transformers' hidden states at the draft's ids"
    ACCEPTANCE = "acceptance per draft position: vLLM's counters against the same draft offline"
    BUILD = "miniature checkpoints built"
    GENERATION = "speculative generation"
    REPLAY = "the same draft replayed offline on transformers' hidden states"
    RANKS = "every rank's draft received the same aux states"


@dataclass(frozen=True)
class RehearsalCheck:
    """One check.

    Attributes:
        name: which check.
        ok: True passed, False failed, None not run (an earlier step failed) or not decided (``undecided``).
        detail: one line of text (figures, vLLM's error).
        where: ``vllm/...py:line`` where vLLM raised, or the release's file that decides, or None.
        figures: numbers behind the verdict (distances, counters, tokens), JSON-ready.
        undecided: with ``ok`` None, why this miniature could not tell right from wrong (JSON: its name).
    """

    name: CheckName
    ok: bool | None
    detail: str
    where: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    undecided: Undecided | None = None


@dataclass(frozen=True)
class RehearsalReport:
    """A rehearsal of the user's target and draft on a miniature, in their own vLLM.

    Attributes:
        vllm: ``distribution version`` of the install rehearsed on.
        python: the interpreter the engine ran in.
        device: ``cpu`` or ``cuda``.
        architecture: the target's architecture.
        layers: (the user's target layers, the miniature's).
        user_ids: the draft's trained ids in vLLM's convention; ``ids``: mapped onto the miniature.
        id_field: where the draft keeps its ids (:class:`~patchkit.rehearse.miniature_ids.IdField`; its value in JSON).
        checks: every check, in order.
        seconds: wall time of the rehearsal (engine runs included).
        changed_fields: the config fields the miniature changed (``field: old -> new``).
        dtype: the engine's and the reference's dtype (``float32``, ``bfloat16``).
        path: ``compiled`` (vLLM's default: torch.compile, and CUDA graphs on a GPU) or ``eager``.
        raw: the engine driver's figures the verdicts were decided on (:mod:`patchkit.rehearse.verdict`).
        layout: the engine's parallel layout (:meth:`patchkit.rehearse.layout.Layout.to_json`):
            ``tensor_parallel_size``, ``pipeline_parallel_size`` and ``world`` (ranks).
        next_steps: what to run after a failed rehearsal (:func:`patchkit.rehearse.rehearsal.next_steps`):
            the ``patchkit apply`` of the target when it would write patches here.
    """

    vllm: str
    python: str
    device: str
    architecture: str
    layers: tuple[int, int]
    user_ids: tuple[int, ...]
    ids: tuple[int, ...]
    id_field: str
    checks: tuple[RehearsalCheck, ...]
    seconds: float
    changed_fields: tuple[str, ...] = ()
    dtype: str = "float32"
    path: str = "compiled"
    raw: dict[str, Any] = field(default_factory=dict)
    next_steps: tuple[NextStep, ...] = ()
    layout: dict[str, int] = field(
        default_factory=lambda: {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "world": 1}
    )

    @property
    def ok(self) -> bool:
        """Every check ran and passed."""
        return bool(self.checks) and all(c.ok is True for c in self.checks)

    @property
    def outcome(self) -> Outcome:
        """Passed when every check passed; failed when one failed or did not run; else not decided (every
        check that did not pass is an :class:`Undecided` one: nothing was shown wrong, nor right)."""
        if self.ok:
            return Outcome.PASSED
        if not self.checks or any(c.ok is False or (c.ok is None and c.undecided is None) for c in self.checks):
            return Outcome.FAILED
        return Outcome.NOT_DECIDED

    @property
    def undecided(self) -> tuple[Undecided, ...]:
        """The causes of the checks not decided, in check order, each once."""
        return tuple(dict.fromkeys(c.undecided for c in self.checks if c.ok is None and c.undecided is not None))

    def check(self, name: CheckName) -> RehearsalCheck | None:
        """The check called ``name``, or None when it was not part of this rehearsal."""
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (``ok`` and ``outcome`` included; check names as text, a check's
        ``undecided`` as its :class:`Undecided` name or null)."""
        data = asdict(self)
        data["ok"] = self.ok
        data["outcome"] = self.outcome.value
        data["next_steps"] = [s.to_dict() for s in self.next_steps]
        for c in data["checks"]:
            c["name"] = c["name"].value
            c["undecided"] = c["undecided"].name if c["undecided"] is not None else None
        return data
