"""A checkpoint's config.json is validated once, where it is read, and every command refuses the same one
the same way (issue 42, findings 7 and 2).

Failed before: ``apply --model`` took a layer count of ``32.0``, ``true`` or ``NaN`` (doctor called the same
config damaged, exit 4), and ``rehearse`` with ``num_hidden_layers`` 10**30 was still building its
miniature after 303 s.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from patchkit.errors import ConfigError, ExitCode
from patchkit.vllm.checkpoints.config import read_config

GLM = Path(__file__).parent / "checkpoints" / "glm-4.6"
BAD_LAYERS = ["32.0", "true", "NaN", "1e30", "1" + "0" * 30, "0", "-3", '"61"', "10001"]
"""JSON texts of layer counts no model has (Python's json reads NaN)."""


def with_layers(folder: Path, text: str) -> Path:
    """A copy of GLM-4.6's config.json in ``folder`` with ``num_hidden_layers`` written as ``text``."""
    data = json.loads((GLM / "config.json").read_text())
    data["num_hidden_layers"] = "LAYERS"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data).replace('"LAYERS"', text))
    return folder


@pytest.mark.parametrize("text", BAD_LAYERS)
def test_an_absurd_layer_count_is_a_damaged_config(tmp_path, text):
    with pytest.raises(ConfigError) as caught:
        read_config(with_layers(tmp_path / "m", text), "--model")
    assert caught.value.exit_code == ExitCode.ENVIRONMENT
    assert "num_hidden_layers is " in caught.value.message and "not a positive layer count" in caught.value.message
    assert len(caught.value.message) < 200  # 10**30 is cut, not printed whole


def test_a_sane_layer_count_is_read(tmp_path):
    assert read_config(with_layers(tmp_path / "m", "92"), "--model").data["num_hidden_layers"] == 92


@pytest.mark.release
@pytest.mark.parametrize("text", ["32.0", "true", "NaN", "1" + "0" * 30])
def test_apply_model_and_rehearse_refuse_it_as_doctor_does(release, cli, tmp_path, monkeypatch, text):
    sp = release("0.34.0")
    model = with_layers(tmp_path / "m", text)
    draft = Path(__file__).parent / "checkpoints" / "llama-3.3-70b-instruct-eagle3"
    monkeypatch.setenv("PYTHONPATH", str(sp))  # patchkit's own interpreter, seeing this copy (no engine runs)
    python = os.path.abspath(sys.executable)
    runs = {
        "doctor": ["doctor", "--model", str(model), "--site-packages", str(sp)],
        "apply": ["apply", "--model", str(model), "--site-packages", str(sp), "--dry-run"],
        "verify": ["verify", "--model", str(model), "--site-packages", str(sp)],
        "rehearse": ["rehearse", "--model", str(model), "--draft", str(draft), "--python", python],
    }
    for name, args in runs.items():
        code, report = cli.json(*args)
        assert code == 4, (name, report)
        assert "num_hidden_layers is" in report["error"] and "not a positive layer count" in report["error"], name


# -- the draft's eagle_config and ids (findings 2 and 10) ---------------------------------------------

KIMI_DRAFT = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 5120,
    "num_hidden_layers": 1,
    "num_attention_heads": 40,
}
BAD_DRAFTS = {
    "eagle_config-list": {"eagle_config": [1, 29, 57]},
    "eagle_config-string": {"eagle_config": "use_aux_hidden_state"},
    "string-ids": {"eagle_aux_hidden_state_layer_ids": ["2", "46", "89"]},
    "nested-string-ids": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["1", "45", "88"]}},
}


@pytest.mark.parametrize("extra", BAD_DRAFTS.values(), ids=list(BAD_DRAFTS))
def test_rehearse_refuses_a_draft_no_release_reads(extra):
    """Failed before: an AttributeError traceback for eagle_config as a list or a string, and string ids
    turned into integers (doctor rejects them)."""
    from patchkit.errors import RefusedError
    from patchkit.rehearse.miniature_ids import trained_ids

    with pytest.raises(RefusedError) as caught:
        trained_ids({**KIMI_DRAFT, **extra}, 92)
    assert (
        caught.value.message.startswith("the draft's eagle_config") or "not a list of integers" in caught.value.message
    )


@pytest.mark.parametrize(
    "ids,shown",
    [([True, 7, 13], "[true, 7, 13]"), ([1, 7, float("inf")], "[1, 7, Infinity]"), ("2,30", '"2,30"')],
)
def test_bad_ids_are_named_as_the_config_writes_them(ids, shown):
    """Held-back inputs of finding 2's and 10's kind (a JSON ``true``, ``1e400``, a comma string): doctor and
    rehearse name them as JSON. Failed before: Python's ``[True, 7, 13]`` and ``inf``, which no config holds."""
    from patchkit.errors import RefusedError
    from patchkit.rehearse.miniature_ids import trained_ids

    with pytest.raises(RefusedError) as caught:
        trained_ids({**KIMI_DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}, 92)
    assert caught.value.message == (
        f"the draft's eagle_config.eagle_aux_hidden_state_layer_ids is {shown}, not a list of integers"
    )


def test_an_empty_eagle_config_is_ignored_as_vllm_ignores_it():
    from patchkit.rehearse.miniature_ids import IdField, trained_ids

    assert trained_ids({**KIMI_DRAFT, "eagle_config": []}, 92) == ((2, 46, 89), IdField.NONE)


@pytest.mark.release
@pytest.mark.parametrize("name", ["eagle_config-list", "eagle_config-string", "string-ids"])
def test_doctor_does_not_call_it_ready_and_rehearse_refuses_it(release, cli, tmp_path, monkeypatch, name):
    sp = release("0.34.0")
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({**KIMI_DRAFT, **BAD_DRAFTS[name]}))
    code, report = cli.json("doctor", "--model", str(GLM), "--draft", str(draft), "--site-packages", str(sp))
    assert code == 1 and report["ready"] is False, report
    ids = [c for c in report["checks"] if c["label"] == "aux layer ids"]
    assert ids and ids[0]["ok"] is False, [c["label"] for c in report["checks"]]
    monkeypatch.setenv("PYTHONPATH", str(sp))
    code, refused = cli.json("rehearse", "--model", str(GLM), "--draft", str(draft), "--python", sys.executable)
    assert code == 3 and refused["error"] == ids[0]["detail"], refused


# -- what stands where config.json should be (finding 10) ---------------------------------------------


@pytest.mark.parametrize("kind", ["directory", "fifo", "fifo-given-as-the-file"])
def test_a_config_json_that_is_not_a_file_is_named_as_what_it_is(tmp_path, kind):
    """Failed before: a directory or a FIFO named config.json was 'has no config.json' (a FIFO given
    itself: 'does not exist'). Never opened: reading a FIFO would wait for a writer."""
    folder = tmp_path / "model"
    folder.mkdir()
    made = folder / "config.json"
    made.mkdir() if kind == "directory" else os.mkfifo(made)
    with pytest.raises(ConfigError) as caught:
        read_config(made if kind == "fifo-given-as-the-file" else folder, "--model")
    what = "a directory" if kind == "directory" else "a FIFO (named pipe)"
    assert caught.value.message == f"--model {made} is {what}, not a file"


@pytest.mark.parametrize("option", ["--model", "--draft"])
def test_a_directory_named_config_json_given_as_the_file_is_named_a_directory(tmp_path, option):
    """Held-back input of finding 10's kind: the folder named config.json given itself (``--model
    DIR/config.json``), not its parent. Failed before: 'DIR/config.json has no config.json', exit 4 with the hint to
    give the folder the user had given. A folder named config.json that holds one is still read as a folder."""
    made = tmp_path / "model" / "config.json"
    made.mkdir(parents=True)
    with pytest.raises(ConfigError) as caught:
        read_config(made, option)
    assert caught.value.message == f"{option} {made} is a directory, not a file"
    (made / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2}))
    assert read_config(made, option).path == made / "config.json"
