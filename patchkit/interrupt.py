"""SIGINT and SIGTERM while patchkit writes: noted, acted on between two file writes, never mid-write.

While a command holds an install's lock (:meth:`patchkit.store.journal.Journal.lock`) the two signals
do not interrupt Python at a random bytecode: :func:`deferred` records the first one, and the
writing code asks :func:`received` at its safe points (between two atomic file writes, between
planning and writing). At such a point the run puts back what it wrote and raises
:class:`patchkit.errors.Interrupted` (exit 130 for SIGINT, 143 for SIGTERM). A second signal
while it puts files back is ignored, so the rollback always finishes.

Outside a writing command, and in a thread other than the main one (where Python cannot set
signal handlers), nothing here changes how signals behave.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []
_depth = 0
_after = [False]
"""True once an outermost :func:`deferred` block has ended (the writing is over) since :func:`reset`."""


def _note(signum: int, _frame) -> None:
    if not _received:
        _received.append(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block, record SIGINT/SIGTERM instead of acting on them (nests; main thread only).

    On leaving the outermost block the previous handlers are restored; a signal recorded but
    not acted upon by then is left for the caller to find with :func:`received` until the next
    :func:`deferred` block starts.
    """
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _depth == 0:
        _received.clear()
        _after[0] = False
        previous = {s: signal.signal(s, _note) for s in _SIGNALS}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            _after[0] = True  # before the handlers go back: a signal from here on finds it set
            for s, handler in previous.items():
                signal.signal(s, handler)


def after_writing() -> bool:
    """True when a :func:`deferred` block (a run that held the lock to write) has ended since :func:`reset`.

    A signal from then on can no longer stop the run: the CLI records it with :func:`note`
    instead of raising :class:`KeyboardInterrupt`, and says so after the report.
    """
    return _after[0]


def note(signum: int) -> None:
    """Record ``signum`` as a :func:`deferred` block does (the first one counts)."""
    _note(signum, None)


def reset() -> None:
    """Forget recorded signals and :func:`after_writing` (a new command starts)."""
    _received.clear()
    _after[0] = False


def received() -> int | None:
    """The signal number recorded in the current :func:`deferred` block, or None."""
    return _received[0] if _received else None


def name(signum: int) -> str:
    """``"SIGINT (Ctrl-C)"`` or ``"SIGTERM"``."""
    return "SIGINT (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name


def late_signal(what: str) -> None:
    """A signal that arrived after the last safe point of ``apply``/``revert``: say so (the run itself
    completed; ``what`` says what it did).

    Raises:
        Interrupted: when a signal was received; its next step is ``patchkit status``.
    """
    from patchkit.advice import NextStep, patchkit_argv  # lazy: only when a signal came late (start-up)
    from patchkit.errors import Interrupted  # lazy: only when a signal came late (start-up)

    signum = received()
    if signum is not None:
        raise Interrupted(
            signum,
            f"interrupted by {name(signum)} after the run had finished: {what}",
            "",
            NextStep(patchkit_argv("status"), "it shows the install as it is"),
        )
