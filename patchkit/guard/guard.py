"""patchkit's guard: a tiny distribution in the serving environment that checks, in every vLLM
process, that the files patchkit patched still hold its bytes (issue 20).

``patchkit apply --guard`` and ``patchkit guard install`` write, into the site-packages of the
vLLM install, without pip (so it works offline), a real distribution:

- ``patchkit_guard/guard.py``: :mod:`patchkit.guard.guard_plugin`, byte for byte (standard library
  only, runs on the serving Python, 3.8 or newer, without patchkit), and a one-line ``__init__.py``;
- ``patchkit_guard/manifest.json``: what it checks (:func:`manifest`): format, the vLLM files
  patchkit journals as patched with the SHA-256 of the bytes patchkit wrote (from the journal,
  :mod:`patchkit.store.journal`), the vLLM version they were patched for, the architectures those
  patches serve, the model-runner generations the install holds with the flag that picks one
  (:mod:`patchkit.vllm.runner.generations`), the patched architectures whose written shape is not
  shown to keep greedy output under a generation (:func:`patchkit.plan.arch_scope.not_shown`: an
  ``apply --force`` on a V2 serve), and the ``patchkit apply`` command (with the environment options
  given) its line names. The guard reads this manifest, not the journal, so it needs neither patchkit nor the
  journal's format; ``apply`` and ``revert`` rewrite it whenever the guard is installed.
- ``patchkit_guard-<version>.dist-info/``: ``METADATA`` (``Name: patchkit-guard``), ``INSTALLER``
  (``patchkit``), ``top_level.txt``, ``entry_points.txt`` with group ``vllm.general_plugins`` and
  ``RECORD`` (every file with its ``sha256=`` digest and size, RECORD itself without: the wheel
  spec's form, so ``pip list`` shows it and ``pip uninstall patchkit-guard`` could remove it).
  ``importlib.metadata.entry_points(group="vllm.general_plugins")`` finds it through the
  ``.dist-info`` folder on ``sys.path`` (that is what vLLM's ``load_plugins_by_group`` calls).

Every one of these files is journaled like any other change, in the journal of distribution
``patchkit-guard`` (``.patchkit/patchkit-guard/journal.json``, the same transaction: pending
record, all or none, the same site-packages lock). They did not exist before, so their original
is "absent" and reverting them deletes them (and the folders, ``__pycache__`` included, they
leave empty). The vLLM journal stays about vLLM's files.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from patchkit import __version__
from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.errors import RefusedError
from patchkit.store.files import sha256
from patchkit.store.journal import Journal
from patchkit.store.plugin_dist import PluginDist, plugin_file_bytes
from patchkit.plugin_results import PluginAction, PluginReport, PluginRun
from patchkit.results import Check
from patchkit.vllm.release.contract import GENERAL_PLUGINS_FROM

if TYPE_CHECKING:
    from patchkit.results import ApplyReport
    from patchkit.vllm.release.install import Install

NAME = "guard"
"""The plugin's name (:class:`patchkit.store.plugin_dist.Plugin`): ``patchkit guard ...``, the reports' key."""
EFFECT = Effect.GUARD
"""What a ``patchkit guard install|remove`` step changes (:class:`patchkit.advice.Effect`)."""
DISTRIBUTION = "patchkit-guard"
"""The guard's distribution name (``pip list`` shows it); also the name of its journal."""
PACKAGE = "patchkit_guard"
"""The guard's import package."""
ENTRY_POINT_GROUP = "vllm.general_plugins"
"""vLLM's entry-point group of plugins loaded in every process (``vllm/plugins/__init__.py``
``DEFAULT_PLUGINS_GROUP``, :data:`patchkit.vllm.release.contract.GENERAL_PLUGINS_FROM` on)."""
GROUP = ENTRY_POINT_GROUP
FIRST_RELEASE = GENERAL_PLUGINS_FROM
"""The first release the guard serves (every release patchkit patches has its group)."""
ENTRY_POINT = f"{PACKAGE} = {PACKAGE}.guard:check"
"""The entry point: its name is what ``VLLM_PLUGINS`` must list when that variable is set."""
PATCH_ID = "guard"
"""The patch id the guard's files carry in their journal."""
MANIFEST_FORMAT = 1


DIST = PluginDist(
    DISTRIBUTION,
    PACKAGE,
    "patchkit's guard: checks at every vLLM start that the files patchkit patched still hold its bytes",
    ((ENTRY_POINT_GROUP, ENTRY_POINT),),
    PATCH_ID,
)
"""The guard's distribution (:mod:`patchkit.store.plugin_dist` writes, journals and removes it)."""
LAYOUT = (
    "action",
    "installed",
    "files",
    "watched",
    "architectures",
    "apply_command",
    "problems",
    "install_command",
    "next_steps",
)
"""The keys of the guard's report in ``--json`` (docs/json.md), in order."""


def report(
    action: PluginAction,
    installed: bool,
    files: Sequence[str] = (),
    watched: Sequence[str] = (),
    architectures: Sequence[str] = (),
    apply_command: str = "",
    **common: Any,
) -> PluginReport:
    """The guard's report (:class:`~patchkit.plugin_results.PluginReport`); its details are ``watched``
    (the vLLM files its manifest checks at every vLLM start), ``architectures`` (the patched ones it
    stops when served with EAGLE-3) and ``apply_command`` (the ``patchkit apply`` its line names).
    ``common``: the report's other fields by name (``problems``, ``install_command``, ``next_steps``)."""
    details = {"watched": tuple(watched), "architectures": tuple(architectures), "apply_command": apply_command}
    return PluginReport(NAME, action, installed, tuple(files), details=details, layout=LAYOUT, **common)


def dist_info() -> str:
    """The guard's ``.dist-info`` folder name (the version is patchkit's)."""
    return DIST.dist_info


def module_path() -> str:
    """The guard module's path relative to site-packages (vLLM's log lines name its file: ``guard.py``)."""
    return f"{PACKAGE}/guard.py"


def manifest_path() -> str:
    """The manifest's path relative to site-packages."""
    return f"{PACKAGE}/manifest.json"


def journal_of(install: Install) -> Journal:
    """The journal of the guard's files in ``install``'s site-packages."""
    return DIST.journal(install)


def apply_command(
    command_options: Sequence[str] | None,
    architectures: Sequence[str] = (),
    model: str | None = None,
    target: str = "vllm",
) -> str:
    """The ``patchkit apply`` command that patches this install again (:func:`patchkit.advice.patchkit_argv`).

    Args:
        command_options: the environment options given (``["--python", "/opt/venv/bin/python"]``), or None.
        architectures: ``--arch`` names to repeat (architectures an ``--arch``/``--model`` run patched).
        model: a ``--model`` folder to repeat instead of the names, or None.
        target: the distribution.
    """
    return shlex.join(
        patchkit_argv(
            "apply",
            target=target,
            environment=command_options or (),
            model=model or None,
            architectures=() if model else architectures,
        )
    )


def watched_files(install: Install, journal: Journal) -> dict[str, str]:
    """``{path: sha256 patchkit wrote}`` for every journaled vLLM file that holds patchkit's bytes now.

    Files a reinstall or an upgrade replaced, or that were edited, are left out: the guard
    watches what ``apply`` left patched (``patchkit status`` names the others).
    """
    out = {}
    for path, entry in sorted(journal.entries.items()):
        file = install.site_packages / path
        if file.is_file() and sha256(file.read_bytes()) == entry.sha256_after:
            out[path] = entry.sha256_after
    return out


def manifest(
    install: Install,
    journal: Journal,
    command_options: Sequence[str] | None,
    model: str | None = None,
    target: str = "vllm",
) -> dict:
    """The manifest the guard reads (format :data:`MANIFEST_FORMAT`); see the module docstring.

    Args:
        install: the vLLM install.
        journal: its vLLM journal, as it is after the command.
        command_options: the environment options given, for the line's ``patchkit apply``.
        model: the ``--model`` folder of the run (or of the previous manifest), to repeat.
    """
    # status and verify import this module; the planning chain costs them ~45 ms (21 modules)
    from patchkit.plan.arch_scope import not_shown  # lazy: keeps status's start-up (planning chain)
    from patchkit.plan.selection import patched_architectures  # lazy: keeps status's start-up (planning chain)
    from patchkit.vllm.runner.generations import SELECTOR  # lazy: the manifest alone reads the install's runners
    from patchkit.vllm.runner.serving import serving_runner  # lazy: the manifest alone reads the install's runners
    from patchkit.vllm.release.source import SourceTree  # lazy: the manifest alone reads the install's runners

    served, chosen = patched_architectures(install, journal)
    return {
        "format": MANIFEST_FORMAT,
        "written_by": f"patchkit {__version__}",
        "vllm_version": str(install.version),
        "files": watched_files(install, journal),
        "architectures": list(served),
        "runners": list(serving_runner(SourceTree(install.site_packages)).present),
        "runner_flag": SELECTOR,
        "not_shown": not_shown(install, journal, served),
        "apply": apply_command(command_options, chosen, model, target),
        "options": list(command_options or ()),
        "model": model,
    }


def distribution(data: dict) -> dict[str, bytes]:
    """The guard's files, ``{path relative to site-packages: bytes}``, in the order they are written
    (:meth:`patchkit.store.plugin_dist.PluginDist.files`: the package first, ``RECORD`` last)."""
    return DIST.files(
        {
            f"{PACKAGE}/__init__.py": b'"""patchkit\'s guard (written by patchkit; its code is in guard.py)."""\n',
            module_path(): (Path(__file__).with_name("guard_plugin.py")).read_bytes(),
            f"{PACKAGE}/plugin_file.py": plugin_file_bytes(),
            manifest_path(): (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(),
        }
    )


def installed(install: Install) -> bool:
    """True when the guard's journal lists its files in this install."""
    return DIST.installed(install)


def edited(install: Install) -> dict[str, tuple[str, ...]]:
    """``{path: patch ids}`` of the guard's files that are there but no longer hold the bytes patchkit wrote.

    Someone changed them (a debugging line in ``guard.py``, a hand-edited manifest): ``revert``
    refuses to delete or rewrite them without ``--force`` (:func:`patchkit.api.revert`). A guard
    file that is gone is not listed: deleting the rest loses nothing.
    """
    return DIST.edited(install)


def revert_blockers(install: Install) -> dict[str, tuple[str, ...]]:
    """The guard's files a revert must not delete without ``--force``: those edited (:func:`edited`)."""
    return edited(install)


def _read_manifest(install: Install) -> dict | None:
    try:
        data = json.loads((install.site_packages / manifest_path()).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def recorded_model(install: Install) -> str | None:
    """The ``--model`` folder the installed guard's manifest repeats in its ``patchkit apply`` (None: none, or no
    guard)."""
    model = (_read_manifest(install) or {}).get("model")
    return model if isinstance(model, str) and model else None


def sync(
    install: Install, journal: Journal, run: PluginRun = PluginRun(), *, dry_run: bool = False
) -> PluginReport | None:
    """Install or refresh the guard for the vLLM journal as it is now; call it under the install's lock.

    Args:
        install: the vLLM install.
        journal: its vLLM journal (after the command's writes).
        run: ``want`` (``--guard``: install it when it is not installed; otherwise only an installed
            guard is refreshed), the environment options given and the run's ``--model`` folder (each
            kept from the installed manifest when None), the target.
        dry_run: say what would be written; write nothing.
    Returns:
        A :class:`~patchkit.plugin_results.PluginReport`, or None when the guard is neither installed nor wanted.
    Raises:
        StateError: a guard file cannot be written (every file written is put back).
    """
    command_options, model, target = run.command_options, run.model, run.target
    gj = journal_of(install)
    if not gj.entries and not run.want:
        return None
    previous = _read_manifest(install) or {}
    if command_options is None:
        command_options = previous.get("options") or ()
    if model is None:
        model = previous.get("model")
    data = manifest(install, journal, command_options, model, target)
    if not data["files"]:
        if gj.entries:  # nothing patched is left: the guard has nothing to watch
            return remove(install, dry_run=dry_run)
        return report(PluginAction.NOTHING_TO_GUARD, False)
    files = distribution(data)
    written = DIST.write(install, files, dry_run=dry_run)
    action = written.action(dry_run)
    again = shlex.join(patchkit_argv("guard install", environment=data["options"]))
    return report(
        action,
        not dry_run or not written.fresh,
        tuple(files),
        tuple(data["files"]),
        tuple(data["architectures"]),
        data["apply"],
        install_command=again,
    )


def remove(install: Install, *, dry_run: bool = False) -> PluginReport:
    """Delete the guard's files (journaled: their original is "absent"); call it under the install's lock.

    A guard file edited or deleted since is deleted as well: ``guard remove`` removes only the
    guard, and ``revert`` checks :func:`edited` first (it refuses without ``--force``). Returns
    ``removed`` (``not installed`` when there was none).
    """
    paths = DIST.remove(install, dry_run=dry_run)
    if not paths:
        return report(PluginAction.NOT_INSTALLED, False)
    return report(PluginAction.REMOVED, dry_run, paths)


def state(install: Install, journal: Journal) -> PluginReport:
    """The guard in this install, for ``status`` and ``verify``; writes nothing.

    ``problems`` names a guard file that no longer holds the bytes patchkit wrote (or is gone),
    and a manifest out of date: a vLLM file it watches that patchkit's journal does not list as
    patched with those bytes, or a patched file it does not watch (run ``patchkit guard install``).
    """
    gj = journal_of(install)
    if not gj.entries:
        return report(PluginAction.NOT_INSTALLED, False)
    problems = DIST.problems(install)
    data = _read_manifest(install) or {}
    watched = data.get("files") if isinstance(data.get("files"), dict) else {}
    journaled = {p: e.sha256_after for p, e in journal.entries.items()}
    for path, digest in sorted(watched.items()):
        if journaled.get(path) != digest:
            problems.append(f"its manifest watches {path}, which patchkit's journal does not list with those bytes")
    for path in sorted(set(watched_files(install, journal)) - set(watched)):
        problems.append(f"its manifest does not watch {path}, which patchkit patched")
    options = [str(o) for o in data.get("options") or ()]
    again = shlex.join(patchkit_argv("guard install", environment=options))
    return report(
        PluginAction.SHOWN,
        True,
        tuple(sorted(gj.entries)),
        tuple(sorted(watched)),
        tuple(data.get("architectures") or ()),
        str(data.get("apply") or ""),
        problems=tuple(problems),
        install_command=again,
    )


def would_install(install: Install, applied: ApplyReport, journal: Journal, run: PluginRun) -> PluginReport:
    """What ``apply --guard --dry-run`` would do with the guard: the files it would watch after the run.

    Args:
        applied: the dry run's :class:`~patchkit.results.ApplyReport` (its ``files`` would be written).
        journal: the vLLM journal as it is now.
        run: the run's options (the guard's files do not depend on them).
    """
    watched = sorted(set(watched_files(install, journal)) | {f.path for f in applied.files})
    if not watched:
        return report(PluginAction.NOTHING_TO_GUARD, installed(install))
    paths = tuple(distribution({"format": MANIFEST_FORMAT}))
    return report(PluginAction.WOULD_INSTALL, installed(install), paths, tuple(watched))


GUARD_CHECK = "patchkit guard"
"""The label of ``verify``'s node about the guard."""


def check(report: PluginReport) -> Check:
    """``verify``'s node for an installed guard: fails when :attr:`PluginReport.problems` is not empty."""
    if report.problems:
        return Check(
            GUARD_CHECK, False, "; ".join(report.problems) + f" (run '{report.install_command}')", kind="guard"
        )
    archs = ", ".join(report.architectures) or "none"
    return Check(
        GUARD_CHECK,
        None,
        f"installed ({PACKAGE}, entry point {ENTRY_POINT_GROUP}): checks "
        f"{len(report.watched)} file(s) in every vLLM process; stops {archs} served with EAGLE-3 "
        "when one lacks patchkit's bytes",
        kind="guard",
    )


def check_run(run: PluginRun) -> None:
    """The guard has no settings: every run is valid."""


def refusal(install: Install) -> RefusedError | None:
    """None: every release patchkit patches has the guard's group (:data:`FIRST_RELEASE`)."""
    return None


def finish_install(found: PluginReport, run: PluginRun) -> PluginReport:
    """``guard install``'s report: with nothing to guard, the ``apply --guard`` that patches and guards."""
    if found.action is not PluginAction.NOTHING_TO_GUARD:
        return found
    step = NextStep(
        patchkit_argv("apply", target=run.target, environment=run.command_options or (), guard=True),
        "patches (with the --arch/--model you patch) and installs the guard",
        effect=Effect.PATCHES,
    )
    return replace(found, next_steps=(step,))
