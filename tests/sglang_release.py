"""Fetch real SGLang release files for tests (issue 44): the ``.py`` files and ``.dist-info`` of a wheel.

As ``tests/vllm_release.py`` does for vLLM: the wheel is downloaded once with ``pip download --no-deps`` (never its
dependencies, which need torch and CUDA), its ``sglang/**/*.py`` files and ``sglang-X.Y.Z.dist-info/`` are
extracted into ``$PATCHKIT_TEST_CACHE`` (default ``~/.cache/patchkit-tests``) under a file lock, and the wheel is
deleted. Tests read that tree (patchkit never writes to an SGLang install yet); a test that needs a writable one
copies it.

The wheel read is the CPython 3.11, manylinux_2_34 x86-64 one (what ``pip download`` picked on this machine for
0.5.14, 0.5.16 and 0.5.23); the download asks for that tag whatever interpreter runs the tests, so every run reads
the same files.

Run as a script to warm the cache: ``python tests/sglang_release.py 0.5.23``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


from vllm_release import _require_network_marker, wheel_files


@dataclass(frozen=True)
class SglangRelease:
    """One SGLang release the tests read, and what it stands for."""

    version: str
    why: str


SGLANG_RELEASES = (
    SglangRelease(
        "0.5.14", "the oldest read: the list-append capture in llama.py, the runner calls the setter blindly"
    ),
    SglangRelease("0.5.16", "the runner's components split out; still the list-append capture in llama.py"),
    SglangRelease("0.5.23", "the issue's measured release: the capture_output boundary, the runner asks hasattr first"),
)
"""Every SGLang release the tests read, oldest first."""

WHEEL_TAGS = ["--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_34_x86_64"]
"""The wheel tag read for every release (the module docstring)."""


def pristine_site_packages(version: str) -> Path:
    """A cached site-packages tree for SGLang ``version``, read-only by convention.

    Returns:
        A folder holding ``sglang/`` (Python files only) and ``sglang-<version>.dist-info/``.
    Raises:
        RuntimeError: the running test has no network marker (``release``).
        subprocess.CalledProcessError: pip could not download the wheel.
    """
    _require_network_marker(f"the SGLang {version} release files")
    dist_info = f"sglang-{version}.dist-info/"
    return wheel_files(
        "sglang",
        version,
        lambda n: (n.startswith("sglang/") and n.endswith(".py")) or n.startswith(dist_info),
        tuple(WHEEL_TAGS),
    )


if __name__ == "__main__":
    for wanted in sys.argv[1:] or [r.version for r in SGLANG_RELEASES]:
        print(pristine_site_packages(wanted))
