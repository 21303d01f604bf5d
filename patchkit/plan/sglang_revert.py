"""``revert --target sglang [--arch X ...]``: the files patchkit changed in SGLang get their bytes back, all or
nothing (issue 44).

Without ``--arch``, every journaled file gets its original bytes (the journal's stored copy). With ``--arch``, only
the files holding those classes' patches are touched, as vLLM's ``revert --arch`` does (:mod:`patchkit.api`'s
``revert``): a file that holds only them gets its original bytes back; a file that also holds a class that stays
(two journaled classes in one module) is rewritten to exactly the bytes ``apply`` of the classes that stay gives the
original (:func:`patchkit.plan.sglang_apply.transform`, replayed in the journal's order), and keeps its original in
the journal. Files of other classes are not touched.

Either way, a file whose bytes are no longer those patchkit wrote (edited by hand, reinstalled, upgraded) refuses the
whole revert, nothing written, unless ``force``. An unfinished earlier run is rolled back first. The core prints
nothing; it returns a frozen :class:`RevertReport`.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit import interrupt
from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import ExitCode, StateError, UsageError
from patchkit.plan.sglang_apply import journal_of, load_patch, registered, transform
from patchkit.sglang import contract as c
from patchkit.sglang.classes import Package
from patchkit.sglang.install import SglangInstall
from patchkit.store.files import sha256
from patchkit.store.records import JournalRecords


@dataclass(frozen=True)
class RevertReport:
    """``revert --target sglang``'s result: the files put back, those rewritten to hold only the classes that stay
    (``--arch``), and those refused (edited since patchkit wrote them; ``--force`` restores them too)."""

    install: SglangInstall
    restored: tuple[str, ...]
    changed: tuple[str, ...]
    architectures: tuple[str, ...] = ()
    rewritten: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.REFUSED if self.changed else ExitCode.OK

    def to_dict(self) -> dict:
        return {
            "command": "revert",
            "target": c.DISTRIBUTION,
            "architectures": list(self.architectures),
            "restored": list(self.restored),
            "rewritten": list(self.rewritten),
            "changed": list(self.changed),
        }


def _scope(journal: JournalRecords, architectures: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The files ``revert --arch`` restores, and those it rewrites with the patch ids that stay in each.

    Raises:
        UsageError: an architecture the journal does not name (nothing patched for it here; exit 2).
    """
    patch = load_patch()
    gone = {patch.record(a) for a in architectures}
    held = sorted({pid for e in journal.entries.values() for pid in e.patches})
    for arch in architectures:
        if patch.record(arch) not in held:
            names = [pid.split(":", 1)[1] for pid in held if pid.startswith(f"{patch.id}:")]
            raise UsageError(
                f"--arch {arch!r}: patchkit patched no such class in this SGLang"
                + (f" (its journal holds {', '.join(names)})" if names else ""),
                step=NextStep(patchkit_argv("status", target=c.DISTRIBUTION), "it names what is patched"),
            )
    restore, keep = [], {}
    for path, entry in sorted(journal.entries.items()):
        if gone & set(entry.patches):
            stay = [pid for pid in entry.patches if pid not in gone]
            if stay:
                keep[path] = stay
            else:
                restore.append(path)
    return restore, keep


def _rewritten(install: SglangInstall, journal: JournalRecords, keep: dict[str, list[str]]) -> dict[str, bytes]:
    """Each file of ``keep`` as ``apply`` of the classes that stay writes it from the journaled original.

    Raises:
        StateError: the original is not stored, or the classes that stay no longer patch it (release changed).
    """
    if not keep:
        return {}
    patch = load_patch()
    package = Package(install.site_packages, c.PACKAGE)
    reference = package.path(c.REFERENCE_MODULE)
    out = {}
    for path, stay in keep.items():
        data = journal.original(journal.entries[path])
        archs = [pid.split(":", 1)[1] for pid in stay]
        for arch, entry in registered(package, archs).items():
            try:
                data = transform(data, entry.cls.name, reference, patch)
            except ValueError as exc:
                raise StateError(
                    f"cannot rewrite {path} for {arch}, which stays patched: {exc}",
                    "revert every class of that file (patchkit revert --target sglang), then apply the others again",
                ) from None
        out[path] = data
    return out


def revert(
    install: SglangInstall, force: bool = False, on_wait=None, architectures: list[str] | None = None
) -> RevertReport:
    """Give the files patchkit changed in this SGLang (``architectures``: only those classes') their bytes back.

    Args:
        install: the SGLang install.
        force: restore files edited since patchkit wrote them too (the edits are lost).
        on_wait: called while another patchkit run holds the lock.
        architectures: registry names (``--arch``); None for every journaled file.
    Returns:
        a frozen :class:`RevertReport`; ``changed`` non-empty (exit 3) when it refused and wrote nothing.
    Raises:
        UsageError: an architecture the registry does not hold, or one the journal does not name (exit 2).
        StateError: an original is missing, or a file could not be written (every file put back).
        Interrupted: SIGINT/SIGTERM while writing; every file was put back.
    """
    chosen = tuple(architectures or ())
    if chosen:
        registered(Package(install.site_packages, c.PACKAGE), list(chosen))
    journal = journal_of(install)
    if chosen and not journal.entries and not journal.pending:
        return RevertReport(install, (), (), chosen)  # nothing to revert, exit 0 as the whole revert
    with interrupt.deferred(), journal.lock(on_wait):
        journal = journal_of(install)
        journal.recover()
        restore, keep = _scope(journal, list(chosen)) if chosen else (sorted(journal.entries), {})
        paths = sorted([*restore, *keep])
        current = {p: install.site_packages / p for p in paths}
        changed = tuple(
            p
            for p in paths
            if not current[p].is_file() or sha256(current[p].read_bytes()) != journal.entries[p].sha256_after
        )
        if changed and not force:
            return RevertReport(install, (), changed, chosen)
        rewrite = _rewritten(install, journal, keep)
        journal.narrow(restore, rewrite, keep, str(install.version))
    interrupt.late_signal(f"restored {len(paths)} file(s)")
    return RevertReport(install, tuple(restore), (), chosen, tuple(sorted(rewrite)))


__all__ = ["RevertReport", "revert"]
