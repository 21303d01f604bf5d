"""``patchkit explain ID``: what a patch changes and why, with its upstream reference."""

from __future__ import annotations

import pytest

from patchkit.plan.spec import load_patches

PATCHES = load_patches("vllm")


@pytest.mark.parametrize("patch", PATCHES, ids=[p.id for p in PATCHES])
def test_explain_json_carries_the_patch_definition(cli, patch):
    code, report = cli.json("explain", patch.id)
    assert code == 0
    assert report["command"] == "explain" and report["id"] == patch.id
    assert report["summary"] == patch.summary and report["why"] == patch.why
    assert report["reference"] == patch.reference and report["vllm"] == str(patch.vllm)
    assert report["target"] == patch.target.describe()
    assert report["codemod"]["name"] == type(patch.codemod).__name__
    assert report["codemod"]["description"] == patch.codemod.description != ""
    assert report["requires"] == list(patch.requires)
    # every patch says why and where upstream has it; explain is only as good as these
    assert patch.why and "vllm-project/vllm" in patch.reference


def test_explain_text(cli):
    result = cli("explain", "eagle3-kimi-k25-proposer")
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("eagle3-kimi-k25-proposer: the EAGLE proposer reads media_placeholder_token_id")
    assert "elif branch in the EAGLE proposer's image-token mapping" in out  # the codemod's description
    assert "module vllm.v1.spec_decode.eagle" in out
    assert "media_placeholder_token_id" in out and "v1/spec_decode/eagle.py" in out  # why / reference


def test_explain_shows_what_needs_the_patch(cli):
    code, report = cli.json("explain", "eagle3-deepseek-backbone")
    assert code == 0
    assert report["required_by"] == ["eagle3-deepseek-interface"]
    assert report["target_description"] == "class registered as DeepseekV2ForCausalLM -> self.model"
    code, report = cli.json("explain", "eagle3-kimi-k25-interface")
    assert report["target_description"] == (
        "class registered as KimiK25ForConditionalGeneration (new methods forward to self.language_model)")


def test_explain_unknown_id(cli):
    code, report = cli.json("explain", "eagle3-alowlist")
    assert code == 2
    assert report["error"] == "unknown patch 'eagle3-alowlist'"
    assert report["hint"].startswith("did you mean eagle3-allowlist?")
    result = cli("explain", "nope")
    assert result.exit_code == 2 and "known patches: eagle3-allowlist" in result.stderr


def test_explain_unknown_target(cli):
    code, report = cli.json("explain", "eagle3-allowlist", "--target", "sglang")
    assert code == 2 and report["error"] == "unknown --target 'sglang'"
