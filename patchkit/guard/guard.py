"""patchkit's guard: a tiny distribution in the serving environment that checks, in every vLLM
process, that the files patchkit patched still hold its bytes (issue 20).

``patchkit apply --guard`` and ``patchkit guard install`` write, into the site-packages of the
vLLM install, without pip (so it works offline), a real distribution:

- ``patchkit_guard/guard.py``: :mod:`patchkit.guard.guard_plugin`, byte for byte (standard library
  only, runs on the serving Python, 3.8 or newer, without patchkit), and a one-line ``__init__.py``;
- ``patchkit_guard/manifest.json``: what it checks (:func:`manifest`): format, the vLLM files
  patchkit journals as patched with the SHA-256 of the bytes patchkit wrote (from the journal,
  :mod:`patchkit.store.journal`), the vLLM version they were patched for, the architectures those
  patches serve, and the ``patchkit apply`` command (with the environment options given) its line
  names. The guard reads this manifest, not the journal, so it needs neither patchkit nor the
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

import base64
import csv
import hashlib
import io
import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from patchkit import __version__, interrupt
from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.errors import StateError
from patchkit.store.files import sha256
from patchkit.store.journal import Journal, journal_for
from patchkit.store.records import PlannedWrite
from patchkit.results import Check, GuardAction, GuardReport

if TYPE_CHECKING:
    from patchkit.vllm.install import Install

DISTRIBUTION = "patchkit-guard"
"""The guard's distribution name (``pip list`` shows it); also the name of its journal."""
PACKAGE = "patchkit_guard"
"""The guard's import package."""
ENTRY_POINT_GROUP = "vllm.general_plugins"
"""vLLM's entry-point group of plugins loaded in every process (``vllm/plugins/__init__.py``
``DEFAULT_PLUGINS_GROUP``, 0.10.2 - 0.33.0)."""
ENTRY_POINT = f"{PACKAGE} = {PACKAGE}.guard:check"
"""The entry point: its name is what ``VLLM_PLUGINS`` must list when that variable is set."""
PATCH_ID = "guard"
"""The patch id the guard's files carry in their journal."""
MANIFEST_FORMAT = 1


def dist_info() -> str:
    """The guard's ``.dist-info`` folder name (the version is patchkit's)."""
    return f"{PACKAGE}-{__version__}.dist-info"


def module_path() -> str:
    """The guard module's path relative to site-packages (vLLM's log lines name its file: ``guard.py``)."""
    return f"{PACKAGE}/guard.py"


def manifest_path() -> str:
    """The manifest's path relative to site-packages."""
    return f"{PACKAGE}/manifest.json"


def journal_of(install: Install) -> Journal:
    """The journal of the guard's files in ``install``'s site-packages."""
    return Journal(install.site_packages, DISTRIBUTION, install.pycache_prefix, install.spellings)


def apply_command(command_options: Sequence[str] | None, architectures: Sequence[str] = (),
                  model: str | None = None, target: str = "vllm") -> str:
    """The ``patchkit apply`` command that patches this install again (:func:`patchkit.advice.patchkit_argv`).

    Args:
        command_options: the environment options given (``["--python", "/opt/venv/bin/python"]``), or None.
        architectures: ``--arch`` names to repeat (architectures an ``--arch``/``--model`` run patched).
        model: a ``--model`` folder to repeat instead of the names, or None.
        target: the distribution.
    """
    return shlex.join(patchkit_argv("apply", target=target, environment=command_options or (), model=model or None,
                                    architectures=() if model else architectures))


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


def patched_architectures(install: Install, journal: Journal) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(served, chosen)``: the architectures the journaled patches serve, and those an ``--arch`` run chose.

    ``served``: the architectures of the shipped patches journaled (their ``architectures``, from
    ``patches/``) and every registry architecture whose class got an interface patch
    (:func:`patchkit.plan.selection.journaled_architectures`); ``chosen``: the latter alone (they need
    ``--arch`` to be patched again).
    """
    # status and verify import this module; the planning chain costs them ~45 ms (21 modules)
    from patchkit.plan.selection import journaled_architectures  # lazy: keeps status's start-up (planning chain)
    from patchkit.plan.spec import load_patches  # lazy: keeps status's start-up (patch definitions)
    from patchkit.vllm.registry import Registry  # lazy: keeps status's start-up
    from patchkit.vllm.source import SourceTree  # lazy: keeps status's start-up

    ids = {pid for e in journal.entries.values() for pid in e.patches}
    shipped = [a for p in load_patches() if p.id in ids for a in p.architectures]
    chosen = journaled_architectures(journal, Registry(SourceTree(install.site_packages)))
    return tuple(dict.fromkeys([*shipped, *chosen])), tuple(chosen)


def manifest(install: Install, journal: Journal, command_options: Sequence[str] | None,
             model: str | None = None, target: str = "vllm") -> dict:
    """The manifest the guard reads (format :data:`MANIFEST_FORMAT`); see the module docstring.

    Args:
        install: the vLLM install.
        journal: its vLLM journal, as it is after the command.
        command_options: the environment options given, for the line's ``patchkit apply``.
        model: the ``--model`` folder of the run (or of the previous manifest), to repeat.
    """
    served, chosen = patched_architectures(install, journal)
    return {
        "format": MANIFEST_FORMAT,
        "written_by": f"patchkit {__version__}",
        "vllm_version": str(install.version),
        "files": watched_files(install, journal),
        "architectures": list(served),
        "apply": apply_command(command_options, chosen, model, target),
        "options": list(command_options or ()),
        "model": model,
    }


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def distribution(data: dict) -> dict[str, bytes]:
    """The guard's files, ``{path relative to site-packages: bytes}``, in the order they are written.

    The package first and ``entry_points.txt``/``RECORD`` last, so a vLLM process starting
    while they are written finds either no entry point or one whose module is complete.
    """
    info = dist_info()
    files: dict[str, bytes] = {
        f"{PACKAGE}/__init__.py": b'"""patchkit\'s guard (written by patchkit; its code is in guard.py)."""\n',
        module_path(): (Path(__file__).with_name("guard_plugin.py")).read_bytes(),
        manifest_path(): (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(),
        f"{info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {DISTRIBUTION}\n"
            f"Version: {__version__}\n"
            "Summary: patchkit's guard: checks at every vLLM start that the files patchkit patched still hold its bytes\n"
            "Requires-Python: >=3.8\n"
        ).encode(),
        f"{info}/INSTALLER": b"patchkit\n",
        f"{info}/top_level.txt": f"{PACKAGE}\n".encode(),
        f"{info}/entry_points.txt": f"[{ENTRY_POINT_GROUP}]\n{ENTRY_POINT}\n".encode(),
    }
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path, content in files.items():
        writer.writerow([path, _record_hash(content), len(content)])
    writer.writerow([f"{info}/RECORD", "", ""])
    files[f"{info}/RECORD"] = out.getvalue().encode()
    return files


def installed(install: Install) -> bool:
    """True when the guard's journal lists its files in this install."""
    return bool(journal_of(install).entries)


def edited(install: Install) -> dict[str, tuple[str, ...]]:
    """``{path: patch ids}`` of the guard's files that are there but no longer hold the bytes patchkit wrote.

    Someone changed them (a debugging line in ``guard.py``, a hand-edited manifest): ``revert``
    refuses to delete or rewrite them without ``--force`` (:func:`patchkit.api.revert`). A guard
    file that is gone is not listed: deleting the rest loses nothing.
    """
    out = {}
    for path, entry in sorted(journal_of(install).entries.items()):
        file = install.site_packages / path
        if file.is_file() and sha256(file.read_bytes()) != entry.sha256_after:
            out[path] = tuple(entry.patches)
    return out


def _read_manifest(install: Install) -> dict | None:
    try:
        data = json.loads((install.site_packages / manifest_path()).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def recorded_model(install: Install) -> str | None:
    """The ``--model`` folder the installed guard's manifest repeats in its ``patchkit apply`` (None: none, or no guard)."""
    model = (_read_manifest(install) or {}).get("model")
    return model if isinstance(model, str) and model else None


def sync(install: Install, journal: Journal, *, command_options: Sequence[str] | None = None,
         model: str | None = None, want: bool = False, dry_run: bool = False,
         target: str = "vllm") -> GuardReport | None:
    """Install or refresh the guard for the vLLM journal as it is now; call it under the install's lock.

    Args:
        install: the vLLM install.
        journal: its vLLM journal (after the command's writes).
        command_options: the environment options given (kept from the installed manifest when None).
        model: the run's ``--model`` folder (kept from the installed manifest when None).
        want: install it when it is not installed (``--guard``); otherwise only an installed guard
            is refreshed.
        dry_run: say what would be written; write nothing.
    Returns:
        A :class:`GuardReport`, or None when the guard is neither installed nor wanted.
    Raises:
        StateError: a guard file cannot be written (every file written is put back).
    """
    gj = journal_of(install)
    if not gj.entries and not want:
        return None
    previous = _read_manifest(install) or {}
    if command_options is None:
        command_options = previous.get("options") or ()
    if model is None:
        model = previous.get("model")
    data = manifest(install, journal, command_options, model, target)
    if not data["files"]:
        if gj.entries:  # nothing patched is left: the guard has nothing to watch
            return remove(install, dry_run=dry_run, locked=True)
        return GuardReport(GuardAction.NOTHING_TO_GUARD, False)
    files = distribution(data)
    changes = []
    for path, content in files.items():
        current = install.site_packages / path
        before = current.read_bytes() if current.is_file() else None
        if before != content:
            changes.append(PlannedWrite(path, before, content, [PATCH_ID]))
    stale = [p for p in gj.entries if p not in files]  # files of a guard from another patchkit version
    action = (GuardAction.UNCHANGED if not changes and not stale else
              GuardAction.WOULD_INSTALL if dry_run else
              GuardAction.REFRESHED if gj.entries else GuardAction.INSTALLED)
    if not dry_run and (changes or stale):
        if changes:
            gj.commit(changes, str(install.version))
        if stale:
            gj.restore(sorted(stale))
    again = shlex.join(patchkit_argv("guard install", environment=data["options"]))
    return GuardReport(action, not dry_run or bool(gj.entries), tuple(files), tuple(data["files"]),
                       tuple(data["architectures"]), data["apply"], (), again)


def remove(install: Install, *, dry_run: bool = False, locked: bool = False) -> GuardReport:
    """Delete the guard's files (journaled: their original is "absent"); call under the lock when ``locked``.

    A guard file edited or deleted since is deleted as well: ``guard remove`` removes only the
    guard, and ``revert`` checks :func:`edited` first (it refuses without ``--force``). Returns
    ``removed`` (``not installed`` when there was none).
    """
    gj = journal_of(install)
    if not gj.entries:
        return GuardReport(GuardAction.NOT_INSTALLED, False)
    paths = sorted(gj.entries)
    if not dry_run:
        present = [p for p in paths if (install.site_packages / p).exists()]
        gj.narrow(present, {}, {}, str(install.version), forget=[p for p in paths if p not in present])
    return GuardReport(GuardAction.REMOVED, dry_run, tuple(paths))


def state(install: Install, journal: Journal) -> GuardReport:
    """The guard in this install, for ``status`` and ``verify``; writes nothing.

    ``problems`` names a guard file that no longer holds the bytes patchkit wrote (or is gone),
    and a manifest out of date: a vLLM file it watches that patchkit's journal does not list as
    patched with those bytes, or a patched file it does not watch (run ``patchkit guard install``).
    """
    gj = journal_of(install)
    if not gj.entries:
        return GuardReport(GuardAction.NOT_INSTALLED, False)
    problems = []
    for path, entry in sorted(gj.entries.items()):
        file = install.site_packages / path
        if not file.is_file():
            problems.append(f"{path} is gone")
        elif sha256(file.read_bytes()) != entry.sha256_after:
            problems.append(f"{path} was changed since patchkit wrote it")
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
    return GuardReport(GuardAction.SHOWN, True, tuple(sorted(gj.entries)), tuple(sorted(watched)),
                       tuple(data.get("architectures") or ()), str(data.get("apply") or ""), tuple(problems), again)


def would_install(install: Install, report, journal: Journal) -> GuardReport:
    """What ``apply --guard --dry-run`` would do with the guard: the files it would watch after the run.

    Args:
        report: the dry run's :class:`~patchkit.results.ApplyReport` (its ``files`` would be written).
        journal: the vLLM journal as it is now.
    """
    watched = sorted(set(watched_files(install, journal)) | {f.path for f in report.files})
    if not watched:
        return GuardReport(GuardAction.NOTHING_TO_GUARD, installed(install))
    paths = tuple(distribution({"format": MANIFEST_FORMAT}))
    return GuardReport(GuardAction.WOULD_INSTALL, installed(install), paths, tuple(watched))


GUARD_CHECK = "patchkit guard"
"""The label of ``verify``'s node about the guard."""


def check(report: GuardReport):
    """``verify``'s node for an installed guard: fails when :attr:`GuardReport.problems` is not empty."""
    if report.problems:
        return Check(GUARD_CHECK, False, "; ".join(report.problems) + f" (run '{report.install_command}')",
                     kind="guard")
    archs = ", ".join(report.architectures) or "none"
    return Check(GUARD_CHECK, None, f"installed ({PACKAGE}, entry point {ENTRY_POINT_GROUP}): checks "
                 f"{len(report.watched)} file(s) in every vLLM process; stops {archs} served with EAGLE-3 "
                 "when one lacks patchkit's bytes", kind="guard")


def install_guard(install: Install, *, command_options: Sequence[str] | None = None, target: str = "vllm",
                  on_wait=None) -> GuardReport:
    """``patchkit guard install``: install (or refresh) the guard for what patchkit has patched, under the lock.

    Returns:
        A :class:`GuardReport`: ``installed``, ``refreshed``, ``unchanged``, or ``nothing to guard``
        (patchkit has patched no file here; nothing is written).
    Raises:
        StateError: an apply or revert did not finish (run ``patchkit apply`` first), or a file
            cannot be written (nothing is left changed).
    """
    with interrupt.deferred(), journal_for(install, target).lock(on_wait=on_wait):
        journal = journal_for(install, target)
        if journal.pending:
            raise StateError("an apply or revert of this install did not finish, so its files are mixed", "",
                             NextStep(patchkit_argv("apply", target=target, environment=command_options or ()),
                                      "first: it puts them back (so does 'patchkit revert')", effect=Effect.PATCHES))
        report = sync(install, journal, command_options=command_options, want=True, target=target)
    if report is not None and report.action is GuardAction.NOTHING_TO_GUARD:
        step = NextStep(patchkit_argv("apply", target=target, environment=command_options or (), guard=True),
                        "patches (with the --arch/--model you patch) and installs the guard", effect=Effect.PATCHES)
        report = replace(report, next_steps=(step,))
    return report


def remove_guard(install: Install, *, target: str = "vllm", on_wait=None) -> GuardReport:
    """``patchkit guard remove``: delete the guard's files (the vLLM patches stay), under the lock."""

    with interrupt.deferred(), journal_for(install, target).lock(on_wait=on_wait):
        return remove(install, locked=True)
