"""Kill a real ``revert --arch`` (a partial revert: some files restored, one rewritten) at every
write step in turn, with SIGKILL and SIGINT.

After each kill: ``status`` names the unfinished revert (SIGKILL) or the run put every file back
itself (SIGINT); then ``revert --arch`` again finishes the job, leaving exactly the bytes an
uninterrupted run leaves. ``tests/kill_wrapper.py`` does the killing (see its docstring).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.release
WRAPPER = Path(__file__).with_name("kill_wrapper.py")
KIMI, GLM = "KimiK25ForConditionalGeneration", "Glm4MoeForCausalLM"
FILES = [
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
    "vllm/model_executor/models/glm4_moe.py",
]


def watched(sp: Path) -> dict[str, bytes]:
    """The files both runs touch, temporary files beside them, and .patchkit (timestamps masked)."""
    out: dict[str, bytes] = {}
    for folder in sorted({(sp / f).parent for f in FILES}):
        for p in folder.iterdir():
            if p.is_file() and (p.name.endswith(".patchkit-tmp") or p.relative_to(sp).as_posix() in FILES):
                out[p.relative_to(sp).as_posix()] = p.read_bytes()
    for p in sorted((sp / ".patchkit").rglob("*")) if (sp / ".patchkit").exists() else ():
        data = p.read_bytes() if p.is_file() else b""
        out[p.relative_to(sp).as_posix()] = re.sub(rb'"applied_at": "[^"]*"', b"", data)
    return out


def put_back(sp: Path, saved: dict[str, bytes], raw: dict[str, bytes]) -> None:
    for rel in watched(sp):
        if rel.endswith(".patchkit-tmp"):
            (sp / rel).unlink()
    shutil.rmtree(sp / ".patchkit", ignore_errors=True)
    for rel, data in raw.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        if not rel.endswith("/"):
            (sp / rel).write_bytes(data)
    assert watched(sp) == saved


def raw_state(sp: Path) -> dict[str, bytes]:
    out = {f: (sp / f).read_bytes() for f in FILES}
    for p in sorted((sp / ".patchkit").rglob("*")):
        out[p.relative_to(sp).as_posix() + ("/" if p.is_dir() else "")] = p.read_bytes() if p.is_file() else b""
    return out


def cli(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "patchkit", *args, "--json"], capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_kill_at_every_write_step_of_revert_arch(release, tmp_path, signum):
    sp = release("0.17.1")
    spa = ["--site-packages", str(sp)]
    assert cli("apply", *spa)[0] == 0
    assert cli("apply", "--arch", GLM, *spa)[0] == 0
    before, before_raw = watched(sp), raw_state(sp)
    code, done = cli("revert", "--arch", KIMI, *spa)
    assert code == 0 and {f["action"] for f in done["files"]} == {"restored", "kept"}  # kept: named, not written
    after = watched(sp)
    put_back(sp, before, before_raw)

    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(WRAPPER), str(signum), str(out), "revert", "--arch", KIMI, *spa],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    steps = 0
    for line in proc.stdout:
        info = json.loads(line)
        if not info["reached"]:
            assert watched(sp) == after
            proc.stdin.write("\n")
            proc.stdin.flush()
            break
        steps = info["step"]
        err = " ".join((out / f"{steps}.err").read_text().split())
        code, status = cli("status", *spa)
        assert code == 0
        if signum == signal.SIGKILL:
            assert os.WIFSIGNALED(info["status"])
        else:
            assert os.WEXITSTATUS(info["status"]) == 130, err
            assert "interrupted by SIGINT" in err
            if "after the run had finished" not in err:
                assert watched(sp) == before, steps  # put back in-process
        unfinished = status["unfinished"]
        if unfinished is not None and unfinished["files"]:
            assert unfinished["operation"] == "revert"
        code, again = cli("revert", "--arch", KIMI, *spa)
        if watched(sp) != after:
            pytest.fail(f"step {steps}: revert --arch again left other bytes ({code}: {again})")
        code, verified = cli("verify", "--arch", "DeepseekV3ForCausalLM", "--arch", GLM, *spa)
        assert code == 0, verified
        put_back(sp, before, before_raw)
        proc.stdin.write("\n")
        proc.stdin.flush()
    proc.wait(timeout=60)
    assert steps >= 5  # the run has several write steps, each was killed
