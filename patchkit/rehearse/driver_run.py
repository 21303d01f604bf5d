"""Running the engine driver from patchkit's side: its spec, its process in its own session, its progress
lines, and stopping it.

:func:`driver_spec` writes the SPEC of :mod:`patchkit.rehearse.engine_driver`'s docstring,
:func:`start_driver` runs the driver in the target interpreter, :func:`follow` passes its progress on and
:func:`stop` stops its process group. Used by :func:`patchkit.rehearse.rehearsal.rehearse`; nothing here
imports vLLM or torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Callable

from patchkit.rehearse.layout import Layout
from patchkit.rehearse.miniature import Miniature
from patchkit.rehearse.tolerances import BANDED_MODEL_TYPES, LAYER_MARGIN, Device, Dtype
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.runner.draft_reads import GETTER, derive
from patchkit.vllm.runner.generations import GENERATIONS

DRIVER = Path(__file__).with_name("engine_driver.py")
"""The script the target interpreter runs (shipped inside the package, never imported here)."""
PROMPT = [5, 17, 99, 240, 33, 7, 401, 12, 88, 150, 3, 64, 300, 21, 9, 77]
"""Token ids of the rehearsal's one prompt (the miniature has no tokenizer: ``skip_tokenizer_init``)."""
PROGRESS = "PATCHKIT-PROGRESS "
"""The prefix of the driver's progress lines on stderr (:mod:`patchkit.rehearse.engine_report`)."""
DRAFT_EMBED = "embed_tokens"
"""The attribute of the draft's backbone that holds its input embedding (vLLM's ``llama_eagle3.py`` and the DFlash
draft: ``self.model.embed_tokens``), which the loader replaces by the target's."""
GPU_BYTES = 2 * 1024**3
"""Free GPU memory the miniature needs (engine workspace, compiled graphs, CUDA graphs and the CUDA
context; the weights are kilobytes). vLLM's start-up check asks for ``gpu_memory_utilization`` x the
GPU's total free (``v1/worker/utils.py`` ``request_memory``, 0.20.2), so that fraction is set to this."""
KV_CACHE_BYTES = 256 * 1024**2
"""The miniature's KV cache on a GPU, fixed (``kv_cache_memory_bytes``): vLLM then skips its
free-memory profiling, which fails when another process on the GPU frees memory meanwhile."""
PROMPT_TOKENS = 24
"""Tokens each engine generates."""


def driver_spec(
    work: Path,
    mini: Miniature,
    where: Device,
    kind: Dtype,
    eager: bool,
    save_aux: bool,
    layout: Layout,
    row,
    found: dict,
    *,
    text_only: bool = False,
    method: str = "eagle3",
    embed_reads: dict | None = None,
) -> dict:
    """The engine driver's SPEC (:mod:`patchkit.rehearse.engine_driver`'s docstring): the miniature, the
    prompt, the path, the layout, patchkit's runner declarations, the speculative ``method`` vLLM runs the draft with
    (``eagle3``, ``dflash``: :func:`patchkit.rehearse.dflash.method_of`) and, on a GPU, the memory it may take.
    ``text_only``: the target is multimodal; its engine runs with ``language_model_only`` (the miniature has
    no tokenizer for a multimodal processor: :func:`patchkit.rehearse.engine_start.engine`). ``embed_reads``: where the
    release's loader takes the target's embedding (:func:`embed_reads`)."""
    spec = {
        "workdir": str(work),
        "target_config": mini.target_config,
        "draft_config": mini.draft_config,
        "reference_ids": list(mini.ids),
        "prompt": PROMPT,
        "max_tokens": PROMPT_TOKENS,
        "num_speculative_tokens": 2,
        "seed": 0,
        "device": where.value,
        "dtype": kind.value,
        "eager": eager,
        "init_scale": 5.0,
        "layer_margin": LAYER_MARGIN,
        "layer_band": mini.target_config.get("model_type") in BANDED_MODEL_TYPES,
        "phases": ["plain", "eagle3"],
        "method": method,
        "save_aux": save_aux,
        "runners": [g.for_driver() for g in GENERATIONS],
        **layout.for_driver(),
        "language_model_only": text_only,
        "embed_reads": embed_reads or {},
        "target_class": None if row is None or row.transformers_backend else [row.entry.module, row.entry.class_name],
    }
    if where is Device.CUDA:
        total = max(found.get("total") or [GPU_BYTES * 10])
        spec["gpu_memory_utilization"] = round(min(0.9, GPU_BYTES / total), 4)
        spec["kv_cache_memory_bytes"] = KV_CACHE_BYTES
    return spec


def embed_reads(tree: SourceTree) -> dict:
    """Where the serving runner's draft loader takes the target's input embedding, read from the install
    (:func:`patchkit.vllm.runner.draft_reads.derive`): ``getter`` (``get_language_model``, called on a target that
    has it) and ``paths`` off the language model, each read that ends at the attribute the draft holds its own in
    (``embed_tokens``) with its alternatives (0.34.0's V2 ``load_eagle_model``: ``model.embed_tokens`` or
    ``model.embedding``). Empty ``paths`` when the loader was not found (the driver then says "not checked")."""
    derivation = derive(tree, with_aux=False)
    paths: list[list[str]] = []
    for read in derivation.reads:
        if read.path[-1] == DRAFT_EMBED:
            for path in (read.path, *read.alternatives):
                if list(path) not in paths:
                    paths.append(list(path))
    return {"getter": GETTER if derivation.language_model else None, "paths": paths, "runner": derivation.runner}


def start_driver(python: Path, work: Path, report_path: Path) -> subprocess.Popen:
    """The engine driver, in its own session (so :func:`stop` stops its workers too), in ``work``."""
    # the miniature's compiled graphs go in its own folder (removed with it), never in the user's cache
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_CACHE_ROOT": str(work / "vllm-cache")}
    return subprocess.Popen(
        [str(python), str(DRIVER), str(work / "spec.json"), str(report_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
        cwd=str(work),
    )


def follow(proc: subprocess.Popen, say: Callable[[str], None]) -> list[str]:
    """Pass the driver's progress lines to ``say`` until it exits; returns its last 20 other lines."""
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith(PROGRESS):
            say(line[len(PROGRESS) :].rstrip())
        else:
            tail = (tail + [line.rstrip()])[-20:]
    proc.wait()
    return tail


def stop(proc: subprocess.Popen | None) -> None:
    """Stop the driver's process group (SIGTERM, then SIGKILL after 20 s); nothing when it has exited. Raises
    nothing."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


__all__ = [
    "DRIVER",
    "GPU_BYTES",
    "KV_CACHE_BYTES",
    "PROGRESS",
    "PROMPT",
    "PROMPT_TOKENS",
    "driver_spec",
    "follow",
    "start_driver",
    "stop",
]
