"""patchkit's environment variables, read and validated in one place.

- ``PATCHKIT_LOCK_TIMEOUT``: seconds a writing command waits for another patchkit run on the
  same install (a number >= 0, e.g. ``30`` or ``2.5``; default 30).
- ``NO_COLOR``: any non-empty value turns off colour (no-color.org); nothing to validate.

A bad value is a :class:`~patchkit.errors.UsageError` (one line, exit 2), raised by
:func:`check_environment`, which the CLI calls before every command.
"""

from __future__ import annotations

import math
import os

from patchkit.errors import UsageError

DEFAULT_LOCK_TIMEOUT_S = 30.0


def lock_timeout() -> float:
    """``PATCHKIT_LOCK_TIMEOUT`` in seconds (default 30).

    Raises:
        UsageError: the value is not a finite number >= 0 (``30s``, ``-1``, ``inf``).
    """
    raw = os.environ.get("PATCHKIT_LOCK_TIMEOUT")
    if raw is None or raw.strip() == "":
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(
            f"PATCHKIT_LOCK_TIMEOUT={raw!r} is not a number of seconds",
            "set it to a number >= 0 without a unit, e.g. PATCHKIT_LOCK_TIMEOUT=30, or unset it",
        )
    return value


def check_environment() -> None:
    """Validate every environment variable patchkit reads.

    Raises:
        UsageError: one of them has a value patchkit cannot use.
    """
    lock_timeout()
