"""Static verify follows the release's own runner and proposer (patchkit.vllm.runner.draft_reads), and every
platform branch of a registry name (patchkit.vllm.registry.platforms). Real release trees only."""

from __future__ import annotations

import pytest
from releases import Sweep, sweep
from packaging.version import Version

from patchkit.vllm.runner import draft_reads
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.chain import load_path
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree

pytestmark = pytest.mark.release

LOAD_PATH = "load path (runner and proposer)"
DERIVED_RELEASES = sweep(Sweep.DERIVE)


def node(checks: list[dict], label: str) -> dict:
    found = [c for c in checks if c["label"] == label]
    assert len(found) == 1, [c["label"] for c in checks]
    return found[0]


def links(arch_node: dict) -> dict[str, dict]:
    found = [c for c in arch_node["children"] if c["label"].startswith(LOAD_PATH + " for ")]
    assert len(found) == 1, [c["label"] for c in arch_node["children"]]
    return {c["label"]: c for c in found[0]["children"]}


@pytest.mark.parametrize("version", DERIVED_RELEASES)
def test_every_release_yields_the_paths(release, version):
    """The derivation finds the proposer's reads and the runner's aux-id source on each release; an
    empty derivation would let verify pass on nothing, so each kind is asserted here."""
    tree = SourceTree(release(version))
    d = draft_reads.derive(tree)
    reads = {r.path: r for r in d.reads}
    assert d.language_model is not None
    assert reads[("model",)].required  # AttributeError when missing, on every release
    assert reads[("model", "embed_tokens")].required
    assert not reads[("lm_head",)].required  # guarded: sharing is skipped when missing
    if serving_runner(tree, {}).name == "V2":  # 0.34.0: V2's load_eagle_model alone, in its own file; the
        # head comes back from get_target_lm_head (a getattr default), handed to the draft by share_target_lm_head
        assert reads[("model",)].location.startswith("vllm/v1/worker/gpu/spec_decode/eagle/utils.py:")
        assert reads[("lm_head",)].location.startswith("vllm/v1/worker/gpu/spec_decode/eagle/utils.py:")
        assert ("model", "embedding") in reads[("model", "embed_tokens")].alternatives
        return
    assert any(not b.classes and b.field == ("config", "image_token_index") for b in d.image_token)
    getters = {a.name for a in d.aux if a.kind == "target"}
    # the runner asks the target for its ids through a getter renamed in 0.18.0
    assert getters == (
        {"get_eagle3_default_aux_hidden_state_layers"}
        if Version(version) >= Version("0.18.0")
        else {"get_eagle3_aux_hidden_state_layers"}
    )
    assert reads[("model",)].location.startswith(
        "vllm/v1/spec_decode/" + ("llm_base_proposer.py:" if version in ("0.20.2", "0.25.0", "0.33.0") else "eagle.py:")
    )


def test_nothing_derived_fails(release):
    """A release whose code patchkit does not understand fails the load path; it never passes on nothing."""
    tree = SourceTree(release("0.17.1"))
    registry = Registry(tree)
    cls = registry.resolve("DeepseekV3ForCausalLM").cls
    empty = draft_reads.Derivation(None, None, (), (), ())
    check = load_path.link_check(tree, registry, cls, empty)
    assert check.ok is False and "no path" in check.detail


def test_kimi_k25_on_0_15_1_fails_on_the_model_link(release, cli):
    """Asked for explicitly, Kimi-K2.5 on 0.15.1 fails verify on the derived '.model' link, at the
    proposer's line; in the default set it stays 'not supported' (apply refuses it, same reason)."""
    sp = release("0.15.1")
    code, _ = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    code, verified = cli.json("verify", "--site-packages", str(sp), "--arch", "KimiK25ForConditionalGeneration")
    assert code == 1
    kimi = node(verified["checks"], "KimiK25ForConditionalGeneration")
    assert kimi["ok"] is False and "vLLM >= 0.16.0" in kimi["detail"]
    got = links(kimi)
    model = got["proposer reads get_language_model().model"]
    assert model["ok"] is False and model["location"] == "vllm/v1/spec_decode/eagle.py:1145"
    assert "DeepseekV2Model (vllm/model_executor/models/deepseek_v2.py:" in model["detail"]
    assert "AttributeError" in model["detail"]
    head = got["proposer reads get_language_model().lm_head"]  # guarded: shown, skipped silently by vLLM
    assert head["ok"] is None and head["location"] == "vllm/v1/spec_decode/eagle.py:1242"
    returned = got["proposer calls KimiK25ForConditionalGeneration.get_language_model()"]
    assert returned["ok"] is True and "kimi_k25.py:424" in returned["detail"]
    assert any("get_language_model().model" in m for m in verified["missing"])


@pytest.mark.parametrize("version", ["0.16.0", "0.17.1"])
def test_kimi_k25_links_pass_after_apply(release, cli, version):
    sp = release(version)
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 1
    image = links(node(verified["checks"], "KimiK25ForConditionalGeneration"))[
        "proposer reads target config.image_token_index"
    ]
    # before the proposer patch: the fallback field, which vLLM's own KimiK25Config lacks
    assert image["ok"] is False and "KimiK25Config (vllm/transformers_utils/configs/kimi_k25.py:" in image["detail"]

    code, _ = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    code, verified = cli.json("verify", "--site-packages", str(sp))
    assert code == 0, verified["missing"]
    got = links(node(verified["checks"], "KimiK25ForConditionalGeneration"))
    expected = {
        "runner takes aux ids from get_eagle3_aux_hidden_state_layers()",
        "proposer calls KimiK25ForConditionalGeneration.get_language_model()",
        "proposer reads get_language_model().model",
        "proposer reads get_language_model().model.embed_tokens",
        "proposer reads get_language_model().lm_head",
        "proposer reads target config.media_placeholder_token_id",
    }
    assert expected <= set(got)
    assert all(got[label]["ok"] is True for label in expected)
    assert got["proposer reads get_language_model().model"]["location"].startswith("vllm/v1/spec_decode/eagle.py:")
    assert (
        "DeepseekV2ForCausalLM" in got["proposer calls KimiK25ForConditionalGeneration.get_language_model()"]["detail"]
    )


def test_gemma3_wrapper_on_0_33_0_shows_its_links(release, cli):
    """A multimodal wrapper patched with --arch on 0.33.0: get_language_model() is the generic
    SupportsMultiModal getter there, read through _mark_language_model in __init__."""
    sp = release("0.33.0")
    arch = "Gemma3ForConditionalGeneration"
    code, _ = cli.json("apply", "--site-packages", str(sp), "--arch", arch)
    assert code == 0
    code, verified = cli.json("verify", "--site-packages", str(sp), "--arch", arch)
    assert code == 0, verified["missing"]
    got = links(node(verified["checks"], arch))
    lm = got[f"proposer calls {arch}.get_language_model()"]
    assert lm["ok"] is True and lm["location"] == "vllm/v1/spec_decode/llm_base_proposer.py:1394"
    assert "Gemma3ForCausalLM (vllm/model_executor/models/gemma3.py:" in lm["detail"]
    assert got["proposer reads get_language_model().model"]["ok"] is True
    assert got["proposer reads get_language_model().model.embed_tokens"]["ok"] is True
    assert got["proposer reads get_language_model().lm_head"]["ok"] is True
    assert got["runner takes aux ids from get_eagle3_default_aux_hidden_state_layers()"]["ok"] is True


# -- platform branches (0.33.0 vllm.models.deepseek_v4: nvidia / amd / xpu / cpu) -----------------

XPU_CLASS = "class DeepseekV4ForCausalLM(nn.Module, SupportsPP, SupportsEagle3, SupportsLoRA):"
XPU_BRANCH = "vllm.models.deepseek_v4.xpu.model.DeepseekV4ForCausalLM"


def test_resolve_lists_every_platform_branch(release, cli):
    sp = release("0.33.0")
    code, resolved = cli.json("resolve", "DeepseekV4ForCausalLM", "--site-packages", str(sp))
    assert code == 0
    branches = resolved["branches"]
    assert [b["first"] for b in branches] == [True, False, False, False]
    assert {b["class"].split(".")[3] for b in branches} == {"amd", "cpu", "nvidia", "xpu"}
    assert all(b["eagle3"] is True and b["location"].startswith("vllm/models/deepseek_v4/") for b in branches)
    text = cli("resolve", "DeepseekV4ForCausalLM", "--site-packages", str(sp)).stdout
    assert "picks the class per platform (4 branches)" in text and XPU_BRANCH in text


def test_verify_checks_every_platform_branch(release, cli):
    """Each other branch gets the chain check; one without the interface fails verify, named. (The first
    branch's own capture check fails on this release already: DeepseekV4's forward has hyper-connections
    patchkit does not read; that node is the same before and after, so the branch is what changes.)"""
    sp = release("0.33.0")
    _, verified = cli.json("verify", "--site-packages", str(sp), "--arch", "DeepseekV4ForCausalLM")
    v4 = next(c for c in verified["checks"] if c["label"].endswith("DeepseekV4ForCausalLM"))
    branches = [c for c in v4["children"] if c["label"].startswith("platform branch ")]
    assert len(branches) == 3 and {b["label"].split(".")[3] for b in branches} | {v4["location"].split("/")[3]} == {
        "amd",
        "cpu",
        "nvidia",
        "xpu",
    }
    xpu_node = node(v4["children"], f"platform branch {XPU_BRANCH}")
    assert node(xpu_node["children"], "SupportsEagle3 in its bases")["ok"] is True
    assert not [m for m in verified["missing"] if m.startswith("SupportsEagle3 in its bases")]

    xpu = sp / "vllm/models/deepseek_v4/xpu/model.py"
    text = xpu.read_text()
    assert text.count(XPU_CLASS) == 1
    xpu.write_text(text.replace(XPU_CLASS, "class DeepseekV4ForCausalLM(nn.Module, SupportsPP, SupportsLoRA):"))
    code, verified = cli.json("verify", "--site-packages", str(sp), "--arch", "DeepseekV4ForCausalLM")
    assert code == 1
    v4 = next(c for c in verified["checks"] if c["label"].endswith("DeepseekV4ForCausalLM"))
    bad = node(v4["children"], f"platform branch {XPU_BRANCH}")
    assert bad["ok"] is False and bad["location"] == "vllm/models/deepseek_v4/xpu/model.py:1301"
    assert "SupportsEagle3 in its bases" in bad["detail"]
    assert [m for m in verified["missing"] if m.startswith("SupportsEagle3 in its bases")]
    code, resolved = cli.json("resolve", "DeepseekV4ForCausalLM", "--site-packages", str(sp))
    assert {b["class"]: b["eagle3"] for b in resolved["branches"]}[XPU_BRANCH] is False
