"""Journal, atomic writes and all-or-nothing runs, with injected faults, on a real release copy."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from patchkit import api
from patchkit.store import journal as journal_mod
from patchkit.store import lock as lock_mod
from patchkit.errors import StateError
from patchkit.vllm.release.install import from_site_packages
from patchkit.store.journal import Journal

from test_releases import snapshot

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
pytestmark = pytest.mark.release


def test_apply_keeps_file_modes_and_drops_bytecode(release):
    sp = release("0.17.1")
    target = sp / DEEPSEEK
    os.chmod(target, 0o640)
    cache = target.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    pyc = cache / "deepseek_v2.cpython-312.pyc"
    pyc.write_bytes(b"stale")
    other_pyc = cache / "llama.cpython-312.pyc"
    other_pyc.write_bytes(b"keep")

    api.apply(from_site_packages(sp))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not pyc.exists()
    assert other_pyc.exists()

    pyc.write_bytes(b"stale again")
    api.revert(from_site_packages(sp))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not pyc.exists()


def test_hard_linked_file_is_replaced_not_written_through(release, tmp_path):
    sp = release("0.17.1")
    cache_copy = tmp_path / "installer-cache-deepseek_v2.py"
    os.link(sp / DEEPSEEK, cache_copy)
    original = cache_copy.read_bytes()
    api.apply(from_site_packages(sp))
    assert (sp / DEEPSEEK).read_bytes() != original
    assert cache_copy.read_bytes() == original


def fail_third_vllm_write(monkeypatch, error: BaseException):
    """Make the third write of a vLLM file (not patchkit's own state) raise ``error``; return the real writer."""
    real = journal_mod.write_atomic
    calls = {"files": 0}

    def faulty(path: Path, data: bytes, *args, **kwargs) -> None:
        if path.name.endswith(".py") and ".patchkit" not in path.parts:
            calls["files"] += 1
            if calls["files"] == 3:
                raise error
        real(path, data, *args, **kwargs)

    monkeypatch.setattr(journal_mod, "write_atomic", faulty)
    return real


def test_failed_write_puts_every_file_back(release, monkeypatch):
    sp = release("0.17.1")
    before = snapshot(sp)
    real = fail_third_vllm_write(monkeypatch, OSError(28, "No space left on device"))
    with pytest.raises(StateError, match="every file was put back"):
        api.apply(from_site_packages(sp))
    monkeypatch.setattr(journal_mod, "write_atomic", real)
    assert snapshot(sp) == before  # every file back, and no .patchkit folder left behind
    report = api.apply(from_site_packages(sp))  # and the next run works
    assert report.written


def test_run_killed_midway_is_rolled_back_by_the_next_command(release, monkeypatch):
    sp = release("0.17.1")
    before = snapshot(sp)
    real = fail_third_vllm_write(monkeypatch, KeyboardInterrupt())  # the process dies; no cleanup runs
    with pytest.raises(KeyboardInterrupt):
        api.apply(from_site_packages(sp))
    monkeypatch.setattr(journal_mod, "write_atomic", real)
    half = snapshot(sp)
    assert sum(half[p] != before[p] for p in before) == 2  # two files were written, then it died
    assert len(Journal(sp).pending) == 4
    status = api.status(from_site_packages(sp))  # status names the unfinished run
    assert sorted(status.pending) == sorted(Journal(sp).pending[i]["path"] for i in range(4))

    report = api.apply(from_site_packages(sp), dry_run=False)
    assert sorted(report.recovered) == sorted(p for p in before if half[p] != before[p])
    assert report.written
    api.revert(from_site_packages(sp))
    assert snapshot(sp) == before


def test_revert_refuses_a_file_edited_since(release, cli):
    sp = release("0.17.1")
    api.apply(from_site_packages(sp))
    target = sp / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"\n# edited by hand\n")
    patched = snapshot(sp)
    result = cli("revert", "--site-packages", str(sp))
    assert result.exit_code == 3
    assert "edited by hand since patchkit wrote it; not touched" in result.stdout
    assert "nothing was reverted" in result.stdout
    assert snapshot(sp) == patched  # all or nothing: the other three files stay patched too


def test_status_tells_patched_from_reinstalled(release, cli):
    sp = release("0.17.1")
    pristine = (sp / DEEPSEEK).read_bytes()
    api.apply(from_site_packages(sp))
    (sp / DEEPSEEK).write_bytes(pristine)  # what a reinstall of the same version does to this file
    code, status = cli.json("status", "--site-packages", str(sp))
    states = {e["path"]: e["state"] for e in status["entries"]}
    assert states[DEEPSEEK] == "reinstalled"
    assert states["vllm/config/speculative.py"] == "patched"
    code, reverted = cli.json("revert", "--site-packages", str(sp))
    assert code == 0
    assert Journal(sp).entries == {}


def test_second_run_waits_for_the_lock_then_gives_up(release, monkeypatch):
    sp = release("0.17.1")
    monkeypatch.setattr(lock_mod, "LOCK_TIMEOUT_S", 0.2)
    holder = Journal(sp)
    entered, release_it = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.lock():
            entered.set()
            release_it.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    entered.wait(10)
    try:
        with pytest.raises(StateError, match="another patchkit run is changing"):
            api.apply(from_site_packages(sp))
    finally:
        release_it.set()
        t.join()
    assert Journal(sp).entries == {}


def test_read_only_state_folder_is_a_clear_error(release, cli, monkeypatch):
    sp = release("0.17.1")
    before = snapshot(sp)

    real_mkdir = Path.mkdir

    def no_mkdir(self, *a, **k):  # site-packages is read-only; the temporary folder is not
        if ".patchkit" in self.parts:
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", no_mkdir)
    result = cli("apply", "--site-packages", str(sp))
    assert result.exit_code == 4
    assert "cannot create patchkit's state folder" in result.stderr
    monkeypatch.undo()
    assert snapshot(sp) == before


def test_upgrade_since_apply_is_told_apart_and_apply_works_on_the_new_release(release, cli, tmp_path):
    """Patched on 0.16.0, then vLLM upgraded to 0.17.1 in the same site-packages."""
    import shutil

    sp = release("0.16.0")
    code, _ = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    journal_dir = sp / ".patchkit"
    upgraded = release("0.17.1")
    shutil.copytree(journal_dir, upgraded / ".patchkit")  # the journal survives an upgrade
    pristine = snapshot(upgraded)

    code, status = cli.json("status", "--site-packages", str(upgraded))
    assert {e["state"] for e in status["entries"]} == {"upgraded"}
    assert {e["vllm_version"] for e in status["entries"]} == {"0.16.0"}
    code, verified = cli.json("verify", "--site-packages", str(upgraded))
    assert code == 1
    journal_check = next(c for c in verified["checks"] if c["label"] == "patchkit journal")
    assert "vLLM was upgraded to another version since" in journal_check["detail"]

    code, applied = cli.json("apply", "--site-packages", str(upgraded))
    assert code == 0 and applied["written"], applied
    code, status = cli.json("status", "--site-packages", str(upgraded))
    assert {(e["state"], e["vllm_version"]) for e in status["entries"]} == {("patched", "0.17.1")}
    code, _ = cli.json("revert", "--site-packages", str(upgraded))
    assert code == 0
    assert {k: v for k, v in snapshot(upgraded).items() if not k.startswith(".patchkit/")} == {
        k: v for k, v in pristine.items() if not k.startswith(".patchkit/")
    }


def test_revert_force_writes_originals_over_a_hand_edit(release, cli):
    sp = release("0.17.1")
    before = snapshot(sp)
    api.apply(from_site_packages(sp))
    target = sp / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"# hand edit\n")
    code, status = cli.json("status", "--site-packages", str(sp))
    assert {e["path"]: e["state"] for e in status["entries"]}[DEEPSEEK] == "edited"
    assert cli("revert", "--site-packages", str(sp)).exit_code == 3
    result = cli("revert", "--site-packages", str(sp), "--force")
    assert result.exit_code == 0
    assert "original bytes restored (--force; the file was edited)" in result.stdout
    assert snapshot(sp) == before
