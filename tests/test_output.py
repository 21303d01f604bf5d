"""Text output on a terminal of 60 and 80 columns and through a pipe (issue 11).

On a terminal (a real pseudo-terminal of that size, ``COLUMNS`` set as ssh and shells do) no
identifier, path, ``file:line``, patch id or timestamp is broken across lines, and every line
longer than the terminal is a single unbreakable word after its indent. Through a pipe nothing
is wrapped, whatever ``COLUMNS`` says. No line ends in a space.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from patchkit import api
from patchkit.vllm.release.install import from_site_packages
from test_doctor import KIMI_K25, llama_draft

pytestmark = pytest.mark.release

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GUIDES = re.compile(r"^[ │├└─]*")
QUOTED = re.compile(r"""'[^']*'[).,;:]*|"[^"]*"[).,;:]*""")
"""An advised command alone on its line: the writer never breaks a quoted span (a paste runs it whole)."""


def run_in_terminal(args: list[str], columns: int) -> str:
    """stdout of ``python -m patchkit ARGS`` on a pseudo-terminal ``columns`` wide (stderr piped)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = dict(os.environ, COLUMNS=str(columns), TERM="xterm")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", *args],
        stdout=slave,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))


def run_piped(args: list[str]) -> str:
    env = dict(os.environ, COLUMNS="60")  # a pipe is not wrapped even when COLUMNS is set
    proc = subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, env=env)
    return proc.stdout


def atoms_whole(text: str, atoms: set[str]) -> list[str]:
    """The atoms that do not appear whole within one line of ``text``."""
    lines = text.splitlines()
    return sorted(a for a in atoms if not any(a in line for line in lines))


def check_fitted(text: str, columns: int) -> None:
    lines = text.splitlines()
    assert lines, "no output"
    for line in lines:
        assert line == line.rstrip(), f"trailing space: {line!r}"
        if len(line) > columns:  # only a single word may overflow, after the guides and indent, or
            body = GUIDES.sub("", line).strip()  # one quoted command alone (issue 42, finding 4: kept whole)
            whole = " " not in body or QUOTED.fullmatch(body)
            assert whole, f"line of {len(line)} > {columns} columns has a break point: {line!r}"


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    """A copy of vLLM 0.17.1 with every patch applied, and a Kimi-K2.5 target and draft config."""
    from vllm_release import fresh_copy

    root = tmp_path_factory.mktemp("out")
    sp = fresh_copy("0.17.1", root / "sp")
    api.apply(from_site_packages(sp))
    for name, data in (("target", KIMI_K25), ("draft", llama_draft(eagle_aux_hidden_state_layer_ids=[2, 30, 58]))):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(data))
    return sp


def commands(sp: Path) -> dict[str, tuple[list[str], set[str]]]:
    """Each command's arguments, and the atoms its output must keep whole (from its --json output)."""
    where = ["--site-packages", str(sp)]
    out: dict[str, tuple[list[str], set[str]]] = {}

    def data(args: list[str]) -> dict:
        return json.loads(
            subprocess.run([sys.executable, "-m", "patchkit", *args, "--json"], capture_output=True, text=True).stdout
        )

    def locations(checks: list[dict]) -> set[str]:
        found = set()
        for c in checks:
            if c["location"]:
                found.add(c["location"])
            found |= locations(c["children"])
        return found

    status = data(["status", *where])
    out["status"] = (
        ["status", *where],
        {a for e in status["entries"] for a in (e["path"], e["applied_at"], *e["patches"])},
    )
    verify = data(["verify", *where])
    out["verify"] = (["verify", *where], locations(verify["checks"]))
    listed = data(["list"])
    out["list"] = (["list"], {a for p in listed["patches"] for a in (p["id"], p["vllm"])})
    out["explain"] = (
        ["explain", "eagle3-kimi-k25-interface"],
        {"eagle3-kimi-k25-interface", "eagle3-deepseek-interface"},
    )
    doctor_args = ["doctor", "--model", str(sp.parent / "target"), "--draft", str(sp.parent / "draft"), *where]
    out["doctor"] = (doctor_args, locations(data(doctor_args)["checks"]))
    resolved = data(["resolve", "DeepseekV3ForCausalLM", *where])
    out["resolve"] = (
        ["resolve", "DeepseekV3ForCausalLM", *where],
        {f"{resolved['file']}:{resolved['line']}", *resolved["bases"][-1].split(" ")},
    )
    applied = data(["apply", "--dry-run", *where])
    out["apply --dry-run"] = (
        ["apply", "--dry-run", *where],
        {a for p in applied["patches"] for a in (p["id"], *(p["target"] or "").split())},
    )
    return out


@pytest.mark.parametrize("columns", [60, 80])
def test_terminal_output_never_breaks_an_identifier(patched, columns):
    for name, (args, atoms) in commands(patched).items():
        assert atoms, name
        text = run_in_terminal(args, columns)
        assert atoms_whole(text, atoms) == [], f"{name} at {columns} columns:\n{text}"
        check_fitted(text, columns)


def test_piped_output_is_not_wrapped(patched):
    where = ["--site-packages", str(patched)]
    verify = json.loads(run_piped(["verify", *where, "--json"]))
    text = run_piped(["verify", *where])
    details = set()

    def collect(checks):
        for c in checks:
            if c["detail"]:
                details.add(f"{c['label']}  {c['detail']}")
            collect(c["children"])

    collect(verify["checks"])
    assert atoms_whole(text, details) == []
    assert any(len(line) > 200 for line in text.splitlines())  # long lines stay long
    listed = json.loads(run_piped(["list", "--json"]))
    text = run_piped(["list"])
    assert atoms_whole(text, {p["summary"] for p in listed["patches"]}) == []
    explained = json.loads(run_piped(["explain", "eagle3-kimi-k25-interface", "--json"]))
    text = run_piped(["explain", "eagle3-kimi-k25-interface"])
    assert atoms_whole(text, {explained["why"], explained["expects"]}) == []
    for args in (["status", *where], ["list"], ["verify", *where], ["explain", "eagle3-allowlist"]):
        out = run_piped(args)
        assert "\x1b[" not in out
        assert all(line == line.rstrip() for line in out.splitlines()), args


def test_error_lines_keep_paths_whole_at_60_columns(tmp_path):
    deep = tmp_path / "a-rather-long-folder-name" / "site-packages-that-does-not-exist-at-all"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 60, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "status", "--site-packages", str(deep)],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=dict(os.environ, COLUMNS="60"),
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    text = ANSI.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))
    assert proc.returncode == 4
    assert any(str(deep) in line for line in text.splitlines()), text
    check_fitted(text, 60)


@pytest.mark.parametrize("version", ["0.17.1", "0.34.0"])
def test_widest_line_at_80_columns(tmp_path, version):
    """Issue 32, measured: on an 80-column terminal no line of verify, doctor, scan, status or apply
    is wider than 80 (a dry run's diff is the files' own lines), except a single word (a path, a command) that cannot be
    broken."""
    from vllm_release import fresh_copy

    sp = fresh_copy(version, tmp_path / "sp")
    where = ["--site-packages", str(sp)]
    glm = str(Path(__file__).parent / "checkpoints" / "glm-4.6")
    widest = {}
    for args in (
        ["verify", *where],
        ["doctor", "--model", glm, *where],
        ["scan", *where],
        ["apply", "--model", glm, *where],
        ["status", *where],
        ["verify", "--model", glm, *where],
    ):
        text = run_in_terminal(args, 80)
        check_fitted(text, 80)
        widest[" ".join(args[:2])] = max(len(line) for line in text.splitlines())
    assert widest, widest
