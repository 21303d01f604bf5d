"""Drift against RECORD, byte preservation, the pre-write verify gate, and staying fast."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patchkit import api
from patchkit.vllm.release.install import from_site_packages
from patchkit.results import Check

from test_releases import snapshot

pytestmark = pytest.mark.release
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


def test_file_changed_by_someone_else_is_refused_unless_forced(release, cli):
    sp = release("0.17.1")
    target = sp / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"# local tweak\n")
    before = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 3
    reasons = {p["id"]: p["reason"] for p in applied["patches"] if p["outcome"] == "refused"}
    assert set(reasons) == {"eagle3-deepseek-backbone", "eagle3-deepseek-interface"}
    assert f"{DEEPSEEK} differs from what vllm 0.17.1's RECORD lists" in reasons["eagle3-deepseek-backbone"]
    others = {p["id"]: p["outcome"] for p in applied["patches"] if p["id"] not in reasons}
    assert set(others.values()) == {"not written"}, others
    assert snapshot(sp) == before
    code, applied = cli.json("apply", "--site-packages", str(sp), "--force")
    assert code == 0 and applied["written"]
    assert target.read_bytes().endswith(b"# local tweak\n")
    cli.json("revert", "--site-packages", str(sp))
    assert snapshot(sp) == before


def test_crlf_file_keeps_its_line_endings(release, cli):
    sp = release("0.17.1")
    spec = sp / "vllm/config/speculative.py"
    crlf = spec.read_bytes().replace(b"\n", b"\r\n")
    spec.write_bytes(crlf)
    code, applied = cli.json("apply", "--site-packages", str(sp), "--force")
    assert code == 0
    patched = spec.read_bytes()
    assert b'"kimi_k2",\r\n' in patched
    assert patched.count(b"\n") == patched.count(b"\r\n")  # no bare LF anywhere
    cli.json("revert", "--site-packages", str(sp))
    assert spec.read_bytes() == crlf


def test_full_run_is_refused_when_the_patched_result_would_not_verify(release, monkeypatch):
    """The gate between planning and writing: a failing chain check stops the write."""
    sp = release("0.17.1")
    before = snapshot(sp)
    import patchkit.api as api_mod

    real = api_mod.run_checks

    def broken(*args, **kwargs):
        checks = real(*args, **kwargs)
        return checks + [Check("injected", False, "a link the chain check would miss")]

    monkeypatch.setattr(api_mod, "run_checks", broken)
    report = api.apply(from_site_packages(sp))
    assert report.refused and not report.written
    assert all(
        "would not pass verify (injected: a link the chain check would miss)" in p.reason for p in report.patches
    )
    assert snapshot(sp) == before


def test_read_only_commands_do_not_import_libcst_vllm_or_torch():
    code = (
        "import sys, patchkit.ui.cli, patchkit.api, patchkit.checks.verify, patchkit.checks.runtime, "
        "patchkit.checks.doctor;"
        "bad = [m for m in ('libcst', 'vllm', 'torch') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
