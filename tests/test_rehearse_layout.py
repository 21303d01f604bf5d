"""rehearse under a parallel layout (issue 34): ``--tensor-parallel-size`` / ``--pipeline-parallel-size``
checked before anything runs, a miniature whose heads and widths the tensor-parallel size divides, the
engine's layout in the driver's spec and ``--json``, and the ranks check decided on its figures."""

from __future__ import annotations

import json

import pytest

from engine_models import GLM45_AIR, GLM45_SPECFORGE_DRAFT, LLAMA, vllm_draft, write_checkpoint
from patchkit.errors import ExitCode, RefusedError
from patchkit.rehearse import driver_run, engine_start, rehearsal
from patchkit.rehearse.layout import Layout, check_gpus, layout
from patchkit.rehearse.miniature import HEADS, heads_for, shrink
from patchkit.rehearse.rehearsal_result import CheckName
from patchkit.rehearse.verdict import Device, Dtype, decide_ranks, tolerance


@pytest.mark.parametrize("option", ["--tensor-parallel-size", "--pipeline-parallel-size"])
def test_a_size_below_one_is_a_one_line_usage_error(option, cli, tmp_path):
    """``--tensor-parallel-size 0`` is exit 2 with one error line and a hint, before any interpreter runs."""
    model = write_checkpoint(tmp_path / "model", LLAMA)
    draft = write_checkpoint(tmp_path / "draft", vllm_draft(LLAMA, None))
    result = cli(
        "rehearse", "--model", str(model), "--draft", str(draft), "--python", "/nonexistent/python", option, "0"
    )
    assert result.exit_code == ExitCode.USAGE, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: {option} 0 is not a rank count"
    assert lines[1].startswith("hint: give the " + option)
    assert "Traceback" not in result.output


@pytest.mark.parametrize("tp", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("target,draft", [(LLAMA, vllm_draft(LLAMA, None)), (GLM45_AIR, GLM45_SPECFORGE_DRAFT)])
def test_the_miniature_shards_evenly_over_the_ranks(tp, target, draft):
    """vLLM shards attention heads, the MLP and the experts' widths over the ranks and asserts the
    division: every one of them in the shrunk target and draft is a multiple of ``tp``; the draft's
    width is the target's; heads stay 2 where 2 divides."""
    mini = shrink(target, draft, tensor_parallel_size=tp)
    cfg, d = mini.target_config, mini.draft_config
    assert cfg["num_attention_heads"] % tp == 0
    assert cfg["num_attention_heads"] == (HEADS if HEADS % tp == 0 else tp)
    kv = cfg["num_key_value_heads"]
    assert kv % tp == 0 or tp % kv == 0  # vLLM replicates KV heads when there are fewer than ranks
    for key in ("hidden_size", "intermediate_size", "moe_intermediate_size"):
        if key in cfg:
            assert cfg[key] % tp == 0, (key, cfg[key])
    assert cfg["hidden_size"] == cfg["num_attention_heads"] * cfg["head_dim"]
    assert d["hidden_size"] == cfg["hidden_size"] and d["num_attention_heads"] % tp == 0
    assert d["intermediate_size"] % tp == 0


def test_tp_1_and_2_keep_the_miniature_as_it_was():
    """The single-worker miniature (the one every recorded rehearsal ran) is unchanged at TP 1 and 2."""
    base = shrink(GLM45_AIR, GLM45_SPECFORGE_DRAFT)
    for tp in (1, 2):
        assert shrink(GLM45_AIR, GLM45_SPECFORGE_DRAFT, tensor_parallel_size=tp) == base
    assert [heads_for(n) for n in (1, 2, 3, 4, 8)] == [2, 2, 3, 4, 8]


def test_the_layout_reaches_the_engine():
    """The driver starts one in-process worker for one rank, vLLM's multiprocessing executor for more."""
    assert engine_start.layout_kwargs({}) == {"distributed_executor_backend": "uni"}
    assert engine_start.layout_kwargs(Layout(2, 1).for_driver()) == {
        "distributed_executor_backend": "mp",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
    }
    assert engine_start.layout_kwargs(Layout(1, 2).for_driver())["pipeline_parallel_size"] == 2


def test_each_rank_gets_its_own_cpus():
    """On two CPUs two ranks get one each; on fewer CPUs than ranks nothing is bound, one thread each."""
    assert engine_start.cpu_binding(1, [0, 1]) == {}
    assert engine_start.cpu_binding(2, [0, 1]) == {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "OMP_NUM_THREADS": "1"}
    assert engine_start.cpu_binding(2, [0, 1, 2, 3, 4]) == {
        "VLLM_CPU_OMP_THREADS_BIND": "0,1|2,3",
        "OMP_NUM_THREADS": "2",
    }
    assert engine_start.cpu_binding(4, [0, 1]) == {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def test_more_ranks_than_gpus_is_refused():
    """vLLM puts rank i on visible GPU i: two ranks need two GPUs, each with the miniature's share free."""
    gib = 1024**3
    with pytest.raises(RefusedError) as err:
        check_gpus(layout(2, 1), [80 * gib], 2 * gib, "/v/bin/python")
    assert err.value.exit_code == ExitCode.REFUSED
    assert err.value.message == "--device cuda with TP=2 needs 2 GPUs; 1 visible"
    with pytest.raises(RefusedError) as err:
        check_gpus(layout(2, 1), [80 * gib, 1 * gib], 2 * gib, "/v/bin/python")
    assert err.value.message == "--device cuda with TP=2: GPU 1 of the first 2 has less than 2 GiB free"
    check_gpus(layout(2, 1), [80 * gib, 80 * gib, 0], 2 * gib, "/v/bin/python")


TOL = tolerance(Device.CPU, Dtype.FP32)


def _ranks(*per_rank):
    return {
        "world": len(per_rank),
        "drafters": sum(1 for r in per_rank if r.get("draft", True)),
        "per_rank": list(per_rank),
    }


def test_ranks_that_received_the_same_states_pass():
    v = decide_ranks(
        _ranks(
            {"rank": 0, "tokens": 16, "width": 192, "distance": 0.0},
            {"rank": 1, "tokens": 16, "width": 192, "distance": 0.0},
        ),
        TOL,
        "cpu float32",
    )
    assert v.ok is True and v.detail.startswith("2 of 2 ranks hold the draft; each received 16 x 192 prompt states")


def test_a_rank_with_a_sequence_shard_fails_naming_it():
    """A capture sharded along the sequence (PR 50691's misfire) gives a rank fewer tokens: failed, named."""
    v = decide_ranks(
        _ranks(
            {"rank": 0, "tokens": 16, "width": 192, "distance": 0.0},
            {"rank": 1, "tokens": 8, "width": 192, "distance": None},
        ),
        TOL,
        "cpu float32",
    )
    assert v.ok is False and "rank 1: 8 x 192 (another shape)" in v.detail


def test_a_rank_with_other_states_fails():
    v = decide_ranks(
        _ranks(
            {"rank": 0, "tokens": 16, "width": 192, "distance": 0.0},
            {"rank": 1, "tokens": 16, "width": 192, "distance": 0.5},
        ),
        TOL,
        "cpu float32",
    )
    assert v.ok is False and "rank 1: 16 x 192, 0.50 away" in v.detail


def test_no_figures_is_not_checked_and_the_rehearsal_does_not_pass():
    assert decide_ranks(None, TOL, "cpu float32").ok is None
    checks = rehearsal.decided_checks({"ranks": {"world": 2, "per_rank": []}}, Device.CPU, Dtype.FP32)
    (ranks,) = [c for c in checks if c.name is CheckName.RANKS]
    assert ranks.ok is None and ranks.detail.startswith("not checked")
    assert not [
        c
        for c in rehearsal.decided_checks({"ranks": {"world": 1, "per_rank": [{"rank": 0}]}}, Device.CPU, Dtype.FP32)
        if c.name is CheckName.RANKS
    ]


@pytest.mark.release
def test_json_records_the_layout_and_the_spec_carries_it(tmp_path, monkeypatch, cli):
    """``--json`` has ``layout``; the driver's spec has the sizes and a miniature with heads ``tp`` divides.
    The engine is not started: the driver is replaced by one that writes an empty report."""
    import vllm_release
    from patchkit.vllm.release.contract import CPU_ENGINE_RELEASE

    python = vllm_release.venv_python(CPU_ENGINE_RELEASE, "vllm-cpu")
    fake = tmp_path / "driver.py"
    fake.write_text(
        "import json, shutil, sys\nshutil.copy(sys.argv[1], sys.argv[1] + '.seen')\n"
        "json.dump({'steps': [], 'raw': {}}, open(sys.argv[2], 'w'))\n"
    )
    monkeypatch.setattr(driver_run, "DRIVER", fake)
    monkeypatch.setattr(rehearsal, "probe_device", lambda *_a, **_k: {"gpus": 0})
    keep = tmp_path / "work"
    real = rehearsal.rehearse
    monkeypatch.setattr(rehearsal, "rehearse", lambda *a, **k: real(*a, **{**k, "keep": keep}))
    model = write_checkpoint(tmp_path / "model", LLAMA)
    draft = write_checkpoint(tmp_path / "draft", vllm_draft(LLAMA, None))
    code, report = cli.json(
        "rehearse",
        "--model",
        str(model),
        "--draft",
        str(draft),
        "--python",
        str(python),
        "--tensor-parallel-size",
        "4",
        "--eager",
    )
    assert code == 1 and report["layout"] == {"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "world": 4}
    spec = json.loads((keep / "spec.json.seen").read_text())
    assert (spec["tensor_parallel_size"], spec["pipeline_parallel_size"]) == (4, 1)
    assert spec["target_config"]["num_attention_heads"] == 4
    (ranks,) = [c for c in report["checks"] if c["name"] == CheckName.RANKS.value]
    assert ranks["ok"] is None
