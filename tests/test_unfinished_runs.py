"""An apply or revert that stopped midway: what every command says, signals, and what is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.store import journal as journal_mod
from patchkit.errors import Interrupted, StateError
from patchkit.vllm.release.install import from_site_packages

from test_journal import fail_third_vllm_write
from test_releases import snapshot

pytestmark = pytest.mark.release
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61},
}
DEEPSEEK_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
}


def killed_apply(sp: Path, monkeypatch) -> dict[str, str]:
    """An apply that died after writing two of its four files (no cleanup ran); returns the pristine snapshot."""
    before = snapshot(sp)
    real = fail_third_vllm_write(monkeypatch, KeyboardInterrupt())  # the process dies; no cleanup runs
    with pytest.raises(KeyboardInterrupt):
        api.apply(from_site_packages(sp))
    monkeypatch.setattr(journal_mod, "write_atomic", real)
    return before


def test_every_command_reports_a_killed_apply(release, cli, monkeypatch, tmp_path):
    sp = release("0.17.1")
    before = killed_apply(sp, monkeypatch)
    half = snapshot(sp)
    written = sorted(p for p in before if half[p] != before[p])
    assert len(written) == 2
    opts = ["--site-packages", str(sp)]

    code, status = cli.json("status", *opts)
    assert status["unfinished"]["operation"] == "apply"
    assert sorted(status["unfinished"]["to_roll_back"]) == written
    assert {f["state"] for f in status["unfinished"]["files"]} == {"written", "not reached"}
    text = cli("status", *opts).stdout
    assert "an earlier 'patchkit apply' stopped while writing" in " ".join(text.split())

    code, verified = cli.json("verify", *opts)
    assert code == 1
    check = next(c for c in verified["checks"] if c["label"] == "no unfinished patchkit run")
    assert check["ok"] is False and all(p in check["detail"] for p in written)

    # the dry run plans from the files as the rollback will leave them: no "hand edit?", exit 0
    code, dry = cli.json("apply", *opts, "--dry-run")
    assert code == 0, dry
    assert sorted(dry["recovered"]) == written
    assert {p["outcome"] for p in dry["patches"]} == {"applied"}
    assert snapshot(sp) == half  # and wrote nothing

    # doctor, for either model, is not ready until the run is finished
    for name, config in (("kimi", KIMI_CONFIG), ("deepseek", DEEPSEEK_CONFIG)):
        model = tmp_path / name
        model.mkdir()
        (model / "config.json").write_text(json.dumps(config))
        code, doc = cli.json("doctor", "--model", str(model), *opts)
        assert code == 1 and not doc["ready"], (name, doc)
        assert any(c["label"] == "no unfinished patchkit run" and c["ok"] is False for c in doc["checks"])

    code, applied = cli.json("apply", *opts)
    assert code == 0 and applied["written"]
    assert sorted(applied["recovered"]) == written
    assert [p["outcome"] for p in applied["patches"]] == [p["outcome"] for p in dry["patches"]]
    assert applied["files"] == dry["files"]  # the dry run planned exactly this
    code, _ = cli.json("revert", *opts)
    assert code == 0
    assert snapshot(sp) == before


def test_a_killed_revert_keeps_a_pending_record_and_is_put_back(release, cli, monkeypatch):
    sp = release("0.17.1")
    before = snapshot(sp)
    api.apply(from_site_packages(sp))
    patched = snapshot(sp)
    real = fail_third_vllm_write(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        api.revert(from_site_packages(sp))
    monkeypatch.setattr(journal_mod, "write_atomic", real)
    half = snapshot(sp)
    reverted = sorted(p for p in before if not p.startswith(".patchkit") and half[p] == before[p] != patched[p])
    assert len(reverted) == 2

    code, status = cli.json("status", "--site-packages", str(sp))
    assert status["unfinished"]["operation"] == "revert"
    assert sorted(status["unfinished"]["to_roll_back"]) == reverted
    assert "reinstalled" not in {e["state"] for e in status["entries"]}  # it is not a reinstall
    code, dry = cli.json("apply", "--site-packages", str(sp), "--dry-run")
    assert code == 0 and sorted(dry["recovered"]) == reverted
    assert {p["outcome"] for p in dry["patches"]} == {"already applied"}
    code, reverted_now = cli.json("revert", "--site-packages", str(sp))
    assert code == 0
    assert snapshot(sp) == before  # rolled back to patched, then reverted: original bytes, no .patchkit


def _run_with_signal_at_write(sp: Path, signum: int, command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``patchkit COMMAND`` in a subprocess that receives ``signum`` at its third file rename."""
    script = tmp_path / "send_signal.py"
    script.write_text(
        "import os, sys\n"
        "real = os.replace\n"
        "n = [0]\n"
        "def replace(a, b):\n"
        "    if str(b).endswith('.py'):\n"
        "        n[0] += 1\n"
        f"        if n[0] == 3: os.kill(os.getpid(), {int(signum)})\n"
        "    return real(a, b)\n"
        "os.replace = replace\n"
        "from patchkit.ui.cli import main\n"
        f"sys.argv = ['patchkit', {command!r}, '--site-packages', {str(sp)!r}]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True)


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_apply_puts_every_file_back_and_says_so(release, tmp_path, signum, code):
    sp = release("0.17.1")
    before = snapshot(sp)
    proc = _run_with_signal_at_write(sp, signum, "apply", tmp_path)
    assert proc.returncode == code, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "during apply: put back" in message and "every file is as it was before this run" in message
    assert "Traceback" not in proc.stderr
    assert snapshot(sp) == before  # no file changed, no .patchkit, no temporary file


def test_a_signal_during_revert_puts_every_file_back(release, tmp_path):
    sp = release("0.17.1")
    api.apply(from_site_packages(sp))
    patched = {k: v for k, v in snapshot(sp).items() if not k.startswith(".patchkit/")}
    proc = _run_with_signal_at_write(sp, signal.SIGINT, "revert", tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert "during revert: put back" in " ".join(proc.stderr.split())
    assert {k: v for k, v in snapshot(sp).items() if not k.startswith(".patchkit/")} == patched
    assert api.status(from_site_packages(sp)).unfinished is None


@pytest.mark.parametrize("dry", [False, True], ids=["apply", "dry-run"])
def test_ctrl_c_while_planning_writes_nothing_and_says_so(release, tmp_path, dry):
    sp = release("0.17.1")
    before = snapshot(sp)
    script = tmp_path / "ctrl_c_while_planning.py"
    script.write_text(
        "import os, signal, sys\n"
        # Ctrl-C at a terminal: Python's own handler. A test runner started in the background by a
        # shell without job control inherits SIGINT ignored, and Python then keeps ignoring it.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import patchkit.plan.engine as engine\n"
        "real = engine.plan\n"
        "def plan(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*a, **k)\n"
        "engine.plan = plan\n"
        "from patchkit.ui.cli import main\n"
        f"sys.argv = ['patchkit', 'apply', '--site-packages', {str(sp)!r}] + {['--dry-run'] if dry else []!r}\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 130, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr
    assert message.startswith("error: interrupted by SIGINT (Ctrl-C) ") and "interrupted: interrupted" not in message
    if dry:  # one wording for one Ctrl-C (issue 32): it read "interrupted: interrupted by SIGINT before ..."
        assert (
            "error: interrupted by SIGINT (Ctrl-C) before anything was written hint: run the command again" in message
        )
    else:
        assert "interrupted by SIGINT (Ctrl-C) during apply: every file is as it was before this run" in message
    assert snapshot(sp) == before


def test_stale_temporary_files_are_removed_by_the_next_run(release, cli):
    sp = release("0.17.1")
    before = snapshot(sp)
    api.apply(from_site_packages(sp))
    stale_beside = sp / "vllm/model_executor/models/.deepseek_v2.py.abc123.patchkit-tmp"
    stale_state = sp / ".patchkit/vllm/.journal.json.xyz.patchkit-tmp"
    stale_beside.write_bytes(b"half a file")
    stale_state.write_bytes(b"half a journal")
    code, status = cli.json("status", "--site-packages", str(sp))
    assert sorted(status["unfinished"]["leftovers"]) == sorted(
        p.relative_to(sp).as_posix() for p in (stale_beside, stale_state)
    )
    code, _ = cli.json("revert", "--site-packages", str(sp))
    assert code == 0
    assert snapshot(sp) == before  # a full revert leaves no .patchkit and no temporary file


def test_a_failed_first_run_leaves_nothing(release, monkeypatch):
    sp = release("0.17.1")
    before = snapshot(sp)
    real = journal_mod.write_atomic
    calls = {"n": 0}

    def disk_full_at_second_copy(path, data, *args, **kwargs):
        if ".patchkit" in path.parts:  # from the second stored copy on, the disk stays full
            calls["n"] += 1
            if calls["n"] >= 2:
                raise OSError(28, "No space left on device", str(path))
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(journal_mod, "write_atomic", disk_full_at_second_copy)
    with pytest.raises(StateError, match="No space left on device"):
        api.apply(from_site_packages(sp))
    assert snapshot(sp) == before
    assert not (sp / ".patchkit").exists()  # not even an empty originals/


def test_status_names_an_orphaned_journal(release, cli):
    import shutil

    sp = release("0.17.1")
    api.apply(from_site_packages(sp))
    shutil.rmtree(sp / "vllm")  # pip uninstall vllm: the package and its metadata go, .patchkit stays
    shutil.rmtree(sp / "vllm-0.17.1.dist-info")
    result = cli("status", "--site-packages", str(sp))
    assert result.exit_code == 4
    message = " ".join(result.stderr.split())
    assert f"patchkit's journal {sp / '.patchkit' / 'vllm'} is still there" in message
    assert f"rm -r {sp / '.patchkit'}" in message


def test_a_signal_whose_rollback_fails_names_the_files_and_the_command_that_finishes(release, cli, monkeypatch):
    sp = release("0.17.1")
    before = snapshot(sp)
    real = journal_mod.write_atomic
    calls = {"n": 0}

    def signal_then_fail(path, data, *args, **kwargs):
        if path.name.endswith(".py") and ".patchkit" not in path.parts:
            calls["n"] += 1
            if calls["n"] == 2:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the second file is written
            elif calls["n"] > 2:
                raise PermissionError(13, "Permission denied", str(path))  # and the put-back fails
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(journal_mod, "write_atomic", signal_then_fail)
    with pytest.raises(Interrupted) as caught:
        api.apply(from_site_packages(sp))
    assert caught.value.exit_code == 130
    assert (
        "wrote vllm/config/speculative.py, vllm/model_executor/models/deepseek_v2.py and could not put every file back"
        in caught.value.message
    )
    assert "run 'patchkit revert' (it puts them back first" in caught.value.hint_for()
    monkeypatch.setattr(journal_mod, "write_atomic", real)
    code, status = cli.json("status", "--site-packages", str(sp))
    assert sorted(status["unfinished"]["to_roll_back"]) == [
        "vllm/config/speculative.py",
        "vllm/model_executor/models/deepseek_v2.py",
    ]
    code, reverted = cli.json("revert", "--site-packages", str(sp))
    assert code == 0
    assert snapshot(sp) == before


def test_ctrl_c_while_waiting_for_the_lock(release):
    import threading

    sp = release("0.17.1")
    before = snapshot(sp)
    entered, done = threading.Event(), threading.Event()

    def hold() -> None:
        with journal_mod.Journal(sp).lock():
            entered.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    entered.wait(10)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(Interrupted, match="while waiting for another patchkit run; nothing was written"):
            api.apply(from_site_packages(sp))
    finally:
        done.set()
        t.join()
        timer.join()
    assert snapshot(sp) == before
