"""Regression tests for the faults an adversarial review found: each must fail cleanly or work."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from patchkit import api
from patchkit.vllm.release.install import from_site_packages
from patchkit.store.journal import Journal

from test_install import make_venv, venv_site_packages
from test_releases import snapshot

pytestmark = pytest.mark.release
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"


def test_lock_holds_across_different_tmpdirs(release, tmp_path):
    sp = release("0.17.1")
    entered, done = threading.Event(), threading.Event()

    def hold() -> None:
        with Journal(sp).lock():
            entered.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    entered.wait(10)
    other_tmp = tmp_path / "other-tmp"
    other_tmp.mkdir()
    try:
        env = dict(os.environ, TMPDIR=str(other_tmp), PATCHKIT_LOCK_TIMEOUT="1")
        proc = subprocess.run(
            [sys.executable, "-m", "patchkit", "apply", "--site-packages", str(sp)],
            capture_output=True,
            text=True,
            env=env,
        )
    finally:
        done.set()
        t.join()
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "another patchkit run is changing" in proc.stderr


def test_latin1_source_file_round_trips(release, cli):
    sp = release("0.17.1")
    target = sp / DEEPSEEK
    target.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + target.read_bytes())
    before = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp), "--force", "--dry-run")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "+        self.aux_hidden_state_layers: tuple[int, ...] = ()" in result.stdout
    assert cli("apply", "--site-packages", str(sp), "--force").exit_code == 0
    assert target.read_bytes().startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    assert snapshot(sp) == before


def test_undecodable_source_is_an_environment_error(release, cli):
    sp = release("0.17.1")
    spec = sp / "vllm/v1/spec_decode/eagle.py"
    spec.write_bytes(b"# \xff\xfe\n" + spec.read_bytes())
    before = snapshot(sp)
    code, err = cli.json("apply", "--site-packages", str(sp), "--force")
    assert code == 4 and "eagle.py" in err["error"]
    assert snapshot(sp) == before


def test_revert_force_restores_a_deleted_file(release, cli):
    sp = release("0.17.1")
    before = snapshot(sp)
    api.apply(from_site_packages(sp))
    (sp / KIMI).unlink()
    assert cli("revert", "--site-packages", str(sp)).exit_code == 3
    assert cli("revert", "--site-packages", str(sp), "--force").exit_code == 0
    assert snapshot(sp) == before


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        "null",
        '{"entries": [], "pending": "zz"}',
        '{"entries": [], "pending": [{"path": "vllm/x.py"}]}',
        '{"entries": [{"path": "../../etc/x", "sha256_before": "a", "sha256_after": "b", '
        '"patches": [], "vllm_version": "0.17.1", "applied_at": "t"}]}',
    ],
)
def test_journal_of_the_wrong_shape_is_a_clear_error(release, cli, content):
    sp = release("0.17.1")
    state = sp / ".patchkit" / "vllm"
    state.mkdir(parents=True)
    (state / "journal.json").write_text(content)
    for command in ("status", "apply", "revert"):
        code, err = cli.json(command, "--site-packages", str(sp))
        assert code == 4, (command, err)
        assert "cannot read patchkit's journal" in err["error"]


def test_damaged_record_and_odd_direct_url(release, cli):
    sp = release("0.17.1")
    dist = sp / "vllm-0.17.1.dist-info"
    (dist / "direct_url.json").write_text('{"url": "x", "dir_info": "x"}')
    assert cli("apply", "--site-packages", str(sp), "--dry-run").exit_code == 0
    with open(dist / "RECORD", "ab") as fh:
        fh.write(b"\xff\xfe")
    code, err = cli.json("apply", "--site-packages", str(sp))
    assert code == 4 and "RECORD" in err["error"]


def test_two_vllm_dist_infos_in_one_folder(release, cli):
    sp = release("0.17.1")
    stale = release("0.15.1") / "vllm-0.15.1.dist-info"
    stale.rename(sp / "vllm-0.15.1.dist-info")
    before = snapshot(sp)
    code, err = cli.json("apply", "--site-packages", str(sp))
    assert code == 4
    assert "several vLLM distributions" in err["error"] and "vllm-0.15.1.dist-info" in err["error"]
    assert snapshot(sp) == before


def test_metadata_that_disagrees_with_the_files_is_refused(release, cli):
    sp = release("0.17.1")
    meta = sp / "vllm-0.17.1.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.17.1", "Version: 0.18.0", 1))
    code, applied = cli.json("apply", "--site-packages", str(sp), "--force")
    assert code == 3
    assert any("a mixed install" in p["reason"] for p in applied["patches"])


def test_symlinked_target_is_refused(release, cli, tmp_path):
    sp = release("0.17.1")
    real = tmp_path / "elsewhere.py"
    (sp / DEEPSEEK).rename(real)
    (sp / DEEPSEEK).symlink_to(real)
    code, applied = cli.json("apply", "--site-packages", str(sp), "--force")
    assert code == 3
    assert any("symbolic link" in p["reason"] for p in applied["patches"])
    assert (sp / DEEPSEEK).is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_owner_is_kept(release):
    sp = release("0.17.1")
    os.chown(sp / DEEPSEEK, 1234, 5678)
    api.apply(from_site_packages(sp))
    st = (sp / DEEPSEEK).stat()
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    api.revert(from_site_packages(sp))
    st = (sp / DEEPSEEK).stat()
    assert (st.st_uid, st.st_gid) == (1234, 5678)


def test_python_whose_startup_prints_a_banner(release, cli, tmp_path):
    python = make_venv(tmp_path / "banner")
    site = venv_site_packages(python)
    (site / "sitecustomize.py").write_text("print('welcome to the GPU box')\n")
    for entry in release("0.17.1").iterdir():
        entry.rename(site / entry.name)
    code, applied = cli.json("apply", "--python", str(python), "--dry-run")
    assert code == 0 and applied["install"]["version"] == "0.17.1"
