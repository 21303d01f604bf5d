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
