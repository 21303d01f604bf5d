"""``--arch`` alone on the allow-list releases (0.10.2 - 0.20.x) finds the checkpoint's model type in
the serving environment (issue 20): its transformers' auto mappings and vLLM's config registry, read
statically (:mod:`patchkit.vllm.registry.model_types`).

A serving environment here is a real vLLM release tree with a real transformers wheel's files next
to ``vllm/`` (both fetched at test time, :mod:`vllm_release`). The expected model types are those the
published checkpoints' ``config.json`` report: GLM-4-0414 ``glm4``, EXAONE-4.0 ``exaone4``,
OLMo-2 ``olmo2``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from vllm_release import transformers_files

pytestmark = pytest.mark.release

PUBLISHED = {"Glm4ForCausalLM": "glm4", "Exaone4ForCausalLM": "exaone4", "Olmo2ForCausalLM": "olmo2"}
PAIRS = [("0.14.1", "4.57.6"), ("0.17.1", "4.57.6"), ("0.20.2", "5.20.2")]
"""A release and a transformers its METADATA allows (0.14.1 / 0.17.1: <5; 0.20.2: >=5.5.1)."""


def serving_env(release, vllm: str, transformers: str) -> Path:
    """A site-packages with vLLM ``vllm`` and transformers ``transformers`` side by side."""
    sp = release(vllm)
    for entry in transformers_files(transformers).iterdir():
        shutil.copytree(entry, sp / entry.name)
    return sp


def allowlist_ids(report: dict) -> list[str]:
    return sorted(p["id"] for p in report["patches"] if p["id"].startswith("eagle3:allowlist:"))


@pytest.mark.parametrize("vllm, transformers", PAIRS)
@pytest.mark.parametrize("arch", sorted(PUBLISHED))
def test_arch_alone_takes_the_model_type_from_the_environments_transformers(release, cli, vllm, transformers, arch):
    sp = serving_env(release, vllm, transformers)
    code, report = cli.json("apply", "--arch", arch, "--site-packages", str(sp))
    assert code == 0 and report["written"], report
    assert f"eagle3:allowlist:{PUBLISHED[arch]}" in allowlist_ids(report)
    # verify checks that the allow-list admits that model type, and it does
    code, checked = cli.json("verify", "--arch", arch, "--site-packages", str(sp))
    assert code == 0, checked
    (allow,) = [c for c in checked["checks"] if c["label"].startswith("speculative-config allow-list admits")]
    assert allow["ok"] is True and PUBLISHED[arch] in allow["label"]


@pytest.mark.parametrize("vllm, transformers", PAIRS[1:])
def test_an_architecture_neither_source_knows_asks_for_model(release, cli, vllm, transformers):
    """InternLM2 ships its config as remote code: transformers and vLLM's config registry say nothing."""
    sp = serving_env(release, vllm, transformers)
    code, report = cli.json("apply", "--arch", "InternLM2ForCausalLM", "--site-packages", str(sp))
    assert code != 0 and not report["written"]
    (refused,) = [p for p in report["patches"] if p["outcome"] == "refused"]
    assert f"transformers {transformers}" in refused["reason"] and "pass --model DIR" in refused["reason"]


def test_without_transformers_next_to_vllm_it_asks_for_model(release, cli):
    sp = release("0.17.1")
    code, report = cli.json("apply", "--arch", "Glm4ForCausalLM", "--site-packages", str(sp))
    assert code != 0 and not report["written"]
    (refused,) = [p for p in report["patches"] if p["outcome"] == "refused"]
    assert f"none in {sp}" in refused["reason"] and "pass --model DIR" in refused["reason"]


@pytest.mark.parametrize("transformers", ["4.57.6", "5.20.2"])
def test_a_multimodal_class_gets_its_text_configs_model_type(release, transformers):
    """Qwen2.5-VL: the auto mapping says qwen2_5_vl, its config's text_config says qwen2_5_vl_text
    (what vLLM's hf_text_config reports); LLaVA's text config is AutoConfig: the checkpoint decides."""
    from patchkit.vllm.registry import model_types
    from patchkit.vllm.registry.table import Registry
    from patchkit.vllm.release.source import SourceTree

    sp = serving_env(release, "0.20.2", transformers)
    tree = SourceTree(sp)
    registry = Registry(tree)
    qwen = registry.resolve("Qwen2_5_VLForConditionalGeneration")
    assert model_types.lookup(tree, qwen.cls, "Qwen2_5_VLForConditionalGeneration", True).types == ("qwen2_5_vl_text",)
    llava = registry.resolve("LlavaForConditionalGeneration")
    assert model_types.lookup(tree, llava.cls, "LlavaForConditionalGeneration", True).types == ()


def test_disagreeing_sources_give_no_answer(tmp_path):
    """The decision rule on a small tree written here (no real release names two model types that
    disagree): transformers maps the class to one model type, vLLM's class names another's config."""
    from patchkit.vllm.registry import model_types
    from patchkit.vllm.release.source import SourceTree

    def write(rel: str, text: str) -> None:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    write("vllm/__init__.py", "")
    write("vllm/transformers_utils/__init__.py", "")
    write("vllm/transformers_utils/config.py", '_CONFIG_REGISTRY = LazyConfigDict(foo="FooConfig")\n')
    write("vllm/model_executor/__init__.py", "")
    write("vllm/model_executor/models/__init__.py", "")
    write(
        "vllm/model_executor/models/foo.py",
        "from vllm.transformers_utils.configs import FooConfig\n\n"
        "class FooForCausalLM:\n    def __init__(self, config):\n        assert isinstance(config, FooConfig)\n",
    )
    write(
        "transformers/models/auto/modeling_auto.py",
        'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("bar", "FooForCausalLM")])\n',
    )
    write(
        "transformers/models/auto/configuration_auto.py", 'CONFIG_MAPPING_NAMES = OrderedDict([("bar", "BarConfig")])\n'
    )
    tree = SourceTree(tmp_path)
    cls = tree.find_class("vllm.model_executor.models.foo", "FooForCausalLM")
    answer = model_types.lookup(tree, cls, "FooForCausalLM", False)
    assert answer.conflict and answer.types == ()
    assert "says bar" in answer.reason() and "says foo" in answer.reason() and "disagree" in answer.reason()
    # the same two sources agreeing: the union
    write(
        "transformers/models/auto/modeling_auto.py",
        'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("foo", "FooForCausalLM")])\n',
    )
    answer = model_types.lookup(SourceTree(tmp_path), cls, "FooForCausalLM", False)
    assert not answer.conflict and answer.types == ("foo",)
