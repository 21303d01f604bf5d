"""The word "native" means one thing in every command (issue 42, finding 10): EAGLE-3 from vLLM's own code, no patch,
scan's ``native`` state and doctor's ``natively``. An architecture vLLM implements in a model file of its own is
"vLLM's own model" (``own_model`` in ``--json``). Failed before: doctor's target line said ``native: resolves to
...`` for a class scan calls ``patchable``, and resolve's and doctor's JSON said ``"native": true`` for it.

Held-back inputs: GLM-4 (interface-only on 0.34.0) and Qwen2-VL (a wrapper), both patchable; Llama, native. The
release is only read (the pristine cached tree).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from patchkit.checks.scan import scan_row
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.source import SourceTree

pytestmark = pytest.mark.release
CONFIGS = {
    "Glm4ForCausalLM": {"model_type": "glm4", "hidden_size": 4096, "num_hidden_layers": 40, "vocab_size": 151552},
    "Qwen2VLForConditionalGeneration": {"model_type": "qwen2_vl", "hidden_size": 3584, "num_hidden_layers": 28},
    "LlamaForCausalLM": {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "vocab_size": 128256},
}
NATIVE = re.compile(r"\bnative(ly)?\b")


def _model(tmp_path: Path, arch: str) -> str:
    folder = tmp_path / arch
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": [arch], **CONFIGS[arch]}))
    return str(folder)


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_native_reads_as_scan_reads_it_in_doctor_and_resolve(arch, cli, tmp_path):
    from vllm_release import pristine_site_packages

    sp = pristine_site_packages("0.34.0")
    tree = SourceTree(sp)
    registry = Registry(tree)
    state = scan_row(tree, registry, contract_mod.detect(tree), arch, "_TEXT_GENERATION_MODELS", set()).state
    code, doctor = cli.json("doctor", "--site-packages", str(sp), "--model", _model(tmp_path, arch))
    target = next(c for c in doctor["checks"] if c["label"].startswith("target architecture"))
    effect = next(c for c in doctor["checks"] if c["label"].startswith("EAGLE-3 in effect"))
    assert target["detail"].startswith("vLLM's own model: resolves to"), target
    assert not NATIVE.search(target["detail"]), target
    assert doctor["target"]["own_model"] is True and "native" not in doctor["target"], doctor["target"]
    assert (state == "native") is bool(NATIVE.match(effect["detail"])), (state, effect["detail"])
    code, resolved = cli.json("resolve", arch, "--site-packages", str(sp))
    assert code == 0 and resolved["own_model"] is True and "native" not in resolved, resolved
