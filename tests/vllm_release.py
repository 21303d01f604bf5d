"""Fetch real vLLM release files for tests: the ``.py`` files and ``.dist-info`` of a wheel.

A release is downloaded once with ``pip download --no-deps`` (the x86-64 manylinux wheel: the
tests run on real release files, never on vLLM source kept in this repository), its ``vllm/**/*.py`` files and ``vllm-X.Y.Z.dist-info/``
are extracted into a cache directory outside the repository, and the wheel is deleted. Each test
gets a fresh copy of that pristine tree, so tests can write to it.

The cache lives in ``$PATCHKIT_TEST_CACHE`` (default ``~/.cache/patchkit-tests``).
Run as a script to warm the cache: ``python tests/vllm_release.py 0.16.0 0.17.1``.
"""

from __future__ import annotations

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
                    "--platform", "manylinux_2_17_x86_64", "--quiet", "--disable-pip-version-check",
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


def fresh_copy(version: str, dest: Path) -> Path:
    """Copy the pristine tree of ``version`` to ``dest`` (a new directory) and return ``dest``."""
    shutil.copytree(pristine_site_packages(version), dest)
    return dest


if __name__ == "__main__":
    for v in sys.argv[1:]:
        print(pristine_site_packages(v))
