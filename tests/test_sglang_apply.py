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
PATCHED = {
    "0.5.14": "2219b89faabeef9c626ef2164a73c4bcbae2cc246ef9d6ae13aef35e6c153f62",  # list append, as 0.5.16
    "0.5.16": "2219b89faabeef9c626ef2164a73c4bcbae2cc246ef9d6ae13aef35e6c153f62",
    "0.5.23": "55ef869e231bb34ec6281b60d511efcec6eb27e407705c578d0a35b9720aa58b",  # capture boundary
}
"""SHA-256 of ``mixtral.py`` after ``apply --arch MixtralForCausalLM`` on each release (the two diffs were read line by
line when pinned: docs/sglang.md, "apply --target sglang")."""


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
@pytest.mark.parametrize("version", list(PATCHED))
def test_apply_verify_revert_is_byte_exact(version, tmp_path, cli):
    site = copy_of(version, tmp_path)
    before = snapshot(site)
    code, report = cli.json("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM")
    assert code == 0, report
    assert [o["status"] for o in report["outcomes"]] == ["applied"] and report["written"] == [MIXTRAL]
    patched = (site / MIXTRAL).read_bytes()
    assert sha(site / MIXTRAL) == PATCHED[version]
    compile(patched, MIXTRAL, "exec")
    links = chain(patched, "MixtralForCausalLM", (site / LLAMA).read_bytes())
    assert [k.label for k in links if not k.ok] == []
    assert {p for p, h in snapshot(site).items() if before.get(p) != h} == {MIXTRAL, *_state_files(site)}

    code, checked = cli.json("verify", "--target", "sglang", "--site-packages", str(site))
    assert code == 0 and [(v["architecture"], v["state"], v["in_effect"]) for v in checked["architectures"]] == [
        ("MixtralForCausalLM", "patched", True)
    ]

    code, again = cli.json("apply", "--target", "sglang", "--site-packages", str(site), "--arch", "MixtralForCausalLM")
    assert code == 0 and [o["status"] for o in again["outcomes"]] == ["already applied"] and again["written"] == []
    assert (site / MIXTRAL).read_bytes() == patched

    code, reverted = cli.json("revert", "--target", "sglang", "--site-packages", str(site))
    assert code == 0 and reverted["restored"] == [MIXTRAL]
    assert snapshot(site) == before


def _state_files(site: Path) -> set[str]:
    return {p.relative_to(site).as_posix() for p in (site / ".patchkit").rglob("*") if p.is_file()}


@pytest.mark.release
def test_the_unpatched_class_fails_the_same_chain(tmp_path):
    site = pristine_site_packages("0.5.23")
    links = chain((site / MIXTRAL).read_bytes(), "MixtralForCausalLM", (site / LLAMA).read_bytes())
    assert not any(k.ok for k in links)
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
    code, report = cli.json(*args, "--arch", "GraniteForCausalLM")
    assert code == 3
    assert [(o["architecture"], o["status"]) for o in report["outcomes"]] == [
        ("MixtralForCausalLM", "applied"),
        ("GraniteForCausalLM", "refused"),
    ]
    assert report["outcomes"][1]["reason"] == "expected 'self.pp_group = ...' in GraniteForCausalLM.__init__, found 0"
    assert report["written"] == [] and snapshot(site) == before
    code, checked = cli.json(
        "verify", "--target", "sglang", "--site-packages", str(site), "--arch", "GraniteForCausalLM"
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
        (("--arch", "MixtralForCausalLM", "--dry-run"), "error: --target sglang: apply does not take --dry-run"),
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
