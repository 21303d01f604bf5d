"""The journal's transaction: every change to an install is written all or nothing, and can be put back.

The records (``journal.json``, ``originals/``) are described and read in :mod:`patchkit.store.records`;
files are written atomically and their bytecode dropped (:mod:`patchkit.store.files`); an exclusive
``flock`` on the site-packages folder itself (:mod:`patchkit.store.lock`) is held while a command
plans and writes, so two runs on one install never interleave.

A run that is killed leaves its ``pending`` record; the next ``apply`` or ``revert`` puts the
files it had written back to their bytes from before it (:meth:`Journal.recover`) and removes its
temporary files (:meth:`Journal.sweep`). SIGINT/SIGTERM during a write are handled in-process:
the run puts back what it wrote and raises :class:`~patchkit.errors.Interrupted`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from pathlib import Path
from typing import Callable, Iterator, NoReturn

from patchkit import interrupt
from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.errors import Interrupted, StateError
from patchkit.results import Check
from patchkit.store import lock as lock_mod
from patchkit.store import preflight
from patchkit.store.files import TMP_SUFFIX, bytecode_of, os_hint, sha256, write_atomic
from patchkit.store.records import FORMAT, Entry, JournalRecords, PlannedWrite
from patchkit.vllm.release.install import Install


class _Stop(Exception):
    """A signal was received; the run stops at this safe point and puts back what it wrote."""


class Journal(JournalRecords):
    """The journal of one distribution in one site-packages directory: its records
    (:class:`~patchkit.store.records.JournalRecords`, same arguments and errors) and the transaction
    that writes them.
    """

    # -- writing ----------------------------------------------------------------------

    def _ensure_dir(self) -> None:
        created = [d for d in (self.dir.parent, self.dir, self.dir / "originals") if not d.exists()]
        try:
            (self.dir / "originals").mkdir(parents=True, exist_ok=True)
            owner = self.owner
            if os.geteuid() == 0 and owner != (0, 0):
                for d in created:
                    os.chown(d, *owner)
        except OSError as exc:
            raise StateError(
                f"cannot create patchkit's state folder {self.dir}: {exc.strerror or exc}",
                os_hint(
                    exc,
                    self.site_packages,
                    f"run patchkit as the user that owns the {self.engine} install, or make site-packages writable",
                ),
            ) from exc

    @contextlib.contextmanager
    def lock(self, on_wait: Callable[[Path, float], None] | None = None) -> Iterator[None]:
        """Hold this install's lock while planning and writing (:func:`patchkit.store.lock.hold`: the
        exclusive ``flock`` on site-packages; ``on_wait`` and the errors are documented there)."""
        with lock_mod.hold(self.site_packages, on_wait):
            yield

    def _save(self) -> None:
        try:
            self._write_state()
        except OSError as exc:
            raise StateError(
                f"cannot write patchkit's journal {self.path}: {exc.strerror or exc}",
                f"the {self.engine} files are as reported above; "
                + os_hint(exc, self.dir, "make the .patchkit folder writable and run the command again"),
            ) from exc

    def _write_state(self) -> None:
        data = {
            "format": FORMAT,
            "target": self.dir.name,
            "entries": [e.to_json(self.version_key) for _, e in sorted(self._state.entries.items())],
            "pending": self._state.pending,
        }
        if self._state.pending:
            data["pending_operation"] = self._state.operation
        self._ensure_dir()
        write_atomic(self.path, (json.dumps(data, indent=2) + "\n").encode(), owner=self.owner)

    def _save_or_remove(self) -> None:
        """Save the journal; with nothing journaled, remove the state folder instead (journal first)."""
        if self._state.entries or self._state.pending:
            self._save()
            self._prune_originals()
        else:
            self.path.unlink(missing_ok=True)
            self.remove_if_empty()

    def _write_file(self, relpath: str, data: bytes | None) -> None:
        """Write (or, for None, delete) a file and drop its bytecode.

        A file created in a folder that does not exist yet gets its folders (the guard's
        distribution); deleting a file removes the folders it leaves empty (its ``__pycache__``
        included), up to site-packages.
        """
        path = self.site_packages / relpath
        if data is None:
            path.unlink(missing_ok=True)
        else:
            if not path.parent.is_dir():
                created = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
                path.parent.mkdir(parents=True)
                owner = self.owner
                if os.geteuid() == 0 and owner != (0, 0):
                    for d in created:
                        os.chown(d, *owner)  # as the state folder: the folders belong to site-packages' owner
            write_atomic(path, data, owner=None if path.exists() else self.owner)
        for pyc in bytecode_of(path, self.pycache_prefix, tuple(s / Path(relpath).parent for s in self.spellings)):
            pyc.unlink(missing_ok=True)
        if data is None:
            folder = path.parent
            with contextlib.suppress(OSError):
                (folder / "__pycache__").rmdir()
            while folder != self.site_packages and self.site_packages in folder.parents:
                try:
                    folder.rmdir()
                except OSError:
                    break  # not empty: other files live there
                folder = folder.parent

    def _store(self, data: bytes) -> str:
        digest = sha256(data)
        stored = self.dir / "originals" / digest
        if not stored.exists():
            write_atomic(stored, data, owner=self.owner)
        return digest

    @staticmethod
    def _check_stop() -> None:
        if interrupt.received() is not None:
            raise _Stop()

    def _bytecode_folders(self, relpaths: list[str]) -> list[Path]:
        return sorted(
            {pyc.parent for p in relpaths for pyc in bytecode_of(self.site_packages / p, self.pycache_prefix)}
        )

    def preflight(self, relpaths: list[str]) -> None:
        """Check, before the first write, that every file and folder involved can be written keeping owners.

        Raises:
            StateError: one cannot (:mod:`patchkit.store.preflight`); nothing was written.
        """
        files = [self.site_packages / p for p in relpaths]
        preflight.check(files, self._bytecode_folders(relpaths), self.dir, self.owner, self.engine)

    def sweep(self, leftovers: list[Path] | None = None) -> list[str]:
        """Remove what interrupted runs left (:meth:`leftovers`, or those given); return their paths.

        Run under the lock (:meth:`recover` does). Removes the state folder when nothing is journaled.
        """
        removed = []
        for f in self.leftovers() if leftovers is None else [*leftovers, *self.leftovers()]:
            if not f.exists():
                continue
            try:
                f.rmdir() if f.is_dir() else f.unlink()
                removed.append(f.relative_to(self.site_packages).as_posix())
            except OSError:
                pass  # left for the next run; status names it
        self.remove_if_empty()
        return removed

    def recover(self) -> list[str]:
        """Put back the files of a run that was killed while writing; return their paths.

        A file whose bytes are what that run was writing gets back the bytes it had before that
        run (an apply's original, a revert's patched bytes); a file the run had not reached, or
        changed since, is left alone. Then leftovers (temporary files, unused copies) are removed.

        Raises:
            StateError: a stored copy is missing, or a file cannot be written (checked first).
            Interrupted: SIGINT/SIGTERM arrived; the rollback finished first (it is idempotent).
        """
        rolled: list[str] = []
        stale = self.leftovers()  # while the pending record still names the folders to look in
        if self._state.pending:
            todo = [
                i
                for i in self._state.pending
                if self._current(i["path"]) == i["sha256_after"] and i["sha256_after"] != i["sha256_before"]
            ]
            data = {
                i["path"]: (self._stored(i["sha256_before"], i["path"]) if i["sha256_before"] else None) for i in todo
            }
            self.preflight([i["path"] for i in todo])
            for item in todo:
                self._write_file(item["path"], data[item["path"]])
                rolled.append(item["path"])
            self._state.pending = []
            self._save_or_remove()
        self.sweep(stale)
        return rolled

    def _run(self, operation: str, changes: list[tuple[str, bytes | None, bytes | None]], finish) -> None:
        """Write ``changes`` (path, bytes before, bytes after; None = absent) with a pending record.

        Order: store the before-bytes, save the pending record, write each file (a safe point for
        signals after each), then ``finish()`` updates the entries and the journal is saved
        without the pending record (the commit point). On an error or a signal before the commit
        point every written file gets its bytes back.
        """
        saved = (dict(self._state.entries), list(self._state.pending), self._state.operation)
        done: list[tuple[str, bytes | None, bytes | None]] = []
        try:
            self._check_stop()
            self._ensure_dir()
            for _, before, _ in changes:
                if before is not None:
                    self._store(before)
            self._check_stop()
            self._state.pending = [
                {
                    "path": p,
                    "sha256_before": sha256(b) if b is not None else None,
                    "sha256_after": sha256(a) if a is not None else None,
                }
                for p, b, a in changes
            ]
            self._state.operation = operation
            self._save()
            self._check_stop()
            for change in changes:
                self._write_file(change[0], change[2])
                done.append(change)
                self._check_stop()
            finish()
            self._state.pending = []
            self._save_or_remove()
        except (OSError, StateError, _Stop) as exc:
            self._fail(operation, exc, done, saved)

    def _fail(
        self, operation: str, exc: BaseException, done: list[tuple[str, bytes | None, bytes | None]], saved
    ) -> NoReturn:
        """After an error or a signal before :meth:`_run`'s commit point: put back the files written so far
        (:meth:`_put_back`), then raise what says so. Called from :meth:`_run`'s ``except`` block only.

        Args:
            operation: ``"apply"`` or ``"revert"``, for the message and the next step.
            exc: what stopped the run (an ``OSError``, a :class:`StateError`, or a signal's ``_Stop``).
            done: the changes written so far, in order; saved: the journal's state before the run.
        Raises:
            Interrupted: a signal stopped the run (``put_back`` when every file went back).
            StateError: a file or the journal could not be written (chained from ``exc``).
        """
        restored_all = self._put_back(done, saved)
        signum = interrupt.received()
        written = ", ".join(p for p, _, _ in done)
        if isinstance(exc, _Stop) and signum is not None:
            if restored_all:
                raise Interrupted(
                    signum,
                    f"interrupted by {interrupt.name(signum)} during {operation}: "
                    + (f"put back {written}; " if done else "")
                    + "every file is as it was before this run",
                    "",
                    NextStep(
                        patchkit_argv(operation),
                        f"again, to {operation} the patches",
                        effect=Effect.PATCHES if operation == "apply" else Effect.RESTORES,
                    ),
                    put_back=True,
                ) from None
            raise Interrupted(
                signum,
                f"interrupted by {interrupt.name(signum)} during {operation}: wrote {written} "
                "and could not put every file back",
                "",
                NextStep(
                    patchkit_argv("revert"),
                    "it puts them back first, then restores the originals",
                    effect=Effect.RESTORES,
                ),
            ) from None
        if isinstance(exc, StateError):
            problem, hint = (
                exc.message,
                exc.hint
                or (
                    f"check that you may write the {self.engine} install (its owner and permissions), "
                    "then run the command again"
                ),
            )
        else:
            problem = f"could not write {getattr(exc, 'filename', None) or 'a file'}: {exc.strerror or exc}"
            hint = os_hint(
                exc,
                self.site_packages,
                f"check that you may write the {self.engine} install (its owner and permissions), "
                "then run the command again",
            )
        raise StateError(
            f"{problem}; "
            + ("every file was put back" if restored_all else "the next patchkit command will put the rest back"),
            hint,
            cause=problem,
        ) from exc

    def _put_back(self, done: list[tuple[str, bytes | None, bytes | None]], saved) -> bool:
        """Give the files written so far their bytes back; restore the journal as it was. True if all went back."""
        restored_all = True
        for path, before, _ in reversed(done):
            try:
                self._write_file(path, before)
            except OSError:
                restored_all = False  # the pending record lets the next command finish it
        self._state.entries, pending, self._state.operation = dict(saved[0]), saved[1], saved[2]
        self._state.pending = pending if restored_all else self._state.pending
        try:
            self._save_or_remove()
        except (OSError, StateError):
            pass
        return restored_all

    def commit(self, writes: list[PlannedWrite], version: str, *, own: bool = False) -> None:
        """Write every planned file, or none: on any error or signal all files get their bytes back.

        Every file and folder is checked writable (keeping owners) first. Before the first file
        is replaced, the bytes each file has now are stored and a ``pending`` record is saved, so
        a run killed midway is rolled back by the next command (:meth:`recover`).

        A journaled file whose bytes changed since patchkit wrote them gets those bytes as its new
        original (a reinstall or an upgrade put them there), unless ``own``: the files are patchkit's
        own (the guard's, the watch's), whose original stays the journaled one ("absent").

        Raises:
            StateError: a file or the journal could not be written (nothing is left changed).
            Interrupted: SIGINT/SIGTERM before the journal was saved; every file was put back.
        """
        self.preflight([w.path for w in writes])
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

        def finish() -> None:
            for w in writes:
                entry = self._state.entries.get(w.path)
                before = sha256(w.before) if w.before is not None else None
                if entry is not None and before != entry.sha256_after and not own:
                    entry = None  # reinstalled or upgraded since: these bytes are the new original
                self._state.entries[w.path] = Entry(
                    path=w.path,
                    sha256_before=entry.sha256_before if entry else before,
                    sha256_after=sha256(w.after),
                    patches=sorted(set(entry.patches if entry else []) | set(w.patches)),
                    version=version,
                    applied_at=now,
                )

        self._run("apply", [(w.path, w.before, w.after) for w in writes], finish)

    def restore(self, paths: list[str], forget: list[str] = ()) -> None:
        """Write back the original bytes of the journaled ``paths`` and forget them (all or none).

        Like :meth:`commit`, the revert keeps a pending record (and a copy of the bytes each file
        has now), so a revert killed midway is put back by the next command.

        Args:
            paths: files to restore.
            forget: further entries to drop (files a reinstall already restored).
        Raises:
            StateError: an original is missing, or a file could not be written (files already
                restored are put back to what they were).
            Interrupted: SIGINT/SIGTERM before the journal was saved; every file was put back.
        """
        self.narrow(list(paths), {}, {}, "", forget)

    def narrow(
        self,
        restore: list[str],
        rewrite: dict[str, bytes],
        keep: dict[str, list[str]],
        version: str,
        forget: list[str] = (),
    ) -> None:
        """A partial revert (``revert --arch``), all or none: some files get their originals back,
        others new bytes that hold only the patches that stay.

        Args:
            restore: journaled files to restore and forget.
            rewrite: journaled files to rewrite, with their new bytes; each keeps its original.
            keep: the patch ids each rewritten file holds afterwards.
            version: the release the new bytes are for.
            forget: further entries to drop (files a reinstall already restored).
        Raises:
            StateError: an original is missing, or a file could not be written (files already
                written are put back to what they were).
            Interrupted: SIGINT/SIGTERM before the journal was saved; every file was put back.
        """
        data = {p: self.original(self._state.entries[p]) for p in restore}
        data.update(rewrite)
        paths = sorted(data)
        self.preflight(paths)
        current = {
            p: (self.site_packages / p).read_bytes() if (self.site_packages / p).is_file() else None for p in paths
        }
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

        def finish() -> None:
            for p in [*restore, *forget]:
                self._state.entries.pop(p, None)
            for p, after in rewrite.items():
                entry = self._state.entries[p]
                self._state.entries[p] = Entry(
                    path=p,
                    sha256_before=entry.sha256_before,
                    sha256_after=sha256(after),
                    patches=sorted(keep[p]),
                    version=version,
                    applied_at=now,
                )

        if not paths:
            finish()
            self._save_or_remove()
            return
        self._run("revert", [(p, current[p], data[p]) for p in paths], finish)

    def forget(self, paths: list[str]) -> None:
        """Drop journal entries (after a restore, or for files a reinstall already restored)."""
        for p in paths:
            self._state.entries.pop(p, None)
        self._save_or_remove()

    def remove_if_empty(self) -> None:
        """Delete the state folder (and ``.patchkit`` if nothing else is in it) once nothing is journaled.

        Site-packages is then as it was before patchkit: the journal, unused copies and
        temporary files go. Call it under the lock, on a journal read under that lock.
        """
        if self._state.entries or self._state.pending:
            return
        if not self.dir.exists():
            if self.dir.parent.is_dir():
                with contextlib.suppress(OSError):
                    self.dir.parent.rmdir()  # an empty .patchkit a first run left
            return
        self.path.unlink(missing_ok=True)
        originals = self.dir / "originals"
        if originals.is_dir():
            keep = self._referenced()
            for f in originals.iterdir():
                if f.name not in keep:
                    f.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                originals.rmdir()
        for f in self.dir.glob(f"*{TMP_SUFFIX}"):
            f.unlink(missing_ok=True)
        for folder in (self.dir, self.dir.parent):
            try:
                folder.rmdir()
            except OSError:
                return  # not empty: something else lives there

    def _prune_originals(self) -> None:
        keep = self._referenced()
        originals = self.dir / "originals"
        if originals.is_dir():
            for f in originals.iterdir():
                if f.name not in keep:
                    try:
                        f.unlink(missing_ok=True)
                    except OSError:
                        pass  # an unused copy left behind harms nothing; the journal no longer names it


def journal_for(install: Install, target: str = "vllm") -> Journal:
    """The journal of ``install`` for ``target``, knowing where its interpreter keeps bytecode."""
    return Journal(
        install.site_packages,
        target,
        install.pycache_prefix,
        install.spellings,
        (install.distribution, str(install.version)),
    )


def unfinished_check(journal: JournalRecords) -> Check | None:
    """A failing check naming an unfinished apply or revert (and leftovers), or None when there is none.

    Used by ``verify`` and ``doctor``: until the next apply or revert puts the written files back,
    the files are a mix of two states that neither run meant to leave.
    """
    run = journal.unfinished()
    if run is None:
        return None
    return Check("no unfinished patchkit run", False if run.unfinished else None, run.summary())
