"""The journal: what patchkit changed in an install, the original bytes, and atomic writes.

State lives beside the install it describes, in ``<site-packages>/.patchkit/<distribution>/``:

- ``journal.json``: one entry per changed file (path relative to site-packages, SHA-256 of the
  original and of what patchkit wrote, patch ids, vLLM version, time), plus a ``pending`` record
  while a run is writing;
- ``originals/<sha256>``: the original bytes of every journaled file, so revert is exact;
and an exclusive ``flock`` on the site-packages folder itself, held while a command plans and
writes, so two runs on one install never interleave.

Every file write is atomic (a temporary file in the same folder, fsync, then ``os.replace``) and
keeps the file's mode; ``os.replace`` gives the path a new inode, so a hard link shared with
another path (an installer's cache) keeps its bytes. The ``__pycache__`` entries of a changed
file are removed so Python recompiles it.
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

from patchkit.errors import StateError

STATE_DIR = ".patchkit"
FORMAT = 1
LOCK_TIMEOUT_S = float(os.environ.get("PATCHKIT_LOCK_TIMEOUT", "30"))
"""How long a run waits for another run on the same install (seconds; env ``PATCHKIT_LOCK_TIMEOUT``)."""


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Entry:
    """One journaled file.

    Attributes:
        path: relative to site-packages, POSIX form.
        sha256_before: digest of the original bytes (kept in ``originals/``).
        sha256_after: digest of the bytes patchkit last wrote.
        patches: ids of the patches in the file.
        vllm_version: the release the file belonged to when patched.
        applied_at: UTC time of the last write, ISO 8601.
    """

    path: str
    sha256_before: str
    sha256_after: str
    patches: list[str]
    vllm_version: str
    applied_at: str


@dataclass
class PlannedWrite:
    """A file a run is about to change: its current (original) and new bytes."""

    path: str
    before: bytes
    after: bytes
    patches: list[str]


@dataclass
class _State:
    entries: dict[str, Entry] = field(default_factory=dict)
    pending: list[dict[str, str]] = field(default_factory=list)


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
        return (f"{folder} is on a read-only file system: patchkit cannot change this install there; "
                "remount it read-write, or patch the image or environment it is built from")
    return otherwise


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, keeping its permission bits and owner.

    Raises:
        OSError: the folder is not writable, or the disk is full (the old file is untouched).
    """
    st = path.stat() if path.exists() else None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".patchkit-tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st else 0o644)
        if st is not None and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            try:
                os.chown(tmp, st.st_uid, st.st_gid)  # keep the owner when run as root
            except PermissionError:
                pass
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _drop_bytecode(path)


def _drop_bytecode(path: Path) -> None:
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


class Journal:
    """The journal of one distribution in one site-packages directory.

    Args:
        site_packages: the install's site-packages folder.
        distribution: ``"vllm"``.
    Raises:
        StateError: ``journal.json`` exists but cannot be read.
    """

    def __init__(self, site_packages: Path, distribution: str = "vllm") -> None:
        self.site_packages = Path(site_packages)
        self.dir = self.site_packages / STATE_DIR / distribution
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
    def pending(self) -> list[dict[str, str]]:
        """Files of a run that started writing and did not finish (empty normally)."""
        return self._state.pending

    def _read(self) -> _State:
        if not self.path.exists():
            return _State()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("the top level is not an object")
            entries = {e["path"]: Entry(**e) for e in raw.get("entries", [])}
            pending = list(raw.get("pending", []))
            for item in pending:
                if not isinstance(item, dict) or not {"path", "sha256_before", "sha256_after"} <= set(item):
                    raise ValueError("a pending record lacks path or digests")
            for path in [*entries, *(item["path"] for item in pending)]:
                if not isinstance(path, str) or path.startswith("/") or ".." in Path(path).parts:
                    raise ValueError(f"path {path!r} is not inside site-packages")
            return _State(entries=entries, pending=pending)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StateError(
                f"cannot read patchkit's journal {self.path}: {exc}",
                "restore it from a backup, or reinstall vLLM and delete the .patchkit folder",
            ) from exc

    def original(self, entry: Entry) -> bytes:
        """The original bytes of a journaled file.

        Raises:
            StateError: the stored copy is missing or does not match its recorded digest.
        """
        return self._stored(entry.sha256_before, f"the original {entry.path}")

    # -- writing ----------------------------------------------------------------------

    def _ensure_dir(self) -> None:
        try:
            (self.dir / "originals").mkdir(parents=True, exist_ok=True)
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
        """
        try:
            fd = os.open(self.site_packages, os.O_RDONLY)
        except OSError as exc:
            raise StateError(f"cannot open {self.site_packages} to lock it: {exc.strerror or exc}",
                             "check that the folder exists and is readable") from exc
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if on_wait is not None:
                        on_wait(self.site_packages, LOCK_TIMEOUT_S)
                        on_wait = None
                    if time.monotonic() >= deadline:
                        raise StateError(
                            f"another patchkit run is changing {self.site_packages} (waited {LOCK_TIMEOUT_S:.0f} s)",
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
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, (json.dumps(data, indent=2) + "\n").encode())

    def recover(self) -> list[str]:
        """Roll back the files of a run that was killed while writing; return their paths.

        A file whose bytes are what that run was writing gets back the bytes it had before that
        run; a file the run had not reached yet is left alone.
        """
        if not self._state.pending:
            return []
        rolled: list[str] = []
        for item in self._state.pending:
            path = self.site_packages / item["path"]
            current = sha256(path.read_bytes()) if path.exists() else None
            if current == item["sha256_after"]:
                write_atomic(path, self._stored(item["sha256_before"], item["path"]))
                rolled.append(item["path"])
        self._state.pending = []
        self._save()
        self._prune_originals()
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

    def commit(self, writes: list[PlannedWrite], vllm_version: str) -> None:
        """Write every planned file, or none: on any error all files get their bytes back.

        Before the first file is replaced, the bytes each file has now are stored and a
        ``pending`` record is saved, so a run killed midway is rolled back by the next command
        (:meth:`recover`).

        Raises:
            StateError: a file or the journal could not be written (nothing is left changed).
        """
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._ensure_dir()
        originals = self.dir / "originals"
        done: list[PlannedWrite] = []
        saved_entries = dict(self._state.entries)
        try:
            originals.mkdir(parents=True, exist_ok=True)
            for w in writes:
                stored = originals / sha256(w.before)
                if not stored.exists():
                    write_atomic(stored, w.before)
            self._state.pending = [
                {"path": w.path, "sha256_before": sha256(w.before), "sha256_after": sha256(w.after)} for w in writes
            ]
            self._save()
            for w in writes:
                write_atomic(self.site_packages / w.path, w.after)
                done.append(w)
            for w in writes:
                entry = self._state.entries.get(w.path)
                if entry is not None and sha256(w.before) != entry.sha256_after:
                    entry = None  # reinstalled or upgraded since: these bytes are the new original
                self._state.entries[w.path] = Entry(
                    path=w.path,
                    sha256_before=entry.sha256_before if entry else sha256(w.before),
                    sha256_after=sha256(w.after),
                    patches=sorted(set(entry.patches if entry else []) | set(w.patches)),
                    vllm_version=vllm_version,
                    applied_at=now,
                )
            self._state.pending = []
            self._save()
            self._prune_originals()
        except OSError as exc:
            restored_all = True
            for w in reversed(done):
                try:
                    write_atomic(self.site_packages / w.path, w.before)
                except OSError:
                    restored_all = False  # the pending record lets the next command finish it
            self._state.entries = saved_entries
            if restored_all:
                self._state.pending = []
            try:
                self._save()
                self._prune_originals()
                self.remove_if_empty()
            except (OSError, StateError):
                pass
            raise StateError(
                f"could not write {getattr(exc, 'filename', None) or 'a file'}: {exc.strerror or exc}; "
                + ("every file was put back" if restored_all else "the next patchkit command will put the rest back"),
                os_hint(exc, self.site_packages,
                        "check that you may write the vLLM install (its owner and permissions), then run the command again"),
            ) from exc

    def restore(self, paths: list[str]) -> None:
        """Write back the original bytes of the journaled ``paths`` and forget them (all or none).

        Raises:
            StateError: an original is missing, or a file could not be written (files already
                restored are put back to what they were).
        """
        data = {p: self.original(self._state.entries[p]) for p in paths}
        current = {p: (self.site_packages / p).read_bytes() if (self.site_packages / p).exists() else None for p in paths}
        done: list[str] = []
        try:
            for p in paths:
                write_atomic(self.site_packages / p, data[p])
                done.append(p)
        except OSError as exc:
            for p in done:
                try:
                    if current[p] is None:
                        (self.site_packages / p).unlink()
                    else:
                        write_atomic(self.site_packages / p, current[p])
                except OSError:
                    pass
            raise StateError(
                f"could not write {getattr(exc, 'filename', None) or 'a file'}: {exc.strerror or exc}; nothing was reverted",
                os_hint(exc, self.site_packages,
                        "check that you may write the vLLM install (its owner and permissions), then run revert again"),
            ) from exc
        self.forget(paths)

    def forget(self, paths: list[str]) -> None:
        """Drop journal entries (after a restore, or for files a reinstall already restored)."""
        for p in paths:
            self._state.entries.pop(p, None)
        self._save()
        self._prune_originals()
        if not self._state.entries and not self._state.pending:
            self.path.unlink(missing_ok=True)

    def remove_if_empty(self) -> None:
        """Delete the state folder (and ``.patchkit`` if nothing else is in it) once nothing is journaled.

        Site-packages is then as it was before patchkit.
        """
        if self._state.entries or self._state.pending or not self.dir.exists():
            return
        (self.dir / "journal.json").unlink(missing_ok=True)
        originals = self.dir / "originals"
        if originals.is_dir() and not any(originals.iterdir()):
            originals.rmdir()
        for folder in (self.dir, self.dir.parent):
            try:
                folder.rmdir()
            except OSError:
                return  # not empty: something else lives there

    def _prune_originals(self) -> None:
        keep = {e.sha256_before for e in self._state.entries.values()}
        keep |= {p["sha256_before"] for p in self._state.pending}
        originals = self.dir / "originals"
        if originals.is_dir():
            for f in originals.iterdir():
                if f.name not in keep:
                    try:
                        f.unlink(missing_ok=True)
                    except OSError:
                        pass  # an unused copy left behind harms nothing; the journal no longer names it
