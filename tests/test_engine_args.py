"""``PATCHKIT_ENGINE_ARGS``: keyword arguments a serving setup needs that rehearse's miniature does not set
(the H200 campaign's Qwen3-Next needed ``additional_config={"gdn_prefill_backend": "triton"}``: its staged
environment has no FlashInfer, and vLLM 0.20.2 picks FlashInfer's Gated DeltaNet kernel on Hopper)."""

from __future__ import annotations

import pytest

from patchkit.rehearse.engine_start import ENGINE_ARGS_VAR, extra_engine_args


def test_unset_or_empty_adds_nothing():
    assert extra_engine_args({}) == {}
    assert extra_engine_args({ENGINE_ARGS_VAR: "  "}) == {}


def test_a_json_object_is_passed_through():
    got = extra_engine_args({ENGINE_ARGS_VAR: '{"additional_config": {"gdn_prefill_backend": "triton"}}'})
    assert got == {"additional_config": {"gdn_prefill_backend": "triton"}}


@pytest.mark.parametrize(
    "text, says", [("{additional_config", "is not JSON"), ('["triton"]', "not list"), ("3", "not int")]
)
def test_anything_else_is_an_error_naming_the_variable(text, says):
    with pytest.raises(ValueError, match=says) as info:
        extra_engine_args({ENGINE_ARGS_VAR: text})
    assert ENGINE_ARGS_VAR in str(info.value)
