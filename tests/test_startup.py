"""What each command loads (issue 11): read-only commands never import libcst; no command imports
pydantic; piped output never imports rich; what a command keeps alive is frozen before the
interpreter's shutdown collects. Also ``--version`` and how ``--help`` shows flags.

Each command runs in a fresh subprocess on a real release copy; the modules loaded are read from
``sys.modules`` when the process exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import patchkit

PROBE = """\
import atexit, json, sys
def report():
    roots = sorted({m.split('.')[0] for m in sys.modules} & {'libcst', 'pydantic', 'rich'})
    sys.stderr.write('PATCHKIT-MODULES ' + json.dumps(roots) + '\\n')
atexit.register(report)
sys.argv = ['patchkit', *sys.argv[1:]]
from patchkit.entry import main  # the script's entry point (pyproject.toml)
main()
"""


def loaded(args: list[str]) -> tuple[int, list[str], str]:
    """Run ``patchkit ARGS`` piped; return its exit code, the heavy modules it loaded, and its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PATCHKIT-MODULES "))
    return proc.returncode, json.loads(line.split(" ", 1)[1]), proc.stderr


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    from vllm_release import fresh_copy

    from patchkit import api
    from patchkit.vllm.release.install import from_site_packages

    root = tmp_path_factory.mktemp("startup")
    sp = fresh_copy("0.17.1", root / "sp")
    fresh_copy("0.17.1", root / "unpatched")
    api.apply(from_site_packages(sp))
    (root / "target").mkdir()
    (root / "target" / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "num_hidden_layers": 61,
                "hidden_size": 7168,
            }
        )
    )
    return sp


READ_ONLY = {
    "status": lambda sp: ["status", "--site-packages", str(sp)],
    "status --arch": lambda sp: ["status", "--arch", "KimiK25ForConditionalGeneration", "--site-packages", str(sp)],
    "verify": lambda sp: ["verify", "--site-packages", str(sp)],
    "list": lambda sp: ["list"],
    "explain": lambda sp: ["explain", "eagle3-deepseek-backbone"],
    "resolve": lambda sp: ["resolve", "DeepseekV3ForCausalLM", "--site-packages", str(sp)],
    "doctor": lambda sp: ["doctor", "--model", str(sp.parent / "target"), "--site-packages", str(sp)],
    "scan": lambda sp: ["scan", "--site-packages", str(sp)],
}


@pytest.mark.release
@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_read_only_command_does_not_import_libcst(patched, command):
    code, modules, stderr = loaded(READ_ONLY[command](patched))
    assert code == 0, stderr
    assert "libcst" not in modules
    assert "pydantic" not in modules
    assert "rich" not in modules  # output through a pipe needs no rich


FAILING = {
    "verify": lambda sp: ["verify", "--site-packages", str(sp)],
    "verify --arch": lambda sp: ["verify", "--arch", "Glm4MoeForCausalLM", "--site-packages", str(sp)],
    "verify --model": lambda sp: ["verify", "--model", str(sp.parent / "target"), "--site-packages", str(sp)],
}


@pytest.mark.release
@pytest.mark.parametrize("command", sorted(FAILING))
def test_failing_verify_does_not_import_libcst(patched, command):
    """A verify that fails (an unpatched 0.17.1) advises apply's dry run without planning it (issue 32,
    finding 9: planning it loaded libcst and took about 3 s of a 3.4 s verify); its advice is
    followed in tests/test_advised_commands.py."""
    code, modules, stderr = loaded(FAILING[command](patched.parent / "unpatched"))
    assert code == 1, stderr
    assert modules == [], modules


@pytest.mark.release
def test_doctor_not_ready_plans_in_its_own_process(patched):
    """Not ready: doctor plans the 'patchkit apply' it advises with apply's own planner, in its own
    process (issue 25; a child 'python -m patchkit' before), so it loads libcst then, and still no
    pydantic and no rich."""
    code, modules, stderr = loaded(
        ["doctor", "--model", str(patched.parent / "target"), "--site-packages", str(patched.parent / "unpatched")]
    )
    assert code == 1, stderr
    assert "libcst" in modules and "pydantic" not in modules and "rich" not in modules


@pytest.mark.release
def test_apply_imports_libcst_and_not_pydantic(patched):
    code, modules, stderr = loaded(["apply", "--dry-run", "--site-packages", str(patched)])
    assert code == 0, stderr
    assert "libcst" in modules  # the probe sees what a rewriting command loads
    assert "pydantic" not in modules


def test_version():
    proc = subprocess.run([sys.executable, "-m", "patchkit", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout == f"patchkit {patchkit.__version__}\n"


def test_help_shows_flags_as_flags():
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--help"],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="120"),
    )
    assert proc.returncode == 0
    flags = [line for line in proc.stdout.splitlines() if "--dry-run" in line or "--force" in line]
    assert len(flags) == 2
    assert not any("<bool>" in line for line in flags), flags


EXIT_PROBE = """\
import atexit, gc, sys
def report():  # runs after the command, just before the interpreter's own shutdown collections
    left = sum(len(gc.get_objects(generation)) for generation in range(3))
    sys.stderr.write(f'PATCHKIT-GC {gc.get_freeze_count()} {left}\\n')
atexit.register(report)
sys.argv = ['patchkit', *sys.argv[1:]]
from patchkit.entry import main  # the script's entry point (pyproject.toml)
main()
"""


@pytest.mark.release
@pytest.mark.parametrize("command", ["scan", "verify"])
def test_shutdown_has_no_parsed_trees_to_collect(patched, command):
    """The interpreter's shutdown runs the cyclic collector even with it disabled; the trees a
    command keeps (scan of 0.17.1: 193 files) are frozen first, so its passes find almost nothing."""
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, command, "--site-packages", str(patched)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PATCHKIT-GC "))
    frozen, left = map(int, line.split()[1:])
    assert frozen > 50_000  # the parsed trees the command kept (and everything else alive)
    assert left < 1_000  # what the shutdown collections still traverse
