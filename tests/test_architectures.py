"""EAGLE-3 for any registered architecture (``--arch``, ``--model``, ``scan``) on real vLLM releases.

Every architecture ``scan`` calls patchable on a real release is applied alone, verified
statically, and reverted to the exact bytes; every other one is refused with nothing written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from patchkit import api
from patchkit.plan.request import Request
from patchkit.vllm.release.install import from_site_packages
from patchkit.checks.scan import scan

pytestmark = pytest.mark.release


def digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "vllm").rglob("*.py"))
    }


def model_dir(tmp: Path, arch: str, model_type: str) -> Path:
    """A checkpoint folder of our own: just the config.json fields patchkit reads."""
    d = tmp / f"ckpt-{arch}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": model_type}))
    return d


def _round_trip(sp: Path, tmp: Path, rows, with_model: bool) -> dict[str, list[str]]:
    """apply --arch -> verify --arch -> revert for each row; returns failures by stage."""
    install = from_site_packages(sp)
    pristine = digest(sp)
    failures: dict[str, list[str]] = {"apply": [], "verify": [], "revert": []}
    for row in rows:
        # a model type of our own naming (the module's name), for releases with a start-up allow-list
        module = row.location.split("/")[-1].split(".py")[0] if row.location else row.architecture.lower()
        request = Request((row.architecture,), model_dir(tmp, row.architecture, f"pk_{module}") if with_model else None)
        report = api.apply(install, request=request)
        if row.lossless is not None and not row.lossless.startswith("lossless"):
            # a hybrid whose mixers lose losslessness here (docs/hybrids.md): refused, nothing written
            if not (
                report.refused
                and not report.written
                and any("not lossless" in p.reason or "not checked" in p.reason for p in report.patches)
            ):
                failures["apply"].append(f"{row.architecture}: {row.lossless}, but apply did not refuse it")
            continue
        if report.refused or not report.written:
            failures["apply"].append(
                f"{row.architecture}: {[(p.id, p.outcome.value, p.reason) for p in report.patches]}"
            )
            continue
        verified = api.verify(install, request=request)
        if not verified.ok:
            failures["verify"].append(
                f"{row.architecture}: {[(f.label, f.detail) for c in verified.checks for f in c.failures()]}"
            )
        api.revert(install)
        if digest(sp) != pristine:
            failures["revert"].append(row.architecture)
            break
    return failures


LOAD_PATH_BROKEN = {
    # vLLM's own EAGLE proposer raises AttributeError loading any draft for these: get_language_model()
    # returns a bare backbone with no .model (patchkit.vllm.runner.draft_reads); scan calls them not patchable
    "0.33.0": {
        "MolmoForCausalLM",
        "Molmo2ForConditionalGeneration",
        "Phi4MMForCausalLM",
        "DiffusionGemmaForBlockDiffusion",
    },
    "0.17.1": {"MolmoForCausalLM", "Molmo2ForConditionalGeneration", "Phi4MMForCausalLM"},
}
WORD_EMBEDDINGS = {
    # their backbone calls its embedding word_embeddings: patchable, with an embed_tokens alias
    "0.33.0": {"BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "SarvamMoEForCausalLM"},
    "0.17.1": {"BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM"},
}


def check_failures(failures: dict[str, list[str]], version: str, report) -> None:
    """Every patchable architecture round-trips; the load-path-broken ones are not patchable, with the reason."""
    assert failures == {"apply": [], "verify": [], "revert": []}, failures
    rows = {r.architecture: r for r in report.rows}
    for arch in LOAD_PATH_BROKEN[version]:
        assert rows[arch].state == "not patchable" and "AttributeError" in rows[arch].reason, rows[arch]
    assert all(rows[a].state == "patchable" for a in WORD_EMBEDDINGS[version])


def test_newest_release_every_patchable_architecture_round_trips(release, tmp_path):
    sp = release("0.33.0")
    report = scan(from_site_packages(sp))
    patchable = [r for r in report.rows if r.state == "patchable"]
    shapes = {
        s: sum(1 for r in patchable if r.shape == s)
        for s in ("standard-loop", "hidden-states-only", "interface-only", "wrapper-only")
    }
    # what the classifier finds on 0.33.0's own files (issue 8: 40 standard-loop text classes, the 2
    # interface-only ones and the 17 wrapper-only multimodal classes; issue 17: 34 of those 40 keep
    # the fused-residual contract: Exaone4, HyperCLOVAX and PhiMoE keep their own residual, so they
    # are hidden-states-only, and Cohere, Cohere2 and Flint are refused, their code does not say)
    text_standard = sum(r.shape == "standard-loop" and r.group == "_TEXT_GENERATION_MODELS" for r in patchable)
    assert text_standard >= 34 and shapes["hidden-states-only"] >= 8, (text_standard, shapes)
    assert shapes["interface-only"] >= 2 and shapes["wrapper-only"] >= 17, shapes
    assert {"Glm4MoeForCausalLM", "Gemma3ForConditionalGeneration", "OlmoeForCausalLM", "Glm4ForCausalLM"} <= {
        r.architecture for r in patchable
    }
    failures = _round_trip(sp, tmp_path, patchable, with_model=False)
    check_failures(failures, "0.33.0", report)


def test_a1_release_every_patchable_architecture_round_trips(release, tmp_path):
    sp = release("0.17.1")
    report = scan(from_site_packages(sp))
    patchable = [r for r in report.rows if r.state == "patchable"]
    text = [r for r in patchable if r.group == "_TEXT_GENERATION_MODELS"]
    # 0.17.1's own files (issue 8: at least 48 text architectures with the standard loop, 15 more whose
    # layers keep the residual inside; issue 17: Cohere, Cohere2, Exaone4, MiniMax (3 names) and PhiMoE
    # of those 48 keep their own residual too, so 44 standard-loop and 22 hidden-states-only)
    standard = sum(r.shape == "standard-loop" for r in text)
    hidden = sum(r.shape == "hidden-states-only" for r in text)
    assert standard >= 44 and hidden >= 22 and len(text) >= 65, (standard, hidden, len(text))
    failures = _round_trip(sp, tmp_path, patchable, with_model=True)
    check_failures(failures, "0.17.1", report)


def test_not_patchable_is_refused_with_nothing_written(release, cli):
    sp = release("0.33.0")
    before = digest(sp)
    report = scan(from_site_packages(sp))
    refused = [r for r in report.rows if r.state == "not patchable"][:15]
    assert refused
    for row in refused:
        code, out = cli.json("apply", "--site-packages", str(sp), "--arch", row.architecture)
        assert code == 3, (row.architecture, out)
        assert out["written"] is False
        (only,) = [p for p in out["patches"] if p["outcome"] == "refused"]
        assert row.architecture in only["reason"]
    assert digest(sp) == before


def test_native_architecture_writes_nothing(release, cli):
    sp = release("0.33.0")
    before = digest(sp)
    code, out = cli.json("apply", "--site-packages", str(sp), "--arch", "LlamaForCausalLM")
    assert code == 0 and out["written"] is False
    assert [p["outcome"] for p in out["patches"]] == ["supported upstream"]
    assert digest(sp) == before


def test_a1_allow_list_needs_a_model_type(release, cli, tmp_path):
    """On 0.17.1 an architecture without a family entry needs --model for the allow-list's model type."""
    sp = release("0.17.1")
    code, out = cli.json("apply", "--site-packages", str(sp), "--arch", "CohereForCausalLM", "--dry-run")
    assert code == 3, out
    assert "pass --model DIR" in " ".join(p["reason"] for p in out["patches"])
    # --model supplies it
    code, out = cli.json(
        "apply",
        "--site-packages",
        str(sp),
        "--model",
        str(model_dir(tmp_path, "CohereForCausalLM", "cohere")),
        "--dry-run",
    )
    assert code == 0, out
    assert "eagle3:allowlist:cohere" in {p["id"] for p in out["patches"]}
    # a family entry supplies it: OLMoE gets olmoe on the allow-list
    code, out = cli.json(
        "apply", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM", "--arch", "Glm4MoeForCausalLM"
    )
    assert code == 0, out
    ids = {p["id"] for p in out["patches"]}
    assert ids == {
        "eagle3:OlmoeModel:capture",
        "eagle3:allowlist:olmoe",
        "eagle3:OlmoeForCausalLM:interface",
        "eagle3:Glm4MoeModel:capture",
        "eagle3:allowlist:glm4_moe",
        "eagle3:Glm4MoeForCausalLM:interface",
    }
    spec = (sp / "vllm/config/speculative.py").read_text()
    assert '"olmoe"' in spec
    # verify without --arch checks what the journal shows was patched, too
    code, verified = cli.json("verify", "--site-packages", str(sp))
    labels = [c["label"] for c in verified["checks"]]
    assert any(label.startswith("OlmoeForCausalLM") for label in labels)


def test_mixin_form_matches_native_shape(release, cli):
    """On 0.33.0 the capture is written the way the release's own classes do it (EagleModelMixin)."""
    sp = release("0.33.0")
    code, out = cli.json("apply", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM")
    assert code == 0, out
    text = (sp / "vllm/model_executor/models/olmoe.py").read_text()
    assert "class OlmoeModel(nn.Module, EagleModelMixin):" in text
    assert "self._maybe_add_hidden_state([], self.start_layer, hidden_states, residual)" in text
    assert "self._maybe_add_hidden_state(aux_hidden_states, layer_idx + 1, hidden_states, residual)" in text
    assert "def set_aux_hidden_state_layers" not in text  # the release's default methods are used


def test_model_dir_reads_text_config(release, cli, tmp_path):
    sp = release("0.33.0")
    d = tmp_path / "gemma3"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Gemma3ForConditionalGeneration"],
                "model_type": "gemma3",
                "text_config": {"model_type": "gemma3_text"},
            }
        )
    )
    code, out = cli.json("apply", "--site-packages", str(sp), "--model", str(d), "--dry-run")
    assert code == 0, out
    assert {p["id"] for p in out["patches"]} == {
        "eagle3:Gemma3Model:capture",
        "eagle3:Gemma3ForCausalLM:interface",
        "eagle3:Gemma3ForConditionalGeneration:interface",
    }


def test_scan_json_and_broken_class(release, cli):
    sp = release("0.33.0")
    code, out = cli.json("scan", "--site-packages", str(sp))
    assert code == 0
    by = {r["architecture"]: r for r in out["architectures"]}
    assert by["LlamaForCausalLM"]["state"] == "native"
    assert by["MiMoForCausalLM"]["state"] == "declared but broken"
    assert "MiMoModel.forward captures no aux hidden states" in by["MiMoForCausalLM"]["reason"]
    assert by["Glm4MoeForCausalLM"]["state"] == "patchable" and by["Glm4MoeForCausalLM"]["shape"] == "standard-loop"
    assert sum(out["counts"].values()) == len(out["architectures"])


def test_verify_fails_a_declared_but_broken_class(release, cli):
    """MiMo declares SupportsEagle3, but its backbone's own forward captures nothing (every release)."""
    for version in ("0.17.1", "0.33.0"):
        sp = release(version)
        code, out = cli.json("verify", "--site-packages", str(sp), "--arch", "MiMoForCausalLM")
        assert code == 1, out
        assert any("aux_hidden_state_layers' in the decoder-layer loop" in m for m in out["missing"]), out["missing"]


def test_default_architecture_with_its_own_model_type(release, cli, tmp_path):
    """A DeepSeek-V3 fine-tune whose config.json reports a model type the shipped entries do not admit."""
    sp = release("0.17.1")
    model = model_dir(tmp_path, "DeepseekV3ForCausalLM", "my_dsv3")
    code, out = cli.json("apply", "--site-packages", str(sp), "--model", str(model))
    assert code == 0, out
    assert {p["id"] for p in out["patches"]} == {
        "eagle3-allowlist",
        "eagle3-deepseek-backbone",
        "eagle3-deepseek-interface",
        "eagle3:allowlist:my_dsv3",
    }
    code, verified = cli.json("verify", "--site-packages", str(sp), "--model", str(model))
    assert code == 0, verified["missing"]


def test_a2_inline_capturing_backbone_gets_its_own_methods(release, cli):
    """Qwen3-Next on 0.18.0: the backbone captures inline without EagleModelMixin, so vLLM's default
    SupportsEagle3 methods would assert; the class gets methods that set the backbone's attribute."""
    sp = release("0.18.0")
    code, out = cli.json("apply", "--site-packages", str(sp), "--arch", "Qwen3NextForCausalLM")
    assert code == 0, out
    assert [p["id"] for p in out["patches"]] == ["eagle3:Qwen3NextForCausalLM:interface"]
    text = (sp / "vllm/model_executor/models/qwen3_next.py").read_text()
    assert "def get_eagle3_default_aux_hidden_state_layers(self)" in text
    assert "self.model.aux_hidden_state_layers = layers" in text
    code, verified = cli.json("verify", "--site-packages", str(sp), "--arch", "Qwen3NextForCausalLM")
    assert code == 0, verified["missing"]


@pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])
def test_backbone_whose_embedding_the_proposer_cannot_find_gets_an_alias(release, version):
    """Bailing MoE's backbone calls its embedding word_embeddings; vLLM's EAGLE proposer reads
    .embed_tokens (or .embedding) and raises AttributeError when it loads any draft."""
    import ast as ast_mod

    sp = release(version)
    install = from_site_packages(sp)
    report = api.apply(install, request=Request(("BailingMoeForCausalLM", "Glm4MoeForCausalLM")))
    assert report.written, [(p.id, p.outcome.value, p.reason) for p in report.patches]
    ids = [p.id for p in report.patches]
    assert "eagle3:BailingMoeModel:embedding-alias" in ids
    assert not any(i.endswith(":embedding-alias") and "Glm4" in i for i in ids)  # it has embed_tokens
    module = ast_mod.parse((sp / "vllm/model_executor/models/bailing_moe.py").read_bytes())
    backbone = next(n for n in module.body if isinstance(n, ast_mod.ClassDef) and n.name == "BailingMoeModel")
    prop = [f for f in backbone.body if isinstance(f, ast_mod.FunctionDef) and f.name == "embed_tokens"]
    assert len(prop) == 1 and ast_mod.unparse(prop[0].body[-1]) == "return self.word_embeddings"
    assert api.verify(install, request=Request(("BailingMoeForCausalLM",))).ok
    api.revert(install)


@pytest.mark.parametrize(
    ("version", "arch", "backbone"),
    [
        # no body of its own: OpenPanguModelBase.__init__ (two classes up) assigns self.model
        ("0.17.1", "PanguEmbeddedForCausalLM", "OpenPanguModel"),
        ("0.33.0", "PanguUltraMoEForCausalLM", "OpenPanguModel"),
        # self.model = model_type(...): the parameter's default, or what a subclass passes up
        ("0.33.0", "InternLM2ForCausalLM", "InternLM2Model"),
        ("0.17.1", "InternLM2VEForCausalLM", "InternLM2VEModel"),
        # the base's __init__ assigns self.model; the subclass only passes layer_type up
        ("0.17.1", "FlexOlmoForCausalLM", "OlmoeModel"),
        ("0.17.1", "BaiChuanForCausalLM", "BaiChuanModel"),
    ],
)
def test_backbone_is_followed_through_the_init_chain(release, version, arch, backbone):
    """held_class follows super().__init__(...) with the keyword arguments it passes: these classes
    were called 'no decoder backbone in self.model' before."""
    from patchkit.vllm.classes.composition import held_class
    from patchkit.vllm.registry.table import Registry
    from patchkit.vllm.release.source import SourceTree

    sp = release(version)
    tree = SourceTree(sp)
    registry = Registry(tree)
    cls = registry.resolve(arch).cls
    assert held_class(tree, registry, cls, "model").cls.name == backbone
    row = next(r for r in scan(from_site_packages(sp)).rows if r.architecture == arch)
    assert (row.state, row.shape) == ("patchable", "standard-loop"), row


@pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])
def test_layer_called_in_both_arms_of_an_if(release, version, tmp_path):
    """DeciModel (nemotron_nas.py) runs its layer in an if/else, once either way: the capture goes
    before that statement (A1: the stream entering the layer) or after it (A2/A3: the next id)."""
    import ast as ast_mod

    sp = release(version)
    install = from_site_packages(sp)
    model = model_dir(tmp_path, "DeciLMForCausalLM", "nemotron-nas")
    report = api.apply(install, request=Request(("DeciLMForCausalLM",), model))
    assert report.written, [(p.id, p.outcome.value, p.reason) for p in report.patches]
    module = ast_mod.parse((sp / "vllm/model_executor/models/nemotron_nas.py").read_bytes())
    deci = next(n for n in module.body if isinstance(n, ast_mod.ClassDef) and n.name == "DeciModel")
    forward = next(f for f in deci.body if isinstance(f, ast_mod.FunctionDef) and f.name == "forward")
    loop = next(s for s in forward.body if isinstance(s, ast_mod.For))
    kinds = [type(s).__name__ for s in loop.body]
    branch = kinds.index("If", 1 if version == "0.17.1" else 0)
    if version == "0.17.1":  # inline capture first, then the branch that runs the layer
        assert kinds[0] == "If" and "aux_hidden_state_layers" in ast_mod.unparse(loop.body[0]), kinds
    else:  # _maybe_add_hidden_state right after the branch
        assert "_maybe_add_hidden_state" in ast_mod.unparse(loop.body[branch + 1]), kinds
    assert api.verify(install, request=Request(("DeciLMForCausalLM",), model)).ok
    api.revert(install)


@pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])
def test_class_whose_head_the_proposer_cannot_find_gets_an_alias(release, version, tmp_path):
    """InternLM2 calls its head ``output``; vLLM's EAGLE proposer shares the target's head with a draft
    that ships none only ``if hasattr(target, "lm_head")``, so such a draft kept a head that was never
    loaded (found by the runtime probe on 0.33.0). The head alias names it; revert --arch takes it out."""
    import ast as ast_mod

    sp = release(version)
    install = from_site_packages(sp)
    pristine = digest(sp)
    model = model_dir(tmp_path, "InternLM2ForCausalLM", "internlm2")
    request = Request(("InternLM2ForCausalLM",), model)
    report = api.apply(install, request=request)
    assert report.written, [(p.id, p.outcome.value, p.reason) for p in report.patches]
    assert "eagle3:InternLM2ForCausalLM:head-alias" in [p.id for p in report.patches]
    module = ast_mod.parse((sp / "vllm/model_executor/models/internlm2.py").read_bytes())
    cls = next(n for n in module.body if isinstance(n, ast_mod.ClassDef) and n.name == "InternLM2ForCausalLM")
    prop = [f for f in cls.body if isinstance(f, ast_mod.FunctionDef) and f.name == "lm_head"]
    assert len(prop) == 1 and ast_mod.unparse(prop[0].body[-1]) == "return self.output"
    verified = api.verify(install, request=request)
    assert verified.ok

    def walk(checks):
        for c in checks:
            yield c
            yield from walk(c.children)

    head = [c for c in walk(verified.checks) if c.label.endswith("InternLM2ForCausalLM.lm_head")]
    assert head and all(f.ok is True for f in head), head
    api.revert(install, request=request)
    assert digest(sp) == pristine


def test_language_model_assigned_with_an_annotation_or_through_a_local(release):
    """0.33.0 dots_ocr.py assigns ``self.language_model: Qwen2ForCausalLM = init_vllm_registered_model(...)``
    and step3_vl.py ``language_model = init_vllm_registered_model(...)`` then ``self.language_model =
    language_model``: both were called 'no decoder backbone in self.model'."""
    rows = {r.architecture: r for r in scan(from_site_packages(release("0.33.0"))).rows}
    dots = rows["DotsOCRForCausalLM"]
    assert (dots.state, dots.shape) == ("patchable", "wrapper-only") and "Qwen2ForCausalLM" in dots.reason, dots
    step = rows["Step3VLForConditionalGeneration"]
    assert step.state == "not patchable" and "text_config at run time" in step.reason, step
    # ovis.py holds it in self.llm: the reason says so (it said 'no decoder backbone in self.model')
    ovis = rows["Ovis"]
    assert ovis.state == "not patchable" and "self.llm" in ovis.reason and ovis.location.startswith("vllm/"), ovis


def test_class_built_by_a_factory_new_is_not_patchable(release, cli):
    """0.17.1 grok1.py: GrokForCausalLM.__new__ returns a Grok1ForCausalLM or Grok2ForCausalLM, which do
    not derive from it, so an interface on GrokForCausalLM never reaches the model vLLM's runner checks
    (the runtime probe's methods check raised TypeError). It used to be called patchable."""
    sp = release("0.17.1")
    before = digest(sp)
    rows = {r.architecture: r for r in scan(from_site_packages(sp)).rows}
    assert rows["Grok1ForCausalLM"].state == "not patchable" and "__new__" in rows["Grok1ForCausalLM"].reason
    assert rows["BaiChuanForCausalLM"].state == "patchable"  # SupportsQuant.__new__ returns the instance itself
    result = cli("apply", "--site-packages", str(sp), "--arch", "Grok1ForCausalLM")
    assert result.exit_code == 3 and "__new__" in result.stdout
    assert digest(sp) == before


def test_subclass_and_wrapper_of_a_shipped_architecture_get_the_shipped_patches(release, cli, tmp_path):
    """0.17.1: DeepseekForCausalLM and MistralLarge3ForCausalLM inherit DeepseekV2ForCausalLM, and
    KimiVLForConditionalGeneration holds one. They got a generic capture of DeepseekV2Model, which the
    shipped eagle3-deepseek-backbone then refused as a hand edit (and the other way round)."""
    sp = release("0.17.1")
    install = from_site_packages(sp)
    for arch in ("DeepseekForCausalLM", "MistralLarge3ForCausalLM", "KimiVLForConditionalGeneration"):
        report = api.apply(install, request=Request((), model_dir(tmp_path, arch, f"pk_{arch.lower()}")))
        assert report.written and not report.refused, [(p.id, p.outcome.value, p.reason) for p in report.patches]
        ids = {p.id for p in report.patches}
        assert "eagle3-deepseek-backbone" in ids and "eagle3:DeepseekV2Model:capture" not in ids, ids
    result = cli("apply", "--site-packages", str(sp))  # the default run after them: nothing collides
    assert result.exit_code == 0, result.stdout
    assert cli("verify", "--site-packages", str(sp), "--arch", "KimiVLForConditionalGeneration").exit_code == 0
