"""What ``doctor`` found (:class:`DoctorReport`): the checklist, the verdict, the next steps and the warnings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from patchkit.advice import Effect, NextStep
from patchkit.checks.drafts.context import DraftFacts
from patchkit.results import Check, InstallInfo
from patchkit.vllm.checkpoints.config import TargetFacts


@dataclass
class DoctorReport:
    """Result of :func:`doctor`.

    Attributes:
        install: the vLLM install checked against.
        target: facts about the target checkpoint.
        draft: facts about the draft, or None when no draft was given.
        checks: the checklist, one :class:`Check` tree per item.
        next_steps: what to do next (empty when ready), the command first: each a
            :class:`~patchkit.advice.NextStep` (a command, or an edit only the user can make).
        warnings: what may be wrong without failing the verdict, one line each.
    """

    install: InstallInfo
    target: TargetFacts
    draft: DraftFacts | None
    checks: list[Check]
    next_steps: list[NextStep] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def actions(self) -> list[str]:
        """What to do next, one line each (:meth:`NextStep.line` of :attr:`next_steps`)."""
        return [s.line() for s in self.next_steps]

    @property
    def apply_command(self) -> str | None:
        """The ``patchkit apply --target vllm --model DIR ...`` that fixes the vLLM side for this target, or None."""
        return next((s.command for s in self.next_steps if s.effect is Effect.PATCHES), None)

    @property
    def apply_patches(self) -> list[str]:
        """The patches :attr:`apply_command` writes."""
        return next((list(s.patches) for s in self.next_steps if s.effect is Effect.PATCHES), [])

    @property
    def ready(self) -> bool:
        """True when no check fails."""
        return not any(c.failures() for c in self.checks)

    @property
    def verdict(self) -> str:
        """``"ready"`` or ``"not ready"``."""
        return "ready" if self.ready else "not ready"

    @property
    def missing(self) -> list[str]:
        """``"label: detail"`` of every failing check."""
        return [f"{c.label}: {c.detail}" for top in self.checks for c in top.failures()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``--json`` schema)."""
        return {
            "command": "doctor",
            "install": asdict(self.install),
            "ready": self.ready,
            "verdict": self.verdict,
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict() if self.draft else None,
            "checks": [asdict(c) for c in self.checks],
            "missing": self.missing,
            "actions": self.actions,
            "next_steps": [s.to_dict() for s in self.next_steps],
            "apply_command": self.apply_command,
            "apply_patches": self.apply_patches,
            "warnings": self.warnings,
        }


__all__ = ["DoctorReport"]
