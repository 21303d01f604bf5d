"""Locate an installed vLLM distribution without importing it.

Importing ``vllm`` pulls in torch and takes seconds; patchkit only needs to know where the
package's files are and which release they belong to. Both come from the distribution's
metadata (``vllm-X.Y.Z.dist-info``) through :mod:`importlib.metadata`, never from guessing paths.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patchkit.errors import InstallNotFound, InterpreterError

DISTRIBUTION = "vllm"
"""The distribution name patchkit patches (``--target vllm``)."""

# Printed by the target interpreter: its import path, in import order. Standard library only.
_SENTINEL = "PATCHKIT-SYS-PATH "
_PREFIX = "PATCHKIT-PYCACHE-PREFIX "
_PROBE = (f"import json, sys; print({_SENTINEL!r} + json.dumps(sys.path)); "
          f"print({_PREFIX!r} + json.dumps(sys.pycache_prefix))")


@dataclass(frozen=True)
class Install:
    """An installed vLLM distribution.

    Attributes:
        site_packages: the directory that holds ``vllm/`` and its ``.dist-info`` (absolute).
        version: the release, from the distribution's metadata.
        dist_info: the ``vllm-X.Y.Z.dist-info`` directory.
        pycache_prefix: the target interpreter's ``sys.pycache_prefix`` (where it also keeps
            bytecode), or None. With ``--python``: that interpreter's; otherwise patchkit's own
            (``PYTHONPYCACHEPREFIX`` / ``-X pycache_prefix`` of this process).
        spellings: the site-packages folder as the interpreter's import path spells it, when
            that differs from ``site_packages`` (a symbolic link on the way).
    """

    site_packages: Path
    version: Version
    dist_info: Path
    pycache_prefix: Path | None = None
    spellings: tuple[Path, ...] = ()


def _from_distributions(dists: list[metadata.Distribution], where: str, folders: list[Path] = (),
                        pycache_prefix: Path | None = None) -> Install:
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
    here = Path(str(dist.locate_file(""))).resolve()
    same_folder = sorted(
        Path(str(getattr(d, "_path", ""))).name for d in dists if Path(str(d.locate_file(""))).resolve() == here
    )
    if len(same_folder) > 1:
        raise InstallNotFound(
            f"{here} holds several vLLM distributions: {', '.join(same_folder)}",
            "remove the stale .dist-info folders (or reinstall vLLM) so one release owns the vllm/ package",
        )
    # PathDistribution keeps the dist-info folder it was read from; that is the one we need.
    dist_path = Path(str(getattr(dist, "_path", ""))).resolve()
    site_packages = Path(str(dist.locate_file(""))).resolve()
    direct_url = _direct_url(dist)
    dir_info = direct_url.get("dir_info")
    if isinstance(dir_info, dict) and dir_info.get("editable"):
        raise InstallNotFound(
            f"vLLM in {site_packages} is an editable install of {direct_url.get('url', 'a source tree')}",
            "patchkit patches installed release wheels; in a source checkout, change the code with git instead",
        )
    if not (site_packages / "vllm" / "__init__.py").is_file():
        raise InstallNotFound(
            f"{dist_path.name} in {site_packages} has no vllm/__init__.py beside it",
            "the distribution's files are missing; reinstall vLLM (pip install --force-reinstall --no-deps vllm==X.Y.Z)",
        )
    try:
        version = Version(dist.version)
    except (InvalidVersion, TypeError) as exc:
        raise InstallNotFound(
            f"vLLM in {site_packages} has an unreadable version {dist.version!r}",
            "reinstall vLLM from a release wheel",
        ) from exc
    spelled = Path(os.path.abspath(str(dist.locate_file(""))))
    return Install(site_packages=site_packages, version=version, dist_info=dist_path,
                   pycache_prefix=pycache_prefix, spellings=(spelled,) if spelled != site_packages else ())


def has_record(install: Install) -> bool:
    """True when the distribution has a ``RECORD`` file (what :func:`record_sha256` reads)."""
    return (install.dist_info / "RECORD").is_file()


def record_sha256(install: Install) -> dict[str, str]:
    """SHA-256 (hex) of every file the distribution's ``RECORD`` lists with a hash, by relative path.

    RECORD (the wheel spec) stores ``sha256=<urlsafe base64, no padding>``; this converts to hex
    so it compares with :func:`patchkit.journal.sha256`. Empty when there is no RECORD.
    """
    out: dict[str, str] = {}
    try:
        for entry in metadata.PathDistribution(install.dist_info).files or []:
            if entry.hash is not None and entry.hash.mode == "sha256":
                digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
                out[entry.as_posix()] = digest.hex()
    except (UnicodeError, ValueError, binascii.Error) as exc:
        raise InstallNotFound(
            f"cannot read {install.dist_info / 'RECORD'}: {exc}",
            "the install's metadata is damaged; reinstall vLLM (pip install --force-reinstall --no-deps vllm==X.Y.Z)",
        ) from exc
    return out


def _direct_url(dist: metadata.Distribution) -> dict:
    """The distribution's ``direct_url.json`` (PEP 610) as a dict; empty for an index install."""
    try:
        data = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


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
    dists = list(metadata.distributions(name=DISTRIBUTION, path=[str(directory)]))
    return _from_distributions(dists, str(directory), [directory], _own_pycache_prefix())


def _own_pycache_prefix() -> Path | None:
    return Path(sys.pycache_prefix) if sys.pycache_prefix else None


def from_python(interpreter: Path) -> Install:
    """Find the vLLM that the interpreter ``interpreter`` would import.

    The interpreter is run once with a one-line standard-library script that prints its
    ``sys.path``; vLLM itself is not imported.

    Args:
        interpreter: path to a Python executable, e.g. ``/opt/venv/bin/python``.
    Returns:
        The :class:`Install` that interpreter sees first on its import path.
    Raises:
        InterpreterError: the path is not an executable Python interpreter.
        InstallNotFound: that interpreter's environment has no vLLM.
    """
    interpreter = Path(interpreter).expanduser()
    if not interpreter.exists():
        raise InterpreterError(
            f"--python {interpreter} does not exist",
            "give the python of the environment that serves the model, e.g. /opt/venv/bin/python",
        )
    if interpreter.is_dir() or not os.access(interpreter, os.X_OK):
        raise InterpreterError(
            f"--python {interpreter} is not an executable file",
            "give the python executable itself, e.g. /opt/venv/bin/python",
        )
    try:
        proc = subprocess.run(
            [str(interpreter), "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InterpreterError(
            f"--python {interpreter} could not be run: {exc}",
            "give the python executable of the serving environment",
        ) from exc
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(_SENTINEL)), None)
    try:  # a sitecustomize may print banners: read only the sentinel line
        sys_path = json.loads(line[len(_SENTINEL):]) if proc.returncode == 0 and line else None
    except ValueError:
        sys_path = None
    if not isinstance(sys_path, list):
        raise InterpreterError(
            f"--python {interpreter} is not a working Python interpreter (exit {proc.returncode})",
            "give the python executable of the serving environment, e.g. /opt/venv/bin/python",
        )
    entries = [p for p in sys_path if isinstance(p, str) and p and Path(p).is_dir()]
    prefix_line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(_PREFIX)), None)
    try:
        prefix = json.loads(prefix_line[len(_PREFIX):]) if prefix_line else None
    except ValueError:
        prefix = None
    dists = list(metadata.distributions(name=DISTRIBUTION, path=entries))
    return _from_distributions(dists, f"the environment of {interpreter}", [Path(p) for p in entries],
                               Path(prefix) if isinstance(prefix, str) and prefix else None)


def from_current_environment() -> Install:
    """Find the vLLM that this Python process would import (patchkit's own environment).

    Raises:
        InstallNotFound: there is none (for instance patchkit was installed with pipx).
    """
    dists = list(metadata.distributions(name=DISTRIBUTION))
    folders = [Path(p) for p in sys.path if p and Path(p).is_dir()]
    return _from_distributions(dists, "patchkit's own environment", folders, _own_pycache_prefix())


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
