"""Errors that stop a patchkit command, each with a one-line message, a hint and an exit code.

Expected outcomes of a patch (applied, refused, not applicable, ...) are *results*, not
errors: see :mod:`patchkit.results`. The exceptions here are for situations where a command
cannot run at all (no vLLM found, a bad ``--python``, a state directory that cannot be written).
The CLI maps each to its exit code in one place (:func:`patchkit.ui.cli.main`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.advice import NextStep, RunOptions


class ExitCode(IntEnum):
    """Process exit codes of every ``patchkit`` command (documented in the README)."""

    OK = 0
    """The command did what was asked; for ``verify``: EAGLE-3 is in effect."""
    NOT_IN_EFFECT = 1
    """``verify``: at least one check failed, EAGLE-3 is not in effect."""
    USAGE = 2
    """Bad command line (unknown option, unknown ``--target``, ``--patch`` or ``--arch``; ``--target sglang`` on a
    command other than ``scan`` and ``doctor``, not written for SGLang yet: nothing is read or written)."""
    REFUSED = 3
    """``apply``/``revert`` refused (also: the interpreter imports another ``vllm``, a linked or cached install);
    nothing on disk was changed."""
    ENVIRONMENT = 4
    """No usable vLLM install, bad ``--python``, unreadable or unwritable files, a missing target file."""
    NOT_DECIDED = 5
    """``rehearse``: no check failed, and one could not tell right from wrong on the miniature it ran (layers
    too alike, a draft that agrees too rarely, a MoE routing near-tie); the next step names what would decide it."""
    INTERRUPTED = 130
    """SIGINT (Ctrl-C) stopped ``apply``/``revert``: what it had written was put back (128 + 2)."""
    TERMINATED = 143
    """SIGTERM stopped ``apply``/``revert``: what it had written was put back (128 + 15)."""
    OUTPUT_CLOSED = 141
    """Standard output could not take the report (closed early by ``| head``, closed ``>&-``, full): 128 + SIGPIPE."""


class PatchkitError(Exception):
    """A condition that stops a command before it changes anything.

    Args:
        message: one line saying what is wrong.
        hint: one line saying what to do about it (without the command of ``step``).
        step: the command to run about it, as a value (:class:`patchkit.advice.NextStep`); the
            CLI adds the running command's options to it (:meth:`hint_for`).
    """

    exit_code: ExitCode = ExitCode.ENVIRONMENT

    def __init__(self, message: str, hint: str = "", step: "NextStep | None" = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.step = step

    def hint_for(self, options: "RunOptions | None" = None) -> str:
        """The hint as shown: :attr:`hint`, then the step's line with ``options`` added (:meth:`NextStep.for_run`)."""
        if self.step is None:
            return self.hint
        step = self.step.for_run(options) if options is not None else self.step
        return "; ".join(part for part in (self.hint, step.line()) if part)


class UsageError(PatchkitError):
    """Bad command-line input, such as an unknown ``--target`` or ``--patch``."""

    exit_code = ExitCode.USAGE


class InstallNotFound(PatchkitError):
    """No vLLM distribution where patchkit was told to look."""


class InterpreterError(PatchkitError):
    """``--python`` is not a working Python interpreter."""


class SourceError(PatchkitError):
    """A vLLM source file is missing or cannot be parsed."""


class ConfigError(PatchkitError):
    """A checkpoint's ``config.json`` given to ``doctor`` is missing, unreadable or not a JSON object."""


class StateError(PatchkitError):
    """patchkit's journal cannot be read or written.

    Args:
        cause: what went wrong without what is on disk now (``message`` adds that: "nothing was
            written", "every file was put back"); defaults to ``message``.
    """

    def __init__(self, message: str, hint: str = "", step: "NextStep | None" = None, cause: str | None = None) -> None:
        super().__init__(message, hint, step)
        self.cause = message if cause is None else cause


class RefusedError(PatchkitError):
    """The command refuses to touch the install (for instance a pending, unfinished run)."""

    exit_code = ExitCode.REFUSED


class Interrupted(PatchkitError):
    """SIGINT or SIGTERM stopped a command; the message says what is on disk now.

    Args:
        signum: the signal (``signal.SIGINT`` or ``signal.SIGTERM``); the exit code is
            ``128 + signum`` (130 or 143, :class:`ExitCode`).
        message, hint, step: as :class:`PatchkitError`.
        put_back: every file the run had written was put back (the install is as before the run).
    """

    def __init__(
        self, signum: int, message: str, hint: str = "", step: "NextStep | None" = None, put_back: bool = False
    ) -> None:
        super().__init__(message, hint, step)
        self.signum = signum
        self.put_back = put_back
        self.exit_code = ExitCode.TERMINATED if signum == 15 else ExitCode.INTERRUPTED


class ClusterError(PatchkitError):
    """``--ray``: Ray is not installed, or no Ray cluster answers at the address."""


REQUIREMENTS = ("typer", "click", "rich", "libcst", "packaging")
"""The import names of patchkit's requirements (``pyproject.toml``)."""


def missing_requirement(exc: ModuleNotFoundError) -> PatchkitError | None:
    """The error (exit 4) for a requirement of patchkit this interpreter cannot import, or None for another module.

    ``python -m patchkit`` from a checkout's root imports the checkout's ``patchkit/`` with any
    interpreter, also one where patchkit and its requirements are not installed.
    """
    import sys  # lazy: only when a requirement is missing

    root = (exc.name or "").split(".")[0]
    if root not in REQUIREMENTS:
        return None
    return PatchkitError(
        f"patchkit needs {root}, which {sys.executable} cannot import",
        f"install patchkit into that environment ({sys.executable} -m pip install /path/to/patchkit), "
        "or run the installed 'patchkit' script",
    )
