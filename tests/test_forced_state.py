"""A patch written with ``apply --force`` reads the same in every command (issue 42, finding 1).

Gemma 3 (``Gemma3ForConditionalGeneration``, the wrapper-only shape) on 0.34.0, with the shown-shapes table as it
stood before the H100 showed that shape there (fixture ``wrapper_not_shown``): ``apply`` refuses it unless
``--force``. Failed before, after
``apply --force``: ``verify`` exited 1, but ``doctor`` called it ready (exit 0), ``status --model`` said
"nothing to patch", and ``revert --model`` exited 2 denying any patch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_releases import snapshot

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("wrapper_not_shown")]
GEMMA = str(Path(__file__).parent / "checkpoints" / "gemma-3-27b-it")
WRAPPER = "Gemma3ForConditionalGeneration"


def test_a_forced_patch_reads_the_same_in_status_verify_doctor_and_revert(release, cli):
    sp = release("0.34.0")
    where = ["--site-packages", str(sp), "--model", GEMMA]
    before = snapshot(sp)
    code, refused = cli.json("apply", *where)
    assert code == 3 and refused["refused"], refused
    code, applied = cli.json("apply", *where, "--force")
    assert code == 0 and applied["written"], applied

    code, status = cli.json("status", *where)
    assert [(a["architecture"], a["state"], a["forced"]) for a in status["architectures"]] == [
        (WRAPPER, "patched", True)
    ], status
    assert "forced (apply --force)" in " ".join(cli("status", *where).stdout.split())
    code, verify = cli.json("verify", *where)
    assert code == 1
    code, doctor = cli.json("doctor", *where)
    assert code == 1 and doctor["ready"] is False, doctor["missing"]
    assert any("greedy output kept under vLLM's V2 runner" in m for m in doctor["missing"]), doctor["missing"]

    code, reverted = cli.json("revert", *where)
    assert code == 0, reverted
    actions = {f["path"]: f["action"] for f in reverted["files"]}
    assert actions["vllm/model_executor/models/gemma3_mm.py"] == "restored", actions
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    assert snapshot(sp) == before


def test_scan_marks_a_forced_patch_as_status_does(release, cli):
    """scan reads a patch written with ``apply --force`` as status does (issue 42, finding 1). Failed before: a
    forced row read "patched by patchkit ... supports EAGLE-3 in this release", with no shape and needs_force
    false, while status said forced and verify failed it. Held-back shapes: wrapper-only (Qwen2-VL; GLM-4's
    interface-only shape until the H100's 0.34.0 records showed it), a hybrid not
    lossless here (Jamba), a wrapper whose language model is patched with it (OpenPangu VL, whose
    PanguEmbeddedForCausalLM is a standard loop, shown under V2, so not forced)."""
    sp = release("0.34.0")
    forced = ["Qwen2VLForConditionalGeneration", "JambaForCausalLM", "OpenPanguVLForConditionalGeneration"]
    where = ["--site-packages", str(sp)]
    archs = [a for arch in forced for a in ("--arch", arch)]
    code, applied = cli.json("apply", *where, *archs, "--force")
    assert code == 0 and applied["written"], applied
    code, status = cli.json("status", *where, *archs, "--arch", "PanguEmbeddedForCausalLM")
    by_status = {a["architecture"]: (a["state"], a["forced"]) for a in status["architectures"]}
    code, scanned = cli.json("scan", *where)
    assert code == 0
    rows = {r["architecture"]: r for r in scanned["architectures"] if r["architecture"] in by_status}
    assert {a: (r["state"], r["forced"]) for a, r in rows.items()} == {
        a: ("patched by patchkit", f) for a, (_, f) in by_status.items()
    }, (rows, by_status)
    assert by_status == {**{a: ("patched", True) for a in forced}, "PanguEmbeddedForCausalLM": ("patched", False)}
    for arch in forced:
        assert rows[arch]["needs_force"] and rows[arch]["reason"].startswith("forced (apply --force)"), rows[arch]
    assert rows["Qwen2VLForConditionalGeneration"]["shape"] == "wrapper-only", rows["Qwen2VLForConditionalGeneration"]
    assert "hybrid, not lossless" in rows["JambaForCausalLM"]["reason"], rows["JambaForCausalLM"]
    text = {line.split()[0]: line for line in cli("scan", *where).stdout.splitlines() if line.strip()}
    assert all("forced (apply --force)" in text[a] for a in forced), [text[a] for a in forced]
    assert "forced" not in text["PanguEmbeddedForCausalLM"]


def test_after_a_forced_apply_verify_and_doctor_advise_its_revert_not_an_apply(release, cli, tmp_path):
    """What fails after ``apply --force`` is what --force accepted: no apply changes it, and the dry run of apply
    only refuses again. verify (scoped and plain) and doctor advise the scoped revert, which restores the files
    (issue 42, finding 1, held-back input: Qwen2-VL's folder on 0.34.0, wrapper-only; GLM-4's until the H100's
    0.34.0 records showed interface-only). Failed before: each advised
    'apply ... --dry-run', exit 3."""
    import json

    sp = release("0.34.0")
    model = tmp_path / "qwen2-vl"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "num_hidden_layers": 28}
        )
    )
    before = snapshot(sp)
    where = ["--site-packages", str(sp)]
    assert cli("apply", *where, "--model", str(model), "--force").exit_code == 0
    code, scoped = cli.json("verify", *where, "--model", str(model))
    code_plain, plain = cli.json("verify", *where)
    code_doctor, doctor = cli.json("doctor", *where, "--model", str(model))
    assert (code, code_plain, code_doctor) == (1, 1, 1)
    revert_model = ["patchkit", "revert", *where, "--model", str(model)]
    assert [s["argv"] for s in scoped["next_steps"]] == [revert_model], scoped["next_steps"]
    assert [s["argv"] for s in plain["next_steps"]] == [
        ["patchkit", "revert", *where, "--arch", "Qwen2VLForConditionalGeneration"]
    ]
    assert doctor["next_steps"][0]["argv"] == revert_model, doctor["next_steps"]
    assert all(s["effect"] == "restores" for s in (scoped["next_steps"][0], doctor["next_steps"][0]))
    assert cli(*revert_model[1:]).exit_code == 0
    assert snapshot(sp) == before
