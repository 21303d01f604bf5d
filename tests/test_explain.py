"""``patchkit explain ID``: what a patch changes and why, with its upstream reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.codemods import CATALOGUE
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
    # the codemod's own class and sentence from the catalogue (it was the reference's type, "CodemodRef")
    assert report["codemod"]["name"] == CATALOGUE[patch.codemod.kind].cls != "CodemodRef"
    assert report["codemod"]["doc"] == CATALOGUE[patch.codemod.kind].doc
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
        "class registered as KimiK25ForConditionalGeneration (new methods forward to self.language_model)"
    )


def test_explain_unknown_id(cli):
    code, report = cli.json("explain", "eagle3-alowlist")
    assert code == 2
    assert report["error"] == "unknown patch 'eagle3-alowlist'"
    assert report["hint"].startswith("did you mean eagle3-allowlist?")
    result = cli("explain", "nope")
    assert result.exit_code == 2 and "known patches: eagle3-allowlist" in result.stderr


def test_explain_unknown_eagle3_form_needs_no_install(cli):
    """An 'eagle3:' id of no form apply prints is unknown before any install is looked for."""
    result = cli("explain", "eagle3:OlmoeModel:captures", "--site-packages", "/nonexistent")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown patch 'eagle3:OlmoeModel:captures'\nhint: ")
    assert "eagle3:<Backbone>:capture" in result.stderr and "Traceback" not in result.stderr


def test_explain_unknown_target(cli):
    code, report = cli.json("explain", "eagle3-allowlist", "--target", "trtllm")
    assert code == 2 and report["error"] == "unknown --target 'trtllm'"
    # sglang is known since issue 44, and explain is written for it: vLLM's patch ids are not SGLang's
    code, report = cli.json("explain", "eagle3-allowlist", "--target", "sglang")
    assert code == 2 and report["error"] == "unknown SGLang patch 'eagle3-allowlist'"


# -- eagle3: ids, read on real releases -------------------------------------------------------------


def _apply_targets(cli, sp, arch: str) -> dict[str, str]:
    """``{id: target}`` of what ``apply --dry-run --arch`` plans (nothing written)."""
    code, report = cli.json("apply", "--site-packages", str(sp), "--dry-run", "--arch", arch)
    assert code == 0, report
    return {p["id"]: p["target"] for p in report["patches"]}


def _decision(report: dict, what: str) -> dict:
    (found,) = [d for d in report["decisions"] if d["what"] == what]
    return found


@pytest.mark.release
def test_explain_capture_id_where_and_who_on_0_17_1(cli, release):
    """The newcomer task: where is OlmoeForCausalLM's capture written on 0.17.1, and who decides its form?"""
    sp = release("0.17.1")
    planned = _apply_targets(cli, sp, "OlmoeForCausalLM")
    code, report = cli.json("explain", "eagle3:OlmoeModel:capture", "--site-packages", str(sp))
    assert code == 0, report
    assert report["kind"] == "capture" and report["apply_id"] == "eagle3:OlmoeModel:capture"
    assert report["vllm_version"] == "0.17.1" and report["era"] == "A1b"
    assert report["architectures"] == ["OlmoeForCausalLM"]
    assert report["shape"]["shape"] == "standard-loop" and report["shape"]["backbone"] == "OlmoeModel"
    # the class and file: exactly what apply plans for that id
    assert report["target"] == planned["eagle3:OlmoeModel:capture"]
    assert report["target"].startswith("vllm/model_executor/models/olmoe.py:") and report["target"].endswith(
        " OlmoeModel"
    )
    assert report["outcome"] == "applied" and report["files"] == ["vllm/model_executor/models/olmoe.py"]
    # who decides the form: the era gives the inline form, stream.py the residual stream, with its signals
    assert report["codemod"]["options"]["form"] == "inline" and report["codemod"]["options"]["residual"] is True
    assert "inline" in _decision(report, "capture form")["answer"]
    stream = _decision(report, "residual stream")
    assert stream["answer"].startswith("hidden_states + residual")
    assert stream["by"] == "patchkit/vllm/stream/residual.py residual_stream"
    assert "OlmoeDecoderLayer.forward reads the residual it is given" in stream["evidence"]
    assert "vllm/model_executor/models/olmoe.py:" in stream["evidence"]
    # the second hop: the file named holds the function named
    path, func = stream["by"].split(" ")
    assert f"def {func}(" in (Path(__file__).parents[1] / path).read_text()
    # the architecture's own name gives the same answer, and the id apply prints
    code, by_arch = cli.json("explain", "eagle3:OlmoeForCausalLM:capture", "--site-packages", str(sp))
    assert code == 0 and by_arch["apply_id"] == "eagle3:OlmoeModel:capture" and by_arch["target"] == report["target"]
    text = cli("explain", "eagle3:OlmoeModel:capture", "--site-packages", str(sp))
    assert text.exit_code == 0
    assert text.stdout.startswith("eagle3:OlmoeModel:capture on vLLM 0.17.1 (EAGLE-3 contract A1b): ")
    assert "patchkit/vllm/stream/residual.py residual_stream" in text.stdout and report["target"] in text.stdout


@pytest.mark.release
def test_explain_capture_id_mixin_form_on_0_33_0(cli, release):
    """On A3 the same id is written in the EagleModelMixin form; explain says so and where."""
    sp = release("0.33.0")
    planned = _apply_targets(cli, sp, "OlmoeForCausalLM")
    code, report = cli.json("explain", "eagle3:OlmoeModel:capture", "--site-packages", str(sp))
    assert code == 0, report
    assert report["era"] == "A3" and report["codemod"]["options"]["form"] == "mixin"
    assert "EagleModelMixin" in _decision(report, "capture form")["answer"]
    assert report["target"] == planned["eagle3:OlmoeModel:capture"]


@pytest.mark.release
def test_explain_interface_and_allowlist_ids_on_0_17_1(cli, release):
    sp = release("0.17.1")
    planned = _apply_targets(cli, sp, "OlmoeForCausalLM")
    code, report = cli.json("explain", "eagle3:OlmoeForCausalLM:interface", "--site-packages", str(sp))
    assert code == 0, report
    assert report["target"] == planned["eagle3:OlmoeForCausalLM:interface"]
    assert report["target"].endswith(" OlmoeForCausalLM")
    assert report["codemod"]["options"]["methods"] is True  # A1: the class gets its own two methods
    code, report = cli.json("explain", "eagle3:allowlist:olmoe", "--site-packages", str(sp))
    assert code == 0, report
    assert report["target"] == planned["eagle3:allowlist:olmoe"] == "vllm/config/speculative.py"
    assert _decision(report, "allow-list")["evidence"].startswith("vllm/config/speculative.py:")
    code, report = cli.json("explain", "eagle3:allowlist:llama", "--site-packages", str(sp))
    assert code == 0 and report["outcome"] is None and "already admits llama" in report["note"]


@pytest.mark.release
def test_explain_eagle3_ids_where_nothing_is_planned(cli, release):
    code, report = cli.json("explain", "eagle3:allowlist:olmoe", "--site-packages", str(release("0.33.0")))
    assert code == 0 and report["outcome"] is None and report["note"] == "this release has no model-type allow-list"
    code, report = cli.json("explain", "eagle3:OlmoeModel:capture", "--site-packages", str(release("0.9.2")))
    assert code == 0 and report["era"] == "A0" and "has no SupportsEagle3 Protocol" in report["note"]
    sp = release("0.17.1")
    code, report = cli.json("explain", "eagle3:LlamaForCausalLM:interface", "--site-packages", str(sp))
    assert code == 0 and report["shape"]["state"] == "native" and report["outcome"] is None
    code, report = cli.json("explain", "eagle3:DeepseekV2Model:capture", "--site-packages", str(sp))
    assert code == 0 and "'patchkit explain eagle3-deepseek-backbone'" in report["note"]  # the shipped patch serves it


@pytest.mark.release
def test_explain_eagle3_id_of_a_class_the_release_lacks(cli, release):
    sp = release("0.17.1")
    before = sorted((p.relative_to(sp), p.stat().st_mtime_ns) for p in sp.rglob("*") if p.is_file())
    result = cli("explain", "eagle3:NoSuchModel:capture", "--site-packages", str(sp))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "error: no class 'NoSuchModel' for 'eagle3:NoSuchModel:capture' in vLLM 0.17.1"
    assert lines[1].startswith("hint: ") and "eagle3:<Backbone>:capture" in lines[1] and len(lines) == 2
    assert sorted((p.relative_to(sp), p.stat().st_mtime_ns) for p in sp.rglob("*") if p.is_file()) == before


@pytest.mark.release
def test_explain_after_apply_explains_the_applied_patch(release, cli):
    """Issue 32: after 'apply', explain read patchkit's own edit as native support ("apply plans no such
    patch here"); it explains the patch from the release's own bytes and says it is applied."""
    sp = release("0.34.0")
    model = Path(__file__).parent / "checkpoints" / "glm-4.6"
    pid = "eagle3:Glm4MoeForCausalLM:interface"
    code, before = cli.json("explain", pid, "--site-packages", str(sp))
    assert code == 0 and before["summary"] and before["applied_in"] == [], before
    assert cli("apply", "--site-packages", str(sp), "--model", str(model)).exit_code == 0
    code, after = cli.json("explain", pid, "--site-packages", str(sp))
    assert code == 0 and after["summary"] == before["summary"] and after["shape"] == before["shape"], after
    assert after["applied_in"] == ["vllm/model_executor/models/glm4_moe.py"], after
    text = " ".join(cli("explain", pid, "--site-packages", str(sp)).stdout.split())
    assert "plans no such patch" not in text and "(native)" not in text, text
    assert "applied: patchkit wrote it into vllm/model_executor/models/glm4_moe.py" in text, text
    code, capture = cli.json("explain", "eagle3:Glm4MoeModel:capture", "--site-packages", str(sp))
    assert code == 0 and capture["summary"] and capture["applied_in"] == after["applied_in"], capture
