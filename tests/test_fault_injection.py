"""Kill a real run of apply and of revert at every write step in turn, then ask every command.

For each write step N of the run (``tests/kill_wrapper.py`` counts them: every mkdir, file
creation, rename, unlink and rmdir), a copy of the run is sent SIGKILL (or SIGINT) just before
its N-th write. Then, on the install as the kill left it, ``status``, ``verify``, ``apply
--dry-run``, ``apply`` and ``revert`` run, and the test asserts what each says and the bytes on
disk. To stay fast (well under two minutes), commands do not run twice on the same state: after
a step that left exactly the bytes of a state already checked (every file patchkit could touch,
its temporary files and ``.patchkit/``, timestamps aside), the check of that state stands; and
``apply --dry-run`` and ``apply`` run once per distinct state of the four files and the journal.
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

TMP_SUFFIX = ".patchkit-tmp"  # patchkit.store.journal.TMP_SUFFIX, spelled out so the test runs against any version

pytestmark = pytest.mark.release
WRAPPER = Path(__file__).with_name("kill_wrapper.py")
FILES = [
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
]


def watched(sp: Path) -> dict[str, bytes]:
    """The four target files, everything beside them that patchkit could leave, and all of .patchkit."""
    out: dict[str, bytes] = {}
    for folder in sorted({(sp / f).parent for f in FILES}):
        for p in folder.iterdir():
            if p.is_file() and (p.name.endswith(TMP_SUFFIX) or p.relative_to(sp).as_posix() in FILES):
                out[p.relative_to(sp).as_posix()] = p.read_bytes()
    state = sp / ".patchkit"
    if state.exists():
        for p in sorted(state.rglob("*")):
            out[p.relative_to(sp).as_posix() + ("/" if p.is_dir() else "")] = p.read_bytes() if p.is_file() else b""
    return out


def norm(state: dict[str, bytes]) -> dict[str, bytes]:
    """``watched`` with the journal's timestamps masked (a later run writes its own)."""
    return {k: re.sub(rb'"applied_at": "[^"]*"', b"", v) if k.endswith("journal.json") else v for k, v in state.items()}


def put_back(sp: Path, saved: dict[str, bytes]) -> None:
    """Make the watched part of ``sp`` exactly ``saved`` again."""
    for rel in watched(sp):
        if rel.endswith(TMP_SUFFIX):
            (sp / rel).unlink()
    shutil.rmtree(sp / ".patchkit", ignore_errors=True)
    for rel, data in saved.items():
        if rel.endswith("/"):
            (sp / rel).mkdir(parents=True, exist_ok=True)
        else:
            (sp / rel).parent.mkdir(parents=True, exist_ok=True)
            (sp / rel).write_bytes(data)


def state_key(sp: Path) -> tuple:
    journal = sp / ".patchkit/vllm/journal.json"
    text = re.sub(r'"applied_at": "[^"]*"', "", journal.read_text()) if journal.exists() else None
    return tuple((sp / f).read_bytes() for f in FILES), text


def run(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "patchkit", *args, "--json"], capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


class Checker:
    """Runs every command on the install as a kill left it, and checks what they say and the bytes."""

    def __init__(self, cli, sp: Path, pristine: dict[str, bytes], patched: dict[str, bytes]) -> None:
        self.cli, self.sp, self.pristine, self.patched = cli, sp, pristine, patched
        self.seen: set[tuple] = set()
        self.seen_states: set[tuple] = set()
        self.full_checks = 0
        self.checks = 0

    def files(self) -> dict[str, bytes]:
        return {f: (self.sp / f).read_bytes() for f in FILES}

    def check(self, operation: str) -> None:
        exact = tuple(sorted(norm(watched(self.sp)).items()))
        if exact in self.seen_states:
            return
        self.seen_states.add(exact)
        self.checks += 1
        sp = ["--site-packages", str(self.sp)]
        disk = self.files()
        journal_file = self.sp / ".patchkit/vllm/journal.json"
        journal = json.loads(journal_file.read_text()) if journal_file.exists() else {"entries": [], "pending": []}
        pending = journal["pending"]
        before_map = self.pristine if operation == "apply" else self.patched
        after_map = self.patched if operation == "apply" else self.pristine
        written = sorted(f for f in FILES if disk[f] == after_map[f] and pending)

        code, status = self.cli.json("status", *sp)
        assert code == 0
        unfinished = status["unfinished"]
        if pending:
            assert unfinished["operation"] == operation
            assert sorted(unfinished["to_roll_back"]) == written
            assert {f["path"]: f["state"] for f in unfinished["files"]} == {
                f: "written" if f in written else "not reached" for f in FILES
            }
            for f in FILES:  # a file not written yet still has its bytes from before the run
                assert disk[f] in (before_map[f], after_map[f])
        else:
            assert unfinished is None or not unfinished["files"], unfinished
            assert {e["state"] for e in status["entries"]} <= {"patched"}
            assert disk == (self.patched if status["entries"] else self.pristine)

        code, verified = self.cli.json("verify", *sp)
        labels = {c["label"]: c for c in verified["checks"]}
        if pending:
            assert code == 1 and labels["no unfinished patchkit run"]["ok"] is False
            assert all(f in labels["no unfinished patchkit run"]["detail"] for f in written)
        else:
            assert "no unfinished patchkit run" not in labels or labels["no unfinished patchkit run"]["ok"] is None
            assert code == (0 if status["entries"] else 1)

        key = state_key(self.sp)
        if key not in self.seen:
            self.seen.add(key)
            self.full_checks += 1
            code, dry = self.cli.json("apply", *sp, "--dry-run")
            assert code == 0, dry
            assert sorted(dry["recovered"]) == written
            code, applied = self.cli.json("apply", *sp)
            assert code == 0, applied
            assert sorted(applied["recovered"]) == written
            # the dry run planned exactly what the real run did, rollback included
            assert [(p["id"], p["outcome"]) for p in dry["patches"]] == [
                (p["id"], p["outcome"]) for p in applied["patches"]
            ]
            assert dry["files"] == applied["files"]
            assert self.files() == self.patched
            leftovers = [r for r in watched(self.sp) if r.endswith(TMP_SUFFIX)]
            assert leftovers == []
        code, reverted = self.cli.json("revert", *sp)
        assert code == 0, reverted
        assert watched(self.sp) == self.pristine_watched, "revert leaves exactly the original bytes and no .patchkit"


def drive(
    checker: Checker,
    sp: Path,
    tmp: Path,
    signum: int,
    operation: str,
    before: dict[str, bytes],
    after: dict[str, bytes],
) -> int:
    """Run ``operation`` under the wrapper with ``signum``; check after every step; return the step count."""
    out = tmp / f"{operation}-{signum}"
    out.mkdir()
    put_back(sp, before)
    proc = subprocess.Popen(
        [sys.executable, str(WRAPPER), str(signum), str(out), operation, "--site-packages", str(sp)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    steps = 0
    for line in proc.stdout:
        info = json.loads(line)
        n, status = info["step"], info["status"]
        if not info["reached"]:
            # the run finished before its n-th write: it ran to the end, as an uninterrupted run does
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (out / f"{n}.err").read_text()
            assert norm(watched(sp)) == norm(after)
            proc.stdin.write("\n")
            proc.stdin.flush()
            break
        steps = n
        err = " ".join((out / f"{n}.err").read_text().split())
        if signum == signal.SIGKILL:
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        else:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 128 + signum, (n, status, err)
            assert f"interrupted by {'SIGINT (Ctrl-C)' if signum == signal.SIGINT else 'SIGTERM'}" in err, err
            now = norm(watched(sp))
            if "after the run had finished" in err:
                assert now == norm(after), n
            else:  # put back in-process: exactly as before the run, no leftovers
                assert "every file is as it was before this run" in err, err
                assert now == norm(before), n
        checker.check(operation)
        put_back(sp, before)
        proc.stdin.write("\n")
        proc.stdin.flush()
    proc.wait(timeout=60)
    return steps


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_kill_at_every_write_step_of_apply_and_revert(release, cli, tmp_path, signum):
    sp = release("0.17.1")
    pristine_watched = watched(sp)
    pristine = {f: (sp / f).read_bytes() for f in FILES}
    code, _ = run("apply", "--site-packages", str(sp))
    assert code == 0
    applied_watched = watched(sp)
    patched = {f: (sp / f).read_bytes() for f in FILES}
    checker = Checker(cli, sp, pristine, patched)
    checker.pristine_watched = pristine_watched

    apply_steps = drive(checker, sp, tmp_path, signum, "apply", pristine_watched, applied_watched)
    put_back(sp, applied_watched)
    revert_steps = drive(checker, sp, tmp_path, signum, "revert", applied_watched, pristine_watched)
    # every step of both runs was reached: 4 files, their stored copies and the journal
    assert apply_steps >= 10 and revert_steps >= 10, (apply_steps, revert_steps)
    assert checker.full_checks >= (2 if signum == signal.SIGINT else 8)
    assert checker.checks >= (2 if signum == signal.SIGINT else (apply_steps + revert_steps) // 2)
