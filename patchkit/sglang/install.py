"""Locate an installed SGLang distribution without importing it.

Importing ``sglang`` pulls in torch and CUDA; patchkit only needs the files and the release. Both come from the
distribution's metadata folder (``sglang-X.Y.Z.dist-info``: its ``top_level.txt`` names ``sglang``), found on the
interpreter's import path by the target-neutral :mod:`patchkit.distributions` and :mod:`patchkit.interpreter`, the
same reading the vLLM wing uses (:mod:`patchkit.vllm.release.install`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patchkit.distributions import Dist, distributions, read_probe
from patchkit.errors import InstallNotFound, InterpreterError
from patchkit.interpreter import interpreter_path, run_probe
from patchkit.sglang.contract import DISTRIBUTION, PACKAGE

WHERE = (
    "point patchkit at the environment that serves the model: --python /path/to/venv/bin/python or --site-packages DIR"
)


@dataclass(frozen=True)
class SglangInstall:
    """An installed SGLang distribution.

    Attributes:
        site_packages: the folder that holds ``sglang/`` and its ``.dist-info`` (absolute).
        version: the release, from the distribution's ``METADATA``.
        dist_info: the distribution's metadata folder.
        distribution: its ``Name`` header (``sglang``).
        python: the interpreter it was found through (``--python``, resolved), or None.
        imports: where that interpreter imports ``sglang`` from (``importlib.util.find_spec``, nothing run); ``()``
            when it cannot import it; None when not asked (``--site-packages``).
    """

    site_packages: Path
    version: Version
    dist_info: Path
    distribution: str = DISTRIBUTION
    python: Path | None = None
    imports: tuple[Path, ...] | None = None


def _from_distributions(dists: list[Dist], where: str) -> SglangInstall:
    """The first distribution (import order) that owns ``sglang/``, checked.

    Raises:
        InstallNotFound: none, an editable install, no ``sglang/__init__.py`` beside it, or an unreadable version.
    """
    if not dists:
        raise InstallNotFound(f"no SGLang distribution found in {where}", WHERE)
    dist = dists[0]
    site_packages = dist.locate_file("").resolve()
    dir_info = dist.direct_url().get("dir_info")
    if isinstance(dir_info, dict) and dir_info.get("editable"):
        raise InstallNotFound(
            f"SGLang in {site_packages} is an editable install",
            "patchkit reads installed release wheels; in a source checkout, read the code with git instead",
        )
    if not (site_packages / PACKAGE / "__init__.py").is_file():
        raise InstallNotFound(
            f"{dist.path.name} in {site_packages} has no {PACKAGE}/__init__.py beside it",
            "the distribution's files are missing: reinstall SGLang",
        )
    try:
        version = Version(dist.version or "")
    except InvalidVersion as exc:
        raise InstallNotFound(
            f"SGLang in {site_packages} has an unreadable version {dist.version!r}", "reinstall SGLang from a wheel"
        ) from exc
    return SglangInstall(site_packages, version, dist.path.resolve(), dist.name or DISTRIBUTION)


def from_site_packages(directory: Path) -> SglangInstall:
    """Find SGLang in one folder (not searched recursively).

    Raises:
        InstallNotFound: the folder does not exist or holds no SGLang distribution.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise InstallNotFound(
            f"--site-packages {directory} is not a directory", "give the folder that holds sglang/ and its .dist-info"
        )
    return _from_distributions(distributions([str(directory)], PACKAGE), str(directory))


def from_python(interpreter: Path | str) -> SglangInstall:
    """Find the SGLang that ``interpreter`` would import; the interpreter runs one standard-library probe
    (:func:`patchkit.interpreter.run_probe`), SGLang is not imported.

    Raises:
        InterpreterError: no working Python interpreter there.
        InstallNotFound: its environment has no SGLang.
    """
    interpreter = interpreter_path(interpreter)
    answer = read_probe(run_probe(interpreter, PACKAGE))
    if answer.sys_path is None:
        raise InterpreterError(
            f"--python {interpreter} is not a working Python interpreter (exit {answer.returncode})",
            "give the python executable of the serving environment, e.g. /opt/venv/bin/python",
        )
    found = _from_distributions(distributions(list(answer.sys_path), PACKAGE), f"the environment of {interpreter}")
    return SglangInstall(
        found.site_packages, found.version, found.dist_info, found.distribution, interpreter, answer.imports
    )


def locate(site_packages: Path | None = None, python: Path | None = None) -> SglangInstall:
    """Find SGLang from ``--site-packages`` or ``--python`` (at most one given; neither: patchkit's own environment).

    Raises:
        InstallNotFound, InterpreterError: as above.
    """
    if site_packages is not None:
        return from_site_packages(site_packages)
    if python is not None:
        return from_python(python)
    return _from_distributions(distributions(sys.path, PACKAGE), "patchkit's own environment")


__all__ = ["SglangInstall", "from_python", "from_site_packages", "locate"]
