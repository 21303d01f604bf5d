"""Shared installs: patchkit run by root on a user's environment, and by a real non-root user.

CI runs as root, so these tests create an unprivileged user (``patchkit-test``, with
``useradd``) and run the real patchkit command line as that user with ``runuser``. The user
runs the system's ``python3.X`` of the same minor version as the tests (``/root``, where the
test interpreter may live, is closed to other users) with this checkout and the test
environment's packages on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from patchkit import api
from patchkit.vllm.release.install import from_site_packages

from test_releases import snapshot
from vllm_release import pristine_site_packages

pytestmark = [
    pytest.mark.release,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"),
        reason="creating a second user and switching to it needs root, useradd and runuser",
    ),
]
USER = "patchkit-test"
FILES = [
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
]


@pytest.fixture(scope="module")
def user() -> pwd.struct_passwd:
    """The unprivileged user, created when missing."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        proc = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], capture_output=True, text=True
        )
        assert proc.returncode in (0, 9), proc.stderr  # 9: created meanwhile by another test run
        return pwd.getpwnam(USER)


def _python_for_user() -> str:
    """An interpreter of the tests' minor version that another user can run."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        real = Path(os.path.realpath(candidate))
        if real.is_file() and all(os.stat(p).st_mode & stat.S_IXOTH for p in [*real.parents, real]):
            return str(real)
    pytest.fail(f"no {version} that a non-root user can run")


def as_user(user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess:
    """Run ``patchkit ARGS`` as ``user`` (a real process with its uid and groups)."""
    # the test environment's site-packages as a site dir, so its .pth files (the editable install) apply
    start = (
        f"import site, sys, runpy; site.addsitedir({sysconfig.get_paths()['purelib']!r}); "
        f"sys.argv = ['patchkit'] + sys.argv[1:]; runpy.run_module('patchkit', run_name='__main__')"
    )
    proc = subprocess.run(
        ["runuser", "-u", user.pw_name, "--", "/usr/bin/env", "NO_COLOR=1", _python_for_user(), "-c", start, *args],
        capture_output=True,
        text=True,
    )
    assert "ModuleNotFoundError" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def shared():
    """A fresh 0.17.1 install in a folder every user can reach (the test's tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="patchkit-owner-", dir="/tmp"))
    os.chmod(base, 0o755)
    sp = base / "site-packages"
    shutil.copytree(pristine_site_packages("0.17.1"), sp)
    yield sp
    shutil.rmtree(base, ignore_errors=True)


def chown_tree(root: Path, uid: int, gid: int) -> None:
    for p in [root, *root.rglob("*")]:
        os.lchown(p, uid, gid)


def owners(sp: Path) -> dict[str, tuple[int, int, int]]:
    return {f: ((st := (sp / f).stat()).st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) for f in FILES}


def test_root_gives_the_journal_to_the_owner_who_can_then_revert(shared, user):
    sp = shared
    chown_tree(sp, user.pw_uid, user.pw_gid)
    before, kept = snapshot(sp), owners(sp)
    api.apply(from_site_packages(sp))  # as root
    for p in [sp / ".patchkit", *(sp / ".patchkit").rglob("*")]:
        assert (p.stat().st_uid, p.stat().st_gid) == (user.pw_uid, user.pw_gid), p
    assert owners(sp) == kept
    proc = as_user(user, "revert", "--site-packages", str(sp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("original bytes restored") == 4
    assert snapshot(sp) == before and owners(sp) == kept  # and no .patchkit left


def test_a_user_cannot_take_over_files_of_another_owner(shared, user):
    """A world-writable tree of root's files: a non-root run would become their owner; it is refused first."""
    sp = shared
    for p in [sp, *sp.rglob("*")]:
        if p.is_dir():
            os.chmod(p, 0o777)
    before, kept = snapshot(sp), owners(sp)
    proc = as_user(user, "apply", "--site-packages", str(sp))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert (
        "belongs to root (uid 0)" in message and "it would change owner" in message and "nothing was written" in message
    )
    assert "Traceback" not in proc.stderr
    assert snapshot(sp) == before and owners(sp) == kept


def test_a_revert_that_could_not_update_the_journal_is_refused_before_restoring(shared, user):
    """The journal belongs to root (left by an older patchkit); the owner's revert must not half-happen."""
    sp = shared
    chown_tree(sp, user.pw_uid, user.pw_gid)
    api.apply(from_site_packages(sp))
    chown_tree(sp / ".patchkit", 0, 0)
    patched = snapshot(sp)
    proc = as_user(user, "revert", "--site-packages", str(sp))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert f"{sp / '.patchkit' / 'vllm' / 'originals'} is not writable by {USER}" in message
    assert snapshot(sp) == patched  # nothing restored, the journal still right
    assert api.status(from_site_packages(sp)).entries and all(
        e.state == "patched" for e in api.status(from_site_packages(sp)).entries
    )


def test_a_user_run_keeps_modes_and_owners(shared, user):
    sp = shared
    chown_tree(sp, user.pw_uid, user.pw_gid)
    os.chmod(sp / FILES[1], 0o640)
    before, kept = snapshot(sp), owners(sp)
    proc = as_user(user, "apply", "--site-packages", str(sp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert owners(sp) == kept
    for p in [sp / ".patchkit", *(sp / ".patchkit").rglob("*")]:
        assert p.stat().st_uid == user.pw_uid
    proc = as_user(user, "revert", "--site-packages", str(sp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(sp) == before and owners(sp) == kept
