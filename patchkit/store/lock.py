"""The install's lock: an exclusive ``flock`` on the site-packages folder, held while a command plans and writes.

Every patchkit run on an install contends for it whatever its ``TMPDIR``, user or path spelling,
so two runs on one install never interleave, and it leaves no file behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from patchkit import interrupt, settings
from patchkit.errors import Interrupted, StateError

LOCK_TIMEOUT_S: float | None = None
"""How long a run waits for another run on the same install, in seconds; None: ``PATCHKIT_LOCK_TIMEOUT`` (30)."""


@contextlib.contextmanager
def hold(site_packages: Path, on_wait: Callable[[Path, float], None] | None = None) -> Iterator[None]:
    """Hold the lock of the install in ``site_packages``; wait at most :data:`LOCK_TIMEOUT_S` s.

    Args:
        site_packages: the install's site-packages folder (the ``flock`` is taken on it).
        on_wait: called once with the site-packages folder and the timeout (seconds) when
            another run holds the lock and this one starts to wait.

    Raises:
        StateError: another patchkit run held the lock for longer than the timeout, or the
            folder cannot be opened.
        UsageError: ``PATCHKIT_LOCK_TIMEOUT`` is not a number of seconds.
        Interrupted: SIGINT/SIGTERM while waiting (nothing was written).
    """
    timeout = LOCK_TIMEOUT_S if LOCK_TIMEOUT_S is not None else settings.lock_timeout()
    try:
        fd = os.open(site_packages, os.O_RDONLY)
    except OSError as exc:
        raise StateError(
            f"cannot open {site_packages} to lock it: {exc.strerror or exc}",
            "check that the folder exists and is readable",
        ) from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if on_wait is not None:
                    on_wait(site_packages, timeout)
                    on_wait = None
                signum = interrupt.received()
                if signum is not None:
                    raise Interrupted(
                        signum,
                        f"interrupted by {interrupt.name(signum)} while waiting for "
                        "another patchkit run; nothing was written",
                    ) from None
                if time.monotonic() >= deadline:
                    raise StateError(
                        f"another patchkit run is changing {site_packages} (waited {timeout:g} s)",
                        "wait for it to finish, then run the command again",
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
