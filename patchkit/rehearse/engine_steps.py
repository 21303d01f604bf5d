"""The engine steps the driver reports, as one type both sides of the process boundary read.

:mod:`patchkit.rehearse.engine_driver` (in the target interpreter, as a script beside this module)
writes each step's :class:`Step` value as the report's ``name``; :mod:`patchkit.rehearse.rehearsal`
reads it back into the :class:`Step` and maps it to its check. The report's words are the checks'
(:class:`patchkit.rehearse.rehearsal_result.CheckName`), never matched as text. This module imports
only the standard library: the driver's interpreter has no patchkit.
"""

from __future__ import annotations

from enum import Enum


class Step(str, Enum):
    """One step of the engine driver; the value is what its report's ``name`` holds."""

    BUILD = "build"  # the miniature checkpoints built
    STARTED = "started"  # the engine started with EAGLE-3
    DRAFT_LOADED = "draft_loaded"  # the draft loaded, the target's embedding shared
    GENERATION = "generation"  # the speculative generation
    PLAIN = "plain"  # the engine without speculation
    REPLAY = "replay"  # the same draft replayed offline on transformers' hidden states


__all__ = ["Step"]
