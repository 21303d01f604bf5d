"""The hint scope: every ``'patchkit CMD ...'`` a message suggests repeats the options of the run.

A command run with ``--python``/``--site-packages``/``--ray``, ``--model``/``--arch`` or
``--guard`` records them here when it starts (:func:`begin`); the writers of
:mod:`patchkit.ui.console` pass every piece of text through :func:`with_options`, so each
suggested command acts on what the run was pointed at. The hints whose wording depends on the
install (:func:`verify_hint`, :func:`reapply_hint`) are built here too, from the result values.

This module imports only the standard library (start-up, issue 11).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from patchkit.results import InstallInfo

given: dict[str, Any] = {"where": "", "scope": "", "guard": False}
"""The options of the running command (:func:`begin` sets them), for :func:`with_options`: ``where``
the environment options, ``scope`` its ``--model``/``--arch`` (:func:`scope`), ``guard`` its
``--guard``; ``process`` is set when patchkit runs as its own process (:func:`patchkit.ui.cli.main`)."""

_SUGGESTED = re.compile(r"(?<!earlier )'patchkit (apply|verify|revert|status|scan|resolve|doctor|guard install|guard remove|watch install|watch remove)((?: [^']*)?)'")
"""A command a line suggests; not one it reports ("an earlier 'patchkit apply' stopped": its options are unknown)."""
_ENVIRONMENT_OPTIONS = ("--python", "--site-packages", "--ray")
_SCOPED = ("apply", "verify", "revert", "status")
"""The commands that act on the architectures chosen: a suggested one repeats the run's ``--model``/``--arch``."""
_SCOPE_OPTIONS = ("--arch", "--model")


def begin(site_packages: Optional[Path], python: Optional[Path], arch: Optional[list[str]],
          model: Optional[Path], guard: bool) -> None:
    """Record the options of the command that starts now (for :func:`with_options`)."""
    given.update(where=where(site_packages, python), scope=scope(arch, model), guard=guard)


def with_options(text: str, where: str | None = None) -> str:
    """``text`` with the options of the run added to each ``'patchkit CMD ...'`` it suggests.

    The one place that makes every hint and suggestion act on what the command was pointed at:
    the environment options given (``where``) go to every suggested command (a ``'patchkit apply'``
    run as written would otherwise patch patchkit's own environment); the run's scope
    (``--model`` as an absolute path, each ``--arch``) goes to a suggested ``apply``, ``verify``,
    ``revert`` or ``status`` (without it, ``apply`` would patch the default DeepSeek/Kimi set and
    ``revert`` revert everything); the run's ``--guard`` goes to a suggested ``apply``. A command
    already naming an option of a kind (``--python``/``--site-packages``/``--ray``;
    ``--arch``/``--model``; ``--guard``) keeps its own.

    Args:
        text: a message, hint or line of output.
        where: the options as :func:`where` spells them (``" --python /opt/venv/bin/python"``);
            None: those of the running command (and then its scope and ``--guard`` too).
    """
    scope_, guard = ("", False) if where is not None else (given["scope"], given["guard"])
    where = given["where"] if where is None else where
    if not (where or scope_ or guard) or "'patchkit " not in text:
        return text

    def add(m: re.Match) -> str:
        command, rest = m.group(1), m.group(2)
        words = rest.split()
        env = "" if any(opt in words for opt in _ENVIRONMENT_OPTIONS) else where
        chosen = scope_ if command in _SCOPED and not any(opt in words for opt in _SCOPE_OPTIONS) else ""
        guarded = " --guard" if guard and command == "apply" and "--guard" not in words else ""
        return f"'patchkit {command}{env}{rest}{chosen}{guarded}'"

    return _SUGGESTED.sub(add, text)


def scope(arch: Optional[list[str]], model: Optional[Path]) -> str:
    """The ``--model``/``--arch`` part of a suggested command: the folder absolute (a hint may be run elsewhere)."""
    return ((f" --model {shlex.quote(os.path.abspath(model))}" if model is not None else "")
            + "".join(f" --arch {shlex.quote(a)}" for a in arch or ()))


def where(site_packages: Optional[Path], python: Optional[Path]) -> str:
    """The ``--python``/``--site-packages`` part of a suggested command, as the user gave it."""
    if python is not None:
        return f" --python {shlex.quote(str(python))}"
    if site_packages is not None:
        return f" --site-packages {shlex.quote(str(site_packages))}"
    return ""


def command_options(site_packages: Optional[Path], python: Optional[Path]) -> list[str]:
    """The environment options as given, as a list (for the commands patchkit's guard names)."""

    def spelled(path: Path) -> str:  # absolute: the guard's line is read in another folder
        return os.path.abspath(path) if os.sep in str(path) or path.exists() else str(path)

    return (["--python", spelled(python)] if python is not None else
            ["--site-packages", spelled(site_packages)] if site_packages is not None else [])


def options_as_given(site_packages: Optional[Path], python: Optional[Path]) -> list[str] | None:
    """The environment options exactly as given (``doctor``'s advice repeats them), or None when neither was."""
    return (["--python", str(python)] if python is not None else
            ["--site-packages", str(site_packages)] if site_packages is not None else None)


def arch_options(architectures: Sequence[str]) -> str:
    """`` --arch A --arch B``: the options that name ``architectures`` in a suggested command."""
    return "".join(f" --arch {shlex.quote(a)}" for a in architectures)


def verify_hint(info: InstallInfo, target: str, where: str, chosen: str = "", journaled: tuple = ()) -> str:
    """What to do when EAGLE-3 is not in effect, for this release's EAGLE-3 contract.

    ``chosen``: the ``--arch``/``--model`` options verify was given (``" --arch X"``), empty for the
    default set. Architectures chosen that way are planned by ``apply`` on every era that has the
    SupportsEagle3 Protocol, so the hint is that command (it writes them, or says why it refuses).
    ``journaled``: without ``chosen``, the architectures the journal says an ``--arch``/``--model``
    run patched (verify checked them too; only ``apply --arch`` patches them again).
    """
    if chosen and (info.patchable or info.native):
        return f"run 'patchkit apply --target {target}{where}{chosen}' (it says what it writes, or why it refuses)"
    again = arch_options(journaled)
    if again and (info.patchable or info.native):
        return ((f"run 'patchkit apply --target {target}{where}' for the default set and " if info.patchable else "run ")
                + f"'patchkit apply --target {target}{where}{again}' for the architectures patchkit's journal says "
                "an --arch/--model run patched")
    if info.patchable:
        return f"run 'patchkit apply --target {target}{where}'"
    if info.native:
        return (f"vLLM {info.version} supports EAGLE-3 for these models natively and patchkit has nothing to "
                f"apply; the files above differ from the release: reinstall vLLM "
                f"(pip install --force-reinstall --no-deps {info.distribution}=={info.version})")
    return (f"patchkit cannot add EAGLE-3 to vLLM {info.version} ({info.era_description}): "
            "upgrade vLLM ('patchkit list' shows the releases each patch is for)")


def reapply_hint(reapply: Sequence[Sequence[str]], target: str, where: str) -> str:
    """``status``'s hint when a reinstall or an upgrade replaced journaled files (:attr:`StatusReport.reapply`).

    ``reapply``: the ``--arch`` lists of the ``apply`` runs that patch them again (``()`` for the
    default set); ``where``: the environment options (:func:`where`).
    """
    runs = " and ".join(f"'patchkit apply --target {target}{where}" + arch_options(archs) + "'" for archs in reapply)
    return (f" run {runs} again for this release"
            + (" (the --arch names: the architectures patchkit's journal says an --arch/--model run patched)"
               if any(reapply) else ""))
