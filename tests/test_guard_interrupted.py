"""SIGINT at every write step of a real ``apply --guard`` and of the ``revert`` that removes the guard.

The guard (:mod:`patchkit.guard.guard`) has its own journal, committed after the vLLM files' one: a
signal during the guard's step finds the vLLM files committed already. Whatever the step, the
run's message must be true of the install as it stands: "every file is as it was before this
run" only when it is, and otherwise the command its hint names finishes the job, leaving exactly
what an uninterrupted run leaves. ``tests/kill_wrapper.py`` does the interrupting (see its docstring).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.release
WRAPPER = Path(__file__).with_name("kill_wrapper.py")
OLMOE = "OlmoeForCausalLM"
GUARD_DIRS = ("patchkit_guard", "patchkit_guard-0.1.0.dist-info")
UNTOUCHED = "every file is as it was before this run"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True)


def snapshot(sp: Path, files: list[str], mask: bool = True) -> dict[str, bytes]:
    """The vLLM files, temporary files beside them, the guard's folders and .patchkit (timestamps masked)."""
    out: dict[str, bytes] = {}
    for folder in sorted({(sp / f).parent for f in files}):
        for p in folder.iterdir():
            if p.is_file() and (p.name.endswith(".patchkit-tmp") or p.relative_to(sp).as_posix() in files):
                out[p.relative_to(sp).as_posix()] = p.read_bytes()
    for top in (".patchkit", *GUARD_DIRS):
        for p in sorted((sp / top).rglob("*")) if (sp / top).exists() else ():
            rel = p.relative_to(sp).as_posix() + ("" if p.is_file() else "/")
            data = p.read_bytes() if p.is_file() else b""
            out[rel] = re.sub(rb'"applied_at": "[^"]*"', b"", data) if mask else data
    return out


def put_back(sp: Path, files: list[str], raw: dict[str, bytes]) -> None:
    """Make the install hold ``raw`` (an unmasked :func:`snapshot`) again."""
    for rel in snapshot(sp, files):
        if rel.endswith(".patchkit-tmp"):
            (sp / rel).unlink()
    for top in (".patchkit", *GUARD_DIRS):
        shutil.rmtree(sp / top, ignore_errors=True)
    for rel, data in raw.items():
        if rel.endswith("/"):
            (sp / rel).mkdir(parents=True, exist_ok=True)
            continue
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_bytes(data)


def suggested(err: str) -> list[str]:
    """The patchkit command the error's hint names (``run 'patchkit ...'``), as arguments."""
    found = re.search(r"run '(patchkit [^']+)'", err.split("hint:", 1)[-1])
    assert found, err
    return shlex.split(found.group(1))[1:]


def interrupt_every_step(
    sp: Path, tmp_path: Path, args: list[str], files: list[str], before_raw: dict[str, bytes], after: dict[str, bytes]
) -> tuple[int, set[str]]:
    """SIGINT each write step of ``patchkit ARGS`` in turn; check the message against the install.

    Returns the number of steps interrupted, and the hint commands followed (the steps after
    which the install was neither as before nor as after the run).
    """
    before = snapshot(sp, files)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(WRAPPER), str(int(signal.SIGINT)), str(out), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    steps, followed = 0, set()
    try:
        for line in proc.stdout:
            info = json.loads(line)
            if not info["reached"]:
                assert snapshot(sp, files) == after
                proc.stdin.write("\n")
                proc.stdin.flush()
                break
            steps = info["step"]
            err = " ".join((out / f"{steps}.err").read_text().split())
            assert os.WEXITSTATUS(info["status"]) == 130, err
            assert "interrupted by SIGINT" in err, err
            now = snapshot(sp, files)
            if "after the run had finished" in err:
                assert now == after, (steps, err)
            elif now != before:
                # something of the run stands: the message must not say otherwise, and must name
                # the command that finishes the job
                assert UNTOUCHED not in err, (steps, err)
                assert "guard" in err, (steps, err)
                again = suggested(err)
                followed.add(" ".join(a for a in again if a != str(sp)))
                done = cli(*again)
                assert done.returncode == 0, (steps, err, done.stdout, done.stderr)
                assert snapshot(sp, files) == after, (steps, err, again)
            else:  # put back: the hint repeats the run, every option given included
                again = suggested(err)
                assert all(a in again for a in args), (steps, err)
                if args[0] == "apply" and not followed:
                    followed.add("again")
                    done = cli(*again)
                    assert done.returncode == 0 and snapshot(sp, files) == after, (steps, err, done.stderr)
            put_back(sp, files, before_raw)
            assert snapshot(sp, files) == before
            proc.stdin.write("\n")
            proc.stdin.flush()
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
    return steps, followed


def test_sigint_at_every_write_step_of_apply_guard_says_what_stands(release, tmp_path):
    sp = release("0.33.0")
    spa = ["--site-packages", str(sp)]
    args = ["apply", *spa, "--arch", OLMOE, "--guard"]
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    files = [f["path"] for f in json.loads(done.stdout)["files"]]
    after = snapshot(sp, files)
    assert any(k.startswith("patchkit_guard/") for k in after)
    assert cli("revert", *spa).returncode == 0
    before_raw = snapshot(sp, files, mask=False)
    assert not any(k.startswith((".patchkit", "patchkit_guard")) for k in before_raw)

    steps, followed = interrupt_every_step(sp, tmp_path, args, files, before_raw, after)
    assert steps >= 10  # the vLLM files' and the guard's files' steps were each interrupted
    # a signal in the guard's step left the patches applied: its hint installs the guard
    assert "guard install --site-packages" in followed and "again" in followed


def test_sigint_at_every_write_step_of_revert_says_what_stands(release, tmp_path):
    sp = release("0.33.0")
    spa = ["--site-packages", str(sp)]
    done = cli("apply", *spa, "--arch", OLMOE, "--guard", "--json")
    assert done.returncode == 0, done.stderr
    files = [f["path"] for f in json.loads(done.stdout)["files"]]
    before_raw = snapshot(sp, files, mask=False)
    assert cli("revert", *spa).returncode == 0
    after = snapshot(sp, files)
    assert not any(k.startswith((".patchkit", "patchkit_guard")) for k in after)
    put_back(sp, files, before_raw)

    steps, followed = interrupt_every_step(sp, tmp_path, ["revert", *spa], files, before_raw, after)
    assert steps >= 10
    # a signal while the guard was removed left the vLLM files reverted: its hint removes the guard
    assert "guard remove --site-packages" in followed


def test_the_guards_apply_command_names_every_path_absolute(release, tmp_path):
    """``apply --model models/olmoe --guard`` run in one folder: the manifest's command works from any folder."""
    sp = release("0.33.0")
    work = tmp_path / "work"
    (work / "models" / "olmoe").mkdir(parents=True)
    (work / "models" / "olmoe" / "config.json").write_text(
        json.dumps({"architectures": [OLMOE], "model_type": "olmoe"})
    )
    rel_sp = os.path.relpath(sp, work)
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--site-packages", rel_sp, "--model", "models/olmoe", "--guard"],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((sp / "patchkit_guard" / "manifest.json").read_text())
    stored = shlex.split(data["apply"])
    assert stored[stored.index("--model") + 1] == str(work / "models" / "olmoe")
    assert stored[stored.index("--site-packages") + 1] == str(sp)
    assert data["model"] == str(work / "models" / "olmoe")
    # from the server's working folder (another one), the stored command acts on the same install and model
    again = subprocess.run(
        [sys.executable, "-m", "patchkit", *stored[1:], "--json"], capture_output=True, text=True, cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["written"] is False  # already applied: nothing to write


def test_sigint_at_every_write_step_of_revert_arch_says_the_guard_was_not_refreshed(release, tmp_path):
    """A partial revert keeps the guard and rewrites its manifest: interrupted there, the hint refreshes it."""
    sp = release("0.33.0")
    spa = ["--site-packages", str(sp)]
    done = cli("apply", *spa, "--arch", OLMOE, "--guard", "--json")
    assert done.returncode == 0, done.stderr
    files = [f["path"] for f in json.loads(done.stdout)["files"]]
    done = cli("apply", *spa, "--arch", "Gemma3ForCausalLM", "--json")
    assert done.returncode == 0, done.stderr
    files += [f["path"] for f in json.loads(done.stdout)["files"] if f["path"] not in files]
    before_raw = snapshot(sp, files, mask=False)
    args = ["revert", *spa, "--arch", "Gemma3ForCausalLM"]
    assert cli(*args).returncode == 0
    after = snapshot(sp, files)
    assert "vllm/model_executor/models/gemma3.py" not in json.loads(after["patchkit_guard/manifest.json"])["files"]
    put_back(sp, files, before_raw)

    steps, followed = interrupt_every_step(sp, tmp_path, args, files, before_raw, after)
    assert steps >= 5
    assert "guard install --site-packages" in followed
