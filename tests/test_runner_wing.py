"""The runner wing (patchkit.vllm.runner): each declared runner fact is found in a real release's bytes,
the serve's runner is chosen by the declared rule, and rehearse's driver finds the draft module through
the declaration (V1 ``drafter.model``, V2 ``speculator.model``)."""

from __future__ import annotations

import ast
import json
import types

import pytest

from patchkit.rehearse import engine_driver
from patchkit.vllm.runner.generations import GENERATIONS, V1, V2
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.release.source import SourceTree
from tests.vllm_release import pristine_site_packages


def _assigned_attrs(tree: SourceTree, relpath: str) -> set[str]:
    """Every ``self.<name> = ...`` in a release file."""
    module = ast.parse(tree.read_bytes(relpath))
    return {
        t.attr
        for n in ast.walk(module)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


@pytest.mark.release
@pytest.mark.parametrize(
    "version, env, expected, present",
    [
        ("0.20.2", {}, "V1", ("V1", "V2")),
        ("0.20.2", {"VLLM_USE_V2_MODEL_RUNNER": "1"}, "V2", ("V1", "V2")),
        ("0.33.0", {}, "V1", ("V1", "V2")),
        ("0.34.0", {}, "V2", ("V2",)),
        ("0.34.0", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "V2", ("V2",)),
    ],
)
def test_the_serve_runner_is_found_with_every_declared_fact(version, env, expected, present):
    tree = SourceTree(pristine_site_packages(version))
    choice = serving_runner(tree, env)
    assert (choice.name, choice.present) == (expected, present)
    assert choice.missing == () and choice.not_checked() is None, choice.missing
    assert expected in choice.reason
    # the drafter path: the runner assigns self.<first>, and the object there holds the draft at self.<second>
    generation = choice.generation
    assert generation.drafter[0] in _assigned_attrs(tree, generation.runner)


@pytest.mark.release
def test_the_v2_draft_module_is_the_speculators_model_on_0_34_0():
    tree = SourceTree(pristine_site_packages("0.34.0"))
    speculator = tree.find_class("vllm.v1.worker.gpu.spec_decode.eagle.speculator", "EagleSpeculator")
    assert speculator is not None
    assert tree.find_member(speculator, "load_model") is not None
    assert any(V2.drafter[1] in _assigned_attrs(tree, c.relpath) for c in tree.mro(speculator))


def _worker(module: str, cls: str, **attrs):
    runner_cls = type(cls, (), {"__module__": module})
    runner = runner_cls()
    for k, v in attrs.items():
        setattr(runner, k, v)
    return types.SimpleNamespace(model_runner=runner)


def test_the_driver_finds_the_draft_through_each_declared_runner():
    runners = [g.for_driver() for g in GENERATIONS]
    draft = object()
    v2 = _worker(V2.runner_module, V2.runner_class, speculator=types.SimpleNamespace(model=draft))
    assert engine_driver._drafter(v2, runners) == (draft, "V2", None)
    v1 = _worker(V1.runner_module, V1.runner_class, drafter=types.SimpleNamespace(model=draft))
    assert engine_driver._drafter(v1, runners) == (draft, "V1", None)
    # V2's runner with V1's attribute only: not found, and the message names the path looked at
    wrong = _worker(V2.runner_module, V2.runner_class, drafter=types.SimpleNamespace(model=draft))
    model, name, why = engine_driver._drafter(wrong, runners)
    assert model is None and name == "V2" and "model_runner.speculator.model" in why
    other = _worker("vllm.v1.worker.tpu_model_runner", "TPUModelRunner")
    model, name, why = engine_driver._drafter(other, runners)
    assert model is None and name is None and "none of the runners patchkit declares" in why


BARE = {
    "Phi4MMForCausalLM": ("not patchable", "a bare LlamaModel"),
    "DiffusionGemmaForBlockDiffusion": ("not patchable", "a bare Gemma4Model"),
    "MuseGlimmerForCausalLM": ("declared but broken", "MuseGlimmerModel"),
}


def _walk(checks):
    for check in checks:
        yield check
        yield from _walk(check.get("children", []))


@pytest.mark.release
def test_0_34_0_load_path_follows_v2s_load_eagle_model(release, cli):
    """On 0.34.0 the load path is V2's ``load_eagle_model``, whose unguarded ``target_language_model.model``
    (``utils.py:140``) Phi4MM, DiffusionGemma and MuseGlimmer lack: verify fails them there, apply refuses
    them (exit 3, nothing written); before the runner wing verify passed MuseGlimmer and scan called the two
    others patchable (the V1 proposer half was gone without a word). vLLM's own code confirms it:
    tests/test_runner_runtime.py."""
    site = release("0.34.0")
    for arch, (verdict, held) in BARE.items():
        code, report = cli.json("verify", "--site-packages", str(site), "--arch", arch)
        assert code == 1, arch
        verdicts = [c for c in _walk(report["checks"]) if c["label"] == f"patchkit's verdict: {verdict}"]
        assert verdicts, (arch, [c["label"] for c in _walk(report["checks"])])
        text = json.dumps(verdicts[0])
        assert held in text and "vllm/v1/worker/gpu/spec_decode/eagle/utils.py:140" in text, text
        links = [c for c in _walk(report["checks"]) if c["label"] == "speculator reads get_language_model().model"]
        assert links and links[0]["ok"] is False and links[0]["location"].endswith("eagle/utils.py:140")
        load_path = [c for c in _walk(report["checks"]) if c["label"].startswith("load path (runner and proposer)")]
        assert "runner V2: the only model runner" in load_path[0]["detail"]
    code, _ = cli.json("apply", "--site-packages", str(site), *[a for arch in BARE for a in ("--arch", arch)])
    assert code == 3


@pytest.mark.release
def test_a_guarded_read_under_v2_on_0_20_2(monkeypatch):
    """0.20.2's V2 ``load_eagle_model`` reads ``.model`` through ``getattr(..., None)``: no required read, so
    a bare language model skips sharing there instead of raising (0.34.0 made the read plain)."""
    from patchkit.vllm.runner.draft_reads import derive

    tree = SourceTree(pristine_site_packages("0.20.2"))
    d = derive(tree, choice=serving_runner(tree, {"VLLM_USE_V2_MODEL_RUNNER": "1"}))
    reads = {r.path: r for r in d.reads}
    assert d.runner == "V2" and d.reader == "speculator" and d.not_checked is None
    assert not reads[("model",)].required and reads[("model",)].location.startswith(V2.loader_file)
    v1 = derive(tree, choice=serving_runner(tree, {}))
    assert v1.runner == "V1" and {r.path: r for r in v1.reads}[("model",)].required


OTHER_NAMED_EMBEDDING = {
    "InternLM2ForCausalLM": "InternLM2Model",
    "BailingMoeForCausalLM": "BailingMoeModel",
    "BailingMoeV2ForCausalLM": "BailingMoeModel",
    "SarvamMoEForCausalLM": "BailingMoeModel",
}


@pytest.mark.release
def test_0_34_0_requires_embed_tokens_or_embedding_on_the_target_backbone(release, monkeypatch):
    """0.34.0's V2 ``maybe_share_target_embed`` takes ``getattr(target_inner, "embed_tokens", None) or
    getattr(target_inner, "embedding", None)`` and raises (nested under ``if target_embed is None``) for a
    draft without its own embedding: the read is required, one alternative enough, located at the raise.
    Backbones holding it as ``tok_embeddings`` / ``word_embeddings`` therefore get patchkit's embedding alias
    there (as on V1); before, the read was taken as guarded, no alias was planned, and the runtime failed
    them with that RuntimeError. 0.20.2's V2 guards the read: no alias, InternLM2 still patchable."""
    from patchkit import api
    from patchkit.vllm.release.install import from_site_packages
    from patchkit.plan.request import Request
    from patchkit.vllm.runner.draft_reads import derive

    site = release("0.34.0")
    reads = {r.path: r for r in derive(SourceTree(site), with_aux=False).reads}
    embed = reads[("model", "embed_tokens")]
    assert embed.required and embed.alternatives == (("model", "embedding"),)
    assert embed.location.startswith(V2.loader_file + ":")
    assert (
        SourceTree(site)
        .read_bytes(V2.loader_file)
        .decode()
        .splitlines()[int(embed.location.rsplit(":", 1)[1]) - 1]
        .strip()
        .startswith("raise ")
    )
    install = from_site_packages(site)
    report = api.apply(install, request=Request(tuple(OTHER_NAMED_EMBEDDING)))
    ids = {p.id for p in report.patches if p.outcome.value == "applied"}
    for backbone in set(OTHER_NAMED_EMBEDDING.values()):
        assert f"eagle3:{backbone}:embedding-alias" in ids, sorted(ids)
    assert api.verify(install, request=Request(tuple(OTHER_NAMED_EMBEDDING))).ok
    api.revert(install)

    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    old = release("0.20.2")
    tree = SourceTree(old)
    d = derive(tree, with_aux=False, choice=serving_runner(tree, {"VLLM_USE_V2_MODEL_RUNNER": "1"}))
    assert d.runner == "V2" and not {r.path: r for r in d.reads}[("model", "embed_tokens")].required
    rows = {r.architecture: r for r in api.scan(from_site_packages(old)).rows}
    assert rows["InternLM2ForCausalLM"].state == "patchable", rows["InternLM2ForCausalLM"]
