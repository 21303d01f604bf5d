"""A patch written with ``apply --force`` reads the same in every command (issue 42, finding 1).

Gemma 3 (``Gemma3ForConditionalGeneration``, the wrapper-only shape) on 0.34.0, whose V2 runner has not been
shown to keep greedy output for that shape: ``apply`` refuses it unless ``--force``. Failed before, after
``apply --force``: ``verify`` exited 1, but ``doctor`` called it ready (exit 0), ``status --model`` said
"nothing to patch", and ``revert --model`` exited 2 denying any patch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_releases import snapshot

pytestmark = pytest.mark.release
GEMMA = str(Path(__file__).parent / "checkpoints" / "gemma-3-27b-it")
WRAPPER = "Gemma3ForConditionalGeneration"


def test_a_forced_patch_reads_the_same_in_status_verify_doctor_and_revert(release, cli):
    sp = release("0.34.0")
    where = ["--site-packages", str(sp), "--model", GEMMA]
    before = snapshot(sp)
    code, refused = cli.json("apply", *where)
    assert code == 3 and refused["refused"], refused
    code, applied = cli.json("apply", *where, "--force")
    assert code == 0 and applied["written"], applied

    code, status = cli.json("status", *where)
    assert [(a["architecture"], a["state"], a["forced"]) for a in status["architectures"]] == [
        (WRAPPER, "patched", True)
    ], status
    assert "forced (apply --force)" in " ".join(cli("status", *where).stdout.split())
    code, verify = cli.json("verify", *where)
    assert code == 1
    code, doctor = cli.json("doctor", *where)
    assert code == 1 and doctor["ready"] is False, doctor["missing"]
    assert any("greedy output kept under vLLM's V2 runner" in m for m in doctor["missing"]), doctor["missing"]

    code, reverted = cli.json("revert", *where)
    assert code == 0, reverted
    actions = {f["path"]: f["action"] for f in reverted["files"]}
    assert actions["vllm/model_executor/models/gemma3_mm.py"] == "restored", actions
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    assert snapshot(sp) == before
