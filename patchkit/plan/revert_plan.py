"""What ``revert`` does with each journaled file in its scope, decided before anything is written.

Each file's :class:`~patchkit.plan.file_states.FileState` gives its
:class:`~patchkit.plan.file_states.RevertAction`; one file that must not be touched (edited or
deleted by hand, without ``--force``) makes the whole revert refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from patchkit.plan.file_states import FILE_STATES, FileState, RevertAction, file_state, revert_action
from patchkit.results import RevertedFile
from patchkit.store.records import JournalRecords
from patchkit.vllm.release.install import Install, record_sha256

if TYPE_CHECKING:
    from patchkit.plan.arch_scope import Narrowing  # the planning chain, which a plain 'revert' never loads


@dataclass(frozen=True)
class RevertPlan:
    """The files a revert writes, and what it reports for each.

    Attributes:
        restore: journaled files that get their original bytes back (and are forgotten).
        rewrites: journaled files rewritten with only the patches that stay (``revert --arch``), with their new bytes.
        forget: entries dropped without writing (a reinstall or an upgrade replaced the file).
        files: one :class:`~patchkit.results.RevertedFile` per file in scope, sorted by path.
        refused: True when a file must not be touched: nothing is written.
    """

    restore: list[str]
    rewrites: dict[str, bytes]
    forget: list[str]
    files: list[RevertedFile]
    refused: bool


def plan_revert(
    install: Install,
    journal: JournalRecords,
    force: bool,
    narrow: Narrowing | None = None,
    rewrite: dict[str, bytes] | None = None,
    guard_edits: dict[str, tuple[str, ...]] | None = None,
) -> RevertPlan:
    """Decide, per journaled file in scope, what the revert does (nothing is written here).

    Args:
        install: the install as it is now.
        journal: its journal, read under the lock (after the rollback of an unfinished run).
        force: restore files edited or deleted by hand too.
        narrow: ``revert --arch``'s scope (:func:`patchkit.plan.arch_scope.narrowing`), or None for every file.
        rewrite: the new bytes of the files that keep patches (:func:`patchkit.plan.arch_scope.rewritten`).
        guard_edits: ``{path: patch ids}`` of patchkit's guard files edited since it wrote them, which
            the revert would delete or rewrite (:func:`patchkit.guard.guard.edited`; the caller leaves
            it empty under ``--force``): each blocks the revert like an edited vLLM file.
    """
    scope = narrow.files if narrow is not None else sorted(journal.entries)
    record = record_sha256(install, list(scope))
    restore: list[str] = []
    rewrites: dict[str, bytes] = {}
    forget: list[str] = []
    files: list[RevertedFile] = []
    planned: list[tuple[str, FileState, list[str]]] = []  # path, state, patches: the files to write
    refused = bool(guard_edits)
    for path, patches in sorted((guard_edits or {}).items()):
        files.append(
            RevertedFile(
                path,
                False,
                "a file of patchkit's guard, changed since patchkit wrote it; not touched",
                patches,
                "blocking",
            )
        )
    for path in scope:
        entry = journal.entries[path]
        state = file_state(install, entry, record)
        action = revert_action(state, force)
        if action is RevertAction.RESTORE:
            if rewrite is not None and path in rewrite:
                rewrites[path] = rewrite[path]
            else:
                restore.append(path)
            planned.append((path, state, entry.patches))
        elif action is RevertAction.FORGET:
            forget.append(path)
            files.append(
                RevertedFile(path, False, f"nothing to revert: {FILE_STATES[state]}", entry.patches, "forgotten")
            )
        else:
            refused = True
            files.append(RevertedFile(path, False, f"{FILE_STATES[state]}; not touched", entry.patches, "blocking"))
    for path, state, patches in planned:
        if refused:
            files.append(RevertedFile(path, False, "not restored: the revert was refused", patches, "held back"))
        elif path in rewrites:
            files.append(_rewritten(path, patches, narrow))
        else:
            how = "original bytes restored" + (
                f" (--force; the file was {state.value})" if state is not FileState.PATCHED else ""
            )
            files.append(RevertedFile(path, True, how, patches, "restored"))
    for path, why in narrow.kept if narrow is not None else ():  # named, never written (issue 42, finding 9)
        files.append(RevertedFile(path, False, why, journal.entries[path].patches, "kept"))
    return RevertPlan(restore, rewrites, forget, sorted(files, key=lambda f: f.path), refused)


def _rewritten(path: str, patches: list[str], narrow: Narrowing) -> RevertedFile:
    """A file a scoped revert rewrites with the patches that stay, with who needs them (issue 42, finding 9)."""
    from patchkit.plan.arch_scope import serves  # lazy: only a scoped revert rewrites; see TYPE_CHECKING above

    gone = ", ".join(sorted(set(patches) - narrow.keep))
    kept = serves(set(patches) & narrow.keep, narrow.staying)
    return RevertedFile(path, True, f"rewritten without {gone}; kept: {kept}", patches, "rewritten")
