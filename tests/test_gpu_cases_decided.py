"""Issue 41, "Show it" on the GPU: every case of ``tests/engine_models.py`` (CASES and GPU_CASES) is decided by a
real GPU engine, its right capture passing and, where patchkit writes the capture, the capture made one layer
late failing, naming it.

The records are what ``benchmarks/gpu034_run.sh`` (``benchmarks/gpu_campaign.py``) wrote on an H100 with vLLM
0.34.0's CUDA build (V2, compiled with CUDA graphs) and, for the cases that ran there first, vLLM 0.20.2 on an
H200. Each record is decided again here by rehearse's own deciders from its raw figures
(:func:`test_verdict.outcome`); the references in them are independent of patchkit (transformers'
``hidden_states``, vLLM's own spec-decode counters and greedy output).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_models import CASES, GPU_CASES
from patchkit.rehearse.rehearsal_result import CheckName, Outcome
from test_verdict import decided, load, outcome

RECORDS = Path(__file__).parent / "engine_records"
CASES_0_34_0 = RECORDS / "h100-vllm-0.34.0-cases.jsonl"
"""The campaign of 2026-12-07 (evening): every case not yet decided on 0.34.0, with ERNIE-4.5-MoE's seeded routers
and the wrapper's embedding found as the release's loader finds it."""
GPU_FILES = sorted(p for p in RECORDS.glob("h[12]00-vllm-*.jsonl") if "dflash" not in p.name)
LATE = "every capture is one layer late"

NATIVE_0_34_0 = {"llama", "gemma", "olmoe", "seed-oss", "stablelm2", "granite-moe", "qwen3-next"}
"""Cases vLLM 0.34.0 serves with EAGLE-3 itself (its own class, or its Transformers backend): patchkit writes
nothing there, so only the right capture is rehearsed (vLLM's own)."""
NOT_ON_GPU = {
    "command-r": "patchkit refuses CohereForCausalLM (apply exit 3): nothing of patchkit's to rehearse; vLLM "
    "refusing the unpatched class with EAGLE-3 is the CPU tier's (tests/test_engine.py)",
}
NAMES = sorted({c.name for c in CASES + GPU_CASES})


def _gpu_rows() -> list[dict]:
    return [
        r | {"_file": p.name}
        for p in GPU_FILES
        for r in load(p)
        if r.get("report", {}).get("raw") and r["report"].get("device") == "cuda"
    ]


def test_every_case_has_a_decided_right_pass_on_a_gpu():
    rows = _gpu_rows()
    missing = []
    for name in NAMES:
        if name in NOT_ON_GPU:
            continue
        if not any(r["case"] == name and r["env"] == "right" and outcome(r) is Outcome.PASSED for r in rows):
            missing.append(name)
    assert not missing, missing


def test_every_case_patchkit_writes_on_0_34_0_fails_one_layer_late_there():
    rows = [r for r in _gpu_rows() if r["report"]["vllm"].endswith("0.34.0")]
    missing = []
    for name in NAMES:
        if name in NOT_ON_GPU or name in NATIVE_0_34_0:
            continue
        shifted = [r for r in rows if r["case"] == name and r["env"] == "shift"]
        ok = [r for r in shifted if outcome(r) is Outcome.FAILED and decided(r)[CheckName.AUX].ok is False]
        if not ok or not all(LATE in decided(r)[CheckName.AUX].detail for r in ok):
            missing.append(name)
    assert not missing, missing


def test_no_right_capture_of_the_campaign_ends_not_decided_or_failed():
    """Issue 41's "done when": no right capture of the campaign ends "failed" or "not decided" for a reason of the
    miniature."""
    rows = load(CASES_0_34_0)
    assert rows and all(r["report"]["vllm"].endswith("0.34.0") and r["report"]["device"] == "cuda" for r in rows)
    right = {(r["case"], r["dtype"]): outcome(r) for r in rows if r["env"] == "right"}
    assert right and all(o is Outcome.PASSED for o in right.values()), right


@pytest.mark.release
def test_the_native_cases_are_what_scan_says_of_0_34_0(release, cli):
    """:data:`NATIVE_0_34_0` is what ``scan`` reads in the real 0.34.0: those classes ``native`` (vLLM's own
    EAGLE-3), every other case's class patchable or refused."""
    site = release("0.34.0")
    result = cli("scan", "--target", "vllm", "--site-packages", str(site), "--json")
    states = {r["architecture"]: r["state"] for r in json.loads(result.stdout)["architectures"]}
    by_case = {c.name: c.target["architectures"][0] for c in CASES + GPU_CASES}
    native = {name for name, arch in by_case.items() if states[arch] == "native"}
    assert native == NATIVE_0_34_0
