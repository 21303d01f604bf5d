"""``apply``, ``verify`` and ``revert --target sglang`` on real SGLang release files (issue 44), each tree copied to
``tmp_path`` first (the cached release is never written).

Whole bytes: the patched ``mixtral.py`` is pinned by its SHA-256 (no SGLang text is committed), and its chain is
compared link by link with the release's own native ``llama.py`` (:func:`patchkit.plan.sglang_chain.chain`, ``ast``,
independent of the libcst codemod); ``compile()`` proves it parses. Leaves alone: a native class is native and nothing
is written; a class of another shape is refused with a one-line reason and nothing is written, even beside one that
could be patched. Applied twice is a no-op; revert gives every file its bytes back; a hand-edited patch is caught.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from patchkit.plan.sglang_chain import chain
from sglang_release import pristine_site_packages

MIXTRAL = "sglang/srt/models/mixtral.py"
LLAMA = "sglang/srt/models/llama.py"
PATCHABLE = {
    ("0.5.14", "MixtralForCausalLM"): ("mixtral", "2219b89faabeef9c626ef2164a73c4bcbae2cc246ef9d6ae13aef35e6c153f62"),
    ("0.5.16", "MixtralForCausalLM"): ("mixtral", "2219b89faabeef9c626ef2164a73c4bcbae2cc246ef9d6ae13aef35e6c153f62"),
    ("0.5.23", "MixtralForCausalLM"): ("mixtral", "55ef869e231bb34ec6281b60d511efcec6eb27e407705c578d0a35b9720aa58b"),
    ("0.5.23", "Spark2_5ForCausalLM"): ("spark2_5", "f8f660ecfb023d4ef09e931d3f9b2879d3f007ea7ab5a780c336a447cc4198c5"),
    ("0.5.23", "Exaone4ForCausalLM"): ("exaone4", "d8176cfd4cace6fad8ef5b7766d5a0f63795b4eb74f1c70994923a57010ed3dd"),
}
"""Every class ``apply --target sglang`` patches on each release (``test_the_patchable_classes_are_these``), with its
module and the SHA-256 of that module after the patch. 0.5.14's and 0.5.16's ``mixtral.py`` and ``llama.py``'s capture
are the same, so are the patched bytes. Each diff was read line by line when pinned (docs/sglang.md)."""


_LEGACY_0514_0516 = (
    "DeepseekForCausalLM",
    "GraniteForCausalLM",
    "OlmoeForCausalLM",
    "QuantMixtralForCausalLM",
    "XverseForCausalLM",
    "XverseMoeForCausalLM",
)
LEGACY = {"0.5.14": _LEGACY_0514_0516, "0.5.16": _LEGACY_0514_0516}
"""The legacy-shape classes (no ``self.pp_group``, a ``range(len(self.layers))`` loop) also patchable on a list-append
release; their round trips are ``tests/test_sglang_legacy_shape.py``'s (kept out of this slow module's byte test)."""


def snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def copy_of(version: str, tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    shutil.copytree(pristine_site_packages(version), site)
    return site


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.release
@pytest.mark.parametrize("version, arch", list(PATCHABLE), ids="-".join)
def test_apply_verify_revert_is_byte_exact(version, arch, tmp_path, cli):
    site = copy_of(version, tmp_path)
    module, digest = PATCHABLE[(version, arch)]
    relpath = f"sglang/srt/models/{module}.py"
    before = snapshot(site)
    code, report = cli.json("apply", "--target", "sglang", "--site-packages", str(site), "--arch", arch)
    assert code == 0, report
    assert [o["status"] for o in report["outcomes"]] == ["applied"] and report["written"] == [relpath]
    patched = (site / relpath).read_bytes()
    assert sha(site / relpath) == digest
    compile(patched, relpath, "exec")
    links = chain(patched, arch, (site / LLAMA).read_bytes())
    assert [k.label for k in links if not k.ok] == []
    assert {p for p, h in snapshot(site).items() if before.get(p) != h} == {relpath, *_state_files(site)}

    code, checked = cli.json("verify", "--target", "sglang", "--site-packages", str(site))
    assert code == 0 and [(v["architecture"], v["state"], v["in_effect"]) for v in checked["architectures"]] == [
        (arch, "patched", True)
    ]
    code, scanned = cli.json("scan", "--target", "sglang", "--site-packages", str(site))
    assert [r["architecture"] for r in scanned["architectures"] if r["state"] == "patched"] == [arch]

    code, again = cli.json("apply", "--target", "sglang", "--site-packages", str(site), "--arch", arch)
    assert code == 0 and [o["status"] for o in again["outcomes"]] == ["already applied"] and again["written"] == []
    assert (site / relpath).read_bytes() == patched

    code, reverted = cli.json("revert", "--target", "sglang", "--site-packages", str(site))
    assert code == 0 and reverted["restored"] == [relpath]
    assert snapshot(site) == before
    code, scanned = cli.json("scan", "--target", "sglang", "--site-packages", str(site))
    assert {r["architecture"]: r["state"] for r in scanned["architectures"]}[arch] == "missing"


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.23"])
def test_the_patchable_classes_are_these(version):
    """Every missing class of the release, planned (nothing written): exactly :data:`PATCHABLE`'s apply."""
    from patchkit.plan import sglang_apply as a
    from patchkit.sglang import contract as c
    from patchkit.sglang.classes import Package
    from patchkit.sglang.install import from_site_packages
    from patchkit.sglang.registry import entries, not_generative
    from patchkit.sglang.states import State, classify

    install = from_site_packages(pristine_site_packages(version))
    package = Package(install.site_packages, c.PACKAGE)
    pooling = not_generative(package, c.GENERATION_CONFIG, c.GENERATION_FUNCTION)
    journal, patch = a.journal_of(install), a.load_patch()
    applied, refused = [], []
    for entry in entries(package):
        if classify(package, entry, pooling).state is State.MISSING:
            outcome, after = a._decide(package, install, entry, pooling, journal, patch, {})
            (applied if after is not None else refused).append(outcome)
            assert outcome.reason and "\n" not in outcome.reason
    want = [arch for v, arch in PATCHABLE if v == version] + list(LEGACY.get(version, ()))
    assert sorted(o.architecture for o in applied) == sorted(want)
    assert {o.status for o in refused} == {a.Status.REFUSED}


def _state_files(site: Path) -> set[str]:
    return {p.relative_to(site).as_posix() for p in (site / ".patchkit").rglob("*") if p.is_file()}


@pytest.mark.release
def test_the_unpatched_class_fails_the_same_chain(tmp_path):
    site = pristine_site_packages("0.5.23")
    links = chain((site / MIXTRAL).read_bytes(), "MixtralForCausalLM", (site / LLAMA).read_bytes())
    # every link but the precondition (Mixtral's layer keeps Llama's boundary calls) is missing before the patch
    assert [k.label for k in links if k.ok] == ["decoder layer's stream"]
    native = chain((site / LLAMA).read_bytes(), "LlamaForCausalLM", (site / LLAMA).read_bytes(), "LlamaModel")
    assert all(k.ok for k in native)


@pytest.mark.release
def test_a_native_class_is_left_alone(tmp_path, cli):
    site = copy_of("0.5.23", tmp_path)
    before = snapshot(site)
    code, report = cli.json("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "LlamaForCausalLM")
    assert code == 0 and [o["status"] for o in report["outcomes"]] == ["native"] and report["written"] == []
    assert snapshot(site) == before
    code, checked = cli.json("verify", "--target", "sglang", "--site-packages", str(site), "--arch", "LlamaForCausalLM")
    assert code == 0 and checked["architectures"][0]["state"] == "native"


@pytest.mark.release
def test_another_shape_is_refused_and_nothing_is_written(tmp_path, cli):
    site = copy_of("0.5.23", tmp_path)
    before = snapshot(site)
    args = ("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM")
    code, report = cli.json(*args, "--arch", "Gemma2ForCausalLM")
    assert code == 3
    assert [(o["architecture"], o["status"]) for o in report["outcomes"]] == [
        ("MixtralForCausalLM", "applied"),
        ("Gemma2ForCausalLM", "refused"),
    ]
    assert report["outcomes"][1]["reason"] == "expected 'self.lm_head = ...' in Gemma2ForCausalLM.__init__, found 0"
    assert report["written"] == [] and snapshot(site) == before
    code, checked = cli.json(
        "verify", "--target", "sglang", "--site-packages", str(site), "--arch", "Gemma2ForCausalLM"
    )
    assert code == 1 and checked["architectures"][0]["state"] == "missing"


@pytest.mark.release
def test_a_broken_patch_is_reported_and_revert_needs_force(tmp_path, cli):
    site = copy_of("0.5.16", tmp_path)
    before = snapshot(site)
    assert (
        cli("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM").exit_code == 0
    )
    path = site / MIXTRAL
    text = path.read_bytes()
    assert text.count(b"forward_batch, aux_hidden_states") == 1
    path.write_bytes(text.replace(b"forward_batch, aux_hidden_states", b"forward_batch"))
    code, checked = cli.json("verify", "--target", "sglang", "--site-packages", str(site))
    assert code == 1
    failed = [c["label"] for c in checked["architectures"][0]["checks"] if not c["ok"]]
    assert failed == ["file holds patchkit's bytes", "logits processor's aux argument"]
    edited = snapshot(site)
    code, refused = cli.json("revert", "--target", "sglang", "--site-packages", str(site))
    assert code == 3 and refused["changed"] == [MIXTRAL] and snapshot(site) == edited
    assert cli("revert", "--target", "sglang", "--site-packages", str(site), "--force").exit_code == 0
    assert snapshot(site) == before


@pytest.mark.release
@pytest.mark.parametrize(
    "args, first",
    [
        (("--arch", "MixtralForCausalLMM"), "error: --arch 'MixtralForCausalLMM' is not in SGLang's registry"),
        ((), "error: apply --target sglang needs --arch"),
        (("--arch", "MixtralForCausalLM", "--force"), "error: --target sglang: apply does not take --force"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(args, first, tmp_path, cli):
    site = copy_of("0.5.23", tmp_path)
    before = snapshot(site)
    result = cli("apply", "--target", "sglang", "--site-packages", str(site), *args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith(first) and lines[1].startswith("hint: ") and len(lines) == 2
    assert snapshot(site) == before


@pytest.mark.release
@pytest.mark.parametrize(
    "version, arch, reason",
    [
        (
            "0.5.16",
            "SarvamMLAForCausalLM",
            "the residual statements of SarvamMoEMLADecoderLayer.forward differ from LlamaDecoderLayer.forward's: "
            "the capture would not read the same stream",
        ),
        (
            "0.5.23",
            "Step3p5ForCausalLM",
            "the boundary calls of Step3p5DecoderLayer.forward differ from LlamaDecoderLayer.forward's: "
            "the capture would not read the same stream",
        ),
        (
            "0.5.23",
            "GraniteForCausalLM",
            "GraniteModel loops over range(len(self.layers)) with layers returning (hidden_states, residual), and this "
            "release's llama.py captures at the layer boundary; no native class of the release appends in such a loop "
            "after a layer with the same residual statements (list-append natives read: gemma3_causal.Gemma3TextModel "
            "(Gemma3DecoderLayer)): not invented",
        ),
        (
            "0.5.23",
            "HYV4ForCausalLM",
            "expected exactly 1 top-level 'for i in range(self.start_layer, self.end_layer)' in HYV4Model.forward, "
            "found 0",
        ),
    ],
)
def test_a_refusal_names_what_differs(version, arch, reason, tmp_path, cli):
    site = copy_of(version, tmp_path)
    before = snapshot(site)
    code, report = cli.json("apply", "--target", "sglang", "--site-packages", str(site), "--arch", arch)
    assert code == 3 and [(o["status"], o["reason"]) for o in report["outcomes"]] == [("refused", reason)]
    assert snapshot(site) == before


@pytest.mark.release
def test_the_shared_journal_names_sglang_in_its_hints(tmp_path, cli):
    """The store's messages name the engine the journal is for (they said 'vLLM' for every target)."""
    site = copy_of("0.5.16", tmp_path)
    (site / ".patchkit" / "sglang").mkdir(parents=True)
    (site / ".patchkit" / "sglang" / "journal.json").write_text("{not json")
    before = snapshot(site)
    result = cli("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM")
    assert result.exit_code == 4 and "Traceback" not in result.output
    first, hint = result.stderr.splitlines()
    assert first.startswith("error: cannot read patchkit's journal ") and "/.patchkit/sglang/journal.json" in first
    assert hint == "hint: restore it from a backup, or reinstall SGLang and delete the .patchkit folder"
    assert snapshot(site) == before


@pytest.mark.release
def test_an_interrupted_apply_puts_every_file_back(tmp_path, cli, monkeypatch):
    """SIGINT at the first write into SGLang's files: the journal's put-back leaves every file as it was."""
    import os
    import signal

    from patchkit.store import journal as journal_mod

    real = journal_mod.write_atomic

    def ctrl_c(path, data, *args, **kwargs):
        if path.name.endswith(".py") and ".patchkit" not in path.parts:
            monkeypatch.setattr(journal_mod, "write_atomic", real)
            os.kill(os.getpid(), signal.SIGINT)
        return real(path, data, *args, **kwargs)

    site = copy_of("0.5.23", tmp_path)
    before = snapshot(site)
    monkeypatch.setattr(journal_mod, "write_atomic", ctrl_c)
    stopped = cli("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM")
    assert stopped.exit_code == 130, stopped.output
    assert "every file is as it was before this run" in stopped.stderr and "Traceback" not in stopped.output
    assert snapshot(site) == before
    hint = stopped.stderr.splitlines()[-1]  # the step repeats the target: without it, it would patch vLLM
    assert hint.startswith(
        f"hint: run 'patchkit apply --target sglang --site-packages {site} --arch MixtralForCausalLM'"
    )


@pytest.mark.release
def test_verify_reports_a_patched_file_that_is_gone(tmp_path, cli):
    site = copy_of("0.5.23", tmp_path)
    assert (
        cli("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM").exit_code == 0
    )
    (site / MIXTRAL).unlink()
    code, checked = cli.json("verify", "--target", "sglang", "--site-packages", str(site))
    assert code == 1 and checked["architectures"][0]["checks"] == [
        {
            "label": "file holds patchkit's bytes",
            "ok": False,
            "detail": f"{MIXTRAL} or its class is gone (reinstalled?)",
        }
    ]
