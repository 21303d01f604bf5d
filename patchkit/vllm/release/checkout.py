"""A vLLM source checkout (``export --source DIR``) as an :class:`~patchkit.vllm.release.install.Install`.

A checkout has no ``.dist-info``: its files are read where they are (``DIR/vllm/...``), and its release is read from
what vLLM's build writes, ``vllm/_version.py`` (setuptools-scm's ``__version__ = version = '0.34.0'``), else from git
(``git describe --tags``: ``v0.34.0`` is 0.34.0; ``v0.34.0-12-gabc`` is the development build ``0.34.1.dev12``, as
setuptools-scm names it). The release decides what patchkit plans, as for an install; the contract is read from the
files either way (:func:`patchkit.vllm.release.contract.detect`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patchkit.errors import InstallNotFound
from patchkit.vllm.release.install import PACKAGE, Install

_VERSION_LINE = re.compile(
    r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M
)
_DESCRIBE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-(\d+)-g[0-9a-f]+)?$")


def from_source(directory: Path) -> Install:
    """The checkout at ``directory`` (the folder holding ``vllm/``), read in place.

    Args:
        directory: the checkout's root.
    Returns:
        An :class:`Install` whose ``site_packages`` is ``directory`` and whose ``dist_info`` names no folder (a
        checkout has no ``RECORD``; ``export`` plans from its files as they are).
    Raises:
        InstallNotFound (exit 4): the folder does not exist, holds no ``vllm/`` package, or its release cannot be
            read from ``vllm/_version.py`` or git.
    """
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise InstallNotFound(
            f"--source {root} is not a directory", "give the root of a vLLM checkout (it holds vllm/)"
        )
    if not (root / PACKAGE / "__init__.py").is_file():
        raise InstallNotFound(
            f"--source {root} holds no vllm/ package", "give the root of a vLLM checkout (it holds vllm/__init__.py)"
        )
    version = _version_file(root) or _described(root)
    if version is None:
        raise InstallNotFound(
            f"cannot tell which vLLM release {root} is: no vllm/_version.py and no git tag",
            "fetch the tags (git fetch --tags) or build the checkout once (pip install -e .), or export against the "
            "installed release with --site-packages/--python",
        )
    return Install(root.resolve(), version, root.resolve() / f"{PACKAGE}-{version}.dist-info")


def _version_file(root: Path) -> Version | None:
    """The release ``vllm/_version.py`` names (None without the file or a readable version)."""
    try:
        text = (root / PACKAGE / "_version.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = _VERSION_LINE.search(text)
    try:
        return Version(found.group(1)) if found else None
    except InvalidVersion:
        return None


def _described(root: Path) -> Version | None:
    """The release ``git describe --tags`` gives for the checkout (None without git, a repository or a tag)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--tags"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = _DESCRIBE.match(done.stdout.strip()) if done.returncode == 0 else None
    if found is None:
        return None
    release, ahead = found.group(1), found.group(2)
    try:
        if not ahead:
            return Version(release)
        parts = Version(release).release
        return Version(".".join(map(str, (*parts[:-1], parts[-1] + 1))) + f".dev{ahead}")
    except InvalidVersion:
        return None


__all__ = ["from_source"]
