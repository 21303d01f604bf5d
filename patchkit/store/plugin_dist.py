"""A small distribution patchkit writes into a serving environment, journaled: the guard's and the watch's;
and the ``<plugin> install``/``remove`` commands every plugin shares (:func:`install_plugin`, :func:`remove_plugin`).

:class:`PluginDist` describes one (its name, import package, summary, entry points). Its files are
the package's files, then a ``<package>-<version>.dist-info/`` with ``METADATA``, ``INSTALLER``
(``patchkit``), ``top_level.txt``, ``entry_points.txt`` and ``RECORD`` (every file with its
``sha256=`` digest and size, RECORD itself without: the wheel spec's form, so ``pip list`` shows it
and ``importlib.metadata.entry_points(group=...)``, which vLLM's ``load_plugins_by_group`` calls,
finds it through the ``.dist-info`` folder on ``sys.path``). ``entry_points.txt`` and ``RECORD``
are written last, so a vLLM process starting meanwhile finds either no entry point or one whose
module is complete.

Every file is journaled like any change to vLLM's files, in the journal named after the
distribution (``.patchkit/<distribution>/journal.json``; the same transaction, :mod:`patchkit.store.journal`:
pending record, all or none, the one site-packages lock the caller holds). None existed before,
so each original is "absent" and reverting deletes it (and the folders, ``__pycache__`` included,
it leaves empty).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from pathlib import Path
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from patchkit import __version__, interrupt
from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.errors import RefusedError, StateError
from patchkit.plugin_results import PluginAction, PluginReport, PluginRun
from patchkit.store.files import sha256
from patchkit.store.journal import Journal, journal_for
from patchkit.store.records import PlannedWrite
from patchkit.vllm.release.install import Install

if TYPE_CHECKING:
    from patchkit.results import ApplyReport, Check


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass(frozen=True)
class Written:
    """What :meth:`PluginDist.write` did: ``changed`` (files written or stale ones deleted, or with
    ``dry_run`` would be) and ``fresh`` (it was not installed before)."""

    changed: bool
    fresh: bool

    def action(self, dry_run: bool) -> PluginAction:
        """What an install that wrote this did, as the plugins report it: nothing changed, would install
        (a dry run), installed (fresh) or refreshed."""
        if not self.changed:
            return PluginAction.UNCHANGED
        if dry_run:
            return PluginAction.WOULD_INSTALL
        return PluginAction.INSTALLED if self.fresh else PluginAction.REFRESHED


@dataclass(frozen=True)
class PluginDist:
    """One of patchkit's plugin distributions.

    Attributes:
        distribution: its name (``pip list``), also its journal's name (``patchkit-guard``).
        package: its import package (``patchkit_guard``).
        summary: the METADATA summary line.
        entry_points: ``(group, "name = module:attr")`` pairs for ``entry_points.txt``.
        patch_id: the patch id its files carry in their journal.
    """

    distribution: str
    package: str
    summary: str
    entry_points: tuple[tuple[str, str], ...]
    patch_id: str

    @property
    def dist_info(self) -> str:
        """The ``.dist-info`` folder name (the version is patchkit's)."""
        return f"{self.package}-{__version__}.dist-info"

    def journal(self, install: Install) -> Journal:
        """The journal of its files in ``install``'s site-packages."""
        return Journal(install.site_packages, self.distribution, install.pycache_prefix, install.spellings)

    def installed(self, install: Install) -> bool:
        """True when its journal lists its files in this install."""
        return bool(self.journal(install).entries)

    def files(self, package_files: dict[str, bytes]) -> dict[str, bytes]:
        """Every file, ``{path relative to site-packages: bytes}``, in the order they are written.

        Args:
            package_files: the package's own files (paths under :attr:`package`), written first.
        """
        info = self.dist_info
        groups: dict[str, list[str]] = {}
        for group, line in self.entry_points:
            groups.setdefault(group, []).append(line)
        files: dict[str, bytes] = {
            **package_files,
            f"{info}/METADATA": (
                f"Metadata-Version: 2.1\nName: {self.distribution}\nVersion: {__version__}\n"
                f"Summary: {self.summary}\nRequires-Python: >=3.8\n"
            ).encode(),
            f"{info}/INSTALLER": b"patchkit\n",
            f"{info}/top_level.txt": f"{self.package}\n".encode(),
            f"{info}/entry_points.txt": "".join(
                f"[{g}]\n" + "".join(f"{e}\n" for e in lines) for g, lines in groups.items()
            ).encode(),
        }
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for path, content in files.items():
            writer.writerow([path, _record_hash(content), len(content)])
        writer.writerow([f"{info}/RECORD", "", ""])
        files[f"{info}/RECORD"] = out.getvalue().encode()
        return files

    def write(self, install: Install, files: dict[str, bytes], *, dry_run: bool = False) -> Written:
        """Write ``files`` (journaled) and delete files of an earlier version that ``files`` lacks.

        Call it under the install's lock. Nothing is written when every file holds these bytes.

        Raises:
            StateError: a file cannot be written (every file written is put back).
            Interrupted: SIGINT/SIGTERM while writing (every file written is put back).
        """
        journal = self.journal(install)
        fresh = not journal.entries
        changes = []
        for path, content in files.items():
            current = install.site_packages / path
            before = current.read_bytes() if current.is_file() else None
            if before != content:
                changes.append(PlannedWrite(path, before, content, [self.patch_id]))
        stale = [p for p in journal.entries if p not in files]
        if not dry_run:
            if changes:
                journal.commit(changes, str(install.version), own=True)  # an edited file stays ours
            if stale:
                journal.restore(sorted(stale))
        return Written(bool(changes or stale), fresh)

    def remove(self, install: Install, *, dry_run: bool = False) -> tuple[str, ...]:
        """Delete its files (their original is "absent"); call it under the install's lock.

        A file edited or deleted since is deleted as well (it is patchkit's own file, not a
        user's). Returns the paths the journal listed (empty when it was not installed).
        """
        journal = self.journal(install)
        paths = sorted(journal.entries)
        if paths and not dry_run:
            present = [p for p in paths if (install.site_packages / p).exists()]
            journal.narrow(present, {}, {}, str(install.version), forget=[p for p in paths if p not in present])
        return tuple(paths)

    def problems(self, install: Install) -> list[str]:
        """Each of its files that is gone or no longer holds the bytes patchkit wrote; writes nothing."""
        out = []
        for path, entry in sorted(self.journal(install).entries.items()):
            file = install.site_packages / path
            if not file.is_file():
                out.append(f"{path} is gone")
            elif sha256(file.read_bytes()) != entry.sha256_after:
                out.append(f"{path} was changed since patchkit wrote it")
        return out

    def edited(self, install: Install) -> dict[str, tuple[str, ...]]:
        """``{path: patch ids}`` of its files that are there but no longer hold the bytes patchkit wrote
        (a file that is gone is not listed); writes nothing."""
        out = {}
        for path, entry in sorted(self.journal(install).entries.items()):
            file = install.site_packages / path
            if file.is_file() and sha256(file.read_bytes()) != entry.sha256_after:
                out[path] = tuple(entry.patches)
        return out


__all__ = ["Plugin", "PluginDist", "Written", "install_plugin", "remove_plugin"]


@runtime_checkable
class Plugin(Protocol):
    """One of patchkit's plugins: a distribution patchkit writes into the serving environment, loaded
    by vLLM through an entry-point group. A plugin is a module with these names (a module satisfies
    a Protocol, PEP 544): :mod:`patchkit.guard.guard` and :mod:`patchkit.watch.watch`, listed once in
    :data:`patchkit.api.PLUGINS`. The commands every plugin shares are
    :func:`install_plugin` and :func:`remove_plugin`, its one line in :mod:`patchkit.ui.console`.

    Attributes:
        NAME: the command group and report key (``guard``, ``watch``).
        EFFECT: what its ``install``/``remove`` step changes (:class:`patchkit.advice.Effect`).
        GROUP: vLLM's entry-point group that loads it.
        FIRST_RELEASE: the first vLLM release that has :attr:`GROUP` (from :mod:`patchkit.vllm.release.contract`).
        DIST: its distribution (:class:`PluginDist`).
        LAYOUT: the keys of its report in ``--json``, in order (:attr:`PluginReport.layout`).
    """

    NAME: str
    EFFECT: Effect
    GROUP: str
    FIRST_RELEASE: str
    DIST: PluginDist
    LAYOUT: tuple[str, ...]

    def report(self, action: PluginAction, installed: bool, **details: Any) -> PluginReport:
        """Its report, every detail it reports defaulted."""

    def installed(self, install: Install) -> bool:
        """True when its journal lists its files in this install."""

    def check_run(self, run: PluginRun) -> None:
        """Raise :class:`~patchkit.errors.UsageError` (exit 2) for a setting of ``run`` out of range."""

    def refusal(self, install: Install) -> RefusedError | None:
        """Why this release cannot run it (None: it can)."""

    def sync(
        self, install: Install, journal: Journal, run: PluginRun = ..., *, dry_run: bool = False
    ) -> PluginReport | None:
        """Install or refresh it for the vLLM journal as it is now, under the install's lock (None: neither
        installed nor wanted)."""

    def remove(self, install: Install, *, dry_run: bool = False) -> PluginReport:
        """Delete its files, under the install's lock (``removed``, or ``not installed``)."""

    def state(self, install: Install, journal: Journal) -> PluginReport:
        """It in this install, for ``status`` and ``verify``; writes nothing."""

    def would_install(self, install: Install, applied: ApplyReport, journal: Journal, run: PluginRun) -> PluginReport:
        """What ``apply --<name> --dry-run`` would do with it."""

    def check(self, report: PluginReport) -> Check:
        """``verify``'s node for it when installed: fails when ``report.problems`` is not empty."""

    def finish_install(self, found: PluginReport, run: PluginRun) -> PluginReport:
        """``<name> install``'s report from :meth:`sync`'s (the next steps of a refused install)."""

    def revert_blockers(self, install: Install) -> dict[str, tuple[str, ...]]:
        """``{path: patch ids}`` of its files a revert must not delete without ``--force``."""


def install_plugin(plugin: Plugin, install: Install, run: PluginRun, *, on_wait=None) -> PluginReport:
    """``patchkit <plugin> install``: install (or refresh) ``plugin`` for what patchkit has patched, under the lock.

    Args:
        plugin: the plugin (:class:`patchkit.plugin_results.Plugin`).
        run: the command's options (``want`` is taken as True).
        on_wait: called while another patchkit run holds the install's lock.
    Returns:
        The plugin's report: ``installed``, ``refreshed``, ``unchanged``, or a refused action (exit 3:
        the release lacks the plugin's group, or there is nothing for it to do; nothing is written).
    Raises:
        UsageError: a setting out of range (:meth:`Plugin.check_run`).
        StateError: an apply or revert did not finish (run ``patchkit apply`` first), or a file
            cannot be written (nothing is left changed).
    """
    plugin.check_run(run)
    refused = plugin.refusal(install)
    if refused is not None:
        return plugin.report(
            PluginAction.NO_PLUGIN_GROUP,
            plugin.installed(install),
            missing=refused.message,
            next_steps=(refused.step,) if refused.step is not None else (),
        )
    want = replace(run, want=True)
    with interrupt.deferred(), journal_for(install, run.target).lock(on_wait=on_wait):
        journal = journal_for(install, run.target)
        if journal.pending:
            raise StateError(
                "an apply or revert of this install did not finish, so its files are mixed",
                "",
                NextStep(
                    patchkit_argv("apply", target=run.target, environment=run.command_options or ()),
                    "first: it puts them back (so does 'patchkit revert')",
                    effect=Effect.PATCHES,
                ),
            )
        report = plugin.sync(install, journal, want)
    assert report is not None  # wanted: sync always reports
    return plugin.finish_install(report, want)


def remove_plugin(plugin: Plugin, install: Install, *, target: str = "vllm", on_wait=None) -> PluginReport:
    """``patchkit <plugin> remove``: delete ``plugin``'s files (the vLLM patches stay), under the lock."""
    with interrupt.deferred(), journal_for(install, target).lock(on_wait=on_wait):
        return plugin.remove(install)


def plugin_file_bytes() -> bytes:
    """:mod:`patchkit.store.plugin_file`'s bytes, which each plugin's distribution carries beside its code
    (``PACKAGE/plugin_file.py``): the one JSON reader the guard and the watch share where they run."""
    return Path(__file__).with_name("plugin_file.py").read_bytes()
