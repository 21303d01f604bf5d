"""An ``apply`` or ``revert`` that stopped while writing, as the journal records it (a result type of ``status`` and
``apply``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class PendingState(str, Enum):
    """Where one file of an unfinished run stands now, decided from its hash and the two the journal
    recorded before the run wrote it (:meth:`patchkit.store.records.JournalRecords.unfinished`)."""

    WRITTEN = "written"
    """It holds what the run was writing: the next apply or revert puts the bytes it had before back."""
    NOT_REACHED = "not reached"
    """It is still as before the run: left alone."""
    CHANGED_SINCE = "changed since"
    """Neither the bytes before nor those the run wrote: left alone."""
    MISSING = "missing"
    """The file is gone: left alone."""


@dataclass(frozen=True)
class PendingFile:
    """One file of an unfinished run.

    Attributes:
        path: relative to site-packages.
        state: where it stands now (:class:`PendingState`; its text is accepted and converted).
    """

    path: str
    state: PendingState

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", PendingState(self.state))


@dataclass(frozen=True)
class PendingRun:
    """An ``apply`` or ``revert`` that stopped while writing (killed), as the journal records it.

    Attributes:
        operation: ``"apply"`` or ``"revert"``.
        files: the files that run was writing, each with its state now.
        leftovers: temporary files and unused copies it left (relative to site-packages);
            the next apply or revert removes them.
    """

    operation: str
    files: tuple[PendingFile, ...]
    leftovers: tuple[str, ...] = ()

    @property
    def to_roll_back(self) -> list[str]:
        """Files the next apply or revert puts back to their bytes from before that run."""
        return [f.path for f in self.files if f.state is PendingState.WRITTEN]

    @property
    def unfinished(self) -> bool:
        """True when a run stopped midway (not only leftovers to clean)."""
        return bool(self.files)

    def summary(self) -> str:
        """One line: what stopped, which files it had written, and what the next apply or revert does."""
        if not self.files:
            return (
                f"{len(self.leftovers)} leftover file(s) of an interrupted run ({', '.join(self.leftovers)}); "
                "the next 'patchkit apply' or 'patchkit revert' removes them"
            )
        written = self.to_roll_back
        wrote = f"it had written {', '.join(written)}" if written else "it had not changed any file yet"
        rest = [f"{f.path} ({f.state.value})" for f in self.files if f.state is not PendingState.WRITTEN]
        return (
            f"an earlier 'patchkit {self.operation}' stopped while writing: {wrote}"
            + (f"; not written: {', '.join(rest)}" if rest else "")
            + f". The next 'patchkit apply' or 'patchkit revert' first puts back the {len(written)} written "
            f"file(s) to their bytes from before that {self.operation}, then runs as usual"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "operation": self.operation,
            "files": [{"path": f.path, "state": f.state.value} for f in self.files],
            "leftovers": list(self.leftovers),
            "to_roll_back": self.to_roll_back,
            "summary": self.summary(),
        }


__all__ = ["PendingFile", "PendingRun", "PendingState"]
