"""A release newer than any patchkit was qualified on (issue 29, item 4): every command says so in its
header, and ``--json`` carries it, with what it means (verdicts rest only on the facts found).

The install is the real 0.34.0 release tree with its version made newer: ``vllm-X.dist-info`` renamed,
its ``METADATA`` ``Version`` header and its ``RECORD`` rows for the dist-info rewritten (the version
patchkit reads is ``METADATA``'s, :mod:`patchkit.vllm.release.install`)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from patchkit.vllm.release.contract import NEWEST_QUALIFIED
from patchkit.vllm.release.install import from_site_packages
from vllm_release import fresh_copy

pytestmark = pytest.mark.release
NEWER = f"{Version(NEWEST_QUALIFIED).major}.{Version(NEWEST_QUALIFIED).minor + 1}.0"
NOTE = (
    f"newer than any release patchkit was qualified on: {NEWEST_QUALIFIED}; "
    "verdicts rest only on the facts found in this install"
)


def newer_release(dest: Path) -> Path:
    """A copy of the newest qualified release's tree whose metadata says :data:`NEWER`."""
    sp = fresh_copy(NEWEST_QUALIFIED, dest)
    old, new = sp / f"vllm-{NEWEST_QUALIFIED}.dist-info", sp / f"vllm-{NEWER}.dist-info"
    old.rename(new)
    metadata = new / "METADATA"
    text = metadata.read_text()
    assert f"\nVersion: {NEWEST_QUALIFIED}\n" in text
    metadata.write_text(text.replace(f"\nVersion: {NEWEST_QUALIFIED}\n", f"\nVersion: {NEWER}\n", 1))
    record = new / "RECORD"
    record.write_text(
        "".join(
            row.replace(f"{old.name}/", f"{new.name}/", 1) if row.startswith(f"{old.name}/") else row
            for row in record.read_text().splitlines(keepends=True)
        )
    )
    return sp


@pytest.fixture(scope="module")
def newer(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("newer")
    sp = newer_release(root / "sp")
    assert str(from_site_packages(sp).version) == NEWER
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "num_hidden_layers": 61,
                "hidden_size": 7168,
            }
        )
    )
    python = root / "python"  # the serving interpreter rehearse asks for: this one, with the newer tree on its path
    python.write_text(f'#!/bin/sh\nPYTHONPATH={sp} exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return {"sp": sp, "model": model, "python": python}


# each command with the options it needs; where --json carries the note: "install" or the top level
COMMANDS = [
    (["apply"], "install"),
    (["verify"], "install"),
    (["status"], "install"),
    (["revert"], "install"),
    (["scan"], "install"),
    (["doctor", "--model", "{model}"], "install"),
    (["resolve", "DeepseekV3ForCausalLM"], "install"),
    (["explain", "eagle3:DeepseekV2Model:capture"], "top"),
    (["guard", "install"], "top"),
    (["watch", "install"], "top"),
    (["rehearse", "--model", "{model}", "--draft", "{model}"], None),
]


@pytest.mark.parametrize("args, where", COMMANDS, ids=[" ".join(a[:2]) for a, _ in COMMANDS])
def test_every_command_says_the_release_is_newer_than_qualified(newer, cli, args, where):
    given = [a.format(**newer) for a in args]
    place = ["--python", str(newer["python"])] if args[0] == "rehearse" else ["--site-packages", str(newer["sp"])]
    result = cli(*given, *place)
    said = " ".join((result.stdout + result.stderr).split())
    assert f"vLLM {NEWER}" in said and NOTE in said, said[:600]
    if where is None:  # rehearse stops at this interpreter's missing torch; its header came first
        return
    result = cli(*given, *place, "--json")
    report = json.loads(result.stdout)
    assert (report["install"] if where == "install" else report)["newer_than_qualified"] == NOTE


def test_the_newest_qualified_release_is_not_called_newer(release, cli):
    sp = release(NEWEST_QUALIFIED)
    code, report = cli.json("status", "--site-packages", str(sp))
    assert code == 0 and report["install"]["version"] == NEWEST_QUALIFIED
    assert report["install"]["newer_than_qualified"] is None
    assert "newer than any release" not in cli("scan", "--site-packages", str(sp)).stdout.splitlines()[0]
