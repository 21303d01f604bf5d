"""benchmarks/gpu_campaign.py's preparation, on real release trees (no GPU, no vLLM import).

The campaign's environments are prepared by patchkit's own CLI (``apply --arch``, ``resolve``,
``verify``); here each environment is a fresh copy of vLLM 0.20.2's release tree (the release the
H200 campaign ran), named to patchkit by ``--site-packages``. Issue 31's resume bug: a second call
that added a case skipped the environment (its marker existed), so the new case was rehearsed
unpatched and vLLM's refusal was counted as a verdict.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from engine_models import CASES, GPU_CASES
from vllm_release import fresh_copy
from wrong_captures import AFTER_LAYER, MUTATIONS

ROOT = Path(__file__).resolve().parents[1]


def _campaign():
    spec = importlib.util.spec_from_file_location("gpu_campaign", ROOT / "benchmarks" / "gpu_campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CAMPAIGN = _campaign()
CASE = {c.name: c for c in GPU_CASES}
ALL = {c.name: c for c in CASES + GPU_CASES}


def _verify(site: Path, arch: str) -> int:
    return subprocess.run(
        [*CAMPAIGN.patchkit(), "verify", "--arch", arch, "--site-packages", str(site)], capture_output=True, text=True
    ).returncode


@pytest.mark.release
def test_a_case_added_later_is_prepared_not_skipped(tmp_path: Path):
    """First call: OLMoE; second call: OLMoE and GLM-4.5-Air. GLM-4.5-Air must be patched in both
    environments and made wrong in ``shift``, and OLMoE's wrong capture must not be made wrong again.
    Before the fix the second call skipped both environments (their markers existed): GLM-4.5-Air
    stayed unpatched (verify exit 1) and its shift capture untouched."""
    state = tmp_path / "state"
    state.mkdir()
    envs = {env: str(fresh_copy("0.20.2", tmp_path / env)) for env in ("right", "shift")}
    CAMPAIGN.prepare(state, [CASE["olmoe"]], envs)
    assert CAMPAIGN.prepared_cases(state, "right") == {"olmoe"}
    CAMPAIGN.prepare(state, [CASE["olmoe"], CASE["glm45-air"]], envs)

    glm = CASE["glm45-air"].target["architectures"][0]
    assert _verify(Path(envs["right"]), glm) == 0
    shifted = (Path(envs["shift"]) / "vllm/model_executor/models/glm4_moe.py").read_text()
    assert MUTATIONS["shift"][1] in shifted and AFTER_LAYER not in shifted
    olmoe = (Path(envs["shift"]) / "vllm/model_executor/models/olmoe.py").read_text()
    assert olmoe.count(MUTATIONS["shift"][1]) == 1
    for env in envs:
        assert CAMPAIGN.prepared_cases(state, env) == {"olmoe", "glm45-air"}
    assert CAMPAIGN.unprepared(state, CAMPAIGN.jobs([CASE["olmoe"], CASE["glm45-air"]])) == []


def test_a_job_on_an_unprepared_environment_is_an_error(tmp_path: Path):
    """A job whose environment holds no record of its case is listed (the campaign stops, exit 2,
    recording no verdict); the unpatched environment's refusal job is not; a marker of the campaign
    before the cases were recorded makes the environment unusable (which cases it holds is unknown)."""
    (tmp_path / "prepared-right.json").write_text(json.dumps({"cases": ["mixtral"]}))
    todo = [
        ("unpatched", "olmoe", "compiled", "bf16"),
        ("right", "mixtral", "compiled", "fp32"),
        ("right", "olmoe", "compiled", "fp32"),
        ("shift", "olmoe", "eager", "fp32"),
    ]
    assert CAMPAIGN.unprepared(tmp_path, todo) == ["right/olmoe/compiled/fp32", "shift/olmoe/eager/fp32"]
    (tmp_path / "prepared-shift").touch()
    with pytest.raises(CAMPAIGN.Unprepared, match="did not record its cases"):
        CAMPAIGN.prepared_cases(tmp_path, "shift")


def test_the_plans_name_known_cases_and_modes():
    """Every ``--only`` plan item is ``case:path-dtype`` of a GPU case and a campaign mode, and its
    jobs put each right rehearsal beside its shifted one (hybrids aside)."""
    for items in CAMPAIGN.PLANS.values():
        only = [(case, *mode.split("-")) for case, mode in (i.split(":") for i in items)]
        assert {c for c, _p, _d in only} <= set(CASE)
        assert {(p, d) for _c, p, d in only} <= set(CAMPAIGN.MODES)
        jobs = CAMPAIGN.jobs([CASE[c] for c in dict.fromkeys(c for c, _p, _d in only)], only)
        assert {(c, p, d) for _e, c, p, d in jobs} == set(only)
        assert all(("shift", c, p, d) in jobs for c, p, d in only if not CAMPAIGN.right_only(CASE[c]))
        assert {
            e for e, *_ in CAMPAIGN.jobs([CASE[c] for c in dict.fromkeys(c for c, _p, _d in only)], only, wrong=False)
        } == {"right"}


def test_no_wrong_capture_is_planned_where_patchkit_writes_none():
    """An interface-only case (Qwen3-Next on 0.20.2: vLLM's own model captures) and a refused hybrid
    (LFM2) are rehearsed right only: the mutations look for the capture patchkit writes, which an
    interface-only patch never writes (preparing its ``shift`` copy would raise, stopping the call)."""
    jobs = CAMPAIGN.jobs([CASE["qwen3-next"], CASE["lfm2"], CASE["mixtral"]])
    assert {e for e, c, *_ in jobs if c in ("qwen3-next", "lfm2")} == {"right"}
    assert {e for e, c, *_ in jobs if c == "mixtral"} == {"right", "shift"}


@pytest.mark.release
def test_an_interface_only_hybrid_is_prepared_without_a_wrong_copy(tmp_path: Path):
    """Qwen3-Next on 0.20.2: ``apply --arch`` patches it without ``--force`` (its Gated DeltaNet mixers
    keep speculation lossless), verify passes, and the shift environment is patched but not mutated."""
    state = tmp_path / "state"
    state.mkdir()
    envs = {env: str(fresh_copy("0.20.2", tmp_path / env)) for env in ("right", "shift")}
    CAMPAIGN.prepare(state, [CASE["qwen3-next"]], envs)
    arch = CASE["qwen3-next"].target["architectures"][0]
    for env in envs:
        assert _verify(Path(envs[env]), arch) == 0
        assert CAMPAIGN.prepared_cases(state, env) == {"qwen3-next"}


@pytest.mark.release
def test_on_0_34_0_each_case_is_applied_on_its_own_and_made_wrong_where_its_capture_is(tmp_path: Path):
    """vLLM 0.34.0 (V2 only): a repeated ``--arch`` on apply kept only the last one, so the campaign applies
    each case on its own; the shapes apply refuses there until shown (interface-only Glm4, wrapper-only
    Gemma 3 multimodal) with ``--force``. The wrong capture of the wrapper is made in its language model's
    file (gemma3.py), that of Glm4 in vLLM's own loop (llama.py: ``LlamaModel``, which ``Glm4Model`` is)."""
    state = tmp_path / "state"
    state.mkdir()
    envs = {env: str(fresh_copy("0.34.0", tmp_path / env)) for env in ("right", "shift")}
    cases = [ALL["glm4"], CASE["gemma3-mm"], CASE["mixtral"]]
    CAMPAIGN.prepare(state, cases, envs)
    models = {env: Path(site) / "vllm/model_executor/models" for env, site in envs.items()}
    for env in envs:
        assert "SupportsEagle3):" in (models[env] / "glm4.py").read_text()
        assert "SupportsEagle3" in (models[env] / "gemma3_mm.py").read_text()
        assert "SupportsEagle3" in (models[env] / "mixtral.py").read_text()
        assert CAMPAIGN.prepared_cases(state, env) == {"glm4", "gemma3-mm", "mixtral"}
    assert MUTATIONS["shift"][1] in (models["shift"] / "gemma3.py").read_text()
    assert MUTATIONS["shift"][0] in (models["right"] / "gemma3.py").read_text()
    assert MUTATIONS["shift-own"][1] in (models["shift"] / "llama.py").read_text()
    assert MUTATIONS["shift-own"][0] in (models["right"] / "llama.py").read_text()
    assert {e for e, c, *_ in CAMPAIGN.jobs(cases) if c in ("glm4", "gemma3-mm")} == {"right", "shift"}


def test_a_right_only_hidden_states_case_gets_no_residual_job(monkeypatch):
    """StableLM 2 is native on vLLM 0.34.0 (``--right-cases``): no capture of patchkit's to make wrong, so
    neither a ``shift`` nor a ``residual`` job (the residual one was planned for every hidden-states-only
    case, and would have rehearsed vLLM's own right capture under the name of a wrong one)."""
    monkeypatch.setattr(CAMPAIGN, "RIGHT_CASES", {"stablelm2"})
    envs = {e for e, c, *_ in CAMPAIGN.jobs([ALL["stablelm2"], ALL["exaone4"]]) if c == "stablelm2"}
    assert envs == {"right"}
    assert {e for e, c, *_ in CAMPAIGN.jobs([ALL["exaone4"]])} == {"right", "shift", "residual"}
