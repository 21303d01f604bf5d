"""Every command a message suggests repeats the run's scope (--model, --arch, --guard), on vLLM 0.17.1's files.

Each test failed before its fix: the hints named only --site-packages, so the suggested 'apply'
patched the default DeepSeek/Kimi set, 'revert' reverted everything and 'verify' (exit 1) checked
the default set instead of the GLM architecture that was patched.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
from pathlib import Path

import pytest

from vllm_release import pristine_site_packages

pytestmark = pytest.mark.release
CHECKPOINTS = Path(__file__).parent / "checkpoints"
GLM_FILE = "vllm/model_executor/models/glm4_moe.py"


def _suggested(text: str, command: str) -> list[str]:
    """The ``'patchkit COMMAND ...'`` commands ``text`` suggests, as argument lists (without 'patchkit')."""
    flat = " ".join(text.split())
    return [shlex.split(m)[1:] for m in re.findall(rf"'(patchkit {command}[^']*)'", flat)]


def _ctrl_c_at_first_write(monkeypatch):
    from patchkit.store import journal as journal_mod

    real = journal_mod.write_atomic

    def ctrl_c(path, data, *args, **kwargs):
        if path.name.endswith(".py") and ".patchkit" not in path.parts:
            monkeypatch.setattr(journal_mod, "write_atomic", real)
            os.kill(os.getpid(), signal.SIGINT)
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(journal_mod, "write_atomic", ctrl_c)


def test_hints_repeat_model_arch_and_guard(release, cli, monkeypatch):
    sp = release("0.17.1")
    monkeypatch.chdir(CHECKPOINTS)  # a relative --model: the hints name it absolute
    glm = str(CHECKPOINTS / "glm-4.6")
    env = ["--site-packages", str(sp)]

    _ctrl_c_at_first_write(monkeypatch)
    stopped = cli("apply", *env, "--model", "glm-4.6", "--guard")
    assert stopped.exit_code == 130, stopped.stdout + stopped.stderr
    assert _suggested(stopped.stderr, "apply") == [["apply", *env, "--model", glm, "--guard"]], stopped.stderr

    applied = cli("apply", *env, "--model", "glm-4.6")
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    verify, revert = _suggested(applied.stdout, "verify"), _suggested(applied.stdout, "revert")
    assert verify == [["verify", *env, "--model", glm]] and revert == [["revert", *env, "--model", glm]], applied.stdout
    assert cli("verify", *env).exit_code == 1  # the default set, which this run did not patch
    assert cli(*verify[0]).exit_code == 0  # the suggested verify checks what was patched

    _ctrl_c_at_first_write(monkeypatch)
    stopped = cli("revert", *env, "--arch", "Glm4MoeForCausalLM")
    assert stopped.exit_code == 130, stopped.stdout + stopped.stderr
    assert _suggested(stopped.stderr, "revert") == [["revert", *env, "--arch", "Glm4MoeForCausalLM"]], stopped.stderr


def test_status_and_verify_after_a_reinstall_name_the_architectures_the_journal_knows(release, cli):
    sp = release("0.17.1")
    env = ["--site-packages", str(sp)]
    assert cli("apply", *env, "--model", str(CHECKPOINTS / "glm-4.6")).exit_code == 0
    shutil.copyfile(pristine_site_packages("0.17.1") / GLM_FILE, sp / GLM_FILE)  # a reinstall replaced it
    status = cli("status", *env)
    assert "reinstalled" in status.stdout
    suggested = _suggested(status.stdout, "apply")
    assert suggested == [["apply", "--target", "vllm", *env, "--arch", "Glm4MoeForCausalLM"]], status.stdout
    verify = cli("verify", *env)  # the default set and the journaled GLM: the hint names both runs
    assert verify.exit_code == 1
    runs = _suggested(verify.stdout, "apply")  # their dry runs (issue 32, finding 9): without --dry-run, the apply
    assert runs == [["apply", "--target", "vllm", *env, "--dry-run"], [*suggested[0], "--dry-run"]], verify.stdout
    runs = [run[:-1] for run in runs]
    assert cli(*suggested[0]).exit_code == 0
    assert cli("verify", *env, "--arch", "Glm4MoeForCausalLM").exit_code == 0
    assert cli(*runs[0]).exit_code == 0
    assert cli("verify", *env).exit_code == 0  # both runs done: everything verify checks is in effect
