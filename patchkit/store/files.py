"""File-system primitives of the store: digests, atomic writes, bytecode lookup and write-failure hints.

Every file write is atomic (a temporary ``.<name>.*.patchkit-tmp`` in the same folder, fsync,
then ``os.replace``) and keeps the file's mode and owner; ``os.replace`` gives the path a new
inode, so a hard link shared with another path (an installer's cache) keeps its bytes. The
bytecode of a changed file is found wherever the interpreter keeps it (``__pycache__`` and a
``pycache_prefix``), in every invalidation mode, so the journal can remove it and Python recompiles.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from pathlib import Path

TMP_SUFFIX = ".patchkit-tmp"


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def os_hint(exc: OSError, folder: Path, otherwise: str) -> str:
    """The hint for a failed write: a full disk and a read-only mount are named as such.

    Args:
        exc: the error; its ``errno`` decides (ENOSPC, EDQUOT, EROFS; else ``otherwise``).
        folder: the folder that could not be written, for the hint.
        otherwise: the hint for every other error (permissions, for instance).
    """
    if exc.errno == errno.ENOSPC:
        return f"the file system holding {folder} is full: free some space, then run the command again"
    if exc.errno == errno.EDQUOT:
        return (
            f"your disk quota on the file system holding {folder} is used up: "
            "free some space, then run the command again"
        )
    if exc.errno == errno.EROFS:
        return read_only_hint(folder)
    return otherwise


def read_only_hint(folder: Path) -> str:
    """The hint for an install on a read-only mount (the same for every user, root included)."""
    return (
        f"{folder} is on a read-only file system: patchkit cannot change this install there; "
        "remount it read-write, or run patchkit where the image or environment is built"
    )


def write_atomic(path: Path, data: bytes, owner: tuple[int, int] | None = None) -> None:
    """Replace ``path`` with ``data`` atomically, keeping its permission bits and owner.

    Args:
        path: the file (created if missing, mode 0644).
        data: its new bytes.
        owner: ``(uid, gid)`` to give the file when run as root (patchkit's state files take
            the owner of site-packages); None: keep the existing file's owner.
    Raises:
        OSError: the folder is not writable, or the disk is full (the old file is untouched and
            no temporary file is left).
    """
    st = path.stat() if path.exists() else None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st else 0o644)
        want = owner if owner is not None else ((st.st_uid, st.st_gid) if st is not None else None)
        if want is not None and want != (os.getuid(), os.getgid()):
            try:
                os.chown(tmp, *want)  # root keeps the owner; others were checked beforehand (preflight)
            except PermissionError:
                pass
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def bytecode_of(path: Path, pycache_prefix: Path | None = None, spellings: tuple[Path, ...] = ()) -> list[Path]:
    """Every compiled file of the source ``path`` the interpreter could load instead of it.

    Python looks in ``__pycache__/<stem>.<tag>[.opt-N].pyc`` beside the source, or, with
    ``sys.pycache_prefix`` set (``PYTHONPYCACHEPREFIX`` or ``-X pycache_prefix``), in
    ``<prefix>/<absolute folder of the source>/<stem>.<tag>[.opt-N].pyc`` (CPython's
    ``importlib._bootstrap_external.cache_from_source``). Every invalidation mode (timestamp,
    checked and unchecked hash) uses these names, so removing them makes Python recompile.

    Args:
        path: the source file, under the site-packages folder as resolved.
        pycache_prefix: the target interpreter's ``sys.pycache_prefix``, or None.
        spellings: other absolute spellings of the source's folder (a site-packages reached
            through a symbolic link), also looked up under the prefix.
    """
    folders = [path.parent / "__pycache__"]
    if pycache_prefix is not None:
        for parent in (path.parent, *spellings):
            folders.append(Path(pycache_prefix) / str(parent).lstrip(os.sep))
    out: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            out.extend(sorted(folder.glob(f"{path.stem}.*.pyc")))
    return out
