"""``patchkit doctor`` on real vLLM releases with small checkpoint configs written by the tests.

The target configs imitate the real checkpoints' ``config.json`` files: Kimi-K2.5 nests its
language model in ``text_config`` (model type ``kimi_k2``, 61 layers, hidden size 7168) under a
``kimi_k25`` wrapper; DeepSeek-V3 is a flat text config. Drafts are EAGLE-3 configs with a Llama
or a DeepSeek (MLA) architecture.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.release

ALL_PATCHES = [
    "eagle3-allowlist",
    "eagle3-deepseek-backbone",
    "eagle3-deepseek-interface",
    "eagle3-kimi-k25-interface",
    "eagle3-kimi-k25-proposer",
]

KIMI_K25: dict[str, Any] = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "media_placeholder_token_id": 163605,
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "kv_lora_rank": 512,
    },
    "vision_config": {"model_type": "moonvit", "hidden_size": 1152},
}
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "num_attention_heads": 128,
}


def llama_draft(**extra: Any) -> dict[str, Any]:
    """An EAGLE-3 draft config with a Llama architecture, one layer, width 7168."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 7168,
        "num_hidden_layers": 1,
        "num_attention_heads": 64,
        **extra,
    }


def mla_draft(**extra: Any) -> dict[str, Any]:
    """An EAGLE-3 draft config with a DeepSeek-V3 (MLA) architecture."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 1,
        "kv_lora_rank": 512,
        **extra,
    }


def checkpoint(root: Path, name: str, config: dict[str, Any]) -> Path:
    """Write ``root/name/config.json`` and return the folder."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def check(report: dict, prefix: str) -> dict:
    """The single top-level check whose label starts with ``prefix``."""
    found = [c for c in report["checks"] if c["label"].startswith(prefix)]
    assert len(found) == 1, [c["label"] for c in report["checks"]]
    return found[0]


def child(node: dict, label: str) -> dict:
    """The single direct child of ``node`` labelled ``label``."""
    found = [c for c in node["children"] if c["label"] == label]
    assert len(found) == 1, [c["label"] for c in node["children"]]
    return found[0]


def snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def doctor(cli, sp: Path, model: Path, draft: Path | None = None) -> tuple[int, dict]:
    args = ["doctor", "--model", str(model), "--site-packages", str(sp)]
    if draft is not None:
        args += ["--draft", str(draft)]
    return cli.json(*args)


# -- the verdict ------------------------------------------------------------------------------


def test_kimi_k25_ready_after_apply_on_0_17_1(release, cli, tmp_path):
    sp = release("0.17.1")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_aux_hidden_state_layer_ids=[2, 30, 58]))
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0 and applied["written"], applied

    code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]
    assert report["ready"] is True and report["verdict"] == "ready"
    assert report["missing"] == [] and report["actions"] == [] and report["apply_command"] is None
    target = report["target"]
    # the nested text_config is what the allow-list and the layer count come from
    assert target["text_config"] == "text_config"
    assert (target["model_type"], target["text_model_type"]) == ("kimi_k25", "kimi_k2")
    assert (target["num_hidden_layers"], target["hidden_size"]) == (61, 7168)
    assert target["class"] == "KimiK25ForConditionalGeneration" and target["multimodal"] is True
    assert target["file"] == "vllm/model_executor/models/kimi_k25.py"

    allow = check(report, "EAGLE-3 start-up check admits text model type kimi_k2")
    assert allow["ok"] is True and "'kimi_k2'" in allow["detail"]
    assert allow["location"].startswith("vllm/config/speculative.py:")
    effect = check(report, "EAGLE-3 in effect for KimiK25ForConditionalGeneration")
    assert effect["ok"] is True and effect["detail"].startswith("patched by patchkit (")
    assert "eagle3-kimi-k25-interface" in effect["detail"]
    proposer = check(report, "EAGLE proposer with a multimodal target")
    assert proposer["ok"] is True and "branch for KimiK25ForConditionalGeneration" in proposer["detail"]

    d = report["draft"]
    assert d["vllm_architectures"] == ["Eagle3LlamaForCausalLM"]
    assert d["draft_class"] == "vllm.model_executor.models.llama_eagle3.Eagle3LlamaForCausalLM"
    assert (d["aux_layer_ids"], d["aux_layer_ids_source"]) == ([2, 30, 58], "draft config")
    assert d["fc_input_width"] == 3 * 7168
    ids = check(report, "aux layer ids (2, 30, 58)")
    assert [c["label"] for c in ids["children"]] == ["id 2", "id 30", "id 58"]
    assert check(report, "draft input width")["ok"] is True

    text = cli("doctor", "--model", str(model), "--draft", str(draft), "--site-packages", str(sp))
    assert text.exit_code == 0
    assert "verdict: ready" in text.stdout and "✗" not in text.stdout


def test_unpatched_0_17_1_names_the_apply_to_run_and_writes_nothing(release, cli, tmp_path):
    sp = release("0.17.1")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft())
    before = snapshot(sp)

    code, report = doctor(cli, sp, model, draft)
    assert code == 1 and report["ready"] is False and report["verdict"] == "not ready"
    assert snapshot(sp) == before  # doctor (and its apply dry run) wrote nothing
    # apply --model: the command that fixes this target (a plain apply writes only the shipped set)
    expected = shlex.join(
        ["patchkit", "apply", "--target", "vllm", "--site-packages", str(sp), "--model", str(model.resolve())]
    )
    assert report["apply_command"] == expected
    assert report["apply_patches"] == ALL_PATCHES
    assert report["actions"][0].startswith(f"run '{expected}' (writes ")

    allow = check(report, "EAGLE-3 start-up check admits text model type kimi_k2")
    assert allow["ok"] is False and "aux_hidden_states_supported" in allow["detail"]
    effect = check(report, "EAGLE-3 in effect for KimiK25ForConditionalGeneration")
    assert effect["ok"] is False
    assert child(effect, "SupportsEagle3 in its bases")["ok"] is False
    proposer = check(report, "EAGLE proposer with a multimodal target")
    assert proposer["ok"] is False and "image_token_index" in proposer["detail"]
    # the draft side is fine; only vLLM's side is missing
    assert check(report, "draft architecture LlamaForCausalLM")["ok"] is True
    assert report["draft"]["aux_layer_ids_source"] == "default"

    text = cli("doctor", "--model", str(model), "--site-packages", str(sp))
    assert text.exit_code == 1
    assert "verdict: not ready" in text.stdout and "next: run 'patchkit apply --target vllm" in text.stdout

    # the suggested command is the fix
    code, _ = cli.json(*shlex.split(expected)[1:])
    assert code == 0
    code, after = doctor(cli, sp, model, draft)
    assert code == 0 and after["ready"] is True, after["missing"]


def test_apply_suggestion_uses_the_python_option_given(release, cli, tmp_path):
    from patchkit.checks.doctor import doctor as run_doctor
    from patchkit.vllm.release.install import from_site_packages

    sp = release("0.16.0")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3)
    report = run_doctor(from_site_packages(sp), model, command_options=["--python", "/opt/serve/bin/python"])
    assert report.apply_command == shlex.join(
        ["patchkit", "apply", "--target", "vllm", "--python", "/opt/serve/bin/python", "--model", str(model.resolve())]
    )
    assert report.to_dict()["apply_command"] == report.apply_command


def test_kimi_k25_ready_natively_on_0_18_0_with_default_ids(release, cli, tmp_path):
    sp = release("0.18.0")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft())
    code, report = doctor(cli, sp, model, draft)
    assert code == 0, report["missing"]
    effect = check(report, "EAGLE-3 in effect for KimiK25ForConditionalGeneration")
    assert effect["ok"] is True and effect["detail"].startswith("natively (EAGLE-3 contract A2")
    assert report["apply_command"] is None
    d = report["draft"]
    assert (d["aux_layer_ids"], d["aux_layer_ids_source"]) == ([2, 30, 58], "default")
    ids = check(report, "aux layer ids (2, 30, 58)")
    assert "default (2, n // 2, n - 3) with n = 61" in ids["detail"]


def test_deepseek_v3_text_only_target(release, cli, tmp_path):
    sp = release("0.18.0")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3)
    code, report = doctor(cli, sp, model)
    assert code == 0, report["missing"]
    assert report["target"]["text_config"] is None and report["target"]["multimodal"] is False
    proposer = check(report, "EAGLE proposer with a multimodal target")
    assert proposer["ok"] is None and "text-only" in proposer["detail"]
    assert check(report, "EAGLE-3 draft")["ok"] is None  # no --draft: said, not failed
    assert report["draft"] is None


# -- the draft -------------------------------------------------------------------------------


def test_out_of_range_aux_layer_id(release, cli, tmp_path):
    sp = release("0.18.0")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_aux_hidden_state_layer_ids=[2, 30, 62]))
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    ids = check(report, "aux layer ids (2, 30, 62)")
    assert ids["ok"] is False
    assert child(ids, "id 30")["ok"] is True
    bad = child(ids, "id 62")
    assert bad["ok"] is False and bad["detail"] == "out of range: the target has 61 layers, ids go from 0 to 61"
    assert any("[62]" in a and "0..61" in a for a in report["actions"])
    assert report["missing"] == ["id 62: out of range: the target has 61 layers, ids go from 0 to 61"]


def test_final_layer_id_needs_the_final_capture(release, cli, tmp_path):
    """Id n (61) is in range; patchkit's A1 capture takes it, vLLM 0.18.0's native forward does not."""
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_aux_hidden_state_layer_ids=[2, 30, 61]))

    patched = release("0.17.1")
    assert cli.json("apply", "--site-packages", str(patched))[0] == 0
    code, report = doctor(cli, patched, model, draft)
    assert code == 0, report["missing"]
    assert child(check(report, "aux layer ids (2, 30, 61)"), "id 61")["ok"] is True

    native = release("0.18.0")
    code, report = doctor(cli, native, model, draft)
    assert code == 1
    last = child(check(report, "aux layer ids (2, 30, 61)"), "id 61")
    assert last["ok"] is False and "does not capture it" in last["detail"]


def test_width_mismatch(release, cli, tmp_path):
    sp = release("0.18.0")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft(hidden_size=4096, target_hidden_size=4096))
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    width = check(report, "draft input width")
    assert width["ok"] is False
    assert "3 ids x hidden_size 7168 = 21504" in width["detail"]
    assert "target_hidden_size 4096 = 12288" in width["detail"]
    assert "built for hidden size 4096, the target has 7168" in width["detail"]
    assert report["draft"]["fc_input_width"] == 12288
    assert check(report, "aux layer ids")["ok"] is True  # only the width is wrong


def test_more_ids_than_the_draft_fc_takes(release, cli, tmp_path):
    sp = release("0.18.0")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_aux_hidden_state_layer_ids=[2, 20, 40, 58]))
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    width = check(report, "draft input width")
    assert width["ok"] is False and "4 aux states are requested, the fc takes 3" in width["detail"]


@pytest.mark.parametrize("version, registered", [("0.17.1", False), ("0.18.0", True)])
def test_mla_draft_is_registered_only_from_0_18_0(release, cli, tmp_path, version, registered):
    sp = release(version)
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", mla_draft())
    code, report = doctor(cli, sp, model, draft)
    arch = check(report, "draft architecture DeepseekV3ForCausalLM")
    row = child(arch, "DeepseekV3ForCausalLM -> Eagle3DeepseekV3ForCausalLM")
    assert report["draft"]["vllm_architectures"] == ["Eagle3DeepseekV3ForCausalLM"]
    if registered:
        assert code == 0 and arch["ok"] is True and row["ok"] is True
        assert (
            report["draft"]["draft_class"] == "vllm.model_executor.models.deepseek_eagle3.Eagle3DeepseekV2ForCausalLM"
        )
    else:
        assert code == 1 and arch["ok"] is False
        assert row["detail"] == (
            "vLLM 0.17.1 does not register Eagle3DeepseekV3ForCausalLM: it cannot build this draft "
            "(MLA EAGLE-3 drafts are registered from vLLM 0.18.0)"
        )
        assert report["draft"]["draft_class"] is None
        assert any("vLLM >= 0.18.0" in a for a in report["actions"])


def test_nested_eagle_config_ids_depend_on_the_runner(release, cli, tmp_path):
    """eagle_config's ids count the output of layer k: 0.17.1 ignores them (its default is those layers);
    0.33.0's model runner reads them verbatim, one layer early."""
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(
        tmp_path,
        "draft",
        llama_draft(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}),
    )

    old = release("0.17.1")
    assert cli.json("apply", "--site-packages", str(old))[0] == 0
    code, report = doctor(cli, old, model, draft)
    assert code == 0, report["missing"]
    d = report["draft"]
    assert (d["aux_layer_ids"], d["declared_aux_layer_ids"], d["intended_aux_layer_ids"]) == (
        [2, 30, 58],
        [1, 29, 57],
        [2, 30, 58],
    )
    ids = check(report, "aux layer ids (2, 30, 58)")
    runner = child(ids, "every model runner captures the trained layers")
    assert runner["ok"] is True and "eagle_config's ids are ignored" in runner["detail"]
    assert runner["location"].startswith("vllm/v1/worker/gpu_model_runner.py:")
    assert not any("[1, 29, 57]" in a and "copy" in a for a in report["actions"])

    new = release("0.33.0")
    code, report = doctor(cli, new, model, draft)
    assert code == 1
    assert (report["draft"]["aux_layer_ids"], report["draft"]["aux_layer_ids_source"]) == (
        [1, 29, 57],
        "draft eagle_config",
    )
    ids = check(report, "aux layer ids (1, 29, 57)")
    assert child(ids, "model runner captures the trained layers")["ok"] is False
    assert child(ids, "model runner V2 captures the trained layers")["ok"] is True
    assert [a for a in report["actions"] if "eagle_aux_hidden_state_layer_ids" in a] == [
        'add "eagle_aux_hidden_state_layer_ids": [2, 30, 58] at the top level of the draft\'s config.json '
        "(eagle_config's [1, 29, 57] + 1: vLLM counts the stream entering layer k; "
        "do not copy eagle_config's ids unchanged)"
    ]


def test_0_10_2_runner_ignores_explicit_ids(release, cli, tmp_path):
    sp = release("0.10.2")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3)
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_aux_hidden_state_layer_ids=[3, 31, 59]))
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    ids = check(report, "aux layer ids (2, 30, 58)")
    ignored = child(ids, "model runner captures the trained layers")
    assert ignored["ok"] is False and "reads no ids from the draft" in ignored["detail"]
    assert any("0.14.1 and later" in a for a in report["actions"])
    assert report["apply_patches"] == ["eagle3-allowlist", "eagle3-deepseek-backbone", "eagle3-deepseek-interface"]


# -- targets doctor cannot help with -----------------------------------------------------------


def test_target_that_is_not_a_native_model(release, cli, tmp_path):
    sp = release("0.17.1")
    model = checkpoint(
        tmp_path,
        "kimi-k2",
        {"architectures": ["KimiK2ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": 61, "hidden_size": 7168},
    )
    # the answer of every command for a name the registry lacks (issue 32): exit 2, the closest names
    code, report = doctor(cli, sp, model)
    assert code == 2 and report["exit_code"] == 2, report
    assert "'KimiK2ForCausalLM' is not in vLLM 0.17.1's model registry" in report["error"]
    assert "did you mean KimiK25ForConditionalGeneration" in report["hint"], report
    assert cli("apply", "--site-packages", str(sp), "--model", str(model)).exit_code == 2


def test_kimi_k25_before_vllm_registers_it(release, cli, tmp_path):
    sp = release("0.14.1")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    code, report = doctor(cli, sp, model)
    assert code == 1
    assert check(report, "target architecture KimiK25ForConditionalGeneration")["ok"] is False
    assert any("eagle3-kimi-k25-interface" in a and "upgrade vLLM" in a for a in report["actions"])


def test_vllm_without_eagle3_contract(release, cli, tmp_path):
    sp = release("0.9.2")
    model = checkpoint(tmp_path, "ds", DEEPSEEK_V3)
    code, report = doctor(cli, sp, model)
    assert code == 1
    effect = check(report, "EAGLE-3 in effect for DeepseekV3ForCausalLM")
    assert effect["ok"] is False and "no SupportsEagle3 Protocol (contract A0)" in effect["detail"]
    assert report["apply_command"] is None
    assert any(a.startswith("upgrade vLLM") for a in report["actions"])


# -- bad input ---------------------------------------------------------------------------------


@pytest.fixture
def sp_0_18_0(release) -> Path:
    """A fresh copy of vLLM 0.18.0."""
    return release("0.18.0")


def test_missing_model_dir(cli, tmp_path, sp_0_18_0):
    code, report = doctor(cli, sp_0_18_0, tmp_path / "nope")
    assert code == 4
    assert report["error"] == f"--model {tmp_path / 'nope'} does not exist"
    assert report["hint"]
    result = cli("doctor", "--model", str(tmp_path / "nope"), "--site-packages", str(sp_0_18_0))
    assert result.exit_code == 4
    assert "error: --model" in result.stderr and "hint:" in result.stderr


def test_repo_id_is_not_downloaded(cli, sp_0_18_0, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, report = doctor(cli, sp_0_18_0, Path("moonshotai/Kimi-K2.5"))
    assert code == 4 and "never downloads" in report["hint"]


def test_folder_without_config(cli, tmp_path, sp_0_18_0):
    (tmp_path / "empty").mkdir()
    code, report = doctor(cli, sp_0_18_0, tmp_path / "empty")
    assert code == 4 and report["error"].endswith("has no config.json")


def test_invalid_json(cli, tmp_path, sp_0_18_0):
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text('{"architectures": ["LlamaForCausalLM"],')
    code, report = doctor(cli, sp_0_18_0, model, draft)
    assert code == 4
    assert report["error"].startswith(f"{draft / 'config.json'} is not valid JSON")


def test_config_that_is_not_an_object(cli, tmp_path, sp_0_18_0):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("[1, 2]")
    code, report = doctor(cli, sp_0_18_0, tmp_path / "m")
    assert code == 4 and "holds a JSON list, not an object" in report["error"]


def test_model_option_is_required(cli, sp_0_18_0):
    result = cli("doctor", "--site-packages", str(sp_0_18_0))
    assert result.exit_code == 2
    assert "--model" in result.stderr


def test_bad_id_list(cli, tmp_path, sp_0_18_0):
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_aux_hidden_state_layer_ids="2,30,58"))
    code, report = doctor(cli, sp_0_18_0, model, draft)
    assert code == 1
    ids = check(report, "aux layer ids")
    assert ids["ok"] is False and '"2,30,58", not a list of integers' in ids["detail"]


def test_patchable_is_good_news_not_a_problem(release, cli):
    """Issue 32: on an unpatched GLM-4.6 (0.34.0) doctor printed '✗ patchkit's verdict: patchable' and
    counted it as the first of 4 problems; the verdict is what apply can fix, the missing links are the problems."""
    sp = release("0.34.0")
    model = Path(__file__).parent / "checkpoints" / "glm-4.6"
    code, report = doctor(cli, sp, model)
    assert code == 1
    effect = check(report, "EAGLE-3 in effect for Glm4MoeForCausalLM")
    verdict = child(effect, "patchkit's verdict: patchable")
    assert verdict["ok"] is None and "apply" in verdict["detail"], verdict
    assert effect["ok"] is False and report["missing"], report["missing"]
    assert not [m for m in report["missing"] if m.startswith("patchkit's verdict")], report["missing"]
    text = cli("doctor", "--model", str(model), "--site-packages", str(sp)).stdout
    assert "✗ patchkit's verdict" not in text and f"not ready ({len(report['missing'])} problems" in text, text
    assert "  - patchkit's verdict" not in text


@pytest.mark.parametrize(
    "nested,bad",
    [([1, 29, 500], [500]), ([1, 29, 61], [61]), ([-1, 29, 57], [-1]), ([1, 29, 10**30], [10**30])],
    ids=["500", "n", "minus-one", "huge"],
)
def test_eagle_config_ids_out_of_range_are_named_not_advised(release, cli, tmp_path, nested, bad):
    """Issue 42, finding 6: doctor advised ``[2, 30, 501]`` for eagle_config's ``[1, 29, 500]`` on a 61-layer
    target (the next run: 501 out of range), and -1 became 0 without a word. eagle_config's ids count the
    output of layer k, so they go from 0 to 60 here; an id outside is named, and no id is advised."""
    sp = release("0.33.0")
    model = checkpoint(tmp_path, "kimi-k2.5", KIMI_K25)
    eagle = {"eagle_aux_hidden_state_layer_ids": nested, "use_aux_hidden_state": True}
    draft = checkpoint(tmp_path, "draft", llama_draft(eagle_config=eagle))
    code, report = doctor(cli, sp, model, draft)
    assert code == 1
    ids = check(report, "aux layer ids")
    assert ids["ok"] is False and f"holds {bad}, outside 0..60" in ids["detail"], ids["detail"]
    assert not any(a.startswith("add ") for a in report["actions"]), report["actions"]
    assert any(
        a.startswith(f"fix the draft's eagle_config.eagle_aux_hidden_state_layer_ids {nested}")
        for a in report["actions"]
    )
