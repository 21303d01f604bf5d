"""The guard stops a serve whose runner is not shown to keep greedy output for the shape patchkit wrote
(issue 30: "The guard stops a V2 serve of a shape not shown lossless").

- On the release files: ``apply --guard`` records in the manifest the runner generations the install
  holds and the patched architectures whose written shape is not shown under V2
  (:func:`patchkit.vllm.shapes.shown.shown_shapes`); the vLLM facts the guard reads to tell the serve's
  runner exist where its docstring says.
- The guard's decision (:func:`patchkit.guard.guard_plugin.serve_runner`, ``not_shown_line``) on
  stand-in configs: these check the guard's own branching, not vLLM; ``tests/test_guard_engine.py``
  runs it in vLLM's real engine.
"""

from __future__ import annotations

import ast
import json
import sys
import types

import pytest
from vllm_release import pristine_site_packages

from patchkit.guard import guard_plugin
from patchkit.vllm.runner.generations import SELECTOR
from patchkit.vllm.runner.serving import serving_runner
from patchkit.vllm.release.source import SourceTree

GLM4 = "Glm4ForCausalLM"  # interface-only on 0.20.2 - 0.34.0 (patchkit scan)
OLMOE = "OlmoeForCausalLM"  # standard-loop on 0.33.0
GEMMA3_MM = "Gemma3ForConditionalGeneration"  # wrapper-only on 0.34.0


@pytest.mark.release
def test_manifest_lists_the_patched_shapes_not_shown_under_v2(release, cli):
    site = release("0.33.0")
    result = cli("apply", "--site-packages", str(site), "--arch", GLM4, "--arch", OLMOE, "--guard")
    assert result.exit_code == 0, result.stdout
    manifest = json.loads((site / "patchkit_guard/manifest.json").read_text())
    assert manifest["runners"] == ["V1", "V2"] and manifest["runner_flag"] == SELECTOR
    assert manifest["not_shown"] == {"V2": {GLM4: "interface-only"}}  # OLMoE's standard loop is shown


@pytest.mark.release
@pytest.mark.usefixtures("wrapper_not_shown")
def test_on_0340_a_forced_wrapper_only_patch_is_listed_and_v2_is_the_only_runner(release, cli):
    """With the wrapper-only shape not shown on 0.34.0 (the table before the H100 showed it), a forced patch of it is
    the guard's ``not_shown`` entry."""
    site = release("0.34.0")
    refused = cli("apply", "--site-packages", str(site), "--arch", GEMMA3_MM, "--guard")
    assert refused.exit_code != 0 and not (site / "patchkit_guard").exists(), refused.stdout
    result = cli("apply", "--site-packages", str(site), "--arch", GEMMA3_MM, "--guard", "--force")
    assert result.exit_code == 0, result.stdout
    manifest = json.loads((site / "patchkit_guard/manifest.json").read_text())
    assert manifest["runners"] == ["V2"]
    assert manifest["not_shown"] == {"V2": {GEMMA3_MM: "wrapper-only"}}


def _config_property(site, name: str) -> bool:
    """Whether ``VllmConfig`` in ``vllm/config/vllm.py`` defines ``name`` as a property."""
    module = ast.parse((site / "vllm/config/vllm.py").read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "VllmConfig")
    return any(
        isinstance(f, ast.FunctionDef)
        and f.name == name
        and any(getattr(d, "id", None) == "property" for d in f.decorator_list)
        for f in cls.body
    )


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.20.2", "0.33.0", "0.34.0"])
def test_the_runner_facts_the_guard_reads_are_in_the_release(version):
    """0.20.2: both runners, the flag is a bool in ``vllm.envs`` (no config property); 0.33.0: both,
    ``VllmConfig.use_v2_model_runner`` decides; 0.34.0: V2 alone (the manifest's ``runners``)."""
    site = pristine_site_packages(version)
    present = serving_runner(SourceTree(site), environ={}).present
    envs = (site / "vllm/envs.py").read_text()
    if version == "0.34.0":
        assert present == ("V2",)
        return
    assert present == ("V1", "V2")
    assert f'"{SELECTOR}"' in envs
    assert _config_property(site, "use_v2_model_runner") == (version == "0.33.0")
    if version == "0.20.2":
        assert f"{SELECTOR}: bool = False" in envs and f'bool(\n        int(os.getenv("{SELECTOR}", "0"))' in envs


def _config(method="eagle3", arch=GLM4, v2=None):
    """A stand-in ``VllmConfig``: ``v2`` set gives it the ``use_v2_model_runner`` property (0.32 - 0.33)."""
    attrs = {} if v2 is None else {"use_v2_model_runner": property(lambda self: v2)}
    config = type("VllmConfig", (), attrs)()
    config.model_config = types.SimpleNamespace(architecture=arch)
    config.speculative_config = types.SimpleNamespace(method=method) if method else None
    return config


BOTH = {"runners": ["V1", "V2"], "runner_flag": SELECTOR, "not_shown": {"V2": {GLM4: "interface-only"}}}


@pytest.mark.parametrize(
    "config, manifest, env, envs_flag, stops",
    [
        (_config(), {**BOTH, "runners": ["V2"]}, {}, None, True),  # 0.34.0: V2 is the only runner
        (_config(v2=True), BOTH, {}, None, True),  # 0.33.0: vLLM's config picked V2
        (_config(v2=False), BOTH, {SELECTOR: "1"}, None, False),  # the config decides over the environment
        (_config(), BOTH, {}, True, True),  # 0.20.2: vllm.envs read the flag as 1
        (_config(), BOTH, {SELECTOR: "1"}, False, False),  # vllm.envs read 0
        (_config(), BOTH, {SELECTOR: "1"}, None, True),  # vllm.envs not loaded: the environment
        (_config(), BOTH, {}, None, False),  # flag unset, no property: V1
        (_config(method="ngram"), {**BOTH, "runners": ["V2"]}, {}, None, False),  # not EAGLE-3
        (_config(arch=OLMOE), {**BOTH, "runners": ["V2"]}, {}, None, False),  # a shape shown under V2
        (_config(), {**BOTH, "runners": []}, {}, None, True),  # no runner found: fail closed
    ],
)
def test_the_guard_stops_eagle3_on_a_runner_where_the_shape_is_not_shown(
    monkeypatch, config, manifest, env, envs_flag, stops
):
    monkeypatch.delenv(SELECTOR, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if envs_flag is None:
        monkeypatch.delitem(sys.modules, "vllm.envs", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "vllm.envs", types.SimpleNamespace(**{SELECTOR: envs_flag}))
    line = guard_plugin.not_shown_line(config, manifest)
    assert (line is not None) == stops, line
    if stops:
        assert line.startswith(guard_plugin.PREFIX) and "interface-only" in line and GLM4 in line
        with pytest.raises(guard_plugin.GuardStop):
            guard_plugin._decide(config, manifest, None, None)
