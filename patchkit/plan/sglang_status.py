"""``status --target sglang``: what SGLang's journal says patchkit applied, and whether the files still hold it
(issue 44).

Read only, no lock taken, no libcst imported: the journal of ``<site-packages>/.patchkit/sglang/``
(:func:`patchkit.plan.sglang_apply.journal_of`), each journaled file's state as vLLM's ``status`` decides it
(:func:`patchkit.plan.file_states.file_state`: ``patched``, ``reinstalled``, ``upgraded``, ``edited``, ``missing``,
``interrupted``) against the distribution's ``RECORD``, the classes from the journal's patch ids
(``eagle3-sglang-capture:<architecture>``), and an unfinished apply or revert (its pending record). Exit 0 whatever
it finds, as vLLM's ``status``; a journal that cannot be read is a :class:`~patchkit.errors.StateError` (exit 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.pending import PendingRun
from patchkit.plan.file_states import FILE_STATES, FileState, file_state
from patchkit.plan.sglang_apply import journal_of, load_patch, registered
from patchkit.sglang import contract as c
from patchkit.sglang.classes import Package
from patchkit.sglang.install import SglangInstall
from patchkit.vllm.release.install import record_sha256


@dataclass(frozen=True)
class FileRow:
    """One journaled file: its path (below site-packages), patch ids, the release it was patched on, its state
    (:data:`~patchkit.plan.file_states.FILE_STATES`) and when patchkit last wrote it."""

    path: str
    patches: tuple[str, ...]
    version: str
    state: FileState
    applied_at: str

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "patches": list(self.patches),
            "version": self.version,
            "state": self.state.value,
            "applied_at": self.applied_at,
        }


@dataclass(frozen=True)
class ClassRow:
    """One class the journal names: its registry architecture, the patch id, its file and that file's state."""

    architecture: str
    patch: str
    path: str
    state: FileState

    def to_dict(self) -> dict:
        return {"architecture": self.architecture, "patch": self.patch, "file": self.path, "state": self.state.value}


@dataclass(frozen=True)
class StatusReport:
    """``status --target sglang``'s result: the install, the classes, the files, an unfinished run (or None) and
    whether the distribution has a ``RECORD`` (without one, an upgrade cannot be told from an edit); with
    ``architectures`` (``--arch``) only their classes and files, and ``not_patched``: those the journal lacks."""

    install: SglangInstall
    classes: tuple[ClassRow, ...]
    files: tuple[FileRow, ...]
    pending: tuple[str, ...]
    unfinished: PendingRun | None
    record_missing: bool
    architectures: tuple[str, ...] = ()
    not_patched: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0: status reports, it does not judge (vLLM's ``status`` alike; ``verify`` judges)."""
        return 0

    def notes(self) -> tuple[tuple[FileState, str], ...]:
        """Each state other than ``patched`` that a file is in, with what it means."""
        odd = sorted({f.state for f in self.files} - {FileState.PATCHED}, key=lambda s: s.value)
        return tuple((s, FILE_STATES[s]) for s in odd)

    def to_dict(self) -> dict:
        return {
            "command": "status",
            "target": c.DISTRIBUTION,
            "version": str(self.install.version),
            "site_packages": str(self.install.site_packages),
            "classes": [r.to_dict() for r in self.classes],
            "entries": [f.to_dict() for f in self.files],
            "pending": list(self.pending),
            "unfinished": self.unfinished.to_dict() if self.unfinished else None,
            "record_missing": self.record_missing,
            "architectures": list(self.architectures),
            "not_patched": list(self.not_patched),
        }


def status(install: SglangInstall, architectures: tuple[str, ...] = ()) -> StatusReport:
    """What patchkit applied to this SGLang, read from its journal; nothing is written.

    Args:
        install: the SGLang install (:func:`patchkit.sglang.install.locate`).
        architectures: registry names (``--arch``): only their classes and the files holding their patches;
            () for everything the journal holds.
    Returns:
        a frozen :class:`StatusReport` (empty rows when patchkit changed nothing here).
    Raises:
        UsageError: an architecture SGLang's registry does not hold (exit 2).
        StateError: the journal cannot be read (another format, damaged).
        InstallNotFound: the distribution's ``RECORD`` cannot be decoded.
    """
    if architectures:
        registered(Package(install.site_packages, c.PACKAGE), list(architectures))
    journal = journal_of(install)
    wanted = {load_patch().record(a) for a in architectures}
    paths = sorted(p for p, e in journal.entries.items() if not wanted or wanted & set(e.patches))
    record = record_sha256(install, paths) if paths else {}
    unfinished = journal.unfinished()
    interrupted = set(unfinished.to_roll_back) if unfinished else set()
    files = tuple(
        FileRow(
            p,
            tuple(journal.entries[p].patches),
            journal.entries[p].version,
            FileState.INTERRUPTED if p in interrupted else file_state(install, journal.entries[p], record),
            journal.entries[p].applied_at,
        )
        for p in paths
    )
    prefix = f"{load_patch().id}:"
    classes = tuple(
        ClassRow(pid[len(prefix) :], pid, f.path, f.state)
        for f in files
        for pid in f.patches
        if pid.startswith(prefix) and (not wanted or pid in wanted)
    )
    return StatusReport(
        install,
        tuple(sorted(classes, key=lambda r: r.architecture)),
        files,
        tuple(sorted(item["path"] for item in journal.pending)),
        unfinished,
        not (install.dist_info / "RECORD").is_file(),
        tuple(architectures),
        tuple(a for a in architectures if a not in {r.architecture for r in classes}),
    )


__all__ = ["ClassRow", "FileRow", "StatusReport", "status"]
