"""``benchmarks/qualify.py``'s own logic, offline: usage errors, which release it compares with, the
scan changes, and that docs/releases.md is regenerated from the reports, the same bytes on a re-run.
(The qualification itself runs on real releases: ``python benchmarks/qualify.py 0.34.0``.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import qualify  # noqa: E402


@pytest.mark.parametrize("argv", [[], ["0.34.0", "0.33.0"], ["latest"], ["0.34.0", "--fast"], ["0.34.0", "--previous"]])
def test_bad_usage_is_exit_2_with_a_hint(argv, capsys):
    assert qualify.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(("usage:", "qualify:")) and ("hint:" in err or "--previous needs" in err)


def test_the_previous_release_is_the_newest_qualified_below_then_the_newest_declared(tmp_path, monkeypatch):
    monkeypatch.setattr(qualify, "REPORTS", tmp_path)
    version, why = qualify.previous_release("0.34.0", None)
    below = [r.version for r in qualify.declared.RELEASES if qualify._vkey(r.version) < (0, 34, 0)]
    assert version == below[-1] and "tests/releases.py" in why
    for v in ("0.17.1", "0.20.2", "0.34.0"):
        (tmp_path / f"{v}.json").write_text("{}")
    assert qualify.previous_release("0.33.0", None)[0] == "0.20.2"  # a report above it is not "previous"
    assert qualify.previous_release("0.34.0", "0.17.1") == ("0.17.1", "--previous")


def test_scan_changes_name_what_appeared_disappeared_and_changed():
    before = {"A": {"state": "patchable"}, "B": {"state": "native"}, "C": {"state": "native"}}
    now = {"A": {"state": "native"}, "B": {"state": "native"}, "D": {"state": "patchable"}}
    assert qualify.scan_changes(now, before) == {
        "appeared": ["D"],
        "disappeared": ["C"],
        "changed": {"A": {"from": "patchable", "to": "native"}},
    }


def report(version: str, qualified: bool) -> dict:
    """A report of the shape qualify() writes (its own fields, filled in by hand)."""
    return {
        "version": version,
        "date": "2026-12-03 12:00 UTC",
        "branch": "b",
        "commit": "0" * 40,
        "dirty": False,
        "scan": {"architectures": 3, "counts": {"native": 2, "patchable": 1}, "rows": {}},
        "previous": {"version": None, "why": "no earlier release declared"},
        "cycle": {
            "architectures": 1,
            "with_model": False,
            "byte_exact": True,
            "failures": {"apply": [], "verify": [] if qualified else ["A: x"], "second apply": [], "revert": []},
        },
        "runtime": None,
        "facts": {"source": "s", "facts": [{"what": "w", "where": "f.py", "found": True}]},
        "seconds": {"total": 1.0, "cycle": 1.0, "runtime": 0.0},
        "qualified": qualified,
        "reasons": qualify.verdict(
            {"cycle": {"failures": {"verify": [] if qualified else ["A: x"]}}, "runtime": None, "facts": {"facts": []}}
        )[1],
    }


def test_the_page_is_generated_from_the_reports_and_a_rerun_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(qualify, "REPORTS", tmp_path / "releases")
    monkeypatch.setattr(qualify, "PAGE", tmp_path / "releases.md")
    qualify.REPORTS.mkdir()
    for v, ok in (("0.33.0", True), ("0.34.0", False)):
        (qualify.REPORTS / f"{v}.json").write_text(json.dumps(report(v, ok)))
    qualify.write_page()
    first = qualify.PAGE.read_text()
    qualify.write_page()
    assert qualify.PAGE.read_text() == first
    rows = [line for line in first.splitlines() if line.startswith("| 0.")]
    assert [r.split(" | ")[0] for r in rows] == ["| 0.34.0", "| 0.33.0"]  # newest first
    assert "| 0.34.0 | not qualified |" in rows[0] and "| 0.33.0 | qualified |" in rows[1]
    assert first.count("## vLLM 0.34.0") == 1 and "runtime not checked (--no-runtime)" in first
