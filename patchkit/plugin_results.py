"""What a command did with patchkit's distributions in the serving environment: the guard and the watch.

Result values like those of :mod:`patchkit.results` (which holds them in its reports' ``guard`` and
``watch`` fields): frozen, with :meth:`to_dict` for ``--json`` (docs/json.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from patchkit.advice import NextStep
from patchkit.jsonable import jsonable
from patchkit.errors import ExitCode


class GuardAction(str, Enum):
    """What a command did with patchkit's guard (:mod:`patchkit.guard.guard`)."""

    INSTALLED = "installed"
    """The guard's distribution was written into site-packages (journaled)."""
    REFRESHED = "refreshed"
    """It was installed already; its manifest was rewritten for the files patchkit journals now."""
    UNCHANGED = "unchanged"
    """It was installed already, byte for byte as this run would write it."""
    WOULD_INSTALL = "would install"
    """``--dry-run``: it would be written (or refreshed)."""
    REMOVED = "removed"
    """Its files were deleted (``revert``, ``guard remove``)."""
    NOTHING_TO_GUARD = "nothing to guard"
    """patchkit has not patched any file of this install, so there is nothing to watch; not installed."""
    NOT_INSTALLED = "not installed"
    """``status``/``verify``/``guard remove``: the guard is not in this install."""
    SHOWN = "shown"
    """``status``/``verify``: the guard is installed; nothing was written."""


@dataclass(frozen=True)
class GuardReport:
    """patchkit's guard in one install, after a command.

    Attributes:
        action: what the command did (:class:`GuardAction`).
        installed: True when the guard is in site-packages after the command.
        files: the guard's files, relative to site-packages (its package and ``.dist-info``).
        watched: the vLLM files its manifest checks at every vLLM start (relative paths).
        architectures: the patched architectures it stops when served with EAGLE-3.
        apply_command: the ``patchkit apply`` command its line names (environment options included).
        problems: what is wrong with it (its files edited or gone, its manifest out of date with
            patchkit's journal); empty when it is as patchkit wrote it.
    """

    action: GuardAction
    installed: bool
    files: tuple[str, ...] = ()
    watched: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    apply_command: str = ""
    problems: tuple[str, ...] = ()
    install_command: str = ""
    """The ``patchkit guard install`` command (environment options included) that rewrites it."""
    next_steps: tuple[NextStep, ...] = ()
    """``guard install`` with nothing to guard: the ``apply --guard`` that patches and guards."""

    def __post_init__(self) -> None:
        for name in ("files", "watched", "architectures", "problems", "next_steps"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def exit_code(self) -> ExitCode:
        """``guard install``/``guard remove``: 3 when patchkit has patched nothing here (nothing to watch), else 0."""
        return ExitCode.REFUSED if self.action is GuardAction.NOTHING_TO_GUARD else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return jsonable(self)


class WatchAction(str, Enum):
    """What a command did with patchkit's acceptance watch (:mod:`patchkit.watch.watch`)."""

    INSTALLED = "installed"
    """The watch's distribution was written into site-packages (journaled)."""
    REFRESHED = "refreshed"
    """It was installed already; its data file was rewritten (what patchkit knows changed)."""
    UNCHANGED = "unchanged"
    """It was installed already, byte for byte as this run would write it."""
    WOULD_INSTALL = "would install"
    """``--dry-run``: it would be written (or refreshed)."""
    REMOVED = "removed"
    """Its files were deleted (``revert``, ``watch remove``)."""
    NO_PLUGIN_GROUP = "no plugin group"
    """This vLLM loads no ``vllm.stat_logger_plugins`` (before 0.11.1): refused, nothing written."""
    NOT_INSTALLED = "not installed"
    """``status``/``verify``/``watch remove``: the watch is not in this install."""
    SHOWN = "shown"
    """``status``/``verify``: the watch is installed; nothing was written."""


@dataclass(frozen=True)
class WatchReport:
    """patchkit's acceptance watch in one install, after a command.

    Attributes:
        action: what the command did (:class:`WatchAction`).
        installed: True when the watch is in site-packages after the command.
        files: the watch's files, relative to site-packages (its package and ``.dist-info``).
        drafts: drafts it counts before judging (``--drafts``; ``PATCHKIT_WATCH_DRAFTS`` overrides it at serve time).
        threshold: first-position acceptance below which it logs its line (``--threshold``).
        architectures: the architectures whose capture patchkit wrote (a cause the line can name).
        readers: per model runner of this release, where it reads the draft's ids (``runner: fields (file:line)``).
        vllm_version: the vLLM release its data file was written for.
        problems: what is wrong with it (its files edited or gone, its data written for another
            release or out of date with patchkit's journal); empty when it is as patchkit wrote it.
        install_command: the ``patchkit watch install`` command (environment options included) that rewrites it.
        missing: with :attr:`WatchAction.NO_PLUGIN_GROUP`: what this vLLM lacks, in words.
    """

    action: WatchAction
    installed: bool
    files: tuple[str, ...] = ()
    drafts: int = 0
    threshold: float = 0.0
    architectures: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()
    vllm_version: str = ""
    problems: tuple[str, ...] = ()
    install_command: str = ""
    missing: str | None = None
    next_steps: tuple[NextStep, ...] = ()
    """With :attr:`WatchAction.NO_PLUGIN_GROUP`: the upgrade to a release that has the group."""

    def __post_init__(self) -> None:
        for name in ("files", "architectures", "readers", "problems", "next_steps"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def exit_code(self) -> ExitCode:
        """``watch install``: 3 when this vLLM has no stat-logger plugin group (nothing written), else 0."""
        return ExitCode.REFUSED if self.action is WatchAction.NO_PLUGIN_GROUP else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return jsonable(self)
