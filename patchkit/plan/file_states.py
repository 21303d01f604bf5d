"""What a journaled file holds now, and what ``revert`` does with it: the revert's file-state policy.

``status`` and ``verify`` name each journaled file's :class:`FileState` (described in
:data:`FILE_STATES`); ``revert`` turns it into a :class:`RevertAction` (:func:`revert_action`).
"""

from __future__ import annotations

from enum import Enum

from patchkit.results import Check
from patchkit.store.files import sha256
from patchkit.store.records import Entry, JournalRecords
from patchkit.vllm.release.install import Install, record_sha256


class FileState(str, Enum):
    """The state of one journaled file; its value is what ``status --json`` prints (``"patched"``)."""

    PATCHED = "patched"
    REINSTALLED = "reinstalled"
    UPGRADED = "upgraded"
    EDITED = "edited"
    MISSING = "missing"
    INTERRUPTED = "interrupted"

    __str__ = str.__str__  # printed as its value, as the plain string it replaces was
    __format__ = str.__format__


FILE_STATES = {
    FileState.PATCHED: "holds the bytes patchkit wrote",
    FileState.REINSTALLED: "original bytes again: replaced by a reinstall of the same vLLM version",
    FileState.UPGRADED: "vLLM was upgraded to another version since; the file belongs to the new release",
    FileState.EDITED: "edited by hand since patchkit wrote it",
    FileState.MISSING: "the file is gone",
    FileState.INTERRUPTED: "an apply or revert stopped while writing it; the next apply or revert puts it back first",
}
"""What ``status`` (and ``verify``) say about each journaled file (keyed by :class:`FileState`, which
equals its value: ``FILE_STATES["patched"]`` works too)."""

REPLACED = frozenset({FileState.REINSTALLED, FileState.UPGRADED})
"""The states of a file a reinstall or an upgrade replaced (``apply`` patches it again; ``revert`` forgets it)."""


class RevertAction(str, Enum):
    """What ``revert`` does with one journaled file."""

    RESTORE = "restore"
    """Write the original bytes back (the file holds patchkit's bytes, or ``--force`` over an edit or deletion)."""
    FORGET = "forget"
    """Drop the entry: a reinstall or an upgrade replaced the file already."""
    REFUSE = "refuse"
    """Edited or deleted by hand: the whole revert writes nothing."""

    __str__ = str.__str__
    __format__ = str.__format__


def file_state(install: Install, entry: Entry, record: dict[str, str]) -> FileState:
    """Classify a journaled file: one of :data:`FILE_STATES`.

    Args:
        install: the install as it is now (its version may differ from the entry's).
        entry: the journal entry.
        record: ``RECORD`` digests of the installed distribution (:func:`patchkit.vllm.release.install.record_sha256`).
    """
    path = install.site_packages / entry.path
    current = sha256(path.read_bytes()) if path.exists() else None
    if current == entry.sha256_after:
        return FileState.PATCHED
    if entry.version != str(install.version):
        # another release now: its file (or its lack of one) is the installer's doing
        if current is None:
            return FileState.UPGRADED if entry.path not in record else FileState.MISSING
        return FileState.UPGRADED if current == record.get(entry.path) else FileState.EDITED
    if current is None:
        return FileState.MISSING
    if current == entry.sha256_before:
        return FileState.REINSTALLED
    return FileState.EDITED


def revert_action(state: FileState | str, force: bool) -> RevertAction:
    """What ``revert`` does with a journaled file in ``state`` (one of :data:`FILE_STATES`, or its value
    as ``status --json`` prints it).

    Returns:
        :attr:`RevertAction.RESTORE` (write the original bytes back: the file holds patchkit's bytes, or
        with ``force`` it was edited or deleted), :attr:`RevertAction.FORGET` (drop the entry: a reinstall
        or an upgrade replaced the file already) or :attr:`RevertAction.REFUSE` (edited or deleted by
        hand: the whole revert writes nothing; also for a value that names no state). Each equals its
        value (``"restore"``, ``"forget"``, ``"refuse"``).
    """
    try:
        state = FileState(state)
    except ValueError:
        return RevertAction.REFUSE
    if state is FileState.PATCHED or (force and state in (FileState.EDITED, FileState.MISSING)):
        return RevertAction.RESTORE
    if state in REPLACED:
        return RevertAction.FORGET
    return RevertAction.REFUSE


def journal_check(install: Install, journal: JournalRecords) -> Check:
    """``verify``'s line about the journaled files (it never fails): how many are patched, or each
    file whose state is another one (:data:`FILE_STATES`)."""
    record = record_sha256(install, journal.entries)
    interrupted = set(journal.unfinished().to_roll_back) if journal.pending else set()
    states = {
        path: FileState.INTERRUPTED if path in interrupted else file_state(install, e, record)
        for path, e in journal.entries.items()
    }
    odd = {p: st for p, st in states.items() if st is not FileState.PATCHED}
    detail = (
        f"{len(states)} file(s) patched by patchkit"
        if not odd
        else "; ".join(f"{p}: {FILE_STATES[st]}" for p, st in sorted(odd.items()))
    )
    return Check("patchkit journal", None, detail)
