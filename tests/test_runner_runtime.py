"""``verify --runtime`` on vLLM 0.34.0, where Model Runner V2 is the only runner: the probe runs V2's own
``load_eagle_model`` (``v1/worker/gpu/spec_decode/eagle/utils.py``) on stand-ins, in a real importable
install (issue 29). Before the runner wing it imported V1's ``vllm.v1.spec_decode.eagle`` and every run
exited 1 with ModuleNotFoundError.

vLLM's own code backs the load-path verdicts: Phi4MM and DiffusionGemma (not patchable) and
MuseGlimmer (declared but broken) raise AttributeError at ``utils.py:140``, where ``load_eagle_model``
reads ``target_language_model.model`` unguarded.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from vllm_release import runtime_venv

pytestmark = pytest.mark.runtime

LOADER = "load_eagle_model (V2 runner)"
BROKEN = {
    "Phi4MMForCausalLM": ("Phi4MMForCausalLM", "not patchable"),
    "DiffusionGemmaForBlockDiffusion": ("DiffusionGemmaForConditionalGeneration", "not patchable"),
    "MuseGlimmerForCausalLM": ("MuseGlimmerForCausalLM", "declared but broken"),
}


@pytest.fixture(scope="module")
def python():
    with runtime_venv("0.34.0") as found:
        yield found


def walk(checks: list[dict]):
    for check in checks:
        yield check
        yield from walk(check.get("children", []))


def loading(report: dict, arch: str) -> dict:
    found = [c for c in walk(report["checks"]) if c["label"].startswith(f"{arch}: vLLM's ") and LOADER in c["label"]]
    assert len(found) == 1, [c["label"] for c in walk(report["checks"])]
    return found[0]


def test_a_native_class_passes_through_v2s_loader(cli, python):
    code, report = cli.json("verify", "--runtime", "--python", str(python), "--arch", "LlamaForCausalLM")
    assert code == 0, report.get("missing")
    check = loading(report, "LlamaForCausalLM")
    assert check["ok"] is True and "utils.py:" in check["detail"] and "embed_tokens and lm_head" in check["detail"]


def test_v2s_loader_raises_on_the_three_bare_language_models(cli, python):
    args = [a for arch in BROKEN for a in ("--arch", arch)]
    code, report = cli.json("verify", "--runtime", "--python", str(python), *args)
    assert code == 1
    for arch, (cls, verdict) in BROKEN.items():
        check = loading(report, arch)
        assert check["ok"] is False, check
        assert (
            "AttributeError" in check["detail"]
            and "vllm/v1/worker/gpu/spec_decode/eagle/utils.py:140" in check["detail"]
        )
        # the static verdict says the same, at the same line
        verdicts = [
            c for c in walk(report["checks"]) if c["label"] == f"patchkit's verdict: {verdict}" and cls in c["detail"]
        ]
        assert verdicts and "utils.py:140" in (verdicts[0]["detail"] + (verdicts[0].get("location") or "")), arch


def test_a_patched_class_passes_through_v2s_loader(cli, python):
    code, applied = cli.json("apply", "--python", str(python), "--arch", "MixtralForCausalLM")
    assert code == 0, applied
    code, report = cli.json("verify", "--runtime", "--python", str(python), "--arch", "MixtralForCausalLM")
    assert code == 0, report.get("missing")
    assert loading(report, "MixtralForCausalLM")["ok"] is True


# -- issue 39: a changed unit is settled by what it does in the serving environment -------------------------

INTERFACES = "vllm/model_executor/models/interfaces.py"
HELPER_SAME = (  # the same behaviour, written otherwise: the fingerprint changes, what it does does not
    "            value = hidden_states + residual if residual is not None else hidden_states\n"
    "            aux_hidden_states.append(value)\n",
    "            aux_hidden_states.append(\n"
    "                hidden_states if residual is None else hidden_states + residual\n"
    "            )\n",
)
HELPER_NONE = (  # the first example: the capture helper returns nothing
    "            aux_hidden_states.append(value)\n        return aux_hidden_states\n",
    "            aux_hidden_states.append(value)\n",
)


@contextmanager
def edited(python, old: str, new: str):
    """The venv's ``interfaces.py`` with ``old`` replaced by ``new``, put back byte for byte after."""
    from patchkit.vllm.release.install import from_python

    path = from_python(python).site_packages / INTERFACES
    before = path.read_bytes()
    assert old.encode() in before
    path.write_bytes(before.replace(old.encode(), new.encode(), 1))
    try:
        yield
    finally:
        path.write_bytes(before)


def _unit(report: dict, key: str) -> dict:
    found = [c for c in walk(report["checks"]) if c.get("kind") == f"unit-exercised:{key}"]
    assert len(found) == 1, [c["label"] for c in walk(report["checks"])]
    return found[0]


def test_runtime_settles_a_changed_unit_that_does_what_patchkit_assumes(cli, python):
    with edited(python, *HELPER_SAME):
        code, report = cli.json("verify", "--python", str(python))
        assert code == 1 and any("not checked" in m and "_maybe_add_hidden_state" in m for m in report["missing"])
        code, report = cli.json("verify", "--runtime", "--python", str(python))
        assert code == 0, report["missing"]
        assert _unit(report, "capture-helper")["ok"] is True


def test_runtime_fails_a_changed_unit_from_what_it_did(cli, python):
    with edited(python, *HELPER_NONE):
        code, report = cli.json("verify", "--runtime", "--python", str(python))
        assert code == 1
        unit = _unit(report, "capture-helper")
        assert unit["ok"] is False and "returned None" in unit["detail"], unit
        assert any("not checked" in m for m in report["missing"])


CHECKPOINTS = Path(__file__).parent / "checkpoints"


def test_doctor_python_settles_a_changed_unit_from_what_it_did(cli, python):
    """doctor --python on a release whose capture helper changed: without the exercise it stayed "not checked"
    (not ready); the unit run in the serving environment settles it when it does what patchkit assumes."""
    model, draft = CHECKPOINTS / "llama-3.3-70b-instruct", CHECKPOINTS / "llama-3.3-70b-instruct-eagle3"
    args = ("doctor", "--python", str(python), "--model", str(model), "--draft", str(draft))
    code, report = cli.json(*args)
    assert code == 0 and not any((c.get("kind") or "").startswith("unit-exercised") for c in walk(report["checks"]))
    with edited(python, *HELPER_SAME):
        code, report = cli.json(*args)
        assert code == 0, report["missing"]
        assert _unit(report, "capture-helper")["ok"] is True
        code, report = cli.json("doctor", "--site-packages", str(site(python)), "--model", str(model))
        assert code != 0 and any("not checked" in m and "_maybe_add_hidden_state" in m for m in report["missing"])


def test_doctor_python_fails_a_changed_unit_that_does_otherwise(cli, python):
    model = CHECKPOINTS / "llama-3.3-70b-instruct"
    with edited(python, *HELPER_NONE):
        code, report = cli.json("doctor", "--python", str(python), "--model", str(model))
        assert code != 0
        unit = _unit(report, "capture-helper")
        assert unit["ok"] is False and "returned None" in unit["detail"], unit


def site(python) -> Path:
    from patchkit.vllm.release.install import from_python

    return from_python(python).site_packages
