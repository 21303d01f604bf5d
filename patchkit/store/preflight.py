"""Before the first write: may this install be patched at all, and can this process write every file
and folder, keeping their owners?

Three refusals come first, before anything is planned or written: the interpreter imports ``vllm``
from another folder (:func:`import_problem`), the install lies inside a package cache
(:func:`cache_problem`), or a file's bytes live behind a symbolic link (:func:`link_on_the_way`).

patchkit replaces a file by writing a temporary file beside it and renaming it over the old one
(:func:`patchkit.store.files.write_atomic`). That needs write access to the *folder*, and it gives
the path a new inode owned by whoever runs patchkit, so the old owner is kept only by ``chown``,
which only root may do for another user (and a non-root user only towards one of its groups).
:func:`check` finds every such problem before anything is written, so a run either keeps every
owner and mode or is refused with nothing changed.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from patchkit.errors import RefusedError, StateError
from patchkit.store.files import read_only_hint
from patchkit.vllm.release.install import Install, imports_elsewhere


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def problems(files: list[Path], folders: list[Path], state_dir: Path, owner: tuple[int, int]) -> list[str]:
    """Every reason this process could not change ``files`` (keeping owners) and its state.

    Args:
        files: files that will be replaced (absolute; missing ones are created).
        folders: other folders that will be written into (``__pycache__`` folders to clean).
        state_dir: patchkit's state folder for this install (created if missing).
        owner: ``(uid, gid)`` the state folder must belong to (the owner of site-packages).
    Returns:
        One line per problem; empty when the run can go ahead.
    """
    out: list[str] = []
    root = os.geteuid() == 0
    groups = set(os.getgroups()) | {os.getegid()}
    seen: set[Path] = set()

    def writable(folder: Path, why: str) -> None:
        if folder in seen:
            return
        seen.add(folder)
        if not os.access(folder, os.W_OK | os.X_OK):
            out.append(f"{folder} is not writable by {_user(os.geteuid())} ({why})")

    for f in files:
        writable(_nearest_existing(f.parent), f"to replace {f.name}")
        if root or not f.exists():
            continue
        st = f.stat()
        if st.st_uid != os.geteuid():
            out.append(f"{f} belongs to {_user(st.st_uid)}; rewritten by {_user(os.geteuid())} it would change owner")
        elif st.st_gid not in groups:
            out.append(
                f"{f} belongs to group {st.st_gid}, which {_user(os.geteuid())} is not in; it would change group"
            )
    for folder in folders:
        if folder.exists():
            writable(folder, "to drop stale bytecode")
    for folder in (state_dir / "originals", state_dir, state_dir.parent):
        if folder.exists():
            writable(folder, "patchkit's state")
            break
    else:
        writable(_nearest_existing(state_dir), "to create patchkit's state folder")
    if not root and not state_dir.parent.exists() and owner[0] != os.geteuid():
        out.append(
            f"patchkit's state folder {state_dir.parent} would belong to {_user(os.geteuid())}, "
            f"not to the owner of site-packages, {_user(owner[0])}"
        )
    return out


def read_only(path: Path) -> bool:
    """True when ``path`` (or the nearest folder above it that exists) is on a read-only mount (``ST_RDONLY``)."""
    try:
        return bool(os.statvfs(_nearest_existing(path)).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check(
    files: list[Path], folders: list[Path], state_dir: Path, owner: tuple[int, int], engine: str = "vLLM"
) -> None:
    """Raise when :func:`problems` finds any (nothing has been written yet); ``engine`` names the install.

    The hint fits the cause: a read-only mount is named as such (no user can write it, root
    included); root is never told to run as root; anyone else is told whose install it is.

    Raises:
        StateError: naming the first problem and how many more there are (exit 4).
    """
    found = problems(files, folders, state_dir, owner)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        if any(read_only(p) for p in (*files, state_dir)):
            hint = read_only_hint(state_dir.parent.parent)
        elif os.geteuid() == 0:
            hint = (
                "root cannot write there either: check how that folder is mounted or protected "
                "(an NFS export that squashes root, chattr +i), then run the command again"
            )
        else:
            hint = f"run patchkit as the owner of the {engine} install, {_user(owner[0])}, or as root"
        raise StateError(f"{found[0]}{more}; nothing was written", hint, cause=f"{found[0]}{more}")


def import_problem(install: Install) -> RefusedError | None:
    """Why the interpreter would not run the files patchkit changes
    (:func:`patchkit.vllm.release.install.imports_elsewhere`), or None.

    ``apply`` raises it (exit 3, nothing written); ``verify`` shows it as a failing check (exit 1).
    """
    other = imports_elsewhere(install)
    if other is None:
        return None
    who = f"--python {install.python}" if install.python else "patchkit's own Python"
    if other == Path(""):
        return RefusedError(
            f"{who} cannot import vllm, although {install.dist_info.name} is on its import path",
            "check that interpreter's import path (PYTHONPATH, .pth files); 'python -c \"import vllm\"' "
            "must work in the serving environment",
        )
    return RefusedError(
        f"{who} imports vllm from {other}, not from {install.site_packages / 'vllm'} (the install "
        "patchkit found): patching it would change nothing that runs",
        f"take {other.parent} off that interpreter's import path (PYTHONPATH, a .pth file) so it "
        "imports the installed vLLM, then run the command again",
    )


CACHE_TAG = "CACHEDIR.TAG"
"""The Cache Directory Tagging Specification's file (https://bford.info/cachedir/); uv writes one at the
root of its cache (astral-sh/uv#526) and also in each virtual environment it creates (#1653)."""


def cache_problem(install: Install) -> RefusedError | None:
    """A refusal when ``install`` lies inside a package cache (uv's ``archive-v0/<id>/``), else None.

    Walking up from site-packages, the first folder holding :data:`CACHE_TAG` marks a cache,
    unless an environment root (``pyvenv.cfg``) comes first: uv tags its venvs too. Patching a
    cache entry would put the patch (and a copy of the journal) into every later install of that
    wheel, so ``apply`` refuses it (exit 3) and never suggests it.
    """
    for folder in (install.site_packages, *install.site_packages.parents):
        if (folder / "pyvenv.cfg").is_file():
            return None
        if (folder / CACHE_TAG).is_file():
            return RefusedError(
                f"{install.site_packages} is inside a package cache ({folder / CACHE_TAG}): every "
                "environment later installed from it would carry the patch",
                "point patchkit at the environment that serves the model (--python /path/to/venv/bin/python); "
                "if its files link into this cache, reinstall vLLM there with its own files "
                "(uv: --link-mode copy)",
            )
    return None


def link_on_the_way(site_packages: Path, relpath: str) -> Path | None:
    """The first symbolic link on the way from ``site_packages`` to the file ``relpath`` (the file included), or None.

    A linked file or a linked folder above it (``vllm/ -> /elsewhere/vllm``) puts the bytes in
    another folder: writing them would change an install (or a cache) that other environments share,
    and the journal, kept beside this ``site_packages``, would not be found from there.
    """
    path = site_packages
    for part in Path(relpath).parts:
        path = path / part
        if path.is_symlink():
            return path
    return None
