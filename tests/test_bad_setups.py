"""Odd set-ups: bad environment variables, a journal of another format, no RECORD, a deleted target
file, and bytecode kept outside the install (``PYTHONPYCACHEPREFIX``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.vllm.release.install import from_site_packages

from test_install import make_venv, venv_site_packages
from test_releases import snapshot

pytestmark = pytest.mark.release
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"


@pytest.mark.parametrize("command,value", [("status", "30s"), ("apply", "-1"), ("list", "nan"), ("revert", "soon")])
def test_a_bad_lock_timeout_is_a_one_line_error(release, value, command):
    sp = release("0.17.1") if command != "list" else None
    before = snapshot(sp) if sp else None
    args = [sys.executable, "-m", "patchkit", command] + (["--site-packages", str(sp)] if sp else [])
    proc = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, PATCHKIT_LOCK_TIMEOUT=value))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == f"error: PATCHKIT_LOCK_TIMEOUT={value!r} is not a number of seconds"
    assert lines[1].startswith("hint: set it to a number >= 0") and len(lines) == 2
    if sp:
        assert snapshot(sp) == before


@pytest.mark.parametrize(
    "fmt,hint",
    [(2, "use the patchkit that wrote it"), (None, "restore it from a backup"), ("1", "restore it from a backup")],
)
def test_a_journal_of_another_format_is_refused(release, cli, fmt, hint):
    sp = release("0.17.1")
    api.apply(from_site_packages(sp))
    path = sp / ".patchkit/vllm/journal.json"
    data = json.loads(path.read_text())
    data["format"] = fmt
    path.write_text(json.dumps(data))
    before = snapshot(sp)
    for command in ("status", "revert", "apply"):
        code, err = cli.json(command, "--site-packages", str(sp))
        assert code == 4, (command, err)
        assert f"has format {fmt!r}; this patchkit reads format 1" in err["error"]
        assert err["hint"].startswith(hint)
    assert snapshot(sp) == before


def test_no_record_refuses_unchecked_edits_unless_forced(release, cli):
    sp = release("0.17.1")
    (sp / "vllm-0.17.1.dist-info" / "RECORD").unlink()
    target = sp / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"# a hand edit nobody can see without RECORD\n")
    before = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 3
    reasons = [p["reason"] for p in applied["patches"] if p["outcome"] == "refused"]
    assert reasons and all("has no RECORD" in r for r in reasons)
    assert snapshot(sp) == before
    code, status = cli.json("status", "--site-packages", str(sp))
    assert status["record_missing"] is True
    assert "no RECORD" in cli("status", "--site-packages", str(sp)).stdout
    code, applied = cli.json("apply", "--site-packages", str(sp), "--force")
    assert code == 0 and applied["written"]
    code, again = cli.json("apply", "--site-packages", str(sp))  # patchkit's own bytes are vouched by its journal
    assert code == 0 and {p["outcome"] for p in again["patches"]} == {"already applied"}
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    assert snapshot(sp) == before


def test_a_missing_target_file_is_named_and_the_other_patches_still_apply(release, cli):
    sp = release("0.17.1")
    (sp / KIMI).unlink()
    pristine = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp), "--dry-run")
    assert result.exit_code == 4
    assert f"{KIMI} missing from this install" in " ".join(result.stderr.split())
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 4
    assert applied["missing_files"] == [KIMI]
    outcomes = {p["id"]: p["outcome"] for p in applied["patches"]}
    assert outcomes == {
        "eagle3-allowlist": "applied",
        "eagle3-deepseek-backbone": "applied",
        "eagle3-deepseek-interface": "applied",
        "eagle3-kimi-k25-interface": "not applicable",
        "eagle3-kimi-k25-proposer": "not applicable",
    }
    assert KIMI in {p["id"]: p["reason"] for p in applied["patches"]}["eagle3-kimi-k25-interface"]
    assert {f["path"] for f in applied["files"]} == {DEEPSEEK, "vllm/config/speculative.py"}
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    assert snapshot(sp) == pristine


def test_a_deleted_file_the_record_lists_is_advised_a_reinstall_with_the_version(release, cli):
    sp = release("0.17.1")
    (sp / KIMI).unlink()
    result = cli("apply", "--site-packages", str(sp), "--dry-run")
    assert result.exit_code == 4
    said = " ".join(result.stderr.split())
    assert "pip install --force-reinstall --no-deps vllm==0.17.1" in said
    code, applied = cli.json("apply", "--site-packages", str(sp), "--dry-run")
    assert (code, applied["missing_files"], applied["not_shipped"]) == (4, [KIMI], [])
    assert "RECORD lists it" in {p["id"]: p["reason"] for p in applied["patches"]}["eagle3-kimi-k25-interface"]
    # the reinstall is a next step in --json too (issue 42, finding 5: it was only in the text's hint)
    assert [s["argv"] for s in applied["next_steps"] if s["effect"] == "reinstalls"] == [
        ["pip", "install", "--force-reinstall", "--no-deps", "vllm==0.17.1"]
    ]


def test_a_reinstall_step_names_the_serving_interpreter_given_with_python(release, cli, monkeypatch):
    """With ``--python``, the reinstall runs that interpreter's pip (issue 42, finding 5: a bare ``pip``
    may belong to another Python). Failed before: the hint and the JSON named bare ``pip``."""
    sp = release("0.17.1")
    (sp / KIMI).unlink()
    monkeypatch.setenv("PYTHONPATH", str(sp))  # patchkit's own interpreter, seeing this copy
    python = os.path.abspath(sys.executable)
    code, applied = cli.json("apply", "--python", python, "--dry-run")
    want = [python, "-m", "pip", "install", "--force-reinstall", "--no-deps", "vllm==0.17.1"]
    assert code == 4 and [s["argv"] for s in applied["next_steps"] if s["effect"] == "reinstalls"] == [want]
    said = " ".join(cli("apply", "--python", python, "--dry-run").stderr.split())
    assert f"run '{' '.join(want)}'" in said and "run 'pip " not in said


def test_a_file_the_release_does_not_ship_is_not_advised_a_reinstall(release, cli):
    sp = release("0.17.1")
    (sp / KIMI).unlink()
    record = sp / "vllm-0.17.1.dist-info" / "RECORD"
    rows = record.read_text().splitlines(keepends=True)
    record.write_text("".join(r for r in rows if not r.startswith(KIMI + ",")))
    assert len(record.read_text().splitlines()) == len(rows) - 1
    pristine = snapshot(sp)
    result = cli("apply", "--site-packages", str(sp), "--dry-run")
    assert result.exit_code == 4
    said = " ".join(result.stderr.split())
    assert f"vLLM 0.17.1 does not ship {KIMI}" in said
    assert "reinstall" not in said.replace("a reinstall would not", "")
    code, applied = cli.json("apply", "--site-packages", str(sp), "--dry-run")
    assert (code, applied["missing_files"], applied["not_shipped"]) == (4, [KIMI], [KIMI])
    reason = {p["id"]: p["reason"] for p in applied["patches"]}["eagle3-kimi-k25-interface"]
    assert "does not ship" in reason and "reinstalling would not change that" in reason
    assert snapshot(sp) == pristine


def test_a_patch_for_a_file_0_34_0_deleted_is_decided_by_its_range_before_its_file(tmp_path, cli):
    """0.34.0 deletes v1/spec_decode/eagle.py; the Kimi proposer patch (<0.18.0) targets it. The
    default apply writes nothing and exits 0; a patch whose range held 0.34.0 would find the file
    missing, and 0.34.0's RECORD does not list it: no reinstall advised."""
    from dataclasses import replace

    from packaging.specifiers import SpecifierSet

    from patchkit.plan import missing
    from patchkit.plan.spec import load_patches
    from patchkit.vllm.registry.table import Registry
    from patchkit.vllm.release.source import SourceTree
    from vllm_release import fresh_copy

    sp = fresh_copy("0.34.0", tmp_path / "sp34")
    assert not (sp / "vllm/v1/spec_decode/eagle.py").exists()
    pristine = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0, applied
    assert (applied["written"], applied["files"], applied["missing_files"]) == (False, [], [])
    assert {p["id"]: p["outcome"] for p in applied["patches"]}["eagle3-kimi-k25-proposer"] == "supported upstream"
    assert snapshot(sp) == pristine

    proposer = next(p for p in load_patches("vllm") if p.id == "eagle3-kimi-k25-proposer")
    in_range = replace(proposer, vllm=SpecifierSet(">=0", prereleases=True))
    tree = SourceTree(sp)
    install = from_site_packages(sp)
    kept, results, absent = missing.split([proposer, in_range], tree, Registry(tree), install)
    assert kept == [proposer]
    assert absent.deleted == () and absent.not_shipped == ("vllm/v1/spec_decode/eagle.py",)
    assert "reinstall vLLM" not in results[0].reason and "does not ship" in results[0].reason


def test_bytecode_under_a_pycache_prefix_is_dropped(release, tmp_path):
    """With PYTHONPYCACHEPREFIX and unchecked-hash pycs, Python would keep importing the old bytecode."""
    python = make_venv(tmp_path / "serving")
    site = venv_site_packages(python)
    for entry in release("0.17.1").iterdir():
        shutil.move(str(entry), site / entry.name)
    prefix = tmp_path / "pycache-prefix"
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(prefix))
    compile_it = (
        "import importlib.util, py_compile, sys; src = sys.argv[1]; "
        "print(py_compile.compile(src, doraise=True, "
        "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH))"
    )
    source = site / DEEPSEEK
    made = subprocess.run(
        [str(python), "-c", compile_it, str(source)], env=env, capture_output=True, text=True, check=True
    )
    pyc = Path(made.stdout.strip())
    assert pyc.is_file() and pyc.is_relative_to(prefix)  # where this interpreter looks for it
    local = source.parent / "__pycache__" / "deepseek_v2.cpython-312.opt-1.pyc"
    local.parent.mkdir(exist_ok=True)
    local.write_bytes(b"stale")
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--python", str(python)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert not pyc.exists() and not local.exists()
    subprocess.run([str(python), "-c", compile_it, str(source)], env=env, capture_output=True, check=True)
    assert pyc.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "revert", "--python", str(python)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert not pyc.exists()
