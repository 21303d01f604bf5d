"""A small distribution patchkit writes into a serving environment, journaled: the guard's and the watch's.

:class:`PluginDist` describes one (its name, import package, summary, entry points). Its files are
the package's files, then a ``<package>-<version>.dist-info/`` with ``METADATA``, ``INSTALLER``
(``patchkit``), ``top_level.txt``, ``entry_points.txt`` and ``RECORD`` (every file with its
``sha256=`` digest and size, RECORD itself without: the wheel spec's form, so ``pip list`` shows it
and ``importlib.metadata.entry_points(group=...)``, which vLLM's ``load_plugins_by_group`` calls,
finds it through the ``.dist-info`` folder on ``sys.path``). ``entry_points.txt`` and ``RECORD``
are written last, so a vLLM process starting meanwhile finds either no entry point or one whose
module is complete.

Every file is journaled like any change to vLLM's files, in the journal named after the
distribution (``.patchkit/<distribution>/journal.json``; the same transaction, :mod:`patchkit.store.journal`:
pending record, all or none, the one site-packages lock the caller holds). None existed before,
so each original is "absent" and reverting deletes it (and the folders, ``__pycache__`` included,
it leaves empty).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass

from patchkit import __version__
from patchkit.store.files import sha256
from patchkit.store.journal import Journal
from patchkit.store.records import PlannedWrite
from patchkit.vllm.install import Install


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass(frozen=True)
class Written:
    """What :meth:`PluginDist.write` did: ``changed`` (files written or stale ones deleted, or with
    ``dry_run`` would be) and ``fresh`` (it was not installed before)."""

    changed: bool
    fresh: bool


@dataclass(frozen=True)
class PluginDist:
    """One of patchkit's plugin distributions.

    Attributes:
        distribution: its name (``pip list``), also its journal's name (``patchkit-guard``).
        package: its import package (``patchkit_guard``).
        summary: the METADATA summary line.
        entry_points: ``(group, "name = module:attr")`` pairs for ``entry_points.txt``.
        patch_id: the patch id its files carry in their journal.
    """

    distribution: str
    package: str
    summary: str
    entry_points: tuple[tuple[str, str], ...]
    patch_id: str

    @property
    def dist_info(self) -> str:
        """The ``.dist-info`` folder name (the version is patchkit's)."""
        return f"{self.package}-{__version__}.dist-info"

    def journal(self, install: Install) -> Journal:
        """The journal of its files in ``install``'s site-packages."""
        return Journal(install.site_packages, self.distribution, install.pycache_prefix, install.spellings)

    def installed(self, install: Install) -> bool:
        """True when its journal lists its files in this install."""
        return bool(self.journal(install).entries)

    def files(self, package_files: dict[str, bytes]) -> dict[str, bytes]:
        """Every file, ``{path relative to site-packages: bytes}``, in the order they are written.

        Args:
            package_files: the package's own files (paths under :attr:`package`), written first.
        """
        info = self.dist_info
        groups: dict[str, list[str]] = {}
        for group, line in self.entry_points:
            groups.setdefault(group, []).append(line)
        files: dict[str, bytes] = {
            **package_files,
            f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {self.distribution}\nVersion: {__version__}\n"
                                 f"Summary: {self.summary}\nRequires-Python: >=3.8\n").encode(),
            f"{info}/INSTALLER": b"patchkit\n",
            f"{info}/top_level.txt": f"{self.package}\n".encode(),
            f"{info}/entry_points.txt": "".join(f"[{g}]\n" + "".join(f"{e}\n" for e in lines)
                                                for g, lines in groups.items()).encode(),
        }
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for path, content in files.items():
            writer.writerow([path, _record_hash(content), len(content)])
        writer.writerow([f"{info}/RECORD", "", ""])
        files[f"{info}/RECORD"] = out.getvalue().encode()
        return files

    def write(self, install: Install, files: dict[str, bytes], *, dry_run: bool = False) -> Written:
        """Write ``files`` (journaled) and delete files of an earlier version that ``files`` lacks.

        Call it under the install's lock. Nothing is written when every file holds these bytes.

        Raises:
            StateError: a file cannot be written (every file written is put back).
            Interrupted: SIGINT/SIGTERM while writing (every file written is put back).
        """
        journal = self.journal(install)
        fresh = not journal.entries
        changes = []
        for path, content in files.items():
            current = install.site_packages / path
            before = current.read_bytes() if current.is_file() else None
            if before != content:
                changes.append(PlannedWrite(path, before, content, [self.patch_id]))
        stale = [p for p in journal.entries if p not in files]
        if not dry_run:
            if changes:
                journal.commit(changes, str(install.version), own=True)  # an edited file stays ours
            if stale:
                journal.restore(sorted(stale))
        return Written(bool(changes or stale), fresh)

    def remove(self, install: Install, *, dry_run: bool = False) -> tuple[str, ...]:
        """Delete its files (their original is "absent"); call it under the install's lock.

        A file edited or deleted since is deleted as well (it is patchkit's own file, not a
        user's). Returns the paths the journal listed (empty when it was not installed).
        """
        journal = self.journal(install)
        paths = sorted(journal.entries)
        if paths and not dry_run:
            present = [p for p in paths if (install.site_packages / p).exists()]
            journal.narrow(present, {}, {}, str(install.version), forget=[p for p in paths if p not in present])
        return tuple(paths)

    def problems(self, install: Install) -> list[str]:
        """Each of its files that is gone or no longer holds the bytes patchkit wrote; writes nothing."""
        out = []
        for path, entry in sorted(self.journal(install).entries.items()):
            file = install.site_packages / path
            if not file.is_file():
                out.append(f"{path} is gone")
            elif sha256(file.read_bytes()) != entry.sha256_after:
                out.append(f"{path} was changed since patchkit wrote it")
        return out


__all__ = ["PluginDist", "Written"]
