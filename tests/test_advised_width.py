"""Advised commands survive an 80-column terminal (issue 42, finding 4).

Failed before the fix: the writer broke ``hint:`` and ``next:`` lines at any space, the quoted
command included, so a paste from tmux ran as two broken commands ("Option '--python' requires an
argument", then "unknown option --model"). Each test renders on a stream that says it is a terminal,
with ``COLUMNS=80``.
"""

from __future__ import annotations

import io
import re
import shlex

from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.errors import UsageError
from patchkit.ui import console

LONG = patchkit_argv(
    "apply",
    environment=("--python", "/home/someone/envs/serving-env-for-vllm/bin/python"),
    model="/data/checkpoints/moonshotai/Kimi-K2.5-Instruct",
    extra=("--dry-run",),
)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _commands(text: str) -> list[str]:
    """The quoted commands in ``text``, each as the lines it was printed on."""
    return re.findall(r"'((?:patchkit|/)[^']*)'", text)


def test_a_next_step_command_is_never_broken_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    stream = Tty()
    writer = console.Writer.for_stream(stream)
    assert writer.width == 80
    step = NextStep(LONG, "writes nothing: shows the patches apply would write here", None, Effect.SHOWS)
    console.next_lines(writer, (step,), "next:")
    found = _commands(stream.getvalue())
    assert found == [shlex.join(LONG)], stream.getvalue()
    assert all(len(line) <= 80 for line in stream.getvalue().splitlines() if shlex.join(LONG) not in line)


def test_an_error_hint_command_is_never_broken_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    stream = Tty()
    monkeypatch.setattr(console.sys, "stderr", stream)
    exc = UsageError("--arch 'X' is not in vLLM 0.34.0's model registry", "did you mean Y", NextStep(LONG, "lists"))
    console.error(exc, as_json=False)
    assert _commands(stream.getvalue()) == [shlex.join(LONG)], stream.getvalue()


def test_prose_with_apostrophes_still_wraps(monkeypatch):
    """A quote that opens no span (``patchkit's``, a lone ``'``) does not glue the rest of the line."""
    monkeypatch.setenv("COLUMNS", "40")
    stream = Tty()
    writer = console.Writer.for_stream(stream)
    writer.line("hint: patchkit's guard and the release's files ' stay as they are, every one of them here")
    assert all(len(line) <= 40 for line in stream.getvalue().splitlines()), stream.getvalue()
