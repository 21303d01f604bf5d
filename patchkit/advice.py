"""A next step: a command patchkit advises, as a value (issue 25).

Every command line patchkit prints as advice is a :class:`NextStep`, made where the decision is
made (the API, doctor, the planner, an error) and only rendered by ``ui/``: the command as an
argument tuple, why, the ``file:line`` the advice rests on, and what running it changes
(:class:`Effect`, the patch ids it writes, the exit code it gives when it does what the advice
says). :func:`patchkit_argv` is the one builder of a ``patchkit ...`` argument tuple, and
:meth:`NextStep.for_run` the one place that adds the options of the running command (its
environment, its ``--arch``/``--model``, its ``--guard``) to a step made where they were not known,
deciding on the argument tuple's words, never on message text. ``tests/test_advised_commands.py``
runs every next step the commands print and checks that it does what its fields say.

This module imports only the standard library (rank 0: every layer may make a next step).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Sequence


class Effect(str, Enum):
    """What running a :class:`NextStep` changes."""

    PATCHES = "patches"
    """``patchkit apply``: writes patchkit's patches into vLLM's files (journaled; ``revert`` undoes it)."""
    RESTORES = "restores"
    """``patchkit revert``: writes the bytes patchkit journaled as original back."""
    GUARD = "guard"
    """``patchkit guard install|remove``: writes or deletes patchkit's guard only."""
    WATCH = "watch"
    """``patchkit watch install|remove``: writes or deletes patchkit's acceptance watch only."""
    REINSTALLS = "reinstalls"
    """``pip install --force-reinstall``: replaces vLLM's files with the release's, outside patchkit's journal."""
    UPGRADE = "upgrade"
    """Install another vLLM release (the step's ``argv`` shows what patchkit knows of them); nothing of this install is
    kept."""
    SHOWS = "shows"
    """Reads only: prints what the step's ``why`` refers to; changes nothing."""
    EDIT = "edit"
    """A change only the user can make (a checkpoint's ``config.json``, a file put back by hand); ``argv`` is empty."""
    NO_COMMAND = "none"
    """No command the user can run decides it: ``why`` says what would (a ``rehearse`` not decided whose
    miniature no option changes); ``argv`` is empty."""


ENVIRONMENT_OPTIONS = ("--python", "--site-packages", "--ray")
"""The options that say which install a command acts on (at most one is given)."""
SCOPE_OPTIONS = ("--arch", "--model")
"""The options that choose architectures."""
SCOPED = ("apply", "verify", "revert", "status")
"""The ``patchkit`` commands that act on the architectures chosen: a step made without a scope gets the run's."""


@dataclass(frozen=True)
class RunOptions:
    """The options of the running command that every step it advises repeats (:meth:`NextStep.for_run`).

    Attributes:
        environment: ``("--python", PATH)``, ``("--site-packages", DIR)`` or ``()``, as given.
        scope: ``("--model", ABSOLUTE_DIR)`` and/or ``("--arch", A, ...)`` pairs, or ``()``.
        guard: the run was given ``--guard`` (a suggested ``apply`` repeats it).
        program: the words that run patchkit as the user ran it (``("/tmp/pk/bin/patchkit",)`` when
            ``patchkit`` on ``PATH`` is not that file, :func:`patchkit.ui.hints.program`).
    """

    environment: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()
    guard: bool = False
    program: tuple[str, ...] = ("patchkit",)
    pip: tuple[str, ...] = ("pip",)
    """The words that run pip in the serving environment: ``("/venv/bin/python", "-m", "pip")`` with
    ``--python`` (a bare ``pip`` may belong to another Python: issue 42, finding 5), else ``("pip",)``."""


def patchkit_argv(
    command: str,
    *,
    target: str | None = None,
    environment: Sequence[str] = (),
    patch_ids: Sequence[str] = (),
    architectures: Sequence[str] = (),
    model: str | None = None,
    force: bool = False,
    guard: bool = False,
    extra: Sequence[str] = (),
) -> tuple[str, ...]:
    """The argument tuple of a ``patchkit`` command: the one builder of every command line patchkit advises.

    Args:
        command: ``"apply"``, ``"verify"``, ``"guard install"`` (words split on spaces), ...
        target: the ``--target`` distribution, or None to leave it out.
        environment: the environment options (:attr:`RunOptions.environment`).
        patch_ids: ``--patch`` ids; architectures: ``--arch`` names; model: a ``--model`` folder
            (give it absolute: a step may be run from another folder).
        force, guard: add ``--force`` / ``--guard``.
        extra: further arguments, last (``("--dry-run",)``).
    Returns:
        ``("patchkit", *command words, [--target T], *environment, [--patch P]..., [--model M],
        [--arch A]..., [--force], [--guard], *extra)``.
    """
    argv = ["patchkit", *command.split(), *(["--target", target] if target is not None else []), *environment]
    for pid in patch_ids:
        argv += ["--patch", pid]
    if model is not None:
        argv += ["--model", model]
    for arch in architectures:
        argv += ["--arch", arch]
    return tuple([*argv, *(["--force"] if force else []), *(["--guard"] if guard else []), *extra])


@dataclass(frozen=True)
class NextStep:
    """One command patchkit advises, with what it rests on and what it changes.

    Attributes:
        argv: the command as arguments (``("patchkit", "apply", "--target", "vllm", ...)``), or
            ``()`` for :attr:`Effect.EDIT` and :attr:`Effect.NO_COMMAND`.
        why: one clause saying what the step is for ("writes the 3 patches this target needs").
        rests_on: the ``file:line`` (relative to site-packages, or a checkpoint's ``config.json``)
            the advice rests on, or None.
        effect: what running it changes (:class:`Effect`).
        patches: the patch ids it writes (:attr:`Effect.PATCHES`) or takes out (:attr:`Effect.RESTORES`).
        exit_code: the exit code it gives when it does what ``why`` says.
        whole: the step acts on the whole install: :meth:`for_run` adds no ``--arch``/``--model``
            of the running command (the ``revert`` that undoes an ``apply --model`` whose
            dependencies another architecture's patches share, :func:`patchkit.plan.next_steps.undo`).
    """

    argv: tuple[str, ...]
    why: str
    rests_on: str | None = None
    effect: Effect = Effect.SHOWS
    patches: tuple[str, ...] = ()
    exit_code: int = 0
    whole: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "patches", tuple(self.patches))

    @property
    def command(self) -> str:
        """The command as a shell would read it (``shlex.join``), or "" for an edit."""
        return shlex.join(self.argv) if self.argv else ""

    @property
    def changes(self) -> str:
        """What running it changes, in words (from :attr:`effect` and :attr:`patches`)."""
        if self.effect is Effect.PATCHES:
            return f"writes {', '.join(self.patches)}" if self.patches else "writes the patches it plans"
        if self.effect is Effect.RESTORES:
            return f"takes out {', '.join(self.patches)}" if self.patches else "restores the files patchkit changed"
        return {
            Effect.GUARD: "writes or removes patchkit's guard only",
            Effect.WATCH: "writes or removes patchkit's acceptance watch only",
            Effect.REINSTALLS: "replaces vLLM's files with the release's own",
            Effect.UPGRADE: "another vLLM release replaces this one",
            Effect.SHOWS: "nothing: it only reads",
            Effect.EDIT: "a file only you can change",
            Effect.NO_COMMAND: "nothing: there is no command to run",
        }[self.effect]

    @property
    def is_patchkit(self) -> bool:
        """True when the step runs patchkit itself (``argv[0] == "patchkit"``)."""
        return bool(self.argv) and self.argv[0] == "patchkit"

    def line(self) -> str:
        """One line: ``run 'COMMAND' (WHY)``; ``upgrade vLLM: WHY; run 'COMMAND'`` (and ``reinstall vLLM: ...``)
        for a pip step; ``WHY`` for a step without a command. A command that holds a single quote
        itself (``pip install 'vllm>=0.16.0'``, a path with a space) is set in double quotes, so
        what is between the quotes is the command a shell reads."""
        if not self.argv:
            return self.why
        quoted = f'"{self.command}"' if "'" in self.command else f"'{self.command}'"
        if self.effect in (Effect.UPGRADE, Effect.REINSTALLS):
            verb = "upgrade" if self.effect is Effect.UPGRADE else "reinstall"
            return f"{verb} vLLM: {self.why}; run {quoted}"
        return f"run {quoted} ({self.why})"

    def for_run(self, options: RunOptions) -> "NextStep":
        """This step with the running command's options added where it names none of their kind.

        A ``patchkit`` step gets the environment options unless its argv has one of
        :data:`ENVIRONMENT_OPTIONS`; a step of :data:`SCOPED` gets the run's ``--arch``/``--model``
        unless it has one of :data:`SCOPE_OPTIONS` or is :attr:`whole`; an ``apply`` gets ``--guard``;
        ``patchkit`` becomes :attr:`RunOptions.program`; a ``pip`` step runs
        :attr:`RunOptions.pip`. Decided on the argument tuple, never on text.
        """
        if self.argv[:1] == ("pip",) and options.pip != ("pip",):
            return replace(self, argv=(*options.pip, *self.argv[1:]))
        if not self.is_patchkit or len(self.argv) < 2:
            return self
        argv = list(self.argv)
        words = set(argv)
        add: list[str] = []
        if options.environment and not words & set(ENVIRONMENT_OPTIONS):
            add += options.environment
        if argv[1] in SCOPED and options.scope and not self.whole and not words & set(SCOPE_OPTIONS):
            add += options.scope
        if argv[1] == "apply" and options.guard and "--guard" not in words:
            add.append("--guard")
        if not add and options.program == ("patchkit",):
            return self
        # after the command's own words (patchkit CMD [SUBCMD]) and its --target
        at = 3 if argv[1] == "guard" and len(argv) > 2 else 2
        if argv[at : at + 1] == ["--target"]:
            at += 2
        return replace(self, argv=tuple([*options.program, *argv[1:at], *add, *argv[at:]]))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``next_steps`` in the ``--json`` reports, docs/json.md)."""
        return {
            "argv": list(self.argv),
            "command": self.command,
            "why": self.why,
            "rests_on": self.rests_on,
            "effect": self.effect.value,
            "changes": self.changes,
            "patches": list(self.patches),
            "exit_code": self.exit_code,
        }


def reinstall(distribution: str, version: str, why: str) -> NextStep:
    """``pip install --force-reinstall --no-deps DIST==VERSION`` (:attr:`Effect.REINSTALLS`): the
    release's own files back, named with the installed distribution and version (never a placeholder)."""
    return NextStep(
        ("pip", "install", "--force-reinstall", "--no-deps", f"{distribution}=={version}"),
        why,
        effect=Effect.REINSTALLS,
    )


def lines(steps: Sequence[NextStep], options: RunOptions | None = None) -> list[str]:
    """:meth:`NextStep.line` of each step (with the run's options, when given)."""
    return [(s.for_run(options) if options is not None else s).line() for s in steps]


__all__ = [
    "ENVIRONMENT_OPTIONS",
    "Effect",
    "NextStep",
    "RunOptions",
    "SCOPED",
    "SCOPE_OPTIONS",
    "lines",
    "patchkit_argv",
    "reinstall",
]
