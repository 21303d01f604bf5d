"""The runtime probe is a folder of scripts (patchkit/checks/probe/) that the target interpreter runs as
``<python> <folder> <JSON>``: it must start there with only the standard library, import no patchkit,
report a missing torch/vLLM as ``fatal`` (not a traceback), and ship in the wheel with every other
subpackage. Offline: runs the probe under this interpreter, which has neither torch nor vLLM."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from patchkit.checks import runtime
from patchkit.errors import InterpreterError

REPO = Path(__file__).resolve().parents[1]
PROBE_FILES = sorted(runtime.PROBE.glob("*.py"))
SIBLINGS = {p.stem for p in PROBE_FILES}
SPEC = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "chains": {"DeepseekV2ForCausalLM": [["model", "vllm.model_executor.models.deepseek_v2:DeepseekV2Model"]]},
    "backbones": {"vllm.model_executor.models.deepseek_v2:DeepseekV2Model": {"residual": True, "pair": True}},
    "getter": "get_eagle3_aux_hidden_state_layers",
    "model_types": ["deepseek_v3"],
}
NO_TORCH = importlib.util.find_spec("torch") is None and importlib.util.find_spec("vllm") is None


def _imports(path: Path, top_level: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_probe_is_a_folder_with_an_entry_point():
    assert runtime.PROBE.is_dir() and (runtime.PROBE / "__main__.py") in PROBE_FILES
    assert len(PROBE_FILES) >= 3


@pytest.mark.parametrize("path", PROBE_FILES, ids=lambda p: p.name)
def test_probe_module_imports_no_patchkit_and_only_the_stdlib_at_the_top(path):
    assert "patchkit" not in _imports(path, top_level=False)
    outside = {
        m for m in _imports(path, top_level=True) - SIBLINGS - {"__future__"} if m not in sys.stdlib_module_names
    }
    assert not outside, f"{path.name} imports {outside} at start-up: a missing one would not be reported as fatal"


@pytest.mark.skipif(not NO_TORCH, reason="this interpreter has torch or vLLM")
def test_probe_reports_missing_torch_as_fatal():
    proc = subprocess.run(
        [sys.executable, str(runtime.PROBE), json.dumps(SPEC)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith(runtime.SENTINEL + " ")
    assert json.loads(line[len(runtime.SENTINEL) :]) == {"fatal": "ModuleNotFoundError(\"No module named 'torch'\")"}


@pytest.mark.skipif(not NO_TORCH, reason="this interpreter has torch or vLLM")
def test_run_probe_turns_the_fatal_report_into_an_interpreter_error():
    with pytest.raises(InterpreterError, match="cannot import vLLM and torch"):
        runtime.run_probe(Path(sys.executable), SPEC)


def test_every_subpackage_ships_in_the_wheel():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "patchkit").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert folders <= listed, f"not shipped: {sorted(folders - listed)}"
