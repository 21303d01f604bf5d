"""No silent success at the edges (issue 20): each case answers right, on real vLLM release files.

Each test here failed before its fix (the report of issue 20 names the before/after output), except
``test_hardlinked_uv_venv_never_changes_the_cache``, which pins a decision: a venv hard-linked to uv's
cache is patched, because patchkit's atomic replace gives the file a new inode and the cache keeps its bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_install import make_venv, venv_site_packages
from test_releases import snapshot
from vllm_release import fresh_copy

pytestmark = pytest.mark.release
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
TYPOS = ["DeepseekV3ForCausalLm", "DeepseekV3ForCausalLM ", "NoSuchArch", ""]


@pytest.mark.parametrize("version", ["0.17.0", "0.17.1"])
@pytest.mark.parametrize("command", ["apply", "verify", "status", "revert"])
def test_unknown_arch_is_a_usage_error_on_every_command(release, cli, version, command):
    """A name the registry does not hold is exit 2 with the closest names, never 'in effect'."""
    sp = release(version)
    before = snapshot(sp)
    for name in TYPOS:
        result = cli(command, "--site-packages", str(sp), "--arch", name)
        assert result.exit_code == 2, (name, result.stdout + result.stderr)
        assert "EAGLE-3 is in effect" not in result.stdout
        assert result.stderr.startswith("error: --arch "), result.stderr
        if name.strip().startswith("Deepseek"):
            assert "did you mean DeepseekV3ForCausalLM" in result.stderr
        code, data = cli.json(command, "--site-packages", str(sp), "--arch", name)
        assert code == 2 and data["exit_code"] == 2 and "ok" not in data, data
    assert snapshot(sp) == before


@pytest.mark.parametrize("command", ["apply", "verify", "status", "revert", "doctor"])
def test_unknown_arch_in_model_config_is_the_same_usage_error(release, cli, tmp_path, command):
    """Issue 32: a config.json naming a class the registry lacks (a lower-case m) is exit 2 with the
    closest names, as through --arch; before, verify and status exited 0 ("in effect"), apply 3."""
    sp = release("0.17.1")
    before = snapshot(sp)
    model = tmp_path / "typo"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Glm4MoeForCausalLm"], "model_type": "glm4_moe"}))
    for how in (["--model", str(model)], *([["--arch", "Glm4MoeForCausalLm"]] if command != "doctor" else [])):
        result = cli(command, "--site-packages", str(sp), *how)
        assert result.exit_code == 2, (how, result.stdout + result.stderr)
        assert (
            "in effect" not in result.stdout
            and "'Glm4MoeForCausalLm' is not in vLLM 0.17.1's model registry" in result.stderr
        ), result.stderr
        assert "did you mean Glm4MoeForCausalLM" in result.stderr, result.stderr
        code, data = cli.json(command, "--site-packages", str(sp), *how)
        assert code == 2 and data["exit_code"] == 2 and "ok" not in data, data
    assert snapshot(sp) == before


def test_empty_arch_agrees_with_resolve(release, cli):
    sp = release("0.17.1")
    assert cli("resolve", "", "--site-packages", str(sp)).exit_code == 2
    result = cli("apply", "--site-packages", str(sp), "--arch", "")
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "is not an architecture name" in result.stderr


def _serving_venv(release, tmp_path: Path, version: str = "0.17.1") -> tuple[Path, Path]:
    python = make_venv(tmp_path / "venv")
    site = venv_site_packages(python)
    for entry in release(version).iterdir():
        shutil.move(str(entry), site / entry.name)
    return python, site


def test_interpreter_that_imports_another_vllm(release, cli, tmp_path, monkeypatch):
    """A bare vllm/ earlier on the path (PYTHONPATH=src): apply refuses (3), verify fails (1)."""
    python, site = _serving_venv(release, tmp_path)
    (tmp_path / "src" / "vllm").mkdir(parents=True)
    (tmp_path / "src" / "vllm" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    before = snapshot(site)
    for extra in ([], ["--dry-run"]):
        result = cli("apply", "--python", str(python), *extra)
        assert result.exit_code == 3, result.stdout + result.stderr
        assert f"imports vllm from {tmp_path / 'src' / 'vllm'}" in result.stderr
        assert f"take {tmp_path / 'src'} off that interpreter's import path" in result.stderr
    assert snapshot(site) == before
    monkeypatch.delenv("PYTHONPATH")
    assert cli("apply", "--python", str(python)).exit_code == 0
    assert cli("verify", "--python", str(python)).exit_code == 0
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    result = cli("verify", "--python", str(python))
    assert result.exit_code == 1, result.stdout
    assert "EAGLE-3 is not in effect" in result.stdout and "the interpreter imports this vLLM" in result.stdout
    code, data = cli.json("verify", "--python", str(python))
    assert code == 1 and data["ok"] is False
    assert any(m.startswith("the interpreter imports this vLLM") for m in data["missing"])
    assert cli("revert", "--python", str(python)).exit_code == 0  # revert still works on the install
    assert snapshot(site) == before


def test_symlinked_package_folder_is_refused_and_status_tells_the_truth(release, cli, tmp_path):
    """linked/vllm -> real/vllm: apply through 'linked' refuses before writing; 'real' is untouched."""
    real = release("0.17.1")
    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.copytree(real / "vllm-0.17.1.dist-info", linked / "vllm-0.17.1.dist-info")
    (linked / "vllm").symlink_to(real / "vllm")
    before = snapshot(real)
    code, data = cli.json("apply", "--site-packages", str(linked))
    assert code == 3, data
    reasons = {p["reason"] for p in data["patches"]}
    assert all(f"vllm is a symbolic link to {real / 'vllm'}" in r for r in reasons), reasons
    assert not any("target install instead" in r for r in reasons)
    assert snapshot(real) == before and not (linked / ".patchkit").exists()
    assert "no patchkit changes in this install" in cli("status", "--site-packages", str(real)).stdout
    assert cli("apply", "--site-packages", str(linked), "--dry-run").exit_code == 3


def _uv_install(release, tmp_path: Path, link_mode: str) -> tuple[Path, Path, Path]:
    """vLLM 0.17.1 installed by the real uv (the ``test`` extra's) with ``--link-mode``, offline.

    The wheel is zipped from the release's own files (its ``.py`` files and ``.dist-info``, as
    fetched), so uv unpacks it into its cache (``archive-v0/<id>/``) and links the venv's files to it.
    Returns ``(venv python, venv site-packages, the cache entry)``.
    """
    import sysconfig
    import zipfile

    src = release("0.17.1")
    wheel = tmp_path / "vllm-0.17.1-cp38-abi3-manylinux_2_31_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(src).as_posix())
    uv = Path(sysconfig.get_path("scripts")) / "uv"
    env = dict(
        os.environ,
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        UV_NO_CONFIG="1",
        UV_OFFLINE="1",
        VIRTUAL_ENV=str(tmp_path / "venv"),
    )
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(tmp_path / "venv")], check=True, env=env)
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--no-deps", "--link-mode", link_mode, str(wheel)], check=True, env=env
    )
    python = tmp_path / "venv" / "bin" / "python"
    (entry,) = [d for d in (tmp_path / "uv-cache" / "archive-v0").iterdir() if (d / "vllm").is_dir()]
    return python, venv_site_packages(python), entry


def test_uv_cache_is_refused_and_never_advised(release, cli, tmp_path):
    """uv --link-mode symlink: the venv's files link into uv's cache; apply refuses both, never pointing at the
    cache."""
    python, site, entry = _uv_install(release, tmp_path, "symlink")
    assert (site / DEEPSEEK).is_symlink() and (site / DEEPSEEK).resolve() == (entry / DEEPSEEK).resolve()
    before = snapshot(entry)
    code, data = cli.json("apply", "--python", str(python))
    assert code == 3, data
    for p in data["patches"]:
        assert "is a symbolic link to" in p["reason"] and "target install instead" not in p["reason"], p
        assert "--link-mode copy" in p["reason"]
    result = cli("apply", "--site-packages", str(entry))
    assert result.exit_code == 3, result.stdout + result.stderr
    assert "is inside a package cache" in result.stderr and "CACHEDIR.TAG" in result.stderr
    assert snapshot(entry) == before and not (entry / ".patchkit").exists()


def test_hardlinked_uv_venv_never_changes_the_cache(release, cli, tmp_path):
    """uv's default on Linux (--link-mode hardlink): patchkit replaces files (a new inode), so the cache keeps its
    bytes."""
    python, site, entry = _uv_install(release, tmp_path, "hardlink")
    assert (site / DEEPSEEK).stat().st_ino == (entry / DEEPSEEK).stat().st_ino
    before = snapshot(entry)
    assert cli("apply", "--python", str(python)).exit_code == 0
    assert (site / DEEPSEEK).read_bytes() != (entry / DEEPSEEK).read_bytes()
    assert snapshot(entry) == before and not (entry / ".patchkit").exists()
    assert cli("verify", "--python", str(python)).exit_code == 0
    assert cli("revert", "--python", str(python)).exit_code == 0
    assert snapshot(entry) == before
    assert (site / DEEPSEEK).read_bytes() == (entry / DEEPSEEK).read_bytes()


_SIGINT_AT = """
import os, signal, sys, time
from patchkit.ui import cli, render
where = sys.argv.pop(1)
if where == "report":  # Ctrl-C while the report of a finished apply is written
    real = render.Writer.table
    def table(self, *a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        return real(self, *a, **k)
    render.Writer.table = table
    cli.main()
else:  # Ctrl-C once the command has said everything, as the interpreter shuts down
    try:
        cli.main()
    except SystemExit:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        raise
"""


def test_sigint_at_the_very_end_of_apply_is_never_silent(release, tmp_path):
    sp = release("0.17.1")
    before = snapshot(sp)
    run = [sys.executable, "-c", _SIGINT_AT]
    late = subprocess.run([*run, "report", "apply", "--site-packages", str(sp)], capture_output=True, text=True)
    assert late.returncode == 130, late.stdout + late.stderr
    assert "after the run had finished; the output above says what is on disk" in late.stderr
    assert "before anything was written" not in late.stderr and "wrote 4 file(s)" in late.stdout
    assert snapshot(sp) != before  # the run had finished: its files are written, as said
    end = subprocess.run([*run, "end", "revert", "--site-packages", str(sp)], capture_output=True, text=True)
    assert end.returncode == 0, (end.returncode, end.stdout + end.stderr)
    assert "Traceback" not in end.stderr and snapshot(sp) == before


@pytest.mark.parametrize("as_json", [False, True])
def test_output_closed_early_is_said_and_not_exit_1(release, as_json):
    """'patchkit verify | head': Python's SIGPIPE recipe; exit 141 with one line on stderr, never a silent 1."""
    sp = release("0.17.1")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "patchkit", "verify", "--site-packages", str(sp), *(["--json"] if as_json else [])],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr.startswith("error: standard output was closed before the report was complete"), proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_every_hint_repeats_the_environment_options(release, cli, tmp_path, monkeypatch):
    """Ctrl-C during apply, and the other hints naming a command: each names the --site-packages/--python given."""
    import signal

    from patchkit.store import journal as journal_mod

    sp = release("0.17.1")
    before = snapshot(sp)
    real = journal_mod.write_atomic
    calls = {"n": 0}

    def ctrl_c(path, data, *args, **kwargs):
        if path.name.endswith(".py") and ".patchkit" not in path.parts:
            calls["n"] += 1
            if calls["n"] == 2:
                os.kill(os.getpid(), signal.SIGINT)
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(journal_mod, "write_atomic", ctrl_c)
    where = f"--site-packages {sp}"
    result = cli("apply", "--site-packages", str(sp))
    assert result.exit_code == 130, result.stdout + result.stderr
    assert f"run 'patchkit apply {where}' (again, to apply the patches)" in " ".join(result.stderr.split())
    calls["n"] = 0
    code, data = cli.json("apply", "--site-packages", str(sp))
    monkeypatch.setattr(journal_mod, "write_atomic", real)
    assert code == 130 and f"'patchkit apply {where}'" in data["hint"], data
    assert snapshot(sp) == before
    hints = [
        cli("status", "--site-packages", str(sp), "--arch", "NoSuchArch").stderr,
        cli("verify", "--site-packages", str(sp)).stdout,
    ]
    assert f"'patchkit scan {where}'" in hints[0]
    assert f"'patchkit apply --target vllm {where} --dry-run'" in hints[1]  # verify advises apply's dry run
    applied = cli("apply", "--site-packages", str(sp))
    assert applied.exit_code == 0
    assert f"'patchkit verify {where}' shows the chain, 'patchkit revert {where}' undoes it" in " ".join(
        applied.stdout.split()
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")
def test_read_only_mount_as_root_is_named_and_root_is_not_told_to_be_root(release, cli, tmp_path):
    src = release("0.17.1")
    mounted = tmp_path / "ro"
    mounted.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(mounted)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        result = cli("apply", "--site-packages", str(mounted))
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    assert result.exit_code == 4, result.stdout + result.stderr
    hint = " ".join(result.stderr.split())
    assert f"hint: {mounted} is on a read-only file system" in hint
    assert "as root" not in hint


def _relabel(sp: Path, old: str, new: str) -> Path:
    """The release's files under another version label (what a nightly wheel's metadata says)."""
    dist = sp / f"vllm-{old}.dist-info"
    dist.rename(sp / f"vllm-{new}.dist-info")
    meta = sp / f"vllm-{new}.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace(f"\nVersion: {old}\n", f"\nVersion: {new}\n", 1))
    return sp


def test_nightly_whose_files_are_native_agrees_across_commands(release, cli, tmp_path):
    """0.17.2.dev300 with native (A2) files: apply says supported upstream like verify and doctor, writes nothing."""
    sp = _relabel(release("0.20.2"), "0.20.2", "0.17.2.dev300")
    before = snapshot(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp))
    assert code == 0, applied
    assert {p["outcome"] for p in applied["patches"]} == {"supported upstream"}, applied["patches"]
    assert applied["written"] is False and snapshot(sp) == before
    assert cli.json("verify", "--site-packages", str(sp))[0] == 0
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "num_hidden_layers": 61,
                "hidden_size": 7168,
            }
        )
    )
    assert cli.json("doctor", "--model", str(model), "--site-packages", str(sp))[0] == 0
    # a final release whose metadata disagrees with its files is still a mixed install
    final = _relabel(fresh_copy("0.20.2", tmp_path / "final"), "0.20.2", "0.17.1")
    code, applied = cli.json("apply", "--site-packages", str(final))
    assert code == 3 and all("a mixed install" in p["reason"] for p in applied["patches"])


def _configs(tmp_path: Path) -> dict[str, Path]:
    """Checkpoint folders whose config.json no command may trip over."""
    texts = {
        "deep": '{"architectures": ["DeepseekV3ForCausalLM"], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "deep-text-config": '{"architectures": ["DeepseekV3ForCausalLM"], "text_config": '
        + '{"a": ' * 50_000
        + "1"
        + "}" * 50_000
        + "}",
        "invalid": '{"architectures": [',
        "not-an-object": "[1, 2]",
        "architectures-not-a-list": '{"architectures": 5, "model_type": 7, "text_config": {"architectures": "x"}}',
        "not-utf8": b'{"architectures": ["\xff"]}',
        "bom": "\ufeff" + json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}),
    }
    out = {}
    for name, text in texts.items():
        folder = tmp_path / "configs" / name
        folder.mkdir(parents=True)
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        (folder / "config.json").write_bytes(data)
        out[name] = folder
    (tmp_path / "configs" / "empty").mkdir()
    out["no-config"] = tmp_path / "configs" / "empty"
    out["missing"] = tmp_path / "configs" / "nope"
    return out


@pytest.mark.parametrize("command", ["apply", "verify", "status", "revert", "doctor"])
def test_bad_config_json_is_exit_4_on_every_command(release, cli, tmp_path, command):
    """Deeply nested, invalid or odd config.json: one exit code (4) for doctor and --model alike, no traceback."""
    sp = release("0.17.1")
    before = snapshot(sp)
    configs = _configs(tmp_path)
    for name in ("deep", "invalid", "not-an-object", "not-utf8", "no-config", "missing"):
        result = cli(command, "--site-packages", str(sp), "--model", str(configs[name]))
        assert result.exit_code == 4, (name, result.stdout + result.stderr)
        assert result.stderr.startswith("error: ") and "\nhint: " in result.stderr, (name, result.stderr)
    assert (
        "nests its JSON too deeply" in cli(command, "--site-packages", str(sp), "--model", str(configs["deep"])).stderr
    )
    assert snapshot(sp) == before


_SWEEP_COMMANDS = {
    "apply": ["apply", "--dry-run"],
    "apply-write": ["apply"],
    "verify": ["verify"],
    "status": ["status"],
    "revert": ["revert"],
    "doctor": ["doctor"],
    "resolve": ["resolve"],
    "scan": ["scan"],
}


def test_no_traceback_for_any_input(release, cli, tmp_path):
    """An adversarial sweep: every command, every odd input; each ends with a documented exit code and no traceback."""
    sp = release("0.17.1")
    before = snapshot(sp)
    configs = _configs(tmp_path)
    archs = [*TYPOS, "-", "Deepseek\x00V3", "DeepseekV3ForCausalLM" * 200, "é", "../../etc/passwd"]
    seen = set()
    for name, command in _SWEEP_COMMANDS.items():
        inputs: list[list[str]] = []
        if name == "resolve":
            inputs += [[a] for a in archs if "\x00" not in a]
        elif name == "doctor":
            inputs += [["--model", str(c)] for c in configs.values()]
            inputs += [["--model", str(configs["bom"]), "--draft", str(c)] for c in configs.values()]
        elif name != "scan":
            inputs += [["--arch", a] for a in archs if "\x00" not in a]
            inputs += [["--model", str(c)] for c in configs.values()]
        required = {"doctor": ["--model", str(configs["bom"])], "resolve": ["DeepseekV3ForCausalLM"]}.get(name, [])
        inputs += [[*required, "--python", p] for p in (str(tmp_path), "/dev/null", "no-such-python-here")]
        inputs += [[*required, "--python", sys.executable, "--site-packages", str(sp)]]
        for extra in inputs:
            for as_json in ([], ["--json"]):
                location = [] if "--python" in extra else ["--site-packages", str(sp)]
                if name == "resolve" and "--python" not in extra:
                    extra, location = [*extra, *location], []
                result = cli(*command, *location, *extra, *as_json)  # an exception fails the test here
                assert result.exit_code in (0, 1, 2, 3, 4), (
                    name,
                    extra,
                    result.exit_code,
                    result.stdout + result.stderr,
                )
                assert "Traceback" not in result.stdout + result.stderr, (name, extra)
                if result.exit_code >= 2 and not as_json:
                    assert result.stderr.startswith("error: ") or "refused" in result.stdout, (
                        name,
                        extra,
                        result.stderr,
                    )
                if as_json:
                    json.loads(result.stdout)  # one JSON object, whatever happened
                seen.add((name, result.exit_code))
        if name == "apply-write":
            cli("revert", "--site-packages", str(sp))
    assert snapshot(sp) == before
    assert {code for _, code in seen} >= {
        0,
        1,
        2,
        4,
    }  # the sweep reached success, "not in effect", usage and environment


def test_deeply_nested_state_files_are_clear(release, cli):
    """The journal and direct_url.json are JSON too: nested too deeply, they give a clear error or are ignored."""
    sp = release("0.17.1")
    deep = "[" * 100_000 + "]" * 100_000
    (sp / "vllm-0.17.1.dist-info" / "direct_url.json").write_text(deep)
    assert cli("apply", "--site-packages", str(sp), "--dry-run").exit_code == 0  # as an index install
    (sp / ".patchkit" / "vllm").mkdir(parents=True)
    (sp / ".patchkit" / "vllm" / "journal.json").write_text(deep)
    for command in ("status", "verify", "revert", "apply"):
        result = cli(command, "--site-packages", str(sp))
        assert result.exit_code == 4, (command, result.stdout + result.stderr)
        assert result.stderr.startswith(
            f"error: cannot read patchkit's journal {sp / '.patchkit' / 'vllm' / 'journal.json'}"
        )


def test_revert_with_nothing_applied_is_exit_0_with_or_without_a_scope(release, cli, tmp_path):
    """Issue 32: 'revert' with nothing applied exited 0, 'revert --model' in the same state 2 ("bad command line")."""
    sp = release("0.17.1")
    before = snapshot(sp)
    model = tmp_path / "glm"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe"}))
    for scope in ([], ["--model", str(model)], ["--arch", "DeepseekV3ForCausalLM"]):
        result = cli("revert", "--site-packages", str(sp), *scope)
        assert result.exit_code == 0, (scope, result.stdout + result.stderr)
        assert "nothing to revert: patchkit has not changed this install" in result.stdout, result.stdout
        code, data = cli.json("revert", "--site-packages", str(sp), *scope)
        assert code == 0 and data["files"] == [] and data["refused"] is False, data
    assert snapshot(sp) == before
