"""Every next step patchkit prints is run, and does what its fields say (issue 25, "Done when").

The steps are collected from the ``--json`` reports of doctor, verify, status, apply and revert, and
from the guard's line (its manifest's ``apply_command``), on real release files and the public
checkpoint configs in ``tests/checkpoints/`` (targets and the public EAGLE-3 drafts there), each in
the situation that makes the command advise something. Then each step is run as printed and
checked against its :class:`patchkit.advice.Effect`:

- ``patches``: it exits with its ``exit_code`` and afterwards patchkit's journal holds every patch
  id it names;
- ``shows``: it exits with its ``exit_code`` and not a byte of the install changed;
- ``restores``: it exits 0 and the files it restores hold the bytes of the release (RECORD);
- ``upgrade`` (``pip install 'vllm>=X'``, not run here: it downloads a release): on the real files
  of release X the same ``apply --dry-run`` plans no patch ``not applicable`` or ``refused``;
- ``reinstalls`` (``pip install --force-reinstall --no-deps vllm==V``, not run either): it names
  the distribution and version of this install; the release's own bytes written back (what that
  pip command writes) make the advised next command work;
- ``edit``: a change only the user can make; it carries no command and says what to change.

Before issue 25 the steps were text assembled in four places (nothing ran them): verify's Kimi
hint on 0.15.1 led to ``not applicable``, and doctor's plan from a checkout crashed.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from pathlib import Path

import pytest
from test_releases import snapshot
from vllm_release import pristine_site_packages

pytestmark = pytest.mark.release

CHECKPOINTS = Path(__file__).parent / "checkpoints"
OLMOE = "OlmoeForCausalLM"
OLMOE_FILE = "vllm/model_executor/models/olmoe.py"


def patchkit_args(step: dict) -> list[str]:
    """The arguments after ``patchkit`` of a step (``argv[0]`` is the command's name)."""
    assert step["argv"][0] == "patchkit", step
    assert shlex.split(step["command"]) == step["argv"]  # the printed form is the argument tuple
    return step["argv"][1:]


def journaled_ids(cli, sp: Path) -> set[str]:
    _, status = cli.json("status", "--site-packages", str(sp))
    return {pid for e in status["entries"] for pid in e["patches"]}


def follow(cli, sp: Path, step: dict, scope: list[str]) -> str:
    """Run (or, for pip steps, check) ``step`` on the install at ``sp``; returns its effect. ``scope``:
    the ``--arch``/``--model`` options of the situation (for an upgrade, the apply to plan there)."""
    effect = step["effect"]
    assert step["why"], step
    if effect == "edit":
        assert step["argv"] == [] and step["command"] == ""
        return effect
    if effect == "upgrade":
        name, release = step["argv"][-1].split(">=")
        assert step["argv"][:2] == ["pip", "install"] and name == "vllm"
        later = pristine_site_packages(release)
        plan = shutil.copytree(later, sp.parent / f"upgrade-{release}")
        code, report = cli.json("apply", "--dry-run", "--site-packages", str(plan), *scope)
        assert code == 0, report
        named = [p for p in report["patches"] if p["id"] in step["patches"]] if step["patches"] else report["patches"]
        assert named and not [p for p in named if p["outcome"] in ("not applicable", "refused")], report["patches"]
        assert not [p for p in report["patches"] if p["outcome"] == "refused"], report["patches"]
        return effect
    if effect == "reinstalls":
        _, status = cli.json("status", "--site-packages", str(sp))
        assert step["argv"] == [
            "pip",
            "install",
            "--force-reinstall",
            "--no-deps",
            f"{status['install']['distribution']}=={status['install']['version']}",
        ]
        return effect
    before = snapshot(sp)
    result = cli(*patchkit_args(step))
    assert result.exit_code == step["exit_code"], (step["command"], result.stdout)
    if effect == "shows":
        assert snapshot(sp) == before, step["command"]
    elif effect == "patches":
        assert set(step["patches"]) <= journaled_ids(cli, sp), (step["command"], result.stdout)
    elif effect == "restores":
        assert snapshot(sp) != before
    return effect


def steps_of(report: dict) -> list[dict]:
    assert isinstance(report.get("next_steps"), list), report.keys()
    return report["next_steps"]


# -- verify --------------------------------------------------------------------------------------


def follow_dry_run(cli, sp: Path, step: dict) -> None:
    """A failing verify advises apply's dry run, unplanned (issue 32, finding 9): it writes nothing and
    exits 0, and the same command without ``--dry-run`` writes exactly the patches the dry run showed,
    after which verify of the same scope passes."""
    argv = patchkit_args(step)
    assert step["effect"] == "shows" and argv[0] == "apply" and argv[-1] == "--dry-run", step
    assert follow(cli, sp, step, []) == "shows"
    _, planned = cli.json(*argv)
    would = {p["id"] for p in planned["patches"] if p["outcome"] == "applied"}
    code, applied = cli.json(*argv[:-1])
    assert code == 0 and would, applied
    assert {p["id"] for p in applied["patches"] if p["outcome"] == "applied"} == would
    assert journaled_ids(cli, sp) == would


@pytest.mark.parametrize(
    "version, effects",
    [
        ("0.9.2", ["upgrade"]),  # no SupportsEagle3 Protocol
        ("0.15.1", ["shows"]),  # the dry run: DeepSeek would apply; Kimi-K2.5 not applicable: use >= 0.16.0
        ("0.17.1", ["shows"]),
    ],
)
def test_verify_advice_runs(release, cli, version, effects):
    sp = release(version)
    code, report = cli.json("verify", "--site-packages", str(sp))
    assert code == 1
    steps = [s for s in steps_of(report)]
    assert [s["effect"] for s in steps] == effects
    for step in steps:
        if step["effect"] == "shows":
            follow_dry_run(cli, sp, step)
        else:
            follow(cli, sp, step, [])
    if "shows" in effects:
        code, after = cli.json("verify", "--site-packages", str(sp))
        assert code == 0 and steps_of(after) == [], after["missing"]


def test_verify_advice_for_a_chosen_architecture_runs(release, cli):
    sp = release("0.33.0")
    code, report = cli.json("verify", "--site-packages", str(sp), "--arch", OLMOE)
    assert code == 1
    (step,) = steps_of(report)
    assert step["argv"][-3:] == ["--arch", OLMOE, "--dry-run"] and "--site-packages" in step["argv"]
    follow_dry_run(cli, sp, step)
    assert cli("verify", "--site-packages", str(sp), "--arch", OLMOE).exit_code == 0


# -- doctor ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.15.1", "0.17.1", "0.33.0"])
@pytest.mark.parametrize(
    "target, draft",
    [
        ("gemma-3-1b-it", "gemma-3-1b-eagle3-specforge"),
        ("llama-3.3-70b-instruct", "llama-3.3-70b-instruct-eagle3"),
        ("glm-4.6", None),
        ("seed-oss-36b", None),
    ],
)
def test_doctor_advice_runs(release, cli, version, target, draft):
    sp = release(version)
    args = ["doctor", "--model", str(CHECKPOINTS / target), "--site-packages", str(sp)]
    if draft is not None:
        args += ["--draft", str(CHECKPOINTS / draft)]
    code, report = cli.json(*args)
    effects = [follow(cli, sp, step, ["--model", str((CHECKPOINTS / target).resolve())]) for step in steps_of(report)]
    assert len(report["actions"]) == len(steps_of(report))  # each line printed is a step
    if "patches" in effects:  # after the apply doctor advised, the vLLM side holds
        _, after = cli.json(*args)
        vllm_side = [c for c in after["checks"] if c["label"].startswith(("EAGLE-3 in effect", "EAGLE-3 start-up"))]
        assert all(c["ok"] is not False for c in vllm_side), after["missing"]
    if code == 0:
        assert steps_of(report) == []


# -- status and the guard after a reinstall ---------------------------------------------------------


def test_status_and_the_guard_name_the_same_apply_and_it_runs(release, cli, tmp_path):
    sp = release("0.33.0")
    model = tmp_path / "olmoe"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": [OLMOE], "model_type": "olmoe", "num_hidden_layers": 16, "hidden_size": 2048})
    )
    assert cli("apply", "--site-packages", str(sp), "--model", str(model), "--guard").exit_code == 0
    shutil.copyfile(pristine_site_packages("0.33.0") / OLMOE_FILE, sp / OLMOE_FILE)  # a reinstall
    _, status = cli.json("status", "--site-packages", str(sp))
    (step,) = steps_of(status)
    # the guard's line names the same command status advises (issue 25: --arch there, --model here)
    assert status["guard"]["apply_command"] == step["command"]
    assert follow(cli, sp, step, []) == "patches"
    assert (
        hashlib.sha256((sp / OLMOE_FILE).read_bytes()).hexdigest()
        != hashlib.sha256((pristine_site_packages("0.33.0") / OLMOE_FILE).read_bytes()).hexdigest()
    )
    assert cli("verify", "--site-packages", str(sp), "--model", str(model)).exit_code == 0


# -- apply and revert ------------------------------------------------------------------------------


def test_apply_advice_after_a_write_runs(release, cli):
    sp = release("0.17.1")
    code, report = cli.json("apply", "--site-packages", str(sp))
    assert code == 0
    verify_step, revert_step = steps_of(report)
    assert follow(cli, sp, verify_step, []) == "shows"
    assert follow(cli, sp, revert_step, []) == "restores"
    assert snapshot(sp) == snapshot(pristine_site_packages("0.17.1"))


KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61},
}


def test_the_revert_apply_model_prints_undoes_all_it_wrote(release, cli, tmp_path):
    """Issue 32: on 0.17.1 ``apply --model Kimi-K2.5`` wrote 4 files and printed a ``revert --model``
    that restored 2 (the DeepSeek patches it depends on also serve DeepSeek's architectures)."""
    sp = release("0.17.1")
    pristine = snapshot(sp)
    model = tmp_path / "Kimi-K2.5"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(KIMI_K25))
    code, report = cli.json("apply", "--site-packages", str(sp), "--model", str(model))
    assert code == 0 and len(report["files"]) == 4, report
    _, revert_step = steps_of(report)
    written = {p["id"] for p in report["patches"] if p["outcome"] == "applied"}
    assert follow(cli, sp, revert_step, []) == "restores"
    assert snapshot(sp) == pristine, revert_step["command"]
    assert set(revert_step["patches"]) == written
    text = cli("apply", "--site-packages", str(sp), "--model", str(model)).stdout
    revert = " ".join(text.split()).split("shows the chain, '")[1].split("' undoes it")[0]
    assert cli(*shlex.split(revert)[1:]).exit_code == 0
    assert snapshot(sp) == pristine, revert
    assert (
        cli("verify", "--site-packages", str(sp), "--model", str(model)).exit_code == 1
    )  # the same scope: not patched

    # DeepSeek patched on its own first: the Kimi apply adds only Kimi's files, and its revert takes only those out
    assert cli("apply", "--site-packages", str(sp), "--arch", "DeepseekV3ForCausalLM").exit_code == 0
    deepseek = snapshot(sp)
    code, report = cli.json("apply", "--site-packages", str(sp), "--model", str(model))
    assert code == 0, report
    _, revert_step = steps_of(report)
    assert "--model" in revert_step["argv"], revert_step
    assert follow(cli, sp, revert_step, []) == "restores"
    assert snapshot(sp) == deepseek, revert_step["command"]


def test_a_refused_arch_among_several_names_the_apply_of_the_rest(release, cli):
    sp = release("0.33.0")
    code, report = cli.json(
        "apply",
        "--site-packages",
        str(sp),
        "--arch",
        OLMOE,
        "--arch",
        "SeedOssForCausalLM",
        "--arch",
        "BloomForCausalLM",
    )
    assert code == 3  # all or nothing: Bloom (no decoder backbone in self.model) refuses
    (step,) = steps_of(report)
    assert "BloomForCausalLM" not in step["argv"] and OLMOE in step["argv"] and "--arch BloomForCausalLM" in step["why"]
    assert follow(cli, sp, step, []) == "patches"


def test_revert_refused_by_an_edit_advises_force_and_a_reinstall(release, cli):
    sp = release("0.17.1")
    assert cli("apply", "--site-packages", str(sp)).exit_code == 0
    deepseek = sp / "vllm/model_executor/models/deepseek_v2.py"
    deepseek.write_bytes(deepseek.read_bytes() + b"# an edit\n")
    code, report = cli.json("revert", "--site-packages", str(sp))
    assert code == 3
    force, reinstall = steps_of(report)
    assert "--force" in force["argv"] and follow(cli, sp, force, []) == "restores"
    assert snapshot(sp) == snapshot(pristine_site_packages("0.17.1"))
    assert follow(cli, sp, reinstall, []) == "reinstalls"


# -- hints that run as printed (issue 32) ----------------------------------------------------------


def test_reinstall_hints_name_the_installed_release(release, cli):
    """A damaged file, a damaged RECORD, a deleted target file: each reinstall names ``vllm==0.17.1``
    (it printed ``vllm==X.Y.Z``, which pip cannot run)."""
    sp = release("0.17.1")
    wanted = "pip install --force-reinstall --no-deps vllm==0.17.1"
    kimi = sp / "vllm/model_executor/models/kimi_k25.py"
    original = kimi.read_bytes()
    kimi.write_bytes(
        original.replace(b"class KimiK25ForConditionalGeneration(", b"class KimiK25ForConditionalGeneration((", 1)
    )
    for command in (["apply"], ["verify"], ["apply", "--dry-run"]):
        result = cli(*command, "--site-packages", str(sp))
        assert result.exit_code == 4 and wanted in result.stderr and "X.Y.Z" not in result.stderr, (
            command,
            result.stderr,
        )
    kimi.unlink()
    result = cli("apply", "--site-packages", str(sp))
    assert "kimi_k25.py missing" in result.stderr and wanted in result.stderr, result.stderr
    assert cli("revert", "--site-packages", str(sp)).exit_code == 0
    kimi.write_bytes(original)
    with open(sp / "vllm-0.17.1.dist-info" / "RECORD", "ab") as fh:
        fh.write(b"\xff\xfe")
    code, err = cli.json("apply", "--site-packages", str(sp))
    assert code == 4 and wanted in err["hint"], err


def test_printed_commands_name_the_script_run_when_patchkit_is_not_on_path(release, tmp_path):
    """Run as ``/some/venv/bin/patchkit`` with no ``patchkit`` on PATH (the README's one-command trial),
    the commands apply prints name that script, and run as printed."""
    import os
    import subprocess
    import sys

    script = Path(sys.executable).parent / "patchkit"
    assert script.is_file()
    sp = release("0.17.1")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    applied = subprocess.run(
        [str(script), "apply", "--site-packages", str(sp)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert applied.returncode == 0, applied.stderr
    text = " ".join(applied.stdout.split())
    verify = text.split("wrote 4 file(s); '")[1].split("' shows the chain")[0]
    revert = text.split("shows the chain, '")[1].split("' undoes it")[0]
    assert shlex.split(verify)[0] == str(script) and shlex.split(revert)[0] == str(script), text
    assert subprocess.run(shlex.split(verify), capture_output=True, env=env, cwd=tmp_path).returncode == 0
    assert subprocess.run(shlex.split(revert), capture_output=True, env=env, cwd=tmp_path).returncode == 0
    assert snapshot(sp) == snapshot(pristine_site_packages("0.17.1"))
    # on PATH, the same file: the commands say 'patchkit'
    env["PATH"] = f"{script.parent}:/usr/bin:/bin"
    applied = subprocess.run(
        [str(script), "apply", "--site-packages", str(sp)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert f"'patchkit verify --site-packages {sp}'" in " ".join(applied.stdout.split()), applied.stdout
