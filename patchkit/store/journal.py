"""The journal: what patchkit changed in an install, the original bytes, and atomic writes.

State lives beside the install it describes, in ``<site-packages>/.patchkit/<distribution>/``,
owned by the owner of site-packages (also when root runs patchkit on a user's environment):

- ``journal.json``: ``format`` (:data:`FORMAT`), one entry per changed file (path relative to
  site-packages, SHA-256 of the original and of what patchkit wrote, patch ids, vLLM version,
  time), plus, while an ``apply`` or a ``revert`` is writing, a ``pending`` record of the files it
  is changing (digest before and after) and ``pending_operation``;
- ``originals/<sha256>``: the original bytes of every journaled file (and, while a run writes,
  the bytes each of its files had before it), so revert and rollback are exact;
and an exclusive ``flock`` on the site-packages folder itself, held while a command plans and
writes, so two runs on one install never interleave.

Every file write is atomic (a temporary ``.<name>.*.patchkit-tmp`` in the same folder, fsync,
then ``os.replace``) and keeps the file's mode and owner; ``os.replace`` gives the path a new
inode, so a hard link shared with another path (an installer's cache) keeps its bytes. The
bytecode of a changed file is removed wherever the interpreter keeps it (``__pycache__`` and a
``pycache_prefix``), in every invalidation mode, so Python recompiles it.

A run that is killed leaves its ``pending`` record; the next ``apply`` or ``revert`` puts the
files it had written back to their bytes from before it (:meth:`Journal.recover`) and removes its
temporary files (:meth:`Journal.sweep`). SIGINT/SIGTERM during a write are handled in-process:
the run puts back what it wrote and raises :class:`~patchkit.errors.Interrupted`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from patchkit import interrupt, settings
from patchkit.store import preflight
from patchkit.errors import Interrupted, StateError
from patchkit.results import PendingFile, PendingRun

STATE_DIR = ".patchkit"
FORMAT = 1
"""The journal's format; a journal of another format is refused (written by another patchkit)."""
LOCK_TIMEOUT_S: float | None = None
"""How long a run waits for another run on the same install, in seconds; None: ``PATCHKIT_LOCK_TIMEOUT`` (30)."""
TMP_SUFFIX = ".patchkit-tmp"
OPERATIONS = ("apply", "revert")


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Entry:
    """One journaled file.

    Attributes:
        path: relative to site-packages, POSIX form.
        sha256_before: digest of the original bytes (kept in ``originals/``); None for a file
            patchkit created (the guard's, :mod:`patchkit.guard.guard`): its revert deletes it.
        sha256_after: digest of the bytes patchkit last wrote.
        patches: ids of the patches in the file.
        vllm_version: the release the file belonged to when patched.
        applied_at: UTC time of the last write, ISO 8601.
    """

    path: str
    sha256_before: str | None
    sha256_after: str
    patches: list[str]
    vllm_version: str
    applied_at: str


@dataclass
class PlannedWrite:
    """A file a run is about to change: its current (original) and new bytes (``before`` None: it is created)."""

    path: str
    before: bytes | None
    after: bytes
    patches: list[str]


@dataclass
class _State:
    entries: dict[str, Entry] = field(default_factory=dict)
    pending: list[dict[str, str | None]] = field(default_factory=list)
    operation: str = "apply"


class _Stop(Exception):
    """A signal was received; the run stops at this safe point and puts back what it wrote."""


def os_hint(exc: OSError, folder: Path, otherwise: str) -> str:
    """The hint for a failed write: a full disk and a read-only mount are named as such.

    Args:
        exc: the error; its ``errno`` decides (ENOSPC, EDQUOT, EROFS; else ``otherwise``).
        folder: the folder that could not be written, for the hint.
        otherwise: the hint for every other error (permissions, for instance).
    """
    if exc.errno == errno.ENOSPC:
        return f"the file system holding {folder} is full: free some space, then run the command again"
    if exc.errno == errno.EDQUOT:
        return f"your disk quota on the file system holding {folder} is used up: free some space, then run the command again"
    if exc.errno == errno.EROFS:
        return read_only_hint(folder)
    return otherwise


def read_only_hint(folder: Path) -> str:
    """The hint for an install on a read-only mount (the same for every user, root included)."""
    return (f"{folder} is on a read-only file system: patchkit cannot change this install there; "
            "remount it read-write, or run patchkit where the image or environment is built")


def write_atomic(path: Path, data: bytes, owner: tuple[int, int] | None = None) -> None:
    """Replace ``path`` with ``data`` atomically, keeping its permission bits and owner.

    Args:
        path: the file (created if missing, mode 0644).
        data: its new bytes.
        owner: ``(uid, gid)`` to give the file when run as root (patchkit's state files take
            the owner of site-packages); None: keep the existing file's owner.
    Raises:
        OSError: the folder is not writable, or the disk is full (the old file is untouched and
            no temporary file is left).
    """
    st = path.stat() if path.exists() else None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st else 0o644)
        want = owner if owner is not None else ((st.st_uid, st.st_gid) if st is not None else None)
        if want is not None and want != (os.getuid(), os.getgid()):
            try:
                os.chown(tmp, *want)  # root keeps the owner; others were checked beforehand (preflight)
            except PermissionError:
                pass
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def bytecode_of(path: Path, pycache_prefix: Path | None = None, spellings: tuple[Path, ...] = ()) -> list[Path]:
    """Every compiled file of the source ``path`` the interpreter could load instead of it.

    Python looks in ``__pycache__/<stem>.<tag>[.opt-N].pyc`` beside the source, or, with
    ``sys.pycache_prefix`` set (``PYTHONPYCACHEPREFIX`` or ``-X pycache_prefix``), in
    ``<prefix>/<absolute folder of the source>/<stem>.<tag>[.opt-N].pyc`` (CPython's
    ``importlib._bootstrap_external.cache_from_source``). Every invalidation mode (timestamp,
    checked and unchecked hash) uses these names, so removing them makes Python recompile.

    Args:
        path: the source file, under the site-packages folder as resolved.
        pycache_prefix: the target interpreter's ``sys.pycache_prefix``, or None.
        spellings: other absolute spellings of the source's folder (a site-packages reached
            through a symbolic link), also looked up under the prefix.
    """
    folders = [path.parent / "__pycache__"]
    if pycache_prefix is not None:
        for parent in (path.parent, *spellings):
            folders.append(Path(pycache_prefix) / str(parent).lstrip(os.sep))
    out: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            out.extend(sorted(folder.glob(f"{path.stem}.*.pyc")))
    return out


class Journal:
    """The journal of one distribution in one site-packages directory.

    Args:
        site_packages: the install's site-packages folder.
        distribution: ``"vllm"``.
        pycache_prefix: the target interpreter's ``sys.pycache_prefix`` (bytecode to drop), or None.
        spellings: other spellings of site-packages the interpreter may use (symbolic links).
    Raises:
        StateError: ``journal.json`` exists but cannot be read, or has another format.
    """

    def __init__(self, site_packages: Path, distribution: str = "vllm", pycache_prefix: Path | None = None,
                 spellings: tuple[Path, ...] = ()) -> None:
        self.site_packages = Path(site_packages)
        self.dir = self.site_packages / STATE_DIR / distribution
        self.pycache_prefix = pycache_prefix
        self.spellings = spellings
        self._state = self._read()

    # -- reading ----------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """``journal.json``."""
        return self.dir / "journal.json"

    @property
    def entries(self) -> dict[str, Entry]:
        """Journaled files by path."""
        return self._state.entries

    @property
    def pending(self) -> list[dict[str, str | None]]:
        """Files of a run that started writing and did not finish (empty normally)."""
        return self._state.pending

    @property
    def pending_operation(self) -> str:
        """``"apply"`` or ``"revert"``: what the unfinished run was doing."""
        return self._state.operation

    @property
    def owner(self) -> tuple[int, int]:
        """``(uid, gid)`` of site-packages: the owner patchkit's state files get."""
        st = self.site_packages.stat()
        return st.st_uid, st.st_gid

    def _read(self) -> _State:
        if not self.path.exists():
            return _State()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("the top level is not an object")
            fmt = raw.get("format")
            if fmt != FORMAT:
                newer = isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT
                raise StateError(
                    f"cannot read patchkit's journal {self.path}: it has format {fmt!r}; this patchkit reads format {FORMAT}",
                    "use the patchkit that wrote it (a newer one)" if newer else
                    "restore it from a backup, or reinstall vLLM and delete the .patchkit folder",
                )
            entries = {e["path"]: Entry(**e) for e in raw.get("entries", [])}
            pending = list(raw.get("pending", []))
            for item in pending:
                if (not isinstance(item, dict) or not {"path", "sha256_before", "sha256_after"} <= set(item)
                        or not all(isinstance(item[k], (str, type(None))) for k in ("sha256_before", "sha256_after"))):
                    raise ValueError("a pending record lacks path or digests")
            operation = raw.get("pending_operation", "apply")
            if operation not in OPERATIONS:
                raise ValueError(f"pending_operation {operation!r} is not one of {', '.join(OPERATIONS)}")
            for path in [*entries, *(item["path"] for item in pending)]:
                if not isinstance(path, str) or path.startswith("/") or ".." in Path(path).parts:
                    raise ValueError(f"path {path!r} is not inside site-packages")
            for e in entries.values():
                if not (all(isinstance(getattr(e, k), str) for k in ("sha256_after", "vllm_version"))
                        and isinstance(e.sha256_before, (str, type(None)))):
                    raise ValueError(f"the entry of {e.path} has a digest or version that is not a string")
            return _State(entries=entries, pending=pending, operation=operation)
        except StateError:
            raise
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise StateError(
                f"cannot read patchkit's journal {self.path}: {exc}",
                "restore it from a backup, or reinstall vLLM and delete the .patchkit folder",
            ) from exc

    def original(self, entry: Entry) -> bytes | None:
        """The original bytes of a journaled file; None for a file patchkit created (revert deletes it).

        Raises:
            StateError: the stored copy is missing or does not match its recorded digest.
        """
        if entry.sha256_before is None:
            return None
        return self._stored(entry.sha256_before, f"the original {entry.path}")

    def _current(self, relpath: str) -> str | None:
        path = self.site_packages / relpath
        return sha256(path.read_bytes()) if path.is_file() else None

    def unfinished(self) -> PendingRun | None:
        """The run that stopped while writing, and the leftovers of interrupted runs, or None.

        Each file of the pending record is ``written`` (it holds what that run was writing),
        ``not reached`` (as before that run), ``missing`` or ``changed since``.
        """
        files = []
        for item in self._state.pending:
            current = self._current(item["path"])
            if current == item["sha256_after"] and current != item["sha256_before"]:
                state = "written"
            elif current == item["sha256_before"]:
                state = "not reached"
            elif current is None:
                state = "missing"
            else:
                state = "changed since"
            files.append(PendingFile(item["path"], state))
        leftovers = tuple(p.relative_to(self.site_packages).as_posix() for p in self.leftovers())
        if not files and not leftovers:
            return None
        return PendingRun(self._state.operation, tuple(files), leftovers)

    def leftovers(self) -> list[Path]:
        """Temporary files of interrupted writes, and stored copies nothing refers to.

        Looked for in patchkit's state folder and beside every journaled or pending file.
        """
        out: list[Path] = []
        folders = {self.site_packages / p for p in [*self._state.entries, *(i["path"] for i in self._state.pending)]}
        for f in sorted(folders):
            if f.parent.is_dir():
                out.extend(sorted(f.parent.glob(f".{f.name}.*{TMP_SUFFIX}")))
        if self.dir.is_dir():
            out.extend(sorted(self.dir.glob(f"*{TMP_SUFFIX}")))
            originals = self.dir / "originals"
            if originals.is_dir():
                keep = self._referenced()
                out.extend(sorted(f for f in originals.iterdir() if f.name not in keep))
        if not self.path.exists():  # folders of a first run that stopped before its journal was saved
            out.extend(d for d in (self.dir / "originals", self.dir) if d.is_dir())
            if self.dir.parent.is_dir() and not [p for p in self.dir.parent.iterdir() if p != self.dir]:
                out.append(self.dir.parent)
        return out

    def rolled_back_view(self) -> tuple[dict[str, bytes], list[str]]:
        """What :meth:`recover` would write, without writing: ``({path: bytes}, paths rolled back)``.

        A dry run plans from these bytes (and from a journal without the pending record), so it
        plans exactly what the real run will do after its rollback.

        Raises:
            StateError: a stored copy the rollback needs is missing or damaged.
        """
        overrides: dict[str, bytes] = {}
        for item in self._state.pending:
            current = self._current(item["path"])
            if current == item["sha256_after"] and current != item["sha256_before"] and item["sha256_before"]:
                overrides[item["path"]] = self._stored(item["sha256_before"], item["path"])
        return overrides, sorted(overrides)

    def without_pending(self) -> "Journal":
        """A copy of this journal, in memory, as it will be once :meth:`recover` has run."""
        copy = object.__new__(Journal)
        copy.site_packages, copy.dir = self.site_packages, self.dir
        copy.pycache_prefix, copy.spellings = self.pycache_prefix, self.spellings
        copy._state = _State(dict(self._state.entries), [], self._state.operation)
        return copy

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
                os_hint(exc, self.site_packages,
                        "run patchkit as the user that owns the vLLM install, or make site-packages writable"),
            ) from exc

    @contextlib.contextmanager
    def lock(self, on_wait: Callable[[Path, float], None] | None = None) -> Iterator[None]:
        """Hold this install's lock while planning and writing; wait at most :data:`LOCK_TIMEOUT_S` s.

        The lock is an exclusive ``flock`` on the site-packages folder itself: every patchkit run
        on this install contends for it whatever its ``TMPDIR``, user or path spelling, and it
        leaves no file behind.

        Args:
            on_wait: called once with the site-packages folder and the timeout (seconds) when
                another run holds the lock and this one starts to wait.

        Raises:
            StateError: another patchkit run held the lock for longer than the timeout, or the
                folder cannot be opened.
            UsageError: ``PATCHKIT_LOCK_TIMEOUT`` is not a number of seconds.
            Interrupted: SIGINT/SIGTERM while waiting (nothing was written).
        """
        timeout = LOCK_TIMEOUT_S if LOCK_TIMEOUT_S is not None else settings.lock_timeout()
        try:
            fd = os.open(self.site_packages, os.O_RDONLY)
        except OSError as exc:
            raise StateError(f"cannot open {self.site_packages} to lock it: {exc.strerror or exc}",
                             "check that the folder exists and is readable") from exc
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if on_wait is not None:
                        on_wait(self.site_packages, timeout)
                        on_wait = None
                    signum = interrupt.received()
                    if signum is not None:
                        raise Interrupted(signum, f"interrupted by {interrupt.name(signum)} while waiting for "
                                                  "another patchkit run; nothing was written") from None
                    if time.monotonic() >= deadline:
                        raise StateError(
                            f"another patchkit run is changing {self.site_packages} (waited {timeout:g} s)",
                            "wait for it to finish, then run the command again",
                        ) from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _save(self) -> None:
        try:
            self._write_state()
        except OSError as exc:
            raise StateError(
                f"cannot write patchkit's journal {self.path}: {exc.strerror or exc}",
                "the vLLM files are as reported above; "
                + os_hint(exc, self.dir, "make the .patchkit folder writable and run the command again"),
            ) from exc

    def _write_state(self) -> None:
        data = {
            "format": FORMAT,
            "entries": [asdict(e) for e in sorted(self._state.entries.values(), key=lambda e: e.path)],
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
        return sorted({pyc.parent for p in relpaths for pyc in bytecode_of(self.site_packages / p, self.pycache_prefix)})

    def preflight(self, relpaths: list[str]) -> None:
        """Check, before the first write, that every file and folder involved can be written keeping owners.

        Raises:
            StateError: one cannot (:mod:`patchkit.store.preflight`); nothing was written.
        """
        preflight.check([self.site_packages / p for p in relpaths], self._bytecode_folders(relpaths),
                        self.dir, self.owner)

    def sweep(self, leftovers: list[Path] | None = None) -> list[str]:
        """Remove what interrupted runs left (:meth:`leftovers`, or those given); return their paths.

        Run under the lock (:meth:`recover` does). Removes the state folder when nothing is journaled.
        """
        removed = []
        for f in (self.leftovers() if leftovers is None else [*leftovers, *self.leftovers()]):
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
            todo = [i for i in self._state.pending
                    if self._current(i["path"]) == i["sha256_after"] and i["sha256_after"] != i["sha256_before"]]
            data = {i["path"]: (self._stored(i["sha256_before"], i["path"]) if i["sha256_before"] else None)
                    for i in todo}
            self.preflight([i["path"] for i in todo])
            for item in todo:
                self._write_file(item["path"], data[item["path"]])
                rolled.append(item["path"])
            self._state.pending = []
            self._save_or_remove()
        self.sweep(stale)
        return rolled

    def _stored(self, digest: str, what: str) -> bytes:
        path = self.dir / "originals" / digest
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StateError(f"patchkit's stored copy of {what} is missing ({path})",
                             "reinstall vLLM (pip install --force-reinstall --no-deps vllm==X.Y.Z)") from exc
        if sha256(data) != digest:
            raise StateError(f"patchkit's stored copy of {what} is damaged ({path})",
                             "reinstall vLLM (pip install --force-reinstall --no-deps vllm==X.Y.Z)")
        return data

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
                {"path": p, "sha256_before": sha256(b) if b is not None else None,
                 "sha256_after": sha256(a) if a is not None else None} for p, b, a in changes
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
            restored_all = self._put_back(done, saved)
            signum = interrupt.received()
            written = ", ".join(p for p, _, _ in done)
            if isinstance(exc, _Stop) and signum is not None:
                if restored_all:
                    raise Interrupted(signum, f"interrupted by {interrupt.name(signum)} during {operation}: "
                                              + (f"put back {written}; " if done else "")
                                              + "every file is as it was before this run",
                                      f"run 'patchkit {operation}' again to {operation} the patches") from None
                raise Interrupted(signum, f"interrupted by {interrupt.name(signum)} during {operation}: wrote {written} "
                                          "and could not put every file back",
                                  "run 'patchkit revert' (or 'patchkit apply') to finish: it puts them back first") from None
            if isinstance(exc, StateError):
                problem, hint = exc.message, exc.hint or (
                    "check that you may write the vLLM install (its owner and permissions), then run the command again")
            else:
                problem = f"could not write {getattr(exc, 'filename', None) or 'a file'}: {exc.strerror or exc}"
                hint = os_hint(exc, self.site_packages,
                               "check that you may write the vLLM install (its owner and permissions), then run the command again")
            raise StateError(
                f"{problem}; "
                + ("every file was put back" if restored_all else "the next patchkit command will put the rest back"),
                hint,
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

    def commit(self, writes: list[PlannedWrite], vllm_version: str) -> None:
        """Write every planned file, or none: on any error or signal all files get their bytes back.

        Every file and folder is checked writable (keeping owners) first. Before the first file
        is replaced, the bytes each file has now are stored and a ``pending`` record is saved, so
        a run killed midway is rolled back by the next command (:meth:`recover`).

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
                if entry is not None and before != entry.sha256_after:
                    entry = None  # reinstalled or upgraded since: these bytes are the new original
                self._state.entries[w.path] = Entry(
                    path=w.path,
                    sha256_before=entry.sha256_before if entry else before,
                    sha256_after=sha256(w.after),
                    patches=sorted(set(entry.patches if entry else []) | set(w.patches)),
                    vllm_version=vllm_version,
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

    def narrow(self, restore: list[str], rewrite: dict[str, bytes], keep: dict[str, list[str]],
               vllm_version: str, forget: list[str] = ()) -> None:
        """A partial revert (``revert --arch``), all or none: some files get their originals back,
        others new bytes that hold only the patches that stay.

        Args:
            restore: journaled files to restore and forget.
            rewrite: journaled files to rewrite, with their new bytes; each keeps its original.
            keep: the patch ids each rewritten file holds afterwards.
            vllm_version: the release the new bytes are for.
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
        current = {p: (self.site_packages / p).read_bytes() if (self.site_packages / p).is_file() else None for p in paths}
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

        def finish() -> None:
            for p in [*restore, *forget]:
                self._state.entries.pop(p, None)
            for p, after in rewrite.items():
                entry = self._state.entries[p]
                self._state.entries[p] = Entry(path=p, sha256_before=entry.sha256_before, sha256_after=sha256(after),
                                               patches=sorted(keep[p]), vllm_version=vllm_version, applied_at=now)

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

    def _referenced(self) -> set[str]:
        keep = {e.sha256_before for e in self._state.entries.values() if e.sha256_before}
        keep |= {p["sha256_before"] for p in self._state.pending if p["sha256_before"]}
        return keep

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
