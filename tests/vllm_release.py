"""Fetch real vLLM release files for tests: the ``.py`` files and ``.dist-info`` of a wheel.

A release is downloaded once with ``pip download --no-deps`` (the x86-64 manylinux wheel: the
tests run on real release files, never on vLLM source kept in this repository), its ``vllm/**/*.py`` files and ``vllm-X.Y.Z.dist-info/``
are extracted into a cache directory outside the repository, and the wheel is deleted. Each test
gets a fresh copy of that pristine tree, so tests can write to it.

The cache lives in ``$PATCHKIT_TEST_CACHE`` (default ``~/.cache/patchkit-tests``).
Run as a script to warm the cache: ``python tests/vllm_release.py 0.16.0 0.17.1``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

CACHE_ROOT = Path(os.environ.get("PATCHKIT_TEST_CACHE", Path.home() / ".cache" / "patchkit-tests"))


def pristine_site_packages(version: str) -> Path:
    """Return a cached, read-only-by-convention site-packages tree for vLLM ``version``.

    Args:
        version: an exact vLLM release, e.g. ``"0.17.1"``.
    Returns:
        A directory holding ``vllm/`` (Python files only) and ``vllm-<version>.dist-info/``.
    Raises:
        subprocess.CalledProcessError: pip could not download the wheel (no network, no wheel).
    """
    target = CACHE_ROOT / f"vllm-{version}" / "site-packages"
    done = target.parent / ".complete"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE_ROOT / f"vllm-{version}.lock")):
        if done.exists():
            return target
        shutil.rmtree(target.parent, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=CACHE_ROOT) as tmp:
            subprocess.run(
                [
                    sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_31_x86_64", "--platform", "manylinux2014_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_34_x86_64",
                    "--platform", "manylinux_2_35_x86_64", "--quiet", "--disable-pip-version-check",
                    "-d", tmp, f"vllm=={version}",
                ],
                check=True,
            )
            (wheel,) = Path(tmp).glob("vllm-*.whl")
            dist_info = f"vllm-{version}.dist-info/"
            with zipfile.ZipFile(wheel) as zf:
                members = [
                    n for n in zf.namelist()
                    if (n.startswith("vllm/") and n.endswith(".py")) or n.startswith(dist_info)
                ]
                zf.extractall(target, members)
            wheel.unlink()
        done.touch()
    return target


@contextlib.contextmanager
def runtime_venv(version: str):
    """Yield the interpreter of a cached, real, importable ``vllm==version`` venv (torch included).

    Built once with ``pip install vllm==version`` (about 10 GB, minutes) in ``$CACHE_ROOT/venv-vllm-X``.
    A FileLock is held for the whole use, so concurrent test runs on the machine wait. Before and
    after, the install is made pristine: patchkit's revert, then RECORD as the judge (a file that
    still differs makes pip reinstall vLLM without dependencies).
    """
    from patchkit import api
    from patchkit.install import from_python, record_sha256
    from patchkit.journal import sha256

    venv = CACHE_ROOT / f"venv-vllm-{version}"
    python = venv / "bin" / "python"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)

    def pristine() -> None:
        install = from_python(python)
        api.revert(install, force=True)
        record = record_sha256(install)
        site = install.site_packages
        drifted = [p for p, digest in record.items() if p.startswith("vllm/") and p.endswith(".py")
                   and (site / p).is_file() and sha256((site / p).read_bytes()) != digest]
        if drifted:
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps",
                            f"vllm=={version}"], check=True)

    with FileLock(str(CACHE_ROOT / f"venv-vllm-{version}.lock")):
        if not (venv / ".complete").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            f"vllm=={version}"], check=True)
            (venv / ".complete").touch()
        pristine()
        try:
            yield python
        finally:
            pristine()


def transformers_files(version: str) -> Path:
    """Return a cached tree holding a real transformers wheel's auto mappings and config files.

    Downloaded once with ``pip download --no-deps transformers==version``; kept are
    ``transformers/models/auto/*.py``, every ``transformers/models/*/configuration_*.py`` and the
    ``transformers-<version>.dist-info/`` folder (what :mod:`patchkit.model_types` reads), then the
    wheel is deleted. Copy its contents next to a release's ``vllm/`` to make a serving environment.

    Raises:
        subprocess.CalledProcessError: pip could not download the wheel.
    """
    target = CACHE_ROOT / f"transformers-{version}" / "site-packages"
    done = target.parent / ".complete"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE_ROOT / f"transformers-{version}.lock")):
        if done.exists():
            return target
        shutil.rmtree(target.parent, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=CACHE_ROOT) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                            "--disable-pip-version-check", "-d", tmp, f"transformers=={version}"], check=True)
            (wheel,) = Path(tmp).glob("transformers-*.whl")
            with zipfile.ZipFile(wheel) as zf:
                members = [n for n in zf.namelist()
                           if n.startswith("transformers/models/auto/") and n.endswith(".py")
                           or (n.startswith("transformers/models/") and n.rpartition("/")[2].startswith("configuration_"))
                           or n.startswith(f"transformers-{version}.dist-info/")]
                zf.extractall(target, members)
            wheel.unlink()
        done.touch()
    return target


def fresh_copy(version: str, dest: Path) -> Path:
    """Copy the pristine tree of ``version`` to ``dest`` (a new directory) and return ``dest``."""
    shutil.copytree(pristine_site_packages(version), dest)
    return dest


if __name__ == "__main__":
    for v in sys.argv[1:]:
        print(pristine_site_packages(v))
