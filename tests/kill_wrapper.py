"""Test wrapper (not shipped): run the real patchkit CLI, and kill a copy of the run at each write step in turn.

Usage: ``python kill_wrapper.py SIGNUM OUTDIR patchkit-args...``

A *write step* is any call that changes the disk: ``os.mkdir``, ``os.open`` creating a file (the
temporary file of an atomic write), ``os.replace``, ``os.unlink`` and ``os.rmdir``. At the run's
first write step, after its planning (so the plan is made once, by the real code), this process
forks: child N runs the rest of the command unchanged and sends itself SIGNUM just before its
N-th write step (SIGKILL: it dies there; SIGINT/SIGTERM: patchkit's own handling runs). The
child's stdout and stderr go to ``OUTDIR/N.out`` and ``OUTDIR/N.err``.

After each child the parent prints one JSON line ``{"step", "reached", "status"}`` and waits for
a line on stdin (the test has checked the install and put it back as it was before the run);
it stops after the first child that finishes without reaching its step. The parent hands the
install's lock over to each child and takes it back between children, so the test can run
patchkit commands meanwhile.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys


def main() -> None:
    signum = int(sys.argv[1])
    outdir = sys.argv[2]
    args = sys.argv[3:]
    real_open, real_replace, real_unlink, real_rmdir, real_mkdir = os.open, os.replace, os.unlink, os.rmdir, os.mkdir
    real_flock = fcntl.flock
    locks: list[tuple[int, str]] = []
    state = {"step": 0, "kill_at": None, "forked": False}
    lock_paths: dict[int, str] = {}

    def marker(name: str) -> None:
        fd = real_open(os.path.join(outdir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)

    def fork_loop() -> None:
        n = 0
        while True:
            n += 1
            pid = os.fork()
            if pid == 0:
                state["kill_at"] = n
                for fdno, suffix in ((1, "out"), (2, "err")):
                    fd = real_open(os.path.join(outdir, f"{n}.{suffix}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(fd, fdno)
                    os.close(fd)
                return
            for fd, _ in locks:
                os.close(fd)  # the child holds the lock now; when it dies, nobody does
            _, status = os.waitpid(pid, 0)
            reached = os.path.exists(os.path.join(outdir, f"{n}.reached"))
            sys.__stdout__.write(json.dumps({"step": n, "reached": reached, "status": status}) + "\n")
            sys.__stdout__.flush()
            if not sys.stdin.readline() or not reached:
                os._exit(0)
            for fd, path in locks:  # take the lock back, on the same descriptor number
                new = real_open(path, os.O_RDONLY)
                real_flock(new, fcntl.LOCK_EX)
                if new != fd:
                    os.dup2(new, fd)
                    os.close(new)

    def step() -> None:
        if not state["forked"]:
            state["forked"] = True
            fork_loop()  # returns only in a child
        state["step"] += 1
        if state["step"] == state["kill_at"]:
            marker(f"{state['kill_at']}.reached")
            os.kill(os.getpid(), signum)

    def opened(path, flags, *a, **k):
        if flags & os.O_CREAT:
            step()
        fd = real_open(path, flags, *a, **k)
        if not flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            lock_paths[fd] = os.fspath(path)
        return fd

    def flock(fd, op):
        real_flock(fd, op)
        if op & fcntl.LOCK_EX and fd in lock_paths:
            locks.append((fd, lock_paths[fd]))

    def wrap(real):
        def stepped(*a, **k):
            step()
            return real(*a, **k)

        return stepped

    os.open = opened
    os.replace, os.unlink, os.rmdir, os.mkdir = (
        wrap(real_replace),
        wrap(real_unlink),
        wrap(real_rmdir),
        wrap(real_mkdir),
    )
    fcntl.flock = flock

    from patchkit.ui.cli import app

    sys.argv = ["patchkit", *args]
    try:
        app(args=args, prog_name="patchkit")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    else:
        code = 0
    if not state["forked"]:
        sys.__stdout__.write(json.dumps({"step": 0, "reached": False, "status": code}) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
