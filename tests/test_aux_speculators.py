"""The aux-state speculators besides EAGLE-3 (DFlash, DFlash2, DSpark) as the installed release serves them (issue 40,
part 3): ``doctor``, ``rehearse`` and the watch on real vLLM 0.34.0 files, and on 0.33.0 and 0.18.0.

The draft configs are written by the tests, with the fields of published drafts:

- DFlash (z-lab, e.g. ``z-lab/Qwen3-8B-DFlash-b16``; SpecForge's DFlash export): ``architectures``
  ``["DFlashDraftModel"]``, ``model_type`` ``qwen3``, ``num_target_layers``, ``block_size``, and
  ``dflash_config`` with ``mask_token_id`` and ``target_layer_ids`` (the output of target layer k, 0-based;
  z-lab's Qwen3-4B draft reads layers 1, 9, 17, 25, 33 of 36).
- DFlash2: the same fields, ``architectures`` ``["DFlash2DraftModel"]``.
- DSpark on Qwen3 (``deepseek-ai/dspark_qwen3_8b_block7``, the example vLLM 0.34.0 names in
  ``dspark/config.py``): ``architectures`` ``["DSparkDraftModel"]``, ``model_type`` ``qwen3``, top-level
  ``dspark_target_layer_ids``.

The target is GLM-4.5-Air (46 layers, hidden size 4096), patched by ``apply --model``.
"""

from __future__ import annotations

from engine_models import GLM45_AIR_DFLASH

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_models import GLM45_AIR

from test_doctor import check, checkpoint, child, doctor

pytestmark = pytest.mark.release

GLM = {**GLM45_AIR, "vocab_size": 151552}
DFLASH_IDS = [1, 12, 23, 34, 44]
"""The ids of the issue's DFlash draft for GLM-4.5-Air (the output of layer k)."""
READ_IDS = [2, 13, 24, 35, 45]
"""What vLLM 0.34.0's V2 reader makes of them (+ 1: ``get_eagle3_aux_layers_from_config``)."""


def dflash(arch: str = "DFlashDraftModel", ids: list[int] | None = DFLASH_IDS, **extra: Any) -> dict[str, Any]:
    """A DFlash draft config for GLM-4.5-Air with z-lab's fields."""
    base = {k: v for k, v in GLM45_AIR_DFLASH.items() if k != "dflash_config"}
    mask = GLM45_AIR_DFLASH["dflash_config"]["mask_token_id"]
    cfg: dict[str, Any] = {
        **base,
        "architectures": [arch],
        "dflash_config": {"mask_token_id": mask, **({"target_layer_ids": ids} if ids is not None else {})},
        **extra,
    }
    return cfg


def dspark(model_type: str = "qwen3") -> dict[str, Any]:
    """A Qwen3 DSpark draft config (top-level ``dspark_target_layer_ids``, output of layer k)."""
    return {
        "architectures": ["DSparkDraftModel"],
        "model_type": model_type,
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "vocab_size": 151552,
        "block_size": 7,
        "dspark_target_layer_ids": DFLASH_IDS,
    }


def patched(release, cli, version: str, model: Path) -> Path:
    sp = release(version)
    code, out = cli.json("apply", "--site-packages", str(sp), "--model", str(model))
    assert code == 0 and out["written"], out
    return sp


@pytest.fixture
def glm(tmp_path) -> Path:
    return checkpoint(tmp_path, "GLM-4.5-Air", GLM)


def test_doctor_reads_a_dflash_draft_as_0_34_0_serves_it(release, cli, tmp_path, glm):
    """The issue's case: before, doctor called the draft unbuildable (Eagle3DFlashDraftModel), said vLLM captures
    the default (2, 23, 43), checked the width for 3 ids and advised an EAGLE-3 draft."""
    sp = patched(release, cli, "0.34.0", glm)
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash())
    code, report = doctor(cli, sp, glm, draft)
    assert code == 0, (report["missing"], report["actions"])
    d = report["draft"]
    assert d["method"] == "dflash"
    method = check(report, "speculative method dflash")
    assert method["ok"] is True and "DFlashSpeculatorConfig" in method["detail"]
    assert method["location"].startswith("vllm/model_executor/models/qwen3_dflash.py:")
    arch = check(report, "draft architecture DFlashDraftModel")
    assert arch["ok"] is True and child(arch, "DFlashDraftModel -> DFlashDraftModel")["ok"] is True
    assert d["vllm_architectures"] == ["DFlashDraftModel"]
    assert d["draft_class"] == "vllm.model_executor.models.qwen3_dflash.DFlashQwen3ForCausalLM"
    assert d["aux_layer_ids"] == READ_IDS and d["aux_layer_ids_source"] == "draft dflash_config"
    assert d["declared_aux_layer_ids"] == DFLASH_IDS and d["intended_aux_layer_ids"] == READ_IDS
    ids = check(report, "aux layer ids (2, 13, 24, 35, 45)")
    runner = child(ids, "model runner V2 captures the trained layers")
    assert "dflash_config.target_layer_ids and adds 1" in runner["detail"]
    assert runner["location"].startswith("vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:")
    width = check(report, "draft input width")
    assert width["ok"] is True and d["fc_input_width"] == 5 * 4096
    assert "5 ids x hidden_size 4096 = 20480" in width["detail"]
    assert report["actions"] == [] and report["warnings"] == []
    text = cli("doctor", "--model", str(glm), "--draft", str(draft), "--site-packages", str(sp))
    assert "verdict: ready for dflash with this vLLM" in text.stdout


def test_an_unpatched_target_is_not_ready_for_a_dflash_draft(release, cli, tmp_path, glm):
    """vLLM 0.34.0 calls set_eagle3_aux_hidden_state_layers for DFlash too: without the capture it raises."""
    sp = release("0.34.0")
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash())
    code, report = doctor(cli, sp, glm, draft)
    assert code == 1
    assert check(report, "EAGLE-3 in effect for Glm4MoeForCausalLM")["ok"] is False
    assert report["draft"]["aux_layer_ids"] == READ_IDS  # the draft's reading does not depend on the target
    assert any(a.startswith("run 'patchkit apply") for a in report["actions"])


def test_a_draft_whose_fc_does_not_fit_the_ids_fails(release, cli, tmp_path, glm):
    """DFlash sizes its fc by the ids vLLM reads: a draft with no ids gets (2, 23, 43) from the target while its
    fc takes num_hidden_layers (5) states."""
    sp = patched(release, cli, "0.34.0", glm)
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash(ids=None))
    code, report = doctor(cli, sp, glm, draft)
    assert code == 1
    assert report["draft"]["aux_layer_ids"] == [2, 23, 43]
    width = check(report, "draft input width")
    assert width["ok"] is False and "num_hidden_layers 5 states" in width["detail"]


def test_dflash2_and_dspark_drafts(release, cli, tmp_path, glm):
    """DFlash2 declares its config (a DFlash subclass); a Qwen3 DSpark draft is renamed Qwen3DSparkModel by
    hf_config_override, whose class declares DSpark's config; its dspark_target_layer_ids are read + 1."""
    sp = patched(release, cli, "0.34.0", glm)
    two = checkpoint(tmp_path, "draft2", dflash(arch="DFlash2DraftModel"))
    code, report = doctor(cli, sp, glm, two)
    assert code == 0, report["actions"]
    assert report["draft"]["method"] == "dflash"
    assert report["draft"]["draft_class"] == "vllm.model_executor.models.qwen3_dflash2.DFlash2Qwen3ForCausalLM"
    assert report["draft"]["aux_layer_ids"] == READ_IDS and report["draft"]["fc_input_width"] == 5 * 4096

    spark = checkpoint(tmp_path, "dspark_glm_block7", dspark())
    code, report = doctor(cli, sp, glm, spark)
    d = report["draft"]
    assert d["method"] == "dspark" and d["vllm_architectures"] == ["Qwen3DSparkModel"]
    assert d["draft_class"] == "vllm.model_executor.models.qwen3_dspark.Qwen3DSparkForCausalLM"
    renamed = child(check(report, "draft architecture DSparkDraftModel"), "DSparkDraftModel -> Qwen3DSparkModel")
    assert "hf_config_override renames it Qwen3DSparkModel" in renamed["detail"]
    assert d["aux_layer_ids"] == READ_IDS and d["aux_layer_ids_source"] == "draft config"
    assert code == 0, report["actions"]


def test_dspark_ids_of_the_model_types_the_reader_names_are_kept(release, cli, tmp_path, glm):
    """0.34.0's reader keeps dspark_target_layer_ids as they are for model_type deepseek_v41 (read from its
    ``model_type == "deepseek_v41"`` test)."""
    sp = patched(release, cli, "0.34.0", glm)
    spark = checkpoint(tmp_path, "dspark_v41", dspark(model_type="deepseek_v41"))
    _, report = doctor(cli, sp, glm, spark)
    assert report["draft"]["aux_layer_ids"] == DFLASH_IDS
    assert report["draft"]["intended_aux_layer_ids"] == DFLASH_IDS


def test_an_eagle3_draft_reads_as_before(release, cli, tmp_path, glm):
    """No method other than EAGLE-3 is picked for a Llama EAGLE-3 draft: doctor reads it as it always did."""
    sp = patched(release, cli, "0.34.0", glm)
    draft = checkpoint(
        tmp_path,
        "GLM-4.5-Air-Eagle3",
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": 4096,
            "num_hidden_layers": 1,
            "vocab_size": 151552,
            "eagle_aux_hidden_state_layer_ids": [2, 23, 43],
        },
    )
    code, report = doctor(cli, sp, glm, draft)
    assert code == 0, report["actions"]
    assert report["draft"]["method"] is None
    assert report["draft"]["vllm_architectures"] == ["LlamaForCausalLMEagle3"]  # EAGLEConfig keeps a name ending Eagle3
    assert not [c for c in report["checks"] if c["label"].startswith("speculative method")]


def test_a_changed_method_unit_says_not_checked(release, cli, tmp_path, glm):
    """A DFlash config class whose code matches no qualified fingerprint: the method, the class and the width rest
    on it, so each says "not checked" and doctor is not ready."""
    sp = patched(release, cli, "0.34.0", glm)
    config = sp / "vllm/v1/worker/gpu/spec_decode/dflash/config.py"
    text = config.read_text()
    assert text.count('return "dflash" in spec.draft_model_config.model.lower()') == 1
    config.write_text(text.replace('return "dflash" in spec', 'return "dflash-" in spec'))
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash())
    code, report = doctor(cli, sp, glm, draft)
    assert code == 1
    for prefix in ("speculative method dflash", "draft architecture DFlashDraftModel", "draft input width"):
        node = check(report, prefix)
        assert node["ok"] is False, prefix
        first = node["children"][0]
        assert first["label"] == "not checked: vLLM code this verdict rests on changed"
        assert "DFlashSpeculatorConfig" in first["detail"]


def test_a_changed_id_reader_says_not_checked(release, cli, tmp_path, glm):
    """The V2 reader whose DFlash offset changed: the ids it reads rest on it."""
    sp = patched(release, cli, "0.34.0", glm)
    utils = sp / "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
    text = utils.read_text()
    old = 'layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]'
    assert text.count(old) == 1
    utils.write_text(text.replace(old, 'layer_ids = [i + 2 for i in (dflash_config.get("target_layer_ids") or [])]'))
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash())
    code, report = doctor(cli, sp, glm, draft)
    assert code == 1
    ids = [c for c in report["checks"] if c["label"].startswith("aux layer ids")]
    assert len(ids) == 1 and ids[0]["ok"] is False
    assert ids[0]["children"][0]["label"] == "not checked: vLLM code this verdict rests on changed"


def test_0_33_0_reads_the_ids_and_the_class_but_not_whether_dflash_uses_aux_states(release, cli, tmp_path, glm):
    """0.33.0 picks DFlash by the draft's path (config/speculative.py) and its readers add 1; it has no speculator
    config classes, so whether DFlash uses aux states is not read there: not checked, never ready."""
    sp = patched(release, cli, "0.33.0", glm)
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash())
    code, report = doctor(cli, sp, glm, draft)
    d = report["draft"]
    assert d["method"] == "dflash" and d["draft_class"].endswith("qwen3_dflash.DFlashQwen3ForCausalLM")
    assert d["aux_layer_ids"] == READ_IDS
    method = check(report, "speculative method dflash")
    assert method["ok"] is False and method["detail"].startswith("not checked:")
    # rehearse runs DFlash drafts (a fresh user found doctor still saying it could not)
    assert "`patchkit rehearse` runs this draft in the engine" in method["detail"]
    assert "cannot run" not in method["detail"]
    assert method["location"].startswith("vllm/config/speculative.py:")
    assert code == 1


def test_0_18_0_has_no_dflash_and_reads_the_draft_as_before(release, cli, tmp_path, glm):
    """A release without DFlash: no method is picked, the draft is read as an EAGLE-3 draft, as before."""
    sp = release("0.18.0")
    draft = checkpoint(tmp_path, "GLM-4.5-Air-DFlash", dflash())
    _, report = doctor(cli, sp, glm, draft)
    d = report["draft"]
    assert d["method"] is None and d["vllm_architectures"] == ["Eagle3DFlashDraftModel"]
    assert d["aux_layer_ids_source"] == "default"


def _rehearse_until_the_engine(tmp_path, glm, monkeypatch, folder: str, config: dict[str, Any]):
    """rehearse on 0.34.0's files up to the engine: the probe of the device and the driver are stood in for, the
    driver's arguments returned (the miniature and the options), or the error raised before it."""
    from vllm_release import pristine_site_packages

    from patchkit.rehearse import rehearsal
    from patchkit.vllm.release.install import from_site_packages

    class Reached(Exception):
        pass

    def drive(python, mini, opts, *args):
        raise Reached(mini, opts)

    monkeypatch.setattr(rehearsal, "probe_device", lambda python, device: {})
    monkeypatch.setattr(rehearsal, "_drive", drive)
    install = from_site_packages(pristine_site_packages("0.34.0"))
    install = dataclasses.replace(install, python=Path(sys.executable))
    with pytest.raises(Reached) as reached:
        rehearsal.rehearse(install, glm, checkpoint(tmp_path, folder, config))
    return reached.value.args


def test_rehearse_refuses_a_dspark_draft(tmp_path, glm, monkeypatch):
    """DSpark stays refused (exit 3), with the refusal text it had before DFlash was rehearsed."""
    from patchkit.errors import ExitCode, RefusedError

    with pytest.raises(RefusedError) as err:
        _rehearse_until_the_engine(tmp_path, glm, monkeypatch, "qwen3-dspark", dspark())
    assert err.value.exit_code == ExitCode.REFUSED
    assert "rehearse runs EAGLE-3 drafts only" in str(err.value) and "method dspark" in str(err.value)


def test_rehearse_runs_a_dflash_draft_with_its_method(tmp_path, glm, monkeypatch):
    """A DFlash draft is rehearsed (issue 40): the engine gets method dflash, the miniature draft is a DFlash draft
    whose dflash_config ids, in the output-of-layer convention, are the miniature's capture ids less one."""
    from patchkit.rehearse.driver_run import driver_spec
    from patchkit.rehearse.layout import Layout
    from patchkit.rehearse.miniature_ids import IdField

    mini, opts = _rehearse_until_the_engine(tmp_path, glm, monkeypatch, "GLM-4.5-Air-DFlash", dflash())
    assert opts["method"] == "dflash"
    assert mini.user_ids == tuple(READ_IDS) and mini.id_field is IdField.DFLASH_CONFIG
    d = mini.draft_config
    assert d["architectures"] == ["DFlashDraftModel"] and d["block_size"] == 16
    assert d["dflash_config"]["target_layer_ids"] == [k - 1 for k in mini.ids]
    assert d["dflash_config"]["mask_token_id"] < d["vocab_size"] == mini.target_config["vocab_size"]
    assert d["hidden_size"] == mini.target_config["hidden_size"] and d["num_target_layers"] == mini.layers[1]
    spec = driver_spec(
        tmp_path, mini, opts["where"], opts["kind"], False, False, Layout(), opts["row"], {}, method="dflash"
    )
    assert spec["method"] == "dflash" and spec["reference_ids"] == list(mini.ids)


def test_rehearse_says_a_dflash_draft_s_ids_are_read_plus_one(tmp_path, glm, monkeypatch):
    """A fresh user read "ids [2, 13, 24, 35, 45] (...; the draft's dflash_config field)" against a field holding
    [1, 12, 23, 34, 44]: the ids line now says the + 1."""
    from vllm_release import pristine_site_packages

    from patchkit.rehearse import rehearsal
    from patchkit.rehearse.rehearsal_result import CheckName
    from patchkit.vllm.release.install import from_site_packages

    mini, _opts = _rehearse_until_the_engine(tmp_path, glm, monkeypatch, "GLM-4.5-Air-DFlash", dflash())
    install = from_site_packages(pristine_site_packages("0.34.0"))
    (ids,) = [c for c in rehearsal._static_checks(install, mini, dflash()) if c.name is CheckName.IDS]
    assert ids.ok is True and f"ids {READ_IDS}" in ids.detail
    assert "dflash_config.target_layer_ids, each + 1" in ids.detail


def test_the_watch_data_file_carries_the_dflash_reading(release):
    """The watch's data file names the aux-state methods and each reader's DFlash/DSpark fields, from 0.34.0."""
    from patchkit.vllm.release.install import from_site_packages
    from patchkit.watch import watch as watch_mod

    sp = release("0.34.0")
    install = from_site_packages(sp)
    journal = type("J", (), {"entries": {}})()
    data = watch_mod.data(install, journal, 8, 0.2, None)
    assert data["methods"] == ["eagle3", "dflash", "dspark"]
    (reader,) = data["readers"]
    assert reader["dflash"] and reader["dflash_offset"] == 1 and reader["dspark_kept"] == ["deepseek_v41"]
    assert reader["order"] == ["top", "dflash", "dspark", "target", "layer_ids"]
    json.dumps(data)


def test_the_path_word_missing_from_a_draft_folder_is_named(release, cli, tmp_path, glm):
    """A fresh user's finding: on 0.33.0 (DFlash picked by the path only) a DFlash draft in a folder named
    ``draftx`` is served as EAGLE-3; doctor advised "use an EAGLE-3 draft", where the fix is the folder's name.
    (The test's own name avoids the word: pytest puts it in tmp_path.)"""
    sp = patched(release, cli, "0.33.0", glm)
    draft = checkpoint(tmp_path, "draftx", dflash())
    code, report = doctor(cli, sp, glm, draft)
    assert code == 1
    said = json.dumps(report)
    assert "picks dflash only by the draft's path (vllm/config/speculative.py:" in said
    assert "put it in a folder whose name contains 'dflash'" in said
    assert "use an EAGLE-3 draft this vLLM can build" not in said
