"""What a command did with patchkit's distributions in the serving environment (its plugins: the
guard and the watch, :class:`patchkit.store.plugin_dist.Plugin`), and what a command asks of them.

Result values like those of :mod:`patchkit.results` (which holds them in its reports' ``guard`` and
``watch`` fields): frozen, with :meth:`to_dict` for ``--json`` (docs/json.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

from patchkit.advice import NextStep
from patchkit.jsonable import jsonable
from patchkit.errors import ExitCode


class PluginAction(str, Enum):
    """What a command did with one of patchkit's plugins (:class:`Plugin`)."""

    INSTALLED = "installed"
    """The plugin's distribution was written into site-packages (journaled)."""
    REFRESHED = "refreshed"
    """It was installed already; its data file was rewritten for what patchkit knows now."""
    UNCHANGED = "unchanged"
    """It was installed already, byte for byte as this run would write it."""
    WOULD_INSTALL = "would install"
    """``--dry-run``: it would be written (or refreshed)."""
    REMOVED = "removed"
    """Its files were deleted (``revert``, ``<plugin> remove``)."""
    NOTHING_TO_GUARD = "nothing to guard"
    """The guard: patchkit has not patched any file of this install, so there is nothing to watch; not installed."""
    NO_PLUGIN_GROUP = "no plugin group"
    """This vLLM lacks the plugin's entry-point group (the watch before 0.11.1): refused, nothing written."""
    NOT_INSTALLED = "not installed"
    """``status``/``verify``/``<plugin> remove``: the plugin is not in this install."""
    SHOWN = "shown"
    """``status``/``verify``: the plugin is installed; nothing was written."""

    @property
    def refused(self) -> bool:
        """True for the actions that install nothing because there is nothing the plugin could do (exit 3)."""
        return self in (PluginAction.NOTHING_TO_GUARD, PluginAction.NO_PLUGIN_GROUP)


LAYOUT = ("action", "installed", "files", "problems", "install_command", "next_steps")
"""The ``--json`` keys every plugin's report has, in the order they appear when a plugin names no other order."""


@dataclass(frozen=True)
class PluginReport:
    """One of patchkit's plugins in one install, after a command.

    Attributes:
        plugin: the plugin's name (``Plugin.NAME``; not in ``--json``: the report's key names it).
        action: what the command did (:class:`PluginAction`).
        installed: True when the plugin is in site-packages after the command.
        files: the plugin's files, relative to site-packages (its package and ``.dist-info``).
        problems: what is wrong with it (its files edited or gone, its data out of date with
            patchkit's journal or written for another release); empty when it is as patchkit wrote it.
        install_command: the ``patchkit <plugin> install`` command (environment options included) that rewrites it.
        next_steps: with a refused action: the command that makes it possible.
        details: the plugin's own facts, ``((key, value), ...)`` (the guard: ``watched``,
            ``architectures``, ``apply_command``; the watch: ``drafts``, ``threshold``, ``architectures``,
            ``readers``, ``vllm_version``, ``missing``); read them as attributes (``report.drafts``).
        layout: the order of the ``--json`` keys (common fields and detail keys; not in ``--json``).
    """

    plugin: str
    action: PluginAction
    installed: bool
    files: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    install_command: str = ""
    next_steps: tuple[NextStep, ...] = ()
    details: tuple[tuple[str, Any], ...] = ()
    layout: tuple[str, ...] = field(default=LAYOUT, repr=False)

    def __post_init__(self) -> None:
        for name in ("files", "problems", "next_steps"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        details = self.details.items() if isinstance(self.details, Mapping) else self.details
        object.__setattr__(self, "details", tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in details))

    def __getattr__(self, name: str) -> Any:
        """A detail by name (``report.watched``); raises AttributeError for a name the plugin does not report."""
        if name.startswith("__"):
            raise AttributeError(name)
        for key, value in self.__dict__.get("details", ()):
            if key == name:
                return value
        raise AttributeError(f"{self.__dict__.get('plugin', 'plugin')} report has no {name!r}")

    @property
    def exit_code(self) -> ExitCode:
        """``<plugin> install``/``remove``: 3 when the action is refused (:attr:`PluginAction.refused`), else 0."""
        return ExitCode.REFUSED if self.action.refused else ExitCode.OK

    def json_fields(self) -> dict[str, Any]:
        """The ``--json`` fields (:func:`patchkit.jsonable.jsonable` reads them): the keys of
        :attr:`layout`, in its order, common fields and details alike (docs/json.md)."""
        values = {name: getattr(self, name) for name in LAYOUT}
        values.update(self.details)
        return {key: values[key] for key in self.layout}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (:meth:`json_fields`)."""
        return jsonable(self)


@dataclass(frozen=True)
class PluginRun:
    """What a command asks of a plugin: the options it was given (none of them required).

    Attributes:
        want: install it when it is not installed (``--guard``, ``--watch``, ``<plugin> install``);
            otherwise only an installed plugin is refreshed.
        command_options: the environment options given (``["--python", "/opt/venv/bin/python"]``);
            None: keep those the installed plugin recorded.
        model: the run's ``--model`` folder (absolute), or None.
        target: the distribution patchkit patches.
        settings: the plugin's own options (the watch: ``drafts``, ``threshold``); None: keep the installed ones.
    """

    want: bool = False
    command_options: Sequence[str] | None = None
    model: str | None = None
    target: str = "vllm"
    settings: Mapping[str, Any] = field(default_factory=dict)
