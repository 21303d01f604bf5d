"""Plan a patch run in memory: decide each patch's outcome and compute every file's new bytes.

Nothing here writes to disk. The order of decisions for each patch is fixed:

1. the install's EAGLE-3 contract (A0: refused; files of one era with metadata of another: refused);
2. its version specifier (outside it: supported upstream from ``upstream_from`` on, else not applicable);
3. the patches it requires (not applicable or refused with them);
4. its target, through the registry (an architecture this release does not register: not applicable);
5. its codemod's post-condition on the file as planned so far (present and journaled: already
   applied; present but not journaled: refused as a foreign edit; partial: refused), then the
   transform and the post-condition again.

Once every patch ran, each changed file's code is generated (once, however many patches changed
it) and must parse again, or every patch that changed it is refused.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
from dataclasses import dataclass, field

import libcst as cst
from packaging.version import Version

from patchkit.advice import reinstall
from patchkit.vllm.classes import loadpath
from patchkit.codemods.base import Presence, Refusal, Site
from patchkit.vllm.classes.composition import CompositionError, Holder, held_class, holder, registry_built
from patchkit.vllm.release.contract import A1_RELEASES, Contract, Era, no_protocol
from patchkit.vllm.release.install import Install
from patchkit.errors import SourceError
from patchkit.store.files import sha256
from patchkit.store.journal import Journal
from patchkit.vllm.registry.table import Registry
from patchkit.results import Outcome, PatchResult
from patchkit.vllm.release import source as source_mod
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.plan.spec import ClassTarget, ModuleTarget, Patch

_REINSTALL = "the installed file is damaged or was edited"


@dataclass
class Plan:
    """The in-memory result of planning a run.

    Attributes:
        results: one :class:`PatchResult` per patch, in run order.
        originals: current bytes of every file a patch would change, by relative path.
        changed: planned new bytes, by relative path.
        patches_by_file: patch ids per changed file.
    """

    results: list[PatchResult] = field(default_factory=list)
    originals: dict[str, bytes] = field(default_factory=dict)
    changed: dict[str, bytes] = field(default_factory=dict)
    patches_by_file: dict[str, list[str]] = field(default_factory=dict)
    encodings: dict[str, str] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        """True when any patch was refused."""
        return any(r.outcome is Outcome.REFUSED for r in self.results)

    def diff(self) -> str:
        """Unified diff (``a/`` and ``b/`` paths relative to site-packages) of every planned change."""
        chunks = []
        for path, new in sorted(self.changed.items()):
            old = self.originals[path]
            encoding = self.encodings.get(path, "utf-8")
            chunks.extend(
                difflib.unified_diff(
                    old.decode(encoding, errors="replace").splitlines(keepends=True),
                    new.decode(encoding, errors="replace").splitlines(keepends=True),
                    fromfile=f"a/{path}",
                    tofile=f"b/{path}",
                )
            )
        return "".join(chunks)


@dataclass(frozen=True)
class _Resolved:
    relpath: str
    module: str
    site: Site
    where: str


class _NotApplicable(Exception):
    """Not for this release; ``upgrade_to``: a release from which it works (:attr:`PatchResult.upgrade_to`)."""

    def __init__(self, message: str, upgrade_to: str | None = None) -> None:
        super().__init__(message)
        self.upgrade_to = upgrade_to


class _Refused(Exception):
    pass


def plan(
    install: Install,
    tree: SourceTree,
    contract: Contract,
    registry: Registry,
    journal: Journal,
    patches: list[Patch],
    decided: tuple[PatchResult, ...] = (),
) -> Plan:
    """Decide every patch's outcome and compute new file contents, writing nothing.

    Args:
        install: the vLLM install (its version is the cross-check).
        tree: the install's sources as on disk.
        contract: its EAGLE-3 contract (:func:`patchkit.vllm.release.contract.detect`).
        registry: its model registry.
        journal: its journal (to tell patchkit's own earlier changes from foreign ones).
        patches: the patches to run, dependencies first.
        decided: results decided before planning (architectures refused or native as a whole,
            :mod:`patchkit.plan.arch_patches`); they lead the plan's results.
    Returns:
        The :class:`Plan`; ``plan.refused`` tells whether the run must write nothing.

    Python's cyclic garbage collector is paused while planning and restored after (as it was).
    """
    paused = gc.isenabled()
    gc.disable()  # libcst builds ~10^5 short-lived acyclic nodes per file: collecting while it does cost ~0.1 s
    try:
        return _plan(install, tree, contract, registry, journal, patches, decided)
    finally:
        if paused:
            gc.enable()


def _plan(
    install: Install,
    tree: SourceTree,
    contract: Contract,
    registry: Registry,
    journal: Journal,
    patches: list[Patch],
    decided: tuple[PatchResult, ...],
) -> Plan:
    result = Plan()
    result.results.extend(decided)
    outcome_of: dict[str, PatchResult] = {}
    modules: dict[str, cst.Module] = {}  # relpath -> module as planned so far
    written: set[str] = set()  # relpaths a patch changed (their code is generated at the end)

    for patch in patches:
        try:
            pr = _decide(patch, install, tree, contract, registry, journal, outcome_of, modules, written, result)
        except _NotApplicable as exc:
            pr = PatchResult(patch.id, Outcome.NOT_APPLICABLE, str(exc), upgrade_to=exc.upgrade_to)
        except _Refused as exc:
            pr = PatchResult(patch.id, Outcome.REFUSED, str(exc))
        result.results.append(pr)
        outcome_of[patch.id] = pr

    # Each changed file's code is generated once, after its last patch (a file two patches change,
    # deepseek_v2.py, is not generated twice), and must parse: fail closed.
    for relpath in written:
        new = modules[relpath].bytes
        try:
            source_mod.parse(new, relpath)  # remembered: the check of the planned result reads this tree
        except (SyntaxError, ValueError) as exc:
            for pr in list(result.results):
                if pr.outcome is Outcome.APPLIED and relpath in pr.files:
                    _replan(
                        result, outcome_of, pr, f"{relpath}: the patched file would not parse ({exc}); nothing written"
                    )
            continue
        if new != result.originals[relpath]:
            result.changed[relpath] = new
    for patch in patches:  # as in step 3: a patch needing one refused here is refused too
        pr = outcome_of[patch.id]
        refused = [d for d in patch.requires if d in outcome_of and outcome_of[d].outcome is Outcome.REFUSED]
        if pr.outcome is Outcome.APPLIED and refused:
            _replan(result, outcome_of, pr, f"needs {refused[0]}, which was refused")
    return result


def _replan(result: Plan, outcome_of: dict[str, PatchResult], planned: PatchResult, reason: str) -> None:
    """Planning found, after the fact, that ``planned`` cannot be written: it is refused (a new,
    frozen result takes its place in the plan)."""
    refused = dataclasses.replace(planned, outcome=Outcome.REFUSED, reason=reason)
    result.results[result.results.index(planned)] = refused
    outcome_of[planned.id] = refused


def _decide(
    patch: Patch,
    install: Install,
    tree: SourceTree,
    contract: Contract,
    registry: Registry,
    journal: Journal,
    outcome_of: dict[str, PatchResult],
    modules: dict[str, cst.Module],
    written: set[str],
    result: Plan,
) -> PatchResult:
    decided = _release_decision(patch, install, contract)
    if decided is not None:
        return decided
    _check_requires(patch, outcome_of)
    load = _loader(install, tree, modules, result)
    codemod = patch.codemod.load()
    resolved = _resolve_target(patch, codemod, tree, registry, load)
    relpath = resolved.relpath
    module = load(relpath)
    try:
        presence, why = codemod.check(module, resolved.site)
    except Refusal as exc:
        raise _Refused(f"{relpath}: {exc}") from exc

    if presence is Presence.PRESENT:
        return _already_applied(patch, journal, result, relpath, why, resolved.where)
    if presence is Presence.PARTIAL:
        raise _Refused(f"{relpath}: {why}; reinstall vLLM to get the original file, then apply again")

    try:
        new_module = codemod.transform(module, resolved.site)
    except Refusal as exc:
        raise _Refused(f"{relpath}: {exc}") from exc
    after, why_after = codemod.check(new_module, resolved.site)
    if after is not Presence.PRESENT:
        raise _Refused(f"{relpath}: post-condition does not hold after the transform: {why_after}")
    modules[relpath] = new_module
    written.add(relpath)
    result.patches_by_file.setdefault(relpath, []).append(patch.id)
    return PatchResult(patch.id, Outcome.APPLIED, patch.codemod.description, [relpath], resolved.where)


def _release_decision(patch: Patch, install: Install, contract: Contract) -> PatchResult | None:
    """What the release alone decides for ``patch``: supported upstream (a result), not applicable or
    refused (raised), or None when the patch is for this release."""
    if contract.era is Era.A0:
        raise _Refused(no_protocol(install.version))
    mismatch = contract.patchable != (install.version in A1_RELEASES)
    if mismatch and not install.version.is_prerelease:
        raise _Refused(
            f"the metadata says vLLM {install.version}, but the files have the {contract.era} EAGLE-3 contract "
            f"({contract.description}); a mixed install: reinstall vLLM"
        )
    # A nightly or release candidate (0.17.2.dev300) carries the files of the era it leads to: the
    # files decide (REFERENCE.md: the era by shape, the version only as a cross-check), as verify does.
    if mismatch and contract.native and patch.upstream_from is not None:
        return PatchResult(
            patch.id,
            Outcome.UPSTREAM,
            f"vLLM {install.version} is a development build whose files have the {contract.era} contract: "
            f"native there (released in {patch.upstream_from}); nothing to write",
        )
    if mismatch and contract.patchable and install.version not in patch.vllm:
        raise _Refused(
            f"vLLM {install.version} is a development build whose files still have the {contract.era} "
            f"contract, outside this patch's range {patch.vllm}: install a release"
        )
    if install.version not in patch.vllm:
        if patch.upstream_from is not None and install.version >= Version(patch.upstream_from):
            return PatchResult(
                patch.id,
                Outcome.UPSTREAM,
                f"vLLM {install.version} has this natively (since {patch.upstream_from}); nothing to write",
            )
        raise _NotApplicable(f"vLLM {install.version} is outside this patch's range {patch.vllm}")
    return None


def _check_requires(patch: Patch, outcome_of: dict[str, PatchResult]) -> None:
    """Raises when a patch ``patch`` needs was not applicable or refused."""
    for dep in patch.requires:
        dep_result = outcome_of.get(dep)
        if dep_result is None:
            continue
        if dep_result.outcome is Outcome.NOT_APPLICABLE:
            raise _NotApplicable(f"needs {dep}, which is not applicable: {dep_result.reason}", dep_result.upgrade_to)
        if dep_result.outcome is Outcome.REFUSED:
            raise _Refused(f"needs {dep}, which was refused")


def _loader(install: Install, tree: SourceTree, modules: dict[str, cst.Module], result: Plan):
    """``load(relpath)``: the file parsed once per run (kept in ``modules``; its bytes and encoding in
    ``result``)."""

    def load(relpath: str) -> cst.Module:
        if relpath not in modules:
            source = tree.read_bytes(relpath)
            try:
                modules[relpath] = cst.parse_module(source)
            except cst.ParserSyntaxError as exc:
                raise SourceError(
                    f"{relpath}:{exc.raw_line}: syntax error: {exc.message}",
                    _REINSTALL,
                    reinstall(install.distribution, str(install.version), "the release's own files back"),
                ) from exc
            except (SyntaxError, UnicodeError, ValueError) as exc:  # encoding declaration, bytes
                raise SourceError(
                    f"{relpath}: cannot be read as Python source: {exc}",
                    _REINSTALL,
                    reinstall(install.distribution, str(install.version), "the release's own files back"),
                ) from exc
            result.originals[relpath] = source
            result.encodings[relpath] = modules[relpath].encoding
        return modules[relpath]

    return load


def _already_applied(patch: Patch, journal: Journal, result: Plan, relpath: str, why: str, where) -> PatchResult:
    """The codemod's change is in ``relpath``: already applied when patchkit's journal wrote it, else refused."""
    entry = journal.entries.get(relpath)
    if entry is not None and patch.id in entry.patches:
        if sha256(result.originals[relpath]) != entry.sha256_after:
            note = "the file was edited since patchkit wrote it ('patchkit status' shows it)"
            return PatchResult(patch.id, Outcome.ALREADY_APPLIED, why, [relpath], where, note)
        return PatchResult(patch.id, Outcome.ALREADY_APPLIED, why, [relpath], where)
    raise _Refused(
        f"{relpath}: {why}, but patchkit's journal has no record of writing it "
        "(a hand edit?); reinstall vLLM to get the original file, then apply again"
    )


def _resolve_target(patch: Patch, codemod, tree: SourceTree, registry: Registry, load) -> _Resolved:
    target = patch.target
    if isinstance(target, ClassTarget):
        resolution = registry.resolve(target.architecture)
        if resolution is None:
            raise _NotApplicable(f"{target.architecture} is not in this release's model registry ({registry.relpath})")
        if resolution.transformers_backend or resolution.cls is None:
            raise _NotApplicable(
                f"the registry maps {target.architecture} to {resolution.entry.module}.{resolution.entry.class_name}, "
                "which is vLLM's Transformers backend or a class patchkit cannot find in this install"
            )
        cls: ClassRef = resolution.cls
        fault = loadpath.bare_language_model(tree, registry, cls)
        if fault is not None:  # EAGLE-3 cannot work through this wrapper here: patch nothing for it
            raise _NotApplicable(f"not patched on this release: {fault.reason()}", loadpath.FIXED_IN.get(fault.cls))
        try:
            for attr in target.held:
                cls = held_class(tree, registry, cls, attr).cls
            if target.defining is not None:
                found = tree.find_member(cls, target.defining)
                cls = found[0] if found is not None else cls
            hold = _holder(tree, registry, cls, target.forwards_to) if target.forwards_to else None
        except CompositionError as exc:
            raise _Refused(str(exc)) from exc
        site = Site(relpath=cls.relpath, module=cls.module, class_name=cls.name, holder=hold)
        return _Resolved(cls.relpath, cls.module, site, f"{cls.location} {cls.name}")
    assert isinstance(target, ModuleTarget)
    candidates = [(m, tree.relpath_of_module(m)) for m in target.modules]
    candidates = [(m, r) for m, r in candidates if r is not None]
    if not candidates:
        raise _Refused(f"none of the modules {', '.join(target.modules)} exists in this install")
    if len(candidates) > 1:  # several layouts present: the first (newest) whose anchor is found
        for module, relpath in candidates:
            try:
                codemod.check(load(relpath), Site(relpath=relpath, module=module))
            except Refusal:
                continue
            return _Resolved(relpath, module, Site(relpath=relpath, module=module), relpath)
    module, relpath = candidates[0]
    return _Resolved(relpath, module, Site(relpath=relpath, module=module), relpath)


def _holder(tree: SourceTree, registry: Registry, cls: ClassRef, attr: str) -> Holder:
    """What ``cls`` holds in ``attr``; a language model the registry picks from ``text_config`` at run
    time counts as a causal LM (vLLM 0.10.2 - 0.33.0 multimodal wrappers,
    ``init_vllm_registered_model`` without ``architectures``)."""
    try:
        return holder(tree, registry, cls, attr)
    except CompositionError:
        built = registry_built(tree, cls, attr)
        if built is None or built[1] is not None:
            raise
        return Holder(attr=attr, kind="causal_lm", cls=cls, lineno=built[0])
