"""``apply --target sglang --arch X``: EAGLE-3 written into SGLang's files, all or nothing, journaled (issue 44;
``revert`` puts them back byte for byte: :mod:`patchkit.plan.sglang_revert`).

The decision for each architecture, first match wins (:func:`_decide`):

1. not in SGLang's registry: a :class:`~patchkit.errors.UsageError` before anything is read further (exit 2);
2. journaled by this patch and native (its setter is there): **already applied** (nothing written);
3. ``native`` (:func:`patchkit.sglang.states.classify`): **native**, nothing written;
4. not ``missing`` (a draft, a pooling model, unread): **refused**, with its state;
5. ``missing``: the codemod (:mod:`patchkit.codemods.sglang_capture`) rewrites its file in the idiom of the
   release's ``llama.py``; an anchor found zero times or twice is **refused** with the codemod's one-line reason;
   another registered class that extends it **refuses** it too (that class would inherit the setter, and scan would
   call it native, with a backbone nothing patched); the output must parse and its chain must hold
   (:func:`patchkit.plan.sglang_chain.chain`), else **refused**.

One refusal and nothing is written (exit 3). Otherwise every file is written through the shared journal
(:class:`patchkit.store.journal.Journal`, ``<site-packages>/.patchkit/sglang/``): pending record, commit point,
put-back. The core prints nothing; it returns frozen reports the CLI renders.
"""

from __future__ import annotations

import difflib
import enum
import importlib
from dataclasses import dataclass
from pathlib import Path

from patchkit import interrupt
from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import ExitCode, UsageError
from patchkit.sglang import contract as c
from patchkit.sglang.classes import Package
from patchkit.sglang.install import SglangInstall
from patchkit.sglang.registry import Entry, entries, not_generative
from patchkit.sglang.states import State, classify
from patchkit.store.journal import Journal
from patchkit.store.records import PlannedWrite


@dataclass(frozen=True)
class SglangPatch:
    """One SGLang patch, a declarative value (``patches/eagle3_sglang.py``).

    Attributes:
        id: the patch id; the journal records ``<id>:<architecture>`` for each class it patched.
        reference: the module and classes (wrapper, backbone, layer) whose statements it copies.
        codemod: the module of its transform.
        summary: one line on what it writes.
        upstream: where SGLang has the same thing natively.
    """

    id: str
    reference: tuple[str, tuple[str, ...]]
    codemod: str
    summary: str
    upstream: str

    def record(self, architecture: str) -> str:
        """The journal's patch id for ``architecture``."""
        return f"{self.id}:{architecture}"


def load_patch() -> SglangPatch:
    """The SGLang patch shipped in ``patches/`` (``patchkit.patches.eagle3_sglang``)."""
    from patchkit.plan.spec import patches_package  # lazy: the vLLM loader's module, only to find patches/

    patches_package()
    return importlib.import_module("patchkit.patches.eagle3_sglang").SGLANG_PATCH


class Status(enum.Enum):
    """What ``apply`` did for one architecture."""

    APPLIED = "applied"
    ALREADY = "already applied"
    NATIVE = "native"
    REFUSED = "refused"


@dataclass(frozen=True)
class Outcome:
    """One architecture's outcome: its status, the file (below site-packages) and a one-line reason."""

    architecture: str
    status: Status
    path: str | None
    reason: str

    def to_dict(self) -> dict:
        return {
            "architecture": self.architecture,
            "status": self.status.value,
            "file": self.path,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ApplyReport:
    """``apply --target sglang``'s result: every outcome, and the files written (none when one was refused).

    With ``dry_run``, ``written`` is empty and ``planned`` names the files a real run would write, ``diff`` their
    unified diff (``a/`` and ``b/`` paths below site-packages, as vLLM's dry run prints it).
    """

    install: SglangInstall
    outcomes: tuple[Outcome, ...]
    written: tuple[str, ...]
    dry_run: bool = False
    planned: tuple[str, ...] = ()
    diff: str = ""

    @property
    def exit_code(self) -> ExitCode:
        refused = any(o.status is Status.REFUSED for o in self.outcomes)
        return ExitCode.REFUSED if refused else ExitCode.OK

    def to_dict(self) -> dict:
        return {
            "command": "apply",
            "target": c.DISTRIBUTION,
            "version": str(self.install.version),
            "dry_run": self.dry_run,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "written": list(self.written),
            "planned": list(self.planned),
            "diff": self.diff,
        }


def journal_of(install: SglangInstall) -> Journal:
    """The shared journal of ``install``, in ``<site-packages>/.patchkit/sglang/``: its entries name the SGLang
    release under ``version`` (target-neutral; the journal's ``target`` is ``sglang``), and a journal an earlier
    patchkit wrote with ``vllm_version`` still reads (:data:`patchkit.store.records.VERSION_KEYS`)."""
    release = (install.distribution, str(install.version))
    return Journal(install.site_packages, c.DISTRIBUTION, None, (), release, engine=c.ENGINE, version_key="version")


def relpath(install: SglangInstall, package: Package, module: str) -> str | None:
    path = package.path(module)
    return None if path is None else path.relative_to(install.site_packages).as_posix()


def registered(package: Package, architectures: list[str]) -> dict[str, Entry]:
    """The registry entries of ``architectures``. Raises UsageError naming the closest registered name."""
    found = {e.architecture: e for e in entries(package)}
    for arch in architectures:
        if arch not in found:
            close = difflib.get_close_matches(arch, list(found), n=1)
            raise UsageError(
                f"--arch {arch!r} is not in SGLang's registry (sglang/srt/models/*.py EntryClass)",
                f"did you mean {close[0]!r}?" if close else "",
                step=NextStep(patchkit_argv("scan", target=c.DISTRIBUTION), "it lists the registered names"),
            )
    return {a: found[a] for a in architectures}


def _decide(package, install, entry, pooling, journal, patch, pending) -> tuple[Outcome, bytes | None]:
    """One architecture's outcome and, when applied, its file's new bytes (the module docstring's order)."""
    from patchkit.plan.sglang_chain import chain  # lazy: only apply and verify read chains
    from patchkit.sglang.drafts import reference_shift  # lazy: as above

    arch = entry.architecture
    row = classify(package, entry, pooling)
    path = relpath(install, package, entry.cls.module) if entry.cls else None
    mine = any(patch.record(arch) in e.patches for e in journal.entries.values())
    if mine and row.state is State.NATIVE:
        return Outcome(arch, Status.ALREADY, path, f"{patch.id} is in {path}"), None
    if row.state is State.NATIVE:
        return Outcome(
            arch, Status.NATIVE, path, f"{c.CAPTURE_SETTER} from {row.setter.name} ({row.setter.module})"
        ), None
    if row.state is not State.MISSING or path is None:
        return Outcome(arch, Status.REFUSED, path, f"scan calls it {row.state.value}: not a target to patch"), None
    reference = package.path(c.REFERENCE_MODULE)
    if reference is None:
        return Outcome(arch, Status.REFUSED, path, f"no {c.REFERENCE_MODULE} to copy the idiom from"), None
    unchecked = reference_shift(package)  # the setter copied must map ids as qualified (behaviour, not its text)
    if unchecked:
        return Outcome(arch, Status.REFUSED, path, unchecked), None
    before = pending.get(path, (install.site_packages / path).read_bytes())
    try:
        after = transform(before, entry.cls.name, reference, patch)
    except ValueError as exc:
        return Outcome(arch, Status.REFUSED, path, str(exc)), None
    heirs = [
        e.architecture
        for e in entries(package)
        if e.cls not in (None, entry.cls) and entry.cls in package.lineage(e.cls)
    ]
    if heirs:
        why = f"registered classes extend it ({', '.join(heirs)}): they would inherit the setter, not the capture"
        return Outcome(arch, Status.REFUSED, path, why), None
    broken = [link.label for link in chain(after, entry.cls.name, reference.read_bytes()) if not link.ok]
    if broken:
        return Outcome(arch, Status.REFUSED, path, f"the patched file's chain does not hold: {', '.join(broken)}"), None
    return Outcome(arch, Status.APPLIED, path, patch.summary), after


def transform(before: bytes, wrapper: str, reference: Path, patch: SglangPatch) -> bytes:
    """The file's new bytes, copied from ``reference`` (the release's ``llama.py``) and its folder's natives. Raises
    ValueError (a refusal's one line) when the shape is not the standard one."""
    import ast  # lazy: only to re-parse what the codemod wrote

    import libcst as cst  # lazy: libcst only when a file is rewritten

    from patchkit.codemods.base import Refusal  # lazy: as above
    from patchkit.codemods.sglang_reference import read_reference  # lazy: as above

    codemod = importlib.import_module(patch.codemod)
    try:
        ref = read_reference(reference.read_bytes(), reference.parent)
        after = codemod.transform(cst.parse_module(before), wrapper, ref).bytes
        ast.parse(after)
        cst.parse_module(after)
    except Refusal as exc:
        raise ValueError(str(exc)) from None
    except (SyntaxError, cst.ParserSyntaxError) as exc:
        raise ValueError(f"the file does not parse: {exc}") from None
    return after


def _plan(package, install, chosen, pooling, journal, patch) -> tuple[list[Outcome], dict, dict]:
    """Every architecture's outcome, the new bytes of each file to write and the patch ids each one gains."""
    outcomes: list[Outcome] = []
    pending: dict[str, bytes] = {}
    records: dict[str, list[str]] = {}
    for arch, entry in chosen.items():
        outcome, after = _decide(package, install, entry, pooling, journal, patch, pending)
        outcomes.append(outcome)
        if after is not None:
            pending[outcome.path] = after
            records.setdefault(outcome.path, []).append(patch.record(arch))
    return outcomes, pending, records


def unified_diff(install: SglangInstall, changed: dict[str, bytes]) -> str:
    """The unified diff of ``changed`` (``{path below site-packages: new bytes}``) against the files on disk."""
    chunks: list[str] = []
    for path, new in sorted(changed.items()):
        old = (install.site_packages / path).read_bytes()
        chunks.extend(
            difflib.unified_diff(
                old.decode("utf-8", errors="replace").splitlines(keepends=True),
                new.decode("utf-8", errors="replace").splitlines(keepends=True),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
            )
        )
    return "".join(chunks)


def apply(install: SglangInstall, architectures: list[str], on_wait=None, dry_run: bool = False) -> ApplyReport:
    """Patch each of ``architectures`` (registry names), all or nothing.

    With ``dry_run``, plan the same and write nothing (no lock taken, no unfinished run rolled back: the plan
    reads the files as they are); the report carries the files and their unified diff.

    Raises:
        UsageError: an architecture the registry does not hold (nothing read further, nothing written).
        StateError: a file or the journal could not be written (every file put back).
        Interrupted: SIGINT/SIGTERM while writing; every file was put back (:mod:`patchkit.interrupt`).
    """
    patch = load_patch()
    package = Package(install.site_packages, c.PACKAGE)
    chosen = registered(package, architectures)
    pooling = not_generative(package, c.GENERATION_CONFIG, c.GENERATION_FUNCTION)
    journal = journal_of(install)
    if dry_run:
        outcomes, pending, _ = _plan(package, install, chosen, pooling, journal, patch)
        refused = any(o.status is Status.REFUSED for o in outcomes)
        planned = {} if refused else pending
        return ApplyReport(install, tuple(outcomes), (), True, tuple(sorted(planned)), unified_diff(install, planned))
    with interrupt.deferred(), journal.lock(on_wait):  # SIGINT/SIGTERM acted on between two writes only
        journal = journal_of(install)
        journal.recover()
        outcomes, pending, records = _plan(package, install, chosen, pooling, journal, patch)
        if any(o.status is Status.REFUSED for o in outcomes) or not pending:
            return ApplyReport(install, tuple(outcomes), ())
        writes = [
            PlannedWrite(p, (install.site_packages / p).read_bytes(), after, records[p]) for p, after in pending.items()
        ]
        journal.commit(writes, str(install.version))
    interrupt.late_signal(f"wrote {len(pending)} file(s)")
    return ApplyReport(install, tuple(outcomes), tuple(sorted(pending)))


__all__ = [
    "ApplyReport",
    "Outcome",
    "SglangPatch",
    "Status",
    "apply",
    "registered",
    "relpath",
    "transform",
    "journal_of",
    "load_patch",
]
