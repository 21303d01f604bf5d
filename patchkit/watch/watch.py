"""patchkit's acceptance watch: a tiny distribution in the serving environment that reads vLLM's
spec-decode counters as the serve runs and, when first-position acceptance collapses, logs one
line saying why (issue 26).

``patchkit apply --watch`` and ``patchkit watch install`` write, into the site-packages of the vLLM
install, without pip (so it works offline), a real distribution (:mod:`patchkit.store.plugin_dist`):

- ``patchkit_watch/watch.py``: :mod:`patchkit.watch.watch_plugin`, byte for byte (the standard
  library and vLLM's ``StatLoggerBase``; runs without patchkit), and a one-line ``__init__.py``;
- ``patchkit_watch/watch.json``: what patchkit knows at install time (:func:`data`): the release,
  the plugin base class, the fields each model runner of this release reads the draft's aux ids
  from (:func:`patchkit.vllm.checkpoints.drafts.read_release`), the target's default ids
  (:data:`patchkit.vllm.stream.aux_defaults.DEFAULT_ID_TERMS`), the architectures whose capture patchkit
  wrote (from its journal), the drafts to count and the threshold, and the environment options;
- ``patchkit_watch-<version>.dist-info/``: ``entry_points.txt`` with group ``vllm.stat_logger_plugins``
  (:data:`patchkit.vllm.plugins.stat_loggers.GROUP`) naming ``AcceptanceWatch``, and ``RECORD``.

Every file is journaled (``.patchkit/patchkit-watch/``, same transaction and lock as vLLM's files);
``revert`` and ``watch remove`` delete them, byte-exact. ``apply`` and ``revert --arch`` rewrite
``watch.json`` whenever the watch is installed (what patchkit patched changed). A release without
the group (before 0.11.1, :func:`patchkit.vllm.plugins.stat_loggers.support`) gets nothing: vLLM is never
patched for the watch. The line's causes are the :class:`Cause` values.
"""

from __future__ import annotations

import json
import math
import shlex
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from patchkit import __version__
from patchkit.advice import Effect, NextStep, patchkit_argv
from patchkit.errors import RefusedError, UsageError
from patchkit.plugin_results import PluginAction, PluginReport, PluginRun
from patchkit.results import Check
from patchkit.store.journal import Journal
from patchkit.store.plugin_dist import PluginDist, plugin_file_bytes
from patchkit.vllm.plugins import stat_loggers
from patchkit.vllm.release.source import SourceTree

if TYPE_CHECKING:
    from patchkit.results import ApplyReport
    from patchkit.vllm.release.install import Install

NAME = "watch"
"""The plugin's name (:class:`patchkit.store.plugin_dist.Plugin`): ``patchkit watch ...``, the reports' key."""
EFFECT = Effect.WATCH
"""What a ``patchkit watch install|remove`` step changes (:class:`patchkit.advice.Effect`)."""
GROUP = stat_loggers.GROUP
FIRST_RELEASE = stat_loggers.FIRST_RELEASE
"""The first release with :data:`GROUP` (:data:`patchkit.vllm.release.contract.STAT_LOGGER_PLUGINS_FROM`)."""
DISTRIBUTION = "patchkit-watch"
"""The watch's distribution name (``pip list`` shows it); also the name of its journal."""
PACKAGE = "patchkit_watch"
ENTRY_POINT = f"{PACKAGE} = {PACKAGE}.watch:AcceptanceWatch"
"""The entry point: its name is what ``VLLM_PLUGINS`` must list when that variable is set."""
PATCH_ID = "watch"
DATA_FORMAT = 1
"""The format of ``watch.json`` (the plugin's ``DATA_FORMAT`` is the same; tests/test_watch.py checks it)."""
DEFAULT_DRAFTS = 200
"""Drafts counted before the watch judges (``--drafts``; ``PATCHKIT_WATCH_DRAFTS`` at serve time)."""
DEFAULT_THRESHOLD = 0.2
"""First-position acceptance below which it speaks (``--threshold``; ``PATCHKIT_WATCH_THRESHOLD``).
A working draft is accepted at the first position 45 - 60% of the time in upstream reports
(vllm#43671, #50170); the broken ones there were at 1 - 10%."""
DIST = PluginDist(
    DISTRIBUTION,
    PACKAGE,
    "patchkit's acceptance watch: says why EAGLE-3 acceptance collapsed in a vLLM serve",
    ((stat_loggers.GROUP, ENTRY_POINT),),
    PATCH_ID,
)


LAYOUT = (
    "action",
    "installed",
    "files",
    "drafts",
    "threshold",
    "architectures",
    "readers",
    "vllm_version",
    "problems",
    "install_command",
    "missing",
    "next_steps",
)
"""The keys of the watch's report in ``--json`` (docs/json.md), in order."""


def report(
    action: PluginAction,
    installed: bool,
    files: Sequence[str] = (),
    drafts: int = 0,
    threshold: float = 0.0,
    architectures: Sequence[str] = (),
    readers: Sequence[str] = (),
    vllm_version: str = "",
    missing: str | None = None,
    **common: Any,
) -> PluginReport:
    """The watch's report (:class:`~patchkit.plugin_results.PluginReport`). Its details: ``drafts``
    (counted before it judges; ``PATCHKIT_WATCH_DRAFTS`` overrides it at serve time), ``threshold``
    (first-position acceptance below which it logs its line), ``architectures`` (those whose capture
    patchkit wrote: a cause the line can name), ``readers`` (per model runner of this release, where
    it reads the draft's ids: ``runner: fields (file:line)``), ``vllm_version`` (the release its data
    file was written for) and ``missing`` (with ``no plugin group``: what this vLLM lacks, in words).
    ``common``: the report's other fields by name (``problems``, ``install_command``, ``next_steps``)."""
    details = {
        "drafts": drafts,
        "threshold": threshold,
        "architectures": tuple(architectures),
        "readers": tuple(readers),
        "vllm_version": vllm_version,
        "missing": missing,
    }
    return PluginReport(NAME, action, installed, tuple(files), details=details, layout=LAYOUT, **common)


class Cause(str, Enum):
    """The causes the watch's line names (``(1) code: why``), likeliest first (the plugin's ``CAUSES``)."""

    OTHER_VOCABULARY = "other-vocabulary"
    """The draft's ``vocab_size`` is not the target's: a draft of another tokenizer."""
    ID_CONVENTION = "id-convention"
    """The draft's ids count a layer's output (SpecForge) and the runner reads them as vLLM's: one layer early."""
    DEFAULT_IDS = "default-ids"
    """The runner fell back to the target's default ids (the draft records none, or where it does is ignored)."""
    PATCHED_CAPTURE = "patched-capture"
    """patchkit wrote the served architecture's capture (``patchkit rehearse`` checks it)."""
    UNKNOWN = "unknown"
    """Nothing patchkit knows explains it."""


def data_path() -> str:
    """``watch.json``'s path relative to site-packages."""
    return f"{PACKAGE}/watch.json"


def module_path() -> str:
    """The plugin module's path relative to site-packages."""
    return f"{PACKAGE}/watch.py"


def check_settings(drafts: int | None, threshold: float | None) -> None:
    """Raise :class:`UsageError` (exit 2) for ``--drafts`` below 1 or a ``--threshold`` outside 0 - 1."""
    if drafts is not None and drafts < 1:
        raise UsageError(
            f"--drafts {drafts}: the watch needs at least one draft to judge",
            f"give a positive number (the default is {DEFAULT_DRAFTS})",
        )
    if threshold is not None and not (0.0 <= threshold <= 1.0 and math.isfinite(threshold)):
        raise UsageError(
            f"--threshold {threshold}: first-position acceptance is a fraction from 0 to 1",
            f"give e.g. --threshold {DEFAULT_THRESHOLD}",
        )


def refusal(install: Install) -> RefusedError | None:
    """The refusal of a release without the ``vllm.stat_logger_plugins`` group (None: it has it)."""
    found = stat_loggers.support(SourceTree(install.site_packages))
    if found.available:
        return None
    return RefusedError(
        f"vLLM {install.version} has no '{stat_loggers.GROUP}' entry-point group "
        f"({found.missing.value}; the first release with one is {stat_loggers.FIRST_RELEASE}), "
        "so the acceptance watch cannot run there; nothing was written",
        "the guard works on every release",
        upgrade_step(install, found),
    )


def upgrade_step(install: Install, found: stat_loggers.Support) -> NextStep:
    """The upgrade to the first release with the stat-logger plugin group (:attr:`Effect.UPGRADE`)."""
    return NextStep(
        ("pip", "install", f"{install.distribution}>={stat_loggers.FIRST_RELEASE}"),
        f"the acceptance watch needs vLLM's '{stat_loggers.GROUP}' ({found.missing.value} in {install.version})",
        None,
        Effect.UPGRADE,
    )


def data(
    install: Install, journal: Journal, drafts: int, threshold: float, command_options: Sequence[str] | None
) -> dict:
    """The data file the plugin reads (format :data:`DATA_FORMAT`); see the module docstring.

    Args:
        install: the vLLM install; journal: its vLLM journal, as it is after the command.
        drafts, threshold: the watch's settings; command_options: the environment options given.
    """
    # status and verify import this module; the release readers and the planning chain cost them start-up
    from patchkit.plan.selection import patched_architectures  # lazy: keeps status's start-up (planning chain)
    from patchkit.vllm.checkpoints import drafts as drafts_mod  # lazy: keeps status's start-up (the draft readers)
    from patchkit.vllm.checkpoints.methods import EAGLE3, aux_methods  # lazy: keeps status's start-up (the same)
    from patchkit.vllm.stream.aux_defaults import DEFAULT_ID_TERMS  # lazy: keeps status's start-up (proposer paths)

    tree = SourceTree(install.site_packages)
    readers = drafts_mod.read_release(tree, install).readers
    served, _ = patched_architectures(install, journal) if journal.entries else ((), ())
    return {
        "format": DATA_FORMAT,
        "written_by": f"patchkit {__version__}",
        "vllm_version": str(install.version),
        "distribution": install.distribution,
        "base_class": f"{stat_loggers.LOGGERS_MODULE}:{stat_loggers.BASE_CLASS}",
        "drafts": drafts,
        "threshold": threshold,
        "ids_field": drafts_mod.IDS_FIELD,
        "eagle_config": drafts_mod.EAGLE_CONFIG,
        "methods": [EAGLE3, *(m for m in aux_methods(tree) if m != EAGLE3)],
        "fields": {
            "dflash_config": drafts_mod.DFLASH_CONFIG,
            "dspark": drafts_mod.DSPARK_IDS,
            "target": drafts_mod.TARGET_LAYER_IDS,
            "layer_ids": drafts_mod.LAYER_IDS,
        },
        "readers": [
            {
                "runner": r.runner,
                "location": r.location,
                "top_level": r.top_level,
                "nested": r.nested,
                "nested_offset": r.nested_offset,
                "layer_ids": r.layer_ids,
                "target_layer_ids": r.target_layer_ids,
                "dflash": r.dflash,
                "dflash_offset": r.dflash_offset,
                "dspark": r.dspark,
                "dspark_kept": list(r.dspark_kept),
                "dflash_layer_ids": r.dflash_layer_ids,
                "order": list(r.order),
            }
            for r in readers
        ],
        "default_ids": {"terms": [list(t) for t in DEFAULT_ID_TERMS]},
        "runner_choice": {
            "property": stat_loggers.RUNNER_V2_PROPERTY,
            "env": stat_loggers.RUNNER_V2_ENV,
            "v1": drafts_mod.RUNNER_MODULES[0][1],
            "v2": drafts_mod.RUNNER_MODULES[1][1],
            # one runner in the install (0.34.0: V2 alone, no flag): it serves, whatever the env says
            "only": _only_runner(tree, drafts_mod.RUNNER_MODULES),
        },
        "patched": list(served),
        "patch_ids": _patch_ids(journal),
        "options": list(command_options or ()),
    }


def _only_runner(tree: SourceTree, labels: tuple[tuple[str, str], ...]) -> str | None:
    """The watch's label of the install's one model runner (:mod:`patchkit.vllm.runner.serving`), None
    when it holds both (the serve's config or environment picks then) or none."""
    from patchkit.vllm.runner.serving import serving_runner  # lazy: keeps status's start-up (the runner wing)

    present = serving_runner(tree).present
    if len(present) != 1:
        return None
    return labels[0][1] if present == ("V1",) else labels[1][1]


def _patch_ids(journal: Journal) -> list[str]:
    """The patch ids the vLLM journal holds (``state`` compares them with the data file's, cheaply)."""
    return sorted({pid for e in journal.entries.values() for pid in e.patches})


def files(content: dict) -> dict[str, bytes]:
    """The watch's files, ``{path relative to site-packages: bytes}``, in the order they are written."""
    return DIST.files(
        {
            f"{PACKAGE}/__init__.py": (
                b'"""patchkit\'s acceptance watch (written by patchkit; its code is in watch.py)."""\n'
            ),
            module_path(): Path(__file__).with_name("watch_plugin.py").read_bytes(),
            f"{PACKAGE}/plugin_file.py": plugin_file_bytes(),
            data_path(): (json.dumps(content, indent=2, sort_keys=True) + "\n").encode(),
        }
    )


def installed(install: Install) -> bool:
    """True when the watch's journal lists its files in this install."""
    return DIST.installed(install)


def _read_data(install: Install) -> dict:
    try:
        found = json.loads((install.site_packages / data_path()).read_text(encoding="utf-8"))
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def _readers(content: dict) -> tuple[str, ...]:
    out = []
    for r in content.get("readers") or ():
        fields = [
            f
            for f, on in (
                ("top level", r.get("top_level")),
                (f"eagle_config {'+ 1' if r.get('nested_offset') else 'verbatim'}", r.get("nested")),
            )
            if on
        ] or ["none: the target's default ids"]
        out.append(f"{r.get('runner')}: {', '.join(fields)} ({r.get('location')})")
    return tuple(out)


def _again(options: Sequence[str]) -> str:
    return shlex.join(patchkit_argv("watch install", environment=options))


def _report(
    action: PluginAction, now_installed: bool, paths: Sequence[str], content: dict, problems: Sequence[str] = ()
) -> PluginReport:
    return report(
        action,
        now_installed,
        tuple(paths),
        int(content.get("drafts") or 0),
        float(content.get("threshold") or 0.0),
        tuple(content.get("patched") or ()),
        _readers(content),
        str(content.get("vllm_version") or ""),
        problems=tuple(problems),
        install_command=_again([str(o) for o in content.get("options") or ()]),
    )


def sync(
    install: Install, journal: Journal, run: PluginRun = PluginRun(), *, dry_run: bool = False
) -> PluginReport | None:
    """Install or refresh the watch for the install as it is now; call it under the install's lock.

    Args:
        install: the vLLM install; journal: its vLLM journal (after the command's writes).
        run: ``want`` (``--watch``: install it when it is not installed; otherwise only an installed
            watch is refreshed), the settings ``drafts`` and ``threshold`` and the environment options
            (each kept from the installed data file when None).
        dry_run: say what would be written; write nothing.
    Returns:
        A :class:`~patchkit.plugin_results.PluginReport`, or None when the watch is neither installed nor wanted.
    Raises:
        RefusedError: ``want`` on a release without the plugin group (:func:`refusal`); nothing written.
        StateError: a file cannot be written (every file written is put back).
    """
    if not installed(install) and not run.want:
        return None
    drafts, threshold, command_options = run.settings.get("drafts"), run.settings.get("threshold"), run.command_options
    problem = refusal(install)
    if problem is not None:
        if run.want:
            raise problem
        return state(install, journal)  # an installed watch on a release that cannot run it: say so
    previous = _read_data(install)
    content = data(
        install,
        journal,
        drafts if drafts is not None else int(previous.get("drafts") or DEFAULT_DRAFTS),
        threshold if threshold is not None else float(previous.get("threshold", DEFAULT_THRESHOLD)),
        command_options if command_options is not None else previous.get("options") or (),
    )
    planned = files(content)
    written = DIST.write(install, planned, dry_run=dry_run)
    action = written.action(dry_run)
    return _report(action, not dry_run or not written.fresh, tuple(planned), content)


def remove(install: Install, *, dry_run: bool = False) -> PluginReport:
    """Delete the watch's files (journaled: their original is "absent"); call it under the lock.

    Returns ``removed`` (``not installed`` when there was none).
    """
    content = _read_data(install)
    paths = DIST.remove(install, dry_run=dry_run)
    if not paths:
        return report(PluginAction.NOT_INSTALLED, False)
    return _report(PluginAction.REMOVED, dry_run, paths, content)


def state(install: Install, journal: Journal) -> PluginReport:
    """The watch in this install, for ``status`` and ``verify``; writes nothing.

    ``problems`` names a watch file that no longer holds patchkit's bytes (or is gone), a data
    file written for another vLLM release (what each runner reads may differ: ``watch install``
    again), one whose patched architectures differ from the journal's, and a release that no
    longer has the plugin group.
    """
    if not installed(install):
        return report(PluginAction.NOT_INSTALLED, False)
    problems = DIST.problems(install)
    content = _read_data(install)
    if content.get("vllm_version") and content["vllm_version"] != str(install.version):
        problems.append(f"its data was written for vLLM {content['vllm_version']}, this is {install.version}")
    if content.get("patch_ids") != _patch_ids(journal):
        problems.append("its data does not list the patches patchkit's journal holds now")
    if refusal(install) is not None:
        problems.append(f"this vLLM has no '{stat_loggers.GROUP}' group: vLLM will not load it")
    return _report(PluginAction.SHOWN, True, sorted(DIST.journal(install).entries), content, problems)


def would_install(install: Install, applied: ApplyReport, journal: Journal, run: PluginRun) -> PluginReport:
    """What ``apply --watch --dry-run`` would do with the watch (nothing is written): ``run``'s settings,
    else the installed ones, else the defaults (``applied`` and ``journal`` do not change it)."""
    drafts, threshold = run.settings.get("drafts"), run.settings.get("threshold")
    previous = _read_data(install)
    content = {
        "drafts": drafts or previous.get("drafts") or DEFAULT_DRAFTS,
        "threshold": threshold if threshold is not None else previous.get("threshold", DEFAULT_THRESHOLD),
        "vllm_version": str(install.version),
    }
    return _report(PluginAction.WOULD_INSTALL, installed(install), tuple(files({"format": DATA_FORMAT})), content)


WATCH_CHECK = "patchkit watch"
"""The label of ``verify``'s node about the watch."""


def check(report: PluginReport) -> Check:
    """``verify``'s node for an installed watch: fails when :attr:`PluginReport.problems` is not empty."""
    if report.problems:
        return Check(
            WATCH_CHECK, False, "; ".join(report.problems) + f" (run '{report.install_command}')", kind="watch"
        )
    return Check(
        WATCH_CHECK,
        None,
        f"installed ({PACKAGE}, entry point {stat_loggers.GROUP}): after "
        f"{report.drafts} drafts, logs one line when first-position acceptance is below "
        f"{report.threshold:.2f}",
        kind="watch",
    )


def check_run(run: PluginRun) -> None:
    """Raise :class:`UsageError` (exit 2) for ``run``'s ``drafts``/``threshold`` out of range
    (:func:`check_settings`)."""
    check_settings(run.settings.get("drafts"), run.settings.get("threshold"))


def finish_install(found: PluginReport, run: PluginRun) -> PluginReport:
    """``watch install``'s report is :func:`sync`'s (its refusal comes before, with its upgrade step)."""
    return found


def revert_blockers(install: Install) -> dict[str, tuple[str, ...]]:
    """None of the watch's files stops a revert: an edited one is deleted like the rest (it holds no
    decision of the user's: its settings are ``watch install``'s options)."""
    return {}
