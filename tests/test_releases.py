"""The main job end to end on real vLLM releases (wheels fetched from the package index at test time).

Each test gets a fresh copy of a release's ``vllm/**/*.py`` and ``vllm-X.Y.Z.dist-info`` and runs
the real CLI on it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest
from releases import Sweep, sweep

pytestmark = pytest.mark.release

PATCHED_RELEASES = sweep(Sweep.PATCHED)
ALL_PATCHES = {
    "eagle3-allowlist",
    "eagle3-deepseek-backbone",
    "eagle3-deepseek-interface",
    "eagle3-kimi-k25-interface",
    "eagle3-kimi-k25-proposer",
}


def snapshot(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (relative POSIX path -> digest)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("version", PATCHED_RELEASES)
def test_apply_verify_reapply_revert(release, cli, version):
    sp = release(version)
    before = snapshot(sp)

    code, applied = cli.json("apply", "--target", "vllm", "--site-packages", str(sp))
    assert code == 0, applied
    assert applied["written"] is True
    assert {p["id"]: p["outcome"] for p in applied["patches"]} == {pid: "applied" for pid in ALL_PATCHES}
    assert applied["verify"]["ok"] is True and applied["verify"]["missing"] == []  # checked before writing
    touched = {f["path"] for f in applied["files"]}
    assert touched == {
        "vllm/config/speculative.py",
        "vllm/model_executor/models/deepseek_v2.py",
        "vllm/model_executor/models/kimi_k25.py",
        "vllm/v1/spec_decode/eagle.py",
    }
    for path in touched:  # every touched file still parses
        ast.parse((sp / path).read_bytes())
    after_apply = snapshot(sp)
    assert {p for p in before if before[p] != after_apply.get(p)} == touched

    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified["missing"]
    labels = [c["label"] for c in verified["checks"]]
    assert "KimiK25ForConditionalGeneration" in labels
    kimi = next(c for c in verified["checks"] if c["label"] == "KimiK25ForConditionalGeneration")
    assert kimi["location"].startswith("vllm/model_executor/models/kimi_k25.py:")
    held = next(c for c in kimi["children"] if c["label"].startswith("self."))
    assert held["label"].startswith("self.language_model holds DeepseekV2ForCausalLM")
    assert kimi["children"][-1]["label"] == "load path (runner and proposer) for KimiK25ForConditionalGeneration"
    backbone = held["children"][-1]
    assert backbone["label"].startswith("self.model holds DeepseekV2Model")
    assert {c["label"] for c in backbone["children"]} >= {
        "ids are global layer indices",
        "captures the residual stream entering each layer",
    }
    text = cli("verify", "--site-packages", str(sp)).stdout
    assert "├── ✓ self.language_model holds DeepseekV2ForCausalLM" in text
    assert "deepseek_v2.py:" in text

    code, again = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    assert again["written"] is False
    assert {p["outcome"] for p in again["patches"]} == {"already applied"}
    assert snapshot(sp) == after_apply  # a second apply changes no byte

    code, status = cli.json("status", "--site-packages", str(sp))
    assert code == 0
    assert {e["path"] for e in status["entries"]} == touched
    assert {e["state"] for e in status["entries"]} == {"patched"}
    assert {e["vllm_version"] for e in status["entries"]} == {version}

    code, reverted = cli.json("revert", "--site-packages", str(sp))
    assert code == 0
    assert {f["path"] for f in reverted["files"] if f["restored"]} == touched
    assert snapshot(sp) == before  # byte-identical, and no state left behind

    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 1
    missing = "\n".join(verified["missing"])
    assert "SupportsEagle3 in its bases" in missing
    assert "allow-list" in missing
    assert "set_aux_hidden_state_layers(): not defined anywhere in its MRO" in missing
    # the proposer's image-token read, derived from the release (patchkit.vllm.runner.draft_reads)
    assert "proposer reads target config.image_token_index: no branch for KimiK25ForConditionalGeneration" in missing


def test_dry_run_prints_diff_and_writes_nothing(release, cli):
    sp = release("0.17.1")
    before = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp), "--dry-run")
    assert result.exit_code == 0
    assert "--- a/vllm/model_executor/models/deepseek_v2.py" in result.stdout
    assert "+class DeepseekV2ForCausalLM(" not in result.stdout  # the class line is edited, not added
    assert '+            "kimi_k2",' in result.stdout
    assert snapshot(sp) == before


def test_0_14_1_patches_deepseek_and_reports_kimi_missing(release, cli):
    sp = release("0.14.1")
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    outcomes = {p["id"]: p for p in applied["patches"]}
    assert outcomes["eagle3-deepseek-backbone"]["outcome"] == "applied"
    assert outcomes["eagle3-deepseek-interface"]["outcome"] == "applied"
    assert outcomes["eagle3-allowlist"]["outcome"] == "applied"
    kimi = outcomes["eagle3-kimi-k25-interface"]
    assert kimi["outcome"] == "not applicable"
    assert "outside this patch's range" in kimi["reason"]  # the version gate runs first
    assert outcomes["eagle3-kimi-k25-proposer"]["outcome"] == "not applicable"
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified["missing"]


def test_0_15_1_kimi_k25_is_not_patched_and_verify_says_why(release, cli):
    """On 0.15.1 Kimi-K2.5's get_language_model() returns a bare DeepseekV2Model; vLLM's proposer reads its
    .model when loading any draft. patchkit patches DeepSeek there, not Kimi-K2.5, and says why."""
    sp = release("0.15.1")
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0, applied
    outcomes = {p["id"]: p for p in applied["patches"]}
    assert {
        i: outcomes[i]["outcome"] for i in ("eagle3-deepseek-backbone", "eagle3-deepseek-interface", "eagle3-allowlist")
    } == dict.fromkeys(("eagle3-deepseek-backbone", "eagle3-deepseek-interface", "eagle3-allowlist"), "applied")
    kimi = outcomes["eagle3-kimi-k25-interface"]
    assert kimi["outcome"] == "not applicable"
    assert "vllm/v1/spec_decode/eagle.py:1145" in kimi["reason"] and "vLLM >= 0.16.0" in kimi["reason"]
    assert outcomes["eagle3-kimi-k25-proposer"]["outcome"] == "not applicable"
    assert "vllm/model_executor/models/kimi_k25.py" not in {f["path"] for f in applied["files"]}
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified["missing"]
    node = next(c for c in verified["checks"] if c["label"] == "KimiK25ForConditionalGeneration")
    assert node["ok"] is None and node["location"] == "vllm/v1/spec_decode/eagle.py:1145"
    assert "vLLM >= 0.16.0" in node["detail"]


def test_0_10_2_allow_list_lives_in_config_init(release, cli):
    sp = release("0.10.2")
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    assert "vllm/config/__init__.py" in {f["path"] for f in applied["files"]}
    assert applied["install"]["era"] == "A1a"
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified["missing"]


@pytest.mark.parametrize("version", ["0.18.0", "0.33.0"])
def test_native_releases_need_nothing(release, cli, version):
    sp = release(version)
    before = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    assert {p["outcome"] for p in applied["patches"]} == {"supported upstream"}
    assert applied["written"] is False
    assert snapshot(sp) == before
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified["missing"]


def test_0_9_2_without_the_protocol_is_refused(release, cli):
    sp = release("0.9.2")
    before = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp))
    assert result.exit_code == 3
    assert "has no SupportsEagle3 Protocol" in result.stdout
    assert "nothing was written" in result.stdout
    assert snapshot(sp) == before
    assert cli("verify", "--site-packages", str(sp)).exit_code == 1


def test_resolve_kimi_k25_names_its_file(release, cli):
    sp = release("0.17.1")
    code, resolved = cli.json("resolve", "KimiK25ForConditionalGeneration", "--site-packages", str(sp))
    assert code == 0
    assert resolved["file"] == "vllm/model_executor/models/kimi_k25.py"
    assert resolved["class"] == "KimiK25ForConditionalGeneration"
    assert resolved["line"] > 1
    assert any(b.startswith("SupportsMultiModal (vllm/model_executor/models/interfaces.py:") for b in resolved["bases"])
    text = cli("resolve", "KimiK25ForConditionalGeneration", "--site-packages", str(sp)).stdout
    assert "kimi_k25.py" in text


def test_resolve_kimi_k2_is_not_one_of_vllms_own_models(release, cli):
    sp = release("0.17.1")
    result = cli("resolve", "KimiK2ForCausalLM", "--site-packages", str(sp))
    assert result.exit_code == 1
    assert "not one of vLLM 0.17.1's own models" in result.stdout
    assert "Transformers backend" in result.stdout
    code, resolved = cli.json("resolve", "KimiK2ForCausalLM", "--site-packages", str(sp))
    assert resolved["own_model"] is False and resolved["file"] is None


def test_resolve_alias_reports_shared_class(release, cli):
    sp = release("0.17.1")
    code, resolved = cli.json("resolve", "DeepseekV32ForCausalLM", "--site-packages", str(sp))
    assert code == 0
    assert resolved["class"] == "DeepseekV3ForCausalLM"
    assert "DeepseekV3ForCausalLM" in resolved["aliases"]
    assert resolved["bases"][0].startswith("DeepseekV2ForCausalLM (vllm/model_executor/models/deepseek_v2.py:")


def test_resolve_absolute_module_names(release, cli):
    """From 0.22 the registry may name absolute modules (vllm.models.deepseek_v4, a package)."""
    sp = release("0.22.0")
    code, resolved = cli.json("resolve", "DeepseekV4ForCausalLM", "--site-packages", str(sp))
    assert code == 0
    assert resolved["registry"]["module"] == "vllm.models.deepseek_v4"
    # a package that picks its implementation per platform: the first (default) branch, the other noted
    assert resolved["file"] == "vllm/models/deepseek_v4/nvidia/model.py"
    assert resolved["alternatives"] == ["vllm.models.deepseek_v4.amd.model.DeepseekV4ForCausalLM"]


ALL_RELEASES = sweep(Sweep.RANGE)


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_every_release_round_trips(release, version):
    """For every release in the test set: apply twice equals apply once; revert restores every byte."""
    from patchkit import api
    from patchkit.vllm.release.install import from_site_packages

    sp = release(version)
    before = snapshot(sp)
    first = api.apply(from_site_packages(sp))
    once = snapshot(sp)
    second = api.apply(from_site_packages(sp))
    assert snapshot(sp) == once
    assert not second.written
    if first.written:
        assert {p.outcome.value for p in second.patches} <= {"already applied", "not applicable"}
    api.revert(from_site_packages(sp))
    assert snapshot(sp) == before
