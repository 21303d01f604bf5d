"""patchkit's API: each function takes an :class:`~patchkit.vllm.install.Install` and returns a result.

The CLI (:mod:`patchkit.ui.cli`) is a thin layer over these functions; other tools can call them
directly. Nothing here prints. Expected outcomes (refused, not applicable, not in effect) are in
the returned results; exceptions (:mod:`patchkit.errors`) are for commands that cannot run.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from patchkit.vllm import contract as contract_mod
from patchkit import interrupt
from patchkit.errors import Interrupted, PatchkitError, RefusedError, StateError, UsageError
from patchkit.vllm.install import Install, has_record, record_sha256
from patchkit.store.journal import Entry, Journal, PlannedWrite, sha256
from patchkit.results import (
    ApplyReport,
    Check,
    FileChange,
    InstallInfo,
    Outcome,
    PatchResult,
    Problem,
    RevertedFile,
    RevertReport,
    StatusEntry,
    StatusReport,
    VerifyReport,
)
from patchkit.vllm.source import ClassRef, SourceTree

if TYPE_CHECKING:
    from patchkit.vllm.registry import Registry, Resolution

# The registry, the chain check and the patch set (and :mod:`patchkit.plan.missing`, which reads
# them) are imported by the functions that use them, so 'status' and 'revert' start without them.


def run_checks(tree: SourceTree, registry, contract: contract_mod.Contract,
               architectures: tuple[str, ...] | None = None,
               model_types: tuple[str, ...] | None = None, requested: tuple[str, ...] = ()) -> list[Check]:
    """The chain check, :func:`patchkit.checks.verify.verify` (imported on first use)."""
    from patchkit.checks.verify import verify as chain_check

    return chain_check(tree, registry, contract, architectures, model_types, requested)


def _info(install: Install, contract: contract_mod.Contract) -> InstallInfo:
    return InstallInfo(str(install.site_packages), str(install.version), contract.era, contract.description,
                       contract.patchable, contract.native, install.distribution)


def journal_for(install: Install, target: str = "vllm") -> Journal:
    """The journal of ``install`` for ``target``, knowing where its interpreter keeps bytecode."""
    return Journal(install.site_packages, target, install.pycache_prefix, install.spellings)


def _late_signal(what: str) -> None:
    """A signal that arrived after the last safe point: say so (the run itself completed)."""
    signum = interrupt.received()
    if signum is not None:
        raise Interrupted(signum, f"interrupted by {interrupt.name(signum)} after the run had finished: {what}",
                          "'patchkit status' shows the install as it is")


def _apply_again(command_options: Sequence[str] | None, patch_ids: list[str] | None, request: Request,
                 force: bool, guard: bool, target: str) -> str:
    """The ``patchkit apply`` command that repeats a run: its environment, ``--patch``, ``--arch``,
    ``--model`` (absolute), ``--force`` and ``--guard`` options."""
    parts = ["patchkit", "apply", *(["--target", target] if target != "vllm" else []), *(command_options or ())]
    for pid in patch_ids or ():
        parts += ["--patch", pid]
    for arch in request.architectures:
        parts += ["--arch", arch]
    if request.model is not None:
        parts += ["--model", os.path.abspath(request.model)]
    parts += [*(["--force"] if force else []), *(["--guard"] if guard else [])]
    return " ".join(shlex.quote(p) for p in parts)


def _guard_interrupted(exc: Interrupted, done: str, step: str, hint: str) -> Interrupted:
    """The :class:`Interrupted` of a signal that stopped the guard's step after the vLLM files were committed.

    The journal's own message (about the guard's files only) would say "every file is as it was
    before this run", which is untrue of the run: ``done`` says what stands of the vLLM files,
    ``step`` is what the guard was not (``installed``/``refreshed``/``removed``), ``hint`` the
    command that finishes the job.
    """
    put_back = "every file is as it was before this run" in exc.message
    stands = {"installed": "", "refreshed": ": it watches what the previous run left patched",
              "removed": ": it is still installed"}[step]
    what = (f"patchkit's guard was not {step} (its files were put back{stands})" if put_back else
            f"patchkit's guard was not {step} ({exc.message.split(': ', 1)[-1]})")
    return Interrupted(exc.signum, f"interrupted by {interrupt.name(exc.signum)} during patchkit's guard step: "
                                   f"{done}; {what}", hint)


def unfinished_check(journal: Journal) -> Check | None:
    """A failing check naming an unfinished apply or revert (and leftovers), or None when there is none.

    Used by ``verify`` and ``doctor``: until the next apply or revert puts the written files back,
    the files are a mix of two states that neither run meant to leave.
    """
    run = journal.unfinished()
    if run is None:
        return None
    return Check("no unfinished patchkit run", False if run.unfinished else None, run.summary())


def import_problem(install: Install) -> RefusedError | None:
    """Why the interpreter would not run the files patchkit changes (:func:`patchkit.vllm.install.imports_elsewhere`), or None.

    ``apply`` raises it (exit 3, nothing written); ``verify`` shows it as a failing check (exit 1).
    """
    from patchkit.vllm.install import imports_elsewhere

    other = imports_elsewhere(install)
    if other is None:
        return None
    who = f"--python {install.python}" if install.python else "patchkit's own Python"
    if other == Path(""):
        return RefusedError(f"{who} cannot import vllm, although {install.dist_info.name} is on its import path",
                            "check that interpreter's import path (PYTHONPATH, .pth files); 'python -c \"import vllm\"' "
                            "must work in the serving environment")
    return RefusedError(f"{who} imports vllm from {other}, not from {install.site_packages / 'vllm'} (the install "
                        "patchkit found): patching it would change nothing that runs",
                        f"take {other.parent} off that interpreter's import path (PYTHONPATH, a .pth file) so it "
                        "imports the installed vLLM, then run the command again")


CACHE_TAG = "CACHEDIR.TAG"
"""The Cache Directory Tagging Specification's file (https://bford.info/cachedir/); uv writes one at the
root of its cache (astral-sh/uv#526) and also in each virtual environment it creates (#1653)."""


def cache_problem(install: Install) -> RefusedError | None:
    """A refusal when ``install`` lies inside a package cache (uv's ``archive-v0/<id>/``), else None.

    Walking up from site-packages, the first folder holding :data:`CACHE_TAG` marks a cache,
    unless an environment root (``pyvenv.cfg``) comes first: uv tags its venvs too. Patching a
    cache entry would put the patch (and a copy of the journal) into every later install of that
    wheel, so ``apply`` refuses it (exit 3) and never suggests it.
    """
    for folder in (install.site_packages, *install.site_packages.parents):
        if (folder / "pyvenv.cfg").is_file():
            return None
        if (folder / CACHE_TAG).is_file():
            return RefusedError(f"{install.site_packages} is inside a package cache ({folder / CACHE_TAG}): every "
                                "environment later installed from it would carry the patch",
                                "point patchkit at the environment that serves the model (--python /path/to/venv/bin/python); "
                                "if its files link into this cache, reinstall vLLM there with its own files "
                                "(uv: --link-mode copy)")
    return None


@dataclass(frozen=True)
class Request:
    """Which architectures a command is about: ``--arch`` names and ``--model DIR``.

    Attributes:
        architectures: registry names given with ``--arch`` (repeatable).
        model: a checkpoint folder given with ``--model`` (its ``config.json`` names architectures,
            ``text_config`` included, and the model type).
    """

    architectures: tuple[str, ...] = ()
    model: Path | None = None

    def __bool__(self) -> bool:
        return bool(self.architectures) or self.model is not None


def arch_selection(tree: SourceTree, registry: Registry, contract: contract_mod.Contract, request: Request):
    """The patches, pre-decided results, architectures and model types for an ``--arch``/``--model`` run.

    Returns:
        ``(patches, decided, architectures, model_types)``: the patches to plan (dependencies first),
        results already decided for whole architectures (refused, or native), the architectures asked
        for (``--arch`` names, then ``--model``'s), and the model types the allow-list must admit.
    Raises:
        ConfigError: ``--model`` folder without a readable ``config.json`` (exit 4).
        SourceError: a file on the way does not parse.
    """
    from patchkit.plan.arch_patches import read_model_config, select_architectures
    from patchkit.plan.spec import load_families, load_patches, select
    from patchkit.checks.verify import TEXT_MODEL_TYPES, read_allow_list

    config = read_model_config(request.model) if request.model is not None else None
    archs = list(dict.fromkeys([*request.architectures, *(config.architectures if config else ())]))
    allow = read_allow_list(tree)
    families = load_families()
    # Architectures the shipped patch set serves get exactly those patches (their proposer branch included):
    # by name, or by class on the releases those patches are for (a subclass of a class a shipped
    # interface patch targets, holding the same backbone: 0.16.0 deepseek_v2.py DeepseekForCausalLM,
    # mistral_large_3.py MistralLarge3ForCausalLM; a generic capture of that backbone would collide)
    from patchkit.plan.arch_patches import shipped_for

    served = {a: found for a in archs for found in [shipped_for(tree, registry, contract, a)] if found}
    shipped = list({p.id: p for found in served.values() for p in found}.values())
    generic = [a for a in archs if a not in served]
    selection = select_architectures(tree, registry, contract, generic, families, config, allow.entries if allow else None)
    decided = []
    for d in selection.decisions:
        if d.refusal is not None:
            decided.append(PatchResult(f"eagle3:{d.architecture}", Outcome.REFUSED, d.refusal, [], d.shape.location))
        elif not d.patch_ids:
            decided.append(PatchResult(f"eagle3:{d.architecture}", Outcome.UPSTREAM,
                                       f"{d.architecture} {d.shape.reason}; nothing to write", [], d.shape.location))
    types: list[str] = []
    for arch in archs:
        if config is not None and config.model_type and arch in config.architectures:
            types.append(config.model_type)
        else:  # the family entry, else the serving environment's transformers / vLLM's config registry
            from patchkit.plan.arch_patches import architecture_model_types

            resolution = registry.resolve(arch)
            types.extend(architecture_model_types(tree, resolution.cls if resolution else None, arch, families)[0])
    patches = [*select(load_patches(), [p.id for p in shipped]), *selection.patches] if shipped else list(selection.patches)
    if shipped:
        types.extend(TEXT_MODEL_TYPES)
        # a checkpoint of a default-set architecture whose model type neither the release's list nor the
        # shipped entries admit (a fine-tune with its own model_type) gets its own allow-list entry
        from patchkit.plan.arch_patches import allow_list_patch
        from patchkit.vllm.contract import admits

        shipped_entries = [e for p in patches if p.codemod.kind == "allowlist" for e in p.codemod.opts.get("entries", ())]
        if (allow is not None and config is not None and config.model_type
                and set(config.architectures) & set(served)
                and not admits([*allow.entries, *shipped_entries], config.model_type)):
            patches.append(allow_list_patch(config.model_type, config.architectures[0]))
    return patches, tuple(decided), tuple(archs), tuple(dict.fromkeys(types))


def apply(install: Install, *, dry_run: bool = False, patch_ids: list[str] | None = None,
          target: str = "vllm", force: bool = False, request: Request = Request(),
          on_wait: Callable[[Path, float], None] | None = None, guard: bool = False,
          command_options: Sequence[str] | None = None) -> ApplyReport:
    """Apply every patch that applies to this release, all or nothing.

    The run is planned in memory; the patched result is verified (the chain check) before any
    byte is written, and a full run whose result would not pass verify is refused; then every
    file is written atomically and journaled.

    Args:
        install: the vLLM install.
        dry_run: plan and verify only; write nothing.
        patch_ids: restrict to these patches (and what they require).
        target: the distribution (``"vllm"``).
        force: patch files whose bytes differ from the distribution's RECORD (someone else
            changed them) instead of refusing.
        request: ``--arch`` / ``--model``: patch these architectures, in the shape this release's
            own native classes use (:mod:`patchkit.plan.arch_patches`), instead of the default set.
        on_wait: called once, with the site-packages folder and the timeout in seconds, when
            another patchkit run holds the install's lock and this one starts waiting.
        guard: also install patchkit's guard (:mod:`patchkit.guard.guard`), journaled, in the same lock;
            an installed guard is refreshed by every apply either way (``report.guard``).
        command_options: the environment options given (``["--python", PATH]``), for the
            ``patchkit apply`` command the guard's line names.

    An unfinished earlier apply or revert (a killed run) is rolled back first, under the lock;
    a dry run plans from the bytes that rollback will leave (``report.recovered`` names the
    files either way). Target files missing from the install are named in
    ``report.missing_files``; the patches that do not need them still run.

    Returns:
        An :class:`ApplyReport`; ``written`` is False when refused, on a dry run, or when there
        was nothing to write. A patch named in ``patch_ids`` that is not applicable to this
        release is refused (with the reason), so its prerequisites are not written either.
    Raises:
        UsageError: unknown target or patch id (the hint names the closest ids); an ``--arch``
            name the registry does not hold (:func:`check_requested`); a bad
            ``PATCHKIT_LOCK_TIMEOUT``.
        SourceError: a file on the way does not parse.
        StateError: the journal cannot be read, has another format, or a file or folder cannot be
            written keeping its owner (checked before the first write; nothing is left changed).
        RefusedError: the interpreter imports ``vllm`` from another folder (:func:`import_problem`);
            the install is inside a package cache (:func:`cache_problem`).
        Interrupted: SIGINT/SIGTERM while the lock was held; every written file was put back
            (or the message names what is left and how to finish).
    """
    from patchkit.plan.spec import load_patches, select

    everything = load_patches(target)
    _unknown_patch_ids(patch_ids, [p.id for p in everything])
    elsewhere = import_problem(install) or cache_problem(install)
    if elsewhere is not None:
        raise elsewhere
    patches = select(everything, patch_ids) if not request else None
    requested = set(patch_ids or ())
    journal = journal_for(install, target)
    if dry_run:
        # Plan exactly what the real run will: from the files as its rollback will leave them.
        overrides, rolled = journal.rolled_back_view()
        report = _apply(install, journal.without_pending(), patches, dry_run=True, requested=requested,
                        force=force, request=request, overrides=overrides, recovered=rolled,
                        unfinished=journal.unfinished())
        if guard and not report.refused:
            from patchkit.guard import guard as guard_mod

            report = replace(report, guard=guard_mod.would_install(install, report, journal))
        return report
    # Plan and write under the lock, from the files as they are once the lock is held: a second,
    # concurrent run then sees the first one's result ("already applied").
    with interrupt.deferred(), journal.lock(on_wait=on_wait):
        journal = journal_for(install, target)
        unfinished = journal.unfinished()
        recovered = journal.recover()
        try:
            report = _apply(install, journal, patches, dry_run=False, requested=requested, force=force,
                            request=request, recovered=recovered, unfinished=unfinished)
        except Interrupted as exc:
            if "every file is as it was before this run" not in exc.message:
                raise
            # the journal's hint says 'patchkit apply' again: repeat this run's options, --guard included
            again = _apply_again(command_options, patch_ids, request, force, guard, target)
            raise Interrupted(exc.signum, exc.message, f"run '{again}' again to apply the patches") from None
        if not report.refused:
            from patchkit.guard import guard as guard_mod

            where = "".join(" " + shlex.quote(o) for o in command_options or ())
            had_guard = guard_mod.installed(install)
            try:
                # absolute: the guard's line is read from the server's working folder, not this one
                found = guard_mod.sync(install, journal, command_options=command_options, want=guard,
                                       model=os.path.abspath(request.model) if request.model is not None else None,
                                       target=target)
            except Interrupted as exc:  # the vLLM files are written (committed) already: say so
                done = (f"the patches were applied and committed ({len(report.files)} file(s) written)"
                        if report.written else "the patches were applied already (nothing to write)")
                raise _guard_interrupted(exc, done, "refreshed" if had_guard else "installed",
                                         f"run 'patchkit guard install{where}' to "
                                         + ("refresh it" if had_guard else "install it")) from None
            except StateError as exc:  # the vLLM files are written (committed) already: say so
                message = exc.message.removesuffix("; nothing was written").removesuffix("; every file was put back")
                raise StateError(f"the patches were applied, but patchkit's guard was not written ({message})",
                                 f"{exc.hint}; then run 'patchkit guard install{where}'") from exc
            if found is not None:
                report = replace(report, guard=found)
        journal.remove_if_empty()
    _late_signal(f"wrote {len(report.files)} file(s)" if report.written else "it wrote nothing")
    return report


def check_patch_ids(ids: list[str] | None, target: str = "vllm") -> None:
    """Raise :class:`UsageError` for an unknown ``--patch`` id (the hint suggests the closest ids).

    The CLI calls this before it looks for the install, so a typo is reported as one.
    """
    if ids:
        from patchkit.plan.spec import load_patches

        _unknown_patch_ids(ids, [p.id for p in load_patches(target)])


def _unknown_patch_ids(ids: list[str] | None, known: list[str]) -> None:
    """Raise :class:`UsageError` for an unknown ``--patch``, suggesting the closest known ids."""
    unknown = [i for i in ids or () if i not in known]
    if not unknown:
        return
    import difflib

    close = list(dict.fromkeys(c for i in unknown for c in difflib.get_close_matches(i, known, n=2, cutoff=0.6)))
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise UsageError(f"unknown --patch {', '.join(unknown)}", hint + f"known patches: {', '.join(known)} ('patchkit list')")


def _apply(install: Install, journal: Journal, patches, *, dry_run: bool, requested: set[str],
           force: bool, request: Request, overrides: dict[str, bytes] | None = None,
           recovered: list[str] = (), unfinished=None) -> ApplyReport:
    """Plan, run the gates (requested patches, symlinks, RECORD drift and absence, the chain on the
    planned bytes), decide every outcome once (:func:`patchkit.plan.outcomes.decide`), then write unless dry.

    ``overrides``: bytes to plan from instead of the disk's (a dry run's view after rollback).
    """
    from patchkit.plan import missing, outcomes
    from patchkit.plan.engine import plan as make_plan  # libcst: imported only by commands that rewrite
    from patchkit.vllm.registry import Registry

    overrides = dict(overrides or {})
    tree = SourceTree(install.site_packages, overrides=overrides)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    check_requested(registry, request, str(install.version))
    decided: tuple[PatchResult, ...] = ()
    archs: tuple[str, ...] | None = None
    types: tuple[str, ...] | None = None
    if request and contract.protocol is not None:
        # shapes are read from the files as they were before patchkit: an architecture patched
        # already gets the same patches planned again (and they are "already applied")
        from patchkit.plan.arch_scope import pristine_tree

        pristine = pristine_tree(install, journal, overrides) if journal.entries else tree
        patches, decided, archs, types = arch_selection(pristine, Registry(pristine) if pristine is not tree else registry,
                                                         contract, request)
    elif request:
        patches = []
        decided = (PatchResult("eagle3", Outcome.REFUSED, f"vLLM {install.version} has no SupportsEagle3 Protocol "
                               f"(contract {contract.era}); EAGLE-3 needs vLLM >= 0.10.2: upgrade vLLM"),)
    order = {p.id: i for i, p in enumerate(patches)}
    patches, gone, missing_files = missing.split(list(patches), tree, registry)
    planned = make_plan(install, tree, contract, registry, journal, patches, decided)
    results = sorted([*planned.results, *gone], key=lambda r: order.get(r.id, len(order))) if gone else planned.results
    vetoes, checked = _gates(install, journal, planned, results, _info(install, contract), requested=requested, force=force,
                             overrides=overrides, archs=archs, types=types, missing_files=missing_files)
    final = outcomes.decide(results, vetoes)
    files = [
        FileChange(path, sha256(planned.originals[path]), sha256(new), planned.patches_by_file.get(path, []))
        for path, new in sorted(planned.changed.items())
    ]
    write = not dry_run and bool(planned.changed) and not any(r.outcome is Outcome.REFUSED for r in final)
    if write:
        journal.commit([PlannedWrite(path, planned.originals[path], new, planned.patches_by_file.get(path, []))
                        for path, new in sorted(planned.changed.items())], str(install.version))
    return ApplyReport(_info(install, contract), dry_run, final, files, written=write, diff=planned.diff(),
                       verify=checked, recovered=recovered, unfinished=unfinished, missing_files=missing_files)


def _gates(install: Install, journal: Journal, planned, results, info: InstallInfo, *, requested: set[str], force: bool,
           overrides: dict[str, bytes], archs, types, missing_files: list[str]):
    """The gates after planning, in order; the first that vetoes ends them.

    Returns:
        ``(vetoes, verify_report)``: the :class:`patchkit.plan.outcomes.Veto` values, and the chain
        check of the planned bytes when the gates got that far (else None).
    """
    from patchkit.plan import outcomes
    from patchkit.vllm.registry import Registry

    if any(r.outcome is Outcome.REFUSED for r in results):
        return (), None
    vetoes = outcomes.requested_not_applicable(results, requested, str(install.version))
    if vetoes:
        return vetoes, None
    changed = list(planned.changed)
    links = {p: link for p in changed for link in [link_on_the_way(install.site_packages, p)] if link is not None}
    if links:
        def through(hit: str) -> str:
            link = links[hit.split(", ")[0]]
            return (f"{link.relative_to(install.site_packages)} is a symbolic link to {link.resolve()}: the bytes live "
                    "in another folder, which other installs (a uv cache, --link-mode symlink) may share, and patchkit "
                    "does not write through links; reinstall vLLM into this environment with its own files "
                    f"(uv: --link-mode copy; pip install --force-reinstall --no-deps vllm=={install.version}), then apply")

        return outcomes.file_gate(results, sorted(links), through), None
    drifted = [] if force else _drifted(install, journal, planned.originals, changed)
    if drifted:
        return outcomes.file_gate(results, drifted, lambda hit: (
            f"{hit} differs from what {install.distribution} {install.version}'s RECORD lists "
            "(changed by someone else?); reinstall vLLM, or pass --force to patch it as it is")), None
    unchecked = [] if force else _unchecked(install, journal, planned.originals, changed)
    if unchecked:
        return outcomes.file_gate(results, unchecked, lambda hit: (
            f"vLLM {install.version} has no RECORD ({install.dist_info.name}/RECORD), "
            f"so patchkit cannot check that {hit} is the release's file (a hand edit "
            "would go unnoticed); reinstall vLLM, or pass --force to patch it as it is")), None
    if not changed:
        return (), None
    # Check the chain on the planned bytes before writing anything.
    after = SourceTree(install.site_packages, overrides={**overrides, **planned.changed})
    checked = VerifyReport(info, run_checks(after, Registry(after), contract_mod.detect(after), archs, types))
    # The whole set must leave EAGLE-3 in effect; a --patch subset is partial by request, and
    # the chain through a missing file cannot hold.
    if not checked.ok and not requested and not missing_files:
        failures = "; ".join(f"{c.label}: {c.detail}" for top in checked.checks for c in top.failures())
        return outcomes.whole_run(results, f"the patched result would not pass verify ({failures})"), checked
    return (), checked


def link_on_the_way(site_packages: Path, relpath: str) -> Path | None:
    """The first symbolic link on the way from ``site_packages`` to the file ``relpath`` (the file included), or None.

    A linked file or a linked folder above it (``vllm/ -> /elsewhere/vllm``) puts the bytes in
    another folder: writing them would change an install (or a cache) that other environments share,
    and the journal, kept beside this ``site_packages``, would not be found from there.
    """
    path = site_packages
    for part in Path(relpath).parts:
        path = path / part
        if path.is_symlink():
            return path
    return None


def _drifted(install: Install, journal: Journal, originals: dict[str, bytes], paths: list[str]) -> list[str]:
    """Files about to be patched whose bytes are neither RECORD's nor what patchkit last wrote."""
    record = record_sha256(install, paths)
    out = []
    for path in paths:
        digest = sha256(originals[path])
        entry = journal.entries.get(path)
        if entry is not None and digest == entry.sha256_after:
            continue  # patchkit's own earlier change; the journal holds the original
        if path in record and digest != record[path]:
            out.append(path)
    return sorted(out)


def _unchecked(install: Install, journal: Journal, originals: dict[str, bytes], paths: list[str]) -> list[str]:
    """Files about to be patched that no RECORD vouches for (the distribution has none) nor the journal."""
    if has_record(install):
        return []
    return sorted(p for p in paths
                  if not (p in journal.entries and sha256(originals[p]) == journal.entries[p].sha256_after))


def verify(install: Install, *, runtime_python: Path | None = None, request: Request = Request()) -> VerifyReport:
    """Check, from the files on disk, that EAGLE-3 is in effect for the resolved classes.

    Args:
        install: the vLLM install.
        runtime_python: when given, also run :mod:`patchkit.checks.probe` with this interpreter
            (the serving environment's): vLLM's own code answers, in a fresh subprocess.
        request: ``--arch`` / ``--model``: check these architectures. Without it: the default
            set's architectures plus every architecture the journal shows patchkit patched.
    Returns:
        A :class:`VerifyReport`; ``ok`` is True only when no check fails. When the runtime probe
        cannot run (``runtime_python`` cannot be started, or cannot import vLLM and torch), the
        static checks are kept and ``runtime_error`` says why.
    Raises:
        UsageError: an ``--arch`` name the registry does not hold (:func:`check_requested`).
        SourceError: a file on the chain is missing or does not parse.
    """
    from patchkit.vllm.registry import Registry

    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    check_requested(registry, request, str(install.version))
    journal = journal_for(install)
    from patchkit.checks.verify import TEXT_MODEL_TYPES, default_architectures

    archs, types = default_architectures(), TEXT_MODEL_TYPES
    patched: list[str] = []
    if request and contract.protocol is not None:
        _, _, archs, types = arch_selection(tree, registry, contract, request)
    else:
        patched = journaled_architectures(journal, registry)
        if patched:
            _, _, extra, extra_types = arch_selection(tree, registry, contract, Request(tuple(patched)))
            archs = tuple(dict.fromkeys([*archs, *extra]))
            types = tuple(dict.fromkeys([*types, *extra_types]))
    checks = run_checks(tree, registry, contract, archs, types, requested=tuple(archs) if request else ())
    pending = unfinished_check(journal)
    if pending is not None:
        checks.insert(1, pending)
    elsewhere = import_problem(install)
    if elsewhere is not None:
        checks.insert(1, Check("the interpreter imports this vLLM", False, elsewhere.message))
    if journal.entries:
        record = record_sha256(install, journal.entries)
        interrupted = set(journal.unfinished().to_roll_back) if journal.pending else set()
        states = {path: "interrupted" if path in interrupted else file_state(install, e, record)
                  for path, e in journal.entries.items()}
        odd = {p: st for p, st in states.items() if st != "patched"}
        detail = (f"{len(states)} file(s) patched by patchkit" if not odd else
                  "; ".join(f"{p}: {FILE_STATES[st]}" for p, st in sorted(odd.items())))
        checks.insert(1, Check("patchkit journal", None, detail))
    from patchkit.guard import guard as guard_mod

    if guard_mod.installed(install):
        checks.insert(1, guard_mod.check(guard_mod.state(install, journal)))
    runtime_error = None
    if runtime_python is not None:
        from patchkit.checks.runtime import probe_spec, run_probe

        try:
            checks.append(run_probe(runtime_python, probe_spec(tree, registry, contract, archs, types)))
        except PatchkitError as exc:
            runtime_error = Problem(exc.message, exc.hint, int(exc.exit_code))
    return VerifyReport(_info(install, contract), checks, runtime_error, journaled=tuple(patched))


def scan(install: Install):
    """Every text-generation and multimodal architecture of ``install`` with its EAGLE-3 state.

    Returns:
        A :class:`patchkit.checks.scan.ScanReport` (frozen): per architecture its state (native, declared
        but broken, patchable, patched by patchkit, not patchable), shape and one-line reason.
    Raises:
        SourceError: the registry or ``interfaces.py`` is missing or does not parse.
    """
    from patchkit.checks.scan import scan as classify_all

    return classify_all(install)


def journaled_architectures(journal: Journal, registry: Registry) -> list[str]:
    """Registry architectures whose class an ``--arch`` run patched, from the journal's patch ids.

    The interface patch of class ``C`` is journaled as ``eagle3:C:interface``
    (:func:`patchkit.plan.arch_patches.interface_id`); every registry row naming ``C`` counts.
    """
    return architectures_of([pid for e in journal.entries.values() for pid in e.patches], registry)


def architectures_of(patch_ids: Sequence[str], registry: Registry) -> list[str]:
    """Registry architectures whose class one of ``patch_ids`` is the interface patch of (sorted)."""
    from patchkit.plan.arch_patches import parse_id

    parsed = [parse_id(pid) for pid in patch_ids]
    classes = {p[1] for p in parsed if p is not None and p[0] == "interface"}
    return sorted(a for a, e in registry.entries.items() if e.class_name in classes)


FILE_STATES = {
    "patched": "holds the bytes patchkit wrote",
    "reinstalled": "original bytes again: replaced by a reinstall of the same vLLM version",
    "upgraded": "vLLM was upgraded to another version since; the file belongs to the new release",
    "edited": "edited by hand since patchkit wrote it",
    "missing": "the file is gone",
    "interrupted": "an apply or revert stopped while writing it; the next apply or revert puts it back first",
}
"""What ``status`` (and ``verify``) say about each journaled file."""


def file_state(install: Install, entry: Entry, record: dict[str, str]) -> str:
    """Classify a journaled file: one of :data:`FILE_STATES`.

    Args:
        install: the install as it is now (its version may differ from the entry's).
        entry: the journal entry.
        record: ``RECORD`` digests of the installed distribution (:func:`record_sha256`).
    """
    path = install.site_packages / entry.path
    current = sha256(path.read_bytes()) if path.exists() else None
    if current == entry.sha256_after:
        return "patched"
    if entry.vllm_version != str(install.version):
        # another release now: its file (or its lack of one) is the installer's doing
        if current is None:
            return "upgraded" if entry.path not in record else "missing"
        return "upgraded" if current == record.get(entry.path) else "edited"
    if current is None:
        return "missing"
    if current == entry.sha256_before:
        return "reinstalled"
    return "edited"


def revert_action(state: str, force: bool) -> str:
    """What ``revert`` does with a journaled file in ``state`` (one of :data:`FILE_STATES`).

    Returns:
        ``"restore"`` (write the original bytes back: the file holds patchkit's bytes, or with
        ``force`` it was edited or deleted), ``"forget"`` (drop the entry: a reinstall or an
        upgrade replaced the file already) or ``"refuse"`` (edited or deleted by hand: the whole
        revert writes nothing).
    """
    if state == "patched" or (force and state in ("edited", "missing")):
        return "restore"
    if state in ("reinstalled", "upgraded"):
        return "forget"
    return "refuse"


def revert(install: Install, *, target: str = "vllm", force: bool = False,
           on_wait: Callable[[Path, float], None] | None = None, request: Request = Request()) -> RevertReport:
    """Restore every file patchkit changed to its original bytes, all or nothing.

    A file edited by hand since patchkit wrote it (or deleted) makes the whole revert refuse,
    writing nothing, unless ``force``: then its original bytes are written back over the edit.
    A file a reinstall or an upgrade already replaced is only dropped from the journal.
    ``on_wait`` is called as in :func:`apply` when another run holds the lock.

    With ``request`` (``--arch``/``--model``) only the patches those architectures need and no
    other patched architecture needs are taken out (:mod:`patchkit.plan.arch_scope`): a file that holds
    only such patches gets its original bytes back; a file that also holds patches that stay (the
    allow-list, a shared backbone) is rewritten to exactly the bytes ``apply`` of what stays gives
    the original. Files of other architectures are not touched.

    An unfinished earlier apply or revert is rolled back first. The revert itself keeps a
    pending record like apply, so a killed revert is put back by the next command.

    Raises:
        UsageError: with ``request``: an ``--arch`` name the registry does not hold
            (:func:`check_requested`), or none of its architectures has a patch of its own in the journal.
        StateError: the journal or an original copy is unreadable, a file or folder cannot be
            written keeping its owner (checked first), or a write failed (files already restored
            are put back).
        Interrupted: SIGINT/SIGTERM while the lock was held; every restored file was put back.
    """
    journal = journal_for(install, target)
    tree = SourceTree(install.site_packages)
    info = _info(install, contract_mod.detect(tree))
    from patchkit.guard import guard as guard_mod

    if request:
        from patchkit.vllm.registry import Registry

        check_requested(Registry(tree), request, str(install.version))
    if not journal.entries and not journal.pending and not journal.leftovers():
        if request:
            raise UsageError(f"patchkit has not changed this install, so nothing is patched for "
                             f"{', '.join(request.architectures) or request.model}", "'patchkit status' shows it")
        if guard_mod.installed(install):  # a guard left watching nothing: it goes with the rest
            with interrupt.deferred(), journal.lock(on_wait=on_wait):
                removed = guard_mod.remove(install, locked=True)
            return RevertReport(info, [], refused=False, guard=removed)
        return RevertReport(info, [], refused=False)
    with interrupt.deferred(), journal.lock(on_wait=on_wait):
        journal = journal_for(install, target)
        unfinished = journal.unfinished()
        rolled = journal.recover()
        what = f"an unfinished {unfinished.operation}" if unfinished else "an unfinished run"
        files: list[RevertedFile] = [RevertedFile(p, True, f"rolled back {what}", [], "rolled back") for p in rolled]
        narrow = rewrite = None
        if request:
            from patchkit.plan import arch_scope

            narrow = arch_scope.narrowing(install, journal, request)
            rewrite = arch_scope.rewritten(install, journal, narrow)
        scope = narrow.files if narrow is not None else sorted(journal.entries)
        record = record_sha256(install, list(scope))
        restore: list[str] = []
        rewrites: dict[str, bytes] = {}
        forget: list[str] = []
        planned: list[tuple[str, str, list[str]]] = []  # path, state, patches: the files to write
        refused = False
        for path in scope:
            entry = journal.entries[path]
            state = file_state(install, entry, record)
            action = revert_action(state, force)
            if action == "restore":
                if rewrite is not None and path in rewrite:
                    rewrites[path] = rewrite[path]
                else:
                    restore.append(path)
                planned.append((path, state, entry.patches))
            elif action == "forget":
                forget.append(path)
                files.append(RevertedFile(path, False, f"nothing to revert: {FILE_STATES[state]}", entry.patches,
                                          "forgotten"))
            else:
                refused = True
                files.append(RevertedFile(path, False, f"{FILE_STATES[state]}; not touched", entry.patches, "blocking"))
        for path, state, patches in planned:
            if refused:
                files.append(RevertedFile(path, False, "not restored: the revert was refused", patches, "held back"))
            elif path in rewrites:
                stays = sorted(set(patches) & narrow.keep)
                files.append(RevertedFile(path, True, f"rewritten without {', '.join(sorted(set(patches) - narrow.keep))}; "
                                                      f"keeps {', '.join(stays)}", patches, "rewritten"))
            else:
                how = "original bytes restored" + (f" (--force; the file was {state})" if state != "patched" else "")
                files.append(RevertedFile(path, True, how, patches, "restored"))
        files = [*files[:len(rolled)], *sorted(files[len(rolled):], key=lambda f: f.path)]
        if refused:
            return RevertReport(info, files, refused=True)
        try:
            if narrow is not None:
                keep = {p: sorted(set(journal.entries[p].patches) & narrow.keep) for p in rewrites}
                journal.narrow(restore, rewrites, keep, str(install.version), forget=forget)
            elif restore or forget:
                journal.restore(restore, forget=forget)
        except Interrupted as exc:
            if not request or "every file is as it was before this run" not in exc.message:
                raise
            # the journal's hint says 'patchkit revert' again, which would revert every patch: repeat --arch/--model
            parts = ["patchkit", "revert", *(["--target", target] if target != "vllm" else [])]
            for arch in request.architectures:
                parts += ["--arch", arch]
            if request.model is not None:
                parts += ["--model", os.path.abspath(request.model)]
            again = " ".join(shlex.quote(p) for p in [*parts, *(["--force"] if force else [])])
            raise Interrupted(exc.signum, exc.message, f"run '{again}' again to revert those patches") from None
        # the guard goes with a full revert; after a partial one it watches what stays patched
        refresh = narrow is not None and bool(journal.entries)
        try:
            guarded = (guard_mod.sync(install, journal, target=target) if refresh
                       else guard_mod.remove(install, locked=True) if guard_mod.installed(install) else None)
        except Interrupted as exc:  # the vLLM files are restored (committed) already: say so
            done = f"the patches were reverted and committed ({len(restore) + len(rewrites)} file(s) restored)"
            raise _guard_interrupted(exc, done, "refreshed" if refresh else "removed",
                                     "run 'patchkit guard install' to refresh it" if refresh else
                                     "run 'patchkit guard remove' to remove it (or 'patchkit revert' again)") from None
        journal.remove_if_empty()
    _late_signal(f"restored {len(restore) + len(rewrites)} file(s)")
    return RevertReport(info, files, refused=False, guard=guarded)


def status(install: Install, *, target: str = "vllm", request: Request = Request()) -> StatusReport:
    """What patchkit has applied to this install: per journaled file, its patches and state.

    States (:data:`FILE_STATES`): patched, reinstalled, upgraded, edited, missing, interrupted.
    The report also names an unfinished run or its leftovers, and a missing ``RECORD``.

    With ``request`` (``--arch``/``--model``): only the files holding a patch those architectures
    need, and per architecture whether all, some or none of its patches are journaled
    (:func:`patchkit.plan.arch_scope.states`). No libcst is imported either way.

    Raises:
        ConfigError: ``--model`` folder without a readable ``config.json`` (exit 4).
        UsageError: an ``--arch`` name the registry does not hold (:func:`check_requested`).
        StateError: the journal (or, with ``request``, an original copy) cannot be read.
    """
    journal = journal_for(install, target)
    tree = SourceTree(install.site_packages)
    info = _info(install, contract_mod.detect(tree))
    architectures = ()
    paths = sorted(journal.entries)
    if request:
        from patchkit.plan import arch_scope
        from patchkit.vllm.registry import Registry

        check_requested(Registry(tree), request, str(install.version))

        found = arch_scope.scope(install, journal, request)
        architectures = arch_scope.states(found, journal)
        paths = [p for p in paths if set(journal.entries[p].patches) & found.all_ids]
    record = record_sha256(install, paths) if paths else {}
    unfinished = journal.unfinished()
    interrupted = set(unfinished.to_roll_back) if unfinished else set()
    entries = [
        StatusEntry(path, journal.entries[path].patches, journal.entries[path].vllm_version,
                    "interrupted" if path in interrupted else file_state(install, journal.entries[path], record),
                    journal.entries[path].applied_at)
        for path in paths
    ]
    from patchkit.guard import guard as guard_mod

    guarded = guard_mod.state(install, journal) if guard_mod.installed(install) else None
    replaced = [journal.entries[e.path] for e in entries if e.state in ("reinstalled", "upgraded")]
    return StatusReport(info, entries, pending=sorted(item["path"] for item in journal.pending),
                        unfinished=unfinished, record_missing=not has_record(install), architectures=architectures,
                        guard=guarded, reapply=_reapply(replaced, journal, tree) if replaced else ())


def _reapply(replaced: list[Entry], journal: Journal, tree: SourceTree) -> tuple[tuple[str, ...], ...]:
    """The ``--arch`` lists of the ``apply`` runs that patch the ``replaced`` journal entries again.

    The journal knows which patches each file held: a shipped patch id belongs to the default set
    (``()``: a plain ``apply``); an ``--arch`` run's patch (``eagle3:...``, :func:`patchkit.plan.arch_patches.parse_id`)
    means an ``--arch`` run: every architecture the journal says such a run patched
    (:func:`journaled_architectures`) is repeated as ``--arch`` (a replaced file may hold only a
    backbone's patch, and ``apply`` says "already applied" for the others). A ``--model`` run is
    journaled by its architectures, not its folder.
    """
    from patchkit.plan.arch_patches import parse_id
    from patchkit.vllm.registry import Registry

    ids = [pid for e in replaced for pid in e.patches]
    runs: list[tuple[str, ...]] = []
    if any(parse_id(pid) is None for pid in ids):
        runs.append(())
    chosen = journaled_architectures(journal, Registry(tree)) if any(parse_id(pid) for pid in ids) else []
    if chosen:
        runs.append(tuple(chosen))
    return tuple(runs)


@dataclass
class ResolveReport:
    """Result of ``resolve``.

    Attributes:
        architecture: the name asked for.
        resolution: the registry row and class, or None when the release does not register it.
        bases: the class's bases, each ``"Name (file:line)"`` for vLLM classes or its source text.
    """

    install: InstallInfo
    architecture: str
    resolution: Resolution | None
    bases: list[str]
    registry_file: str = ""
    suggestions: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    branches: list[dict] = field(default_factory=list)
    """Every platform branch (:func:`patchkit.vllm.platforms.branches`): ``class``, ``location``, ``first``,
    ``eagle3`` (the class has ``SupportsEagle3`` in its bases and non-stub methods); empty without dispatch."""

    @property
    def native(self) -> bool:
        """True when the architecture resolves to a native vLLM model class."""
        return self.resolution is not None and self.resolution.cls is not None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        r = self.resolution
        cls = r.cls if r else None
        return {
            "command": "resolve",
            "install": vars(self.install),
            "architecture": self.architecture,
            "native": self.native,
            "registry": None if r is None else {"module": r.entry.module, "class": r.entry.class_name,
                                                "file": self.registry_file, "line": r.entry.lineno},
            "file": cls.relpath if cls else None,
            "line": cls.lineno if cls else None,
            "class": cls.name if cls else None,
            "bases": self.bases,
            "aliases": list(r.aliases) if r else [],
            # not in the registry: vLLM would load it through its Transformers backend too
            "suggestions": self.suggestions,
            "alternatives": self.alternatives,
            "branches": self.branches,
            "transformers_backend": r is None or r.transformers_backend,
        }


def check_architecture(architecture: str) -> None:
    """Raise :class:`UsageError` for an architecture name that cannot be one (empty, or with spaces).

    vLLM's registry keys are Python class names (``DeepseekV2ForCausalLM``).
    """
    if not architecture.strip() or any(ch.isspace() for ch in architecture):
        raise UsageError(f"{architecture!r} is not an architecture name",
                         "give a class name from the checkpoint's config.json \"architectures\", "
                         "e.g. DeepseekV3ForCausalLM")


def suggestions(registry: Registry, architecture: str) -> list[str]:
    """Registry names close to ``architecture``: a case slip, a one-letter typo or stray spaces.

    Returns:
        Up to three registered names, closest first (empty when none is that close).
    """
    import difflib

    by_lower = {a.lower(): a for a in registry.entries}
    close = difflib.get_close_matches(architecture.strip().lower(), list(by_lower), n=3, cutoff=0.9)
    return [by_lower[c] for c in close]


def check_requested(registry: Registry, request: Request, version: str) -> None:
    """Raise :class:`UsageError` for an ``--arch`` name this release's registry does not hold.

    ``apply``, ``verify``, ``status`` and ``revert`` call it before they plan or read anything
    else, so a typo (``DeepseekV3ForCausalLm``, a trailing space, an empty name) is a usage error
    on every command (exit 2, with the closest registered names), never a check that passes
    because there was nothing to check. Names from ``--model``'s config.json are the
    checkpoint's, not a typo on the command line: they are not checked here.

    Args:
        registry: the install's model registry (``vllm/model_executor/models/registry.py``, read statically).
        request: the ``--arch`` names, and ``--model``: its ``config.json`` is read here, so a bad one
            is the same error on every command (even ``revert`` with nothing to revert).
        version: the vLLM release, for the message.
    Raises:
        UsageError: an ``--arch`` name the registry does not hold.
        ConfigError: ``--model``'s ``config.json`` is missing or unreadable (exit 4).
    """
    if request.model is not None:  # read first: a bad config.json is the same error on every command
        from patchkit.plan.arch_patches import read_model_config

        read_model_config(request.model)
    for name in request.architectures:
        if registry.resolve(name) is not None:
            continue
        if not name.strip():
            raise UsageError("--arch '' is not an architecture name",
                             "give a class name from the checkpoint's config.json \"architectures\", "
                             "e.g. DeepseekV3ForCausalLM")
        raise not_registered(registry, name, version, "--arch")


def not_registered(registry: Registry, name: str, version: str, given: str, env: str = "") -> UsageError:
    """The error for an architecture name this release's registry does not hold (exit 2).

    One message for every command: ``--arch`` names (:func:`check_requested`) and the
    ``architectures`` of ``rehearse --model``'s ``config.json``.

    Args:
        registry: the install's model registry (``vllm/model_executor/models/registry.py``, read statically).
        name: the architecture name as given.
        version: the vLLM release, for the message.
        given: where the name came from (``--arch``, ``--model's config.json architectures``).
        env: the environment options the user gave (`` --python PY``), repeated in the hint.
    Returns:
        A :class:`UsageError` naming ``name``, with the closest registered names (:func:`suggestions`).
    """
    close = suggestions(registry, name)
    hint = (f"did you mean {' or '.join(close)}? " if close else "") + \
        f"'patchkit scan{env}' lists the architectures this vLLM registers"
    return UsageError(f"{given} {name!r} is not in vLLM {version}'s model registry", hint)


def resolve(install: Install, architecture: str) -> ResolveReport:
    """Resolve an architecture name through this vLLM's registry, read statically.

    Returns:
        A :class:`ResolveReport`; ``resolution`` is None when the architecture is not registered
        (vLLM would then load it through its Transformers backend with ``trust_remote_code``).
    Raises:
        UsageError: ``architecture`` is empty or holds spaces (:func:`check_architecture`).
        SourceError: the registry or the model file does not parse.
    """
    from patchkit.vllm.registry import Registry

    check_architecture(architecture)
    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    resolution = registry.resolve(architecture)
    bases: list[str] = []
    if resolution is not None and resolution.cls is not None:
        for b in tree.bases(resolution.cls):
            bases.append(f"{b.name} ({b.location})" if isinstance(b, ClassRef) else b)
    # a case slip or a one-letter typo, not every vaguely similar name
    close = suggestions(registry, architecture) if resolution is None else []
    alternatives = tree.alternatives(resolution.entry.module, resolution.entry.class_name) if resolution else []
    from patchkit.vllm import platforms
    from patchkit.vllm.chain import links

    branches = [{"class": b.dotted, "location": b.cls.location if b.cls else None, "first": b.first,
                 "eagle3": links.has_interface(tree, registry, contract, b.cls)}
                for b in platforms.branches(tree, resolution)]
    return ResolveReport(_info(install, contract), architecture, resolution, bases, registry.relpath, close,
                         alternatives, branches)


__all__ = ["apply", "verify", "revert", "status", "resolve", "ResolveReport", "PatchResult"]
