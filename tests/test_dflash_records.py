"""A DFlash draft rehearsed on the GPU (issue 40, "Rehearse a DFlash draft for a patched target on 0.34.0"), decided
again here from the records: an H100, vLLM 0.34.0's CUDA build, V2, bf16, eager and compiled; GLM-4.5-Air patched by
``patchkit apply --arch Glm4MoeForCausalLM`` and a miniature DFlash draft whose folder name carries the word 0.34.0
picks the method by (``benchmarks/gpu034_run.sh``, 2026-12-07). The references are independent of patchkit:
transformers' ``hidden_states`` on the same device and dtype, and vLLM's own output without speculation."""

from __future__ import annotations

from pathlib import Path

from test_verdict import decided, load, outcome

from patchkit.rehearse.rehearsal_result import CheckName, Outcome
from patchkit.rehearse.tolerances import Undecided

RECORD = Path(__file__).parent / "engine_records" / "h100-vllm-0.34.0-dflash.jsonl"


def test_the_dflash_draft_receives_the_right_states_and_keeps_greedy_output_on_the_gpu():
    """Eager and compiled: aux states at the DFlash ids + 1 within bf16's tolerance of transformers' (and the shifted
    layers far), greedy output identical; acceptance "not compared" (no offline replay of parallel drafting), so
    the outcome is not decided (exit 5), never passed."""
    rows = load(RECORD)
    assert {r["path"] for r in rows} == {"eager", "compiled"}
    for r in rows:
        report = r["report"]
        assert report["vllm"] == "vllm 0.34.0" and report["device"] == "cuda" and report["dtype"] == "bfloat16"
        assert report["id_field"] == "dflash_config" and report["user_ids"] == [2, 13, 24, 35, 45]
        started = next(c for c in report["checks"] if c["name"] == CheckName.STARTED.value)
        assert started["ok"] and "method dflash" in started["detail"]
        checks = decided(r)
        assert checks[CheckName.AUX].ok is True and checks[CheckName.GREEDY].ok is True
        acceptance = checks[CheckName.ACCEPTANCE]
        assert acceptance.ok is None and acceptance.undecided is Undecided.NO_OFFLINE_REPLAY
        assert outcome(r) is Outcome.NOT_DECIDED and r["exit"] == 5
