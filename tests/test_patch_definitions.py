"""Every patch definition in patches/, every codemod of the catalogue and every family keep their metadata
honest (a meta-test, as refurb does for checks)."""

from __future__ import annotations

import importlib
import re

import pytest
from releases import Sweep, sweep
import test_codemods
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.codemods import CATALOGUE, CodemodRef
from patchkit.codemods.base import Codemod
from patchkit.patches import eagle3_families
from patchkit.plan.arch_patches import allow_list_patch, allowlist_id, parse_id
from patchkit.plan.spec import ClassTarget, ModuleTarget, load_families, load_patches

PATCHES = load_patches("vllm")
FAMILIES = load_families()


def test_the_set_is_the_eagle3_set_in_dependency_order():
    ids = [p.id for p in PATCHES]
    assert sorted(ids) == sorted(
        {
            "eagle3-allowlist",
            "eagle3-deepseek-backbone",
            "eagle3-deepseek-interface",
            "eagle3-kimi-k25-interface",
            "eagle3-kimi-k25-proposer",
        }
    )
    for p in PATCHES:
        for dep in p.requires:
            assert ids.index(dep) < ids.index(p.id), f"{p.id} runs before {dep}, which it requires"


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_metadata(patch):
    module = importlib.import_module(f"patchkit.patches.{patch.id.replace('-', '_')}")
    assert module.PATCH is patch, "the module name is the id with '-' as '_'"
    assert patch.summary and patch.why and patch.reference and patch.codemod.description
    assert len(patch.codemod.expects) > 40
    assert getattr(patch.codemod, "patch_id", patch.id) == patch.id, "comments in vLLM files name the right patch"
    assert all(dep in {p.id for p in PATCHES} for dep in patch.requires)
    # written for the A1 releases: in range at 0.17.1, out of range at 0.18.0 (native) and 0.10.1 (A0)
    assert Version("0.17.1") in patch.vllm
    assert Version("0.18.0") not in patch.vllm
    assert Version("0.10.1") not in patch.vllm
    assert isinstance(patch.target, (ClassTarget, ModuleTarget))


# -- shipped patches: ids and specifiers -------------------------------------------------------

SHIPPED_ID = re.compile(r"eagle3(-[a-z0-9]+)+")


def test_shipped_ids_are_well_formed_and_unique():
    ids = [p.id for p in PATCHES]
    assert len(ids) == len(set(ids)), f"duplicate patch ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    bad = [i for i in ids if not SHIPPED_ID.fullmatch(i)]
    assert not bad, f"patch ids not of the form eagle3-<words>: {bad}"
    assert all(parse_id(i) is None for i in ids), "a shipped id collides with the eagle3:<...> ids of --arch"


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_specifier_parses_and_admits_prereleases(patch):
    assert isinstance(patch.vllm, SpecifierSet)
    assert SpecifierSet(str(patch.vllm), prereleases=True) == patch.vllm, "the range does not survive a round trip"
    assert patch.vllm.prereleases is True, "STYLE rule 1: SpecifierSet(..., prereleases=True)"
    assert Version("0.17.1rc1") in patch.vllm
    if patch.upstream_from is not None:
        assert Version(patch.upstream_from) not in patch.vllm, "in range on the release that has it natively"


# -- the codemod catalogue -------------------------------------------------------------------------

KIND = re.compile(r"[a-z]+(-[a-z]+)*")
KINDS = sorted(CATALOGUE)


@pytest.mark.parametrize("kind", KINDS)
def test_catalogue_entry(kind):
    entry = CATALOGUE[kind]
    assert KIND.fullmatch(kind), f"catalogue key {kind!r} is not lower-case words joined by '-'"
    assert entry.module.startswith("patchkit.codemods."), f"{kind}: {entry.module} is outside patchkit.codemods"
    cls = getattr(importlib.import_module(entry.module), entry.cls, None)
    assert isinstance(cls, type) and issubclass(cls, Codemod), f"{kind}: {entry.module}.{entry.cls} is not a Codemod"
    assert cls.kind == kind, f"{entry.cls}.kind is {cls.kind!r}, its catalogue key is {kind!r}"
    assert entry.description and entry.doc.endswith("."), f"{kind}: description and a one-sentence doc"
    # resolvable through a reference, as a patch names it, with the options its test cases use
    cases = [c for c in test_codemods.FIXES + test_codemods.ALONE if c.kind == kind]
    for case in cases:
        ref = CodemodRef.of(kind, **case.options)
        codemod = ref.load()
        assert type(codemod) is cls and ref.name == entry.cls
        assert ref.description == entry.description
        assert len(ref.expects) > 40 and ref.expects == entry.expects(codemod.options), (
            f"{kind}: 'expects' names the anchors"
        )
        assert getattr(codemod, "patch_id", "p") == "p", "comments in vLLM files name the right patch"


def test_catalogue_classes_are_unique():
    where = [(k.module, k.cls) for k in CATALOGUE.values()]
    assert len(where) == len(set(where)), "two catalogue keys name one codemod class"


def test_every_catalogue_entry_has_codemod_tests():
    """Each kind has a before/after pair and a leaves-alone case in test_codemods (which itself checks
    that every kind has all four tests: fixes, leaves alone, applied twice, reverts)."""
    missing_fix = set(KINDS) - {c.kind for c in test_codemods.FIXES}
    missing_alone = set(KINDS) - {c.kind for c in test_codemods.ALONE}
    assert not missing_fix and not missing_alone, f"no before/after: {missing_fix}; no leaves-alone: {missing_alone}"
    for name in ("test_fixes", "test_leaves_alone", "test_applied_twice_is_a_no_op", "test_reverts_to_the_same_bytes"):
        assert callable(getattr(test_codemods, name, None)), f"test_codemods.{name} is gone"


def test_every_catalogue_entry_is_used():
    """A kind serves a shipped patch or an ``eagle3:<...>`` id of ``--arch``; none is dead."""
    shipped = {p.codemod.kind for p in PATCHES}
    derived = {parse_id(f"eagle3:X:{k}")[0] for k in KINDS if parse_id(f"eagle3:X:{k}")} | {"allowlist"}
    assert parse_id("eagle3:allowlist:llama") == ("allowlist", "llama")
    assert set(KINDS) == shipped | derived, f"unused kinds: {set(KINDS) - shipped - derived}"
    assert derived <= set(KINDS)


# -- the families ----------------------------------------------------------------------------------

FAMILY_NAME = re.compile(r"[a-z][a-z0-9]*([.-][a-z0-9]+)*")
ARCHITECTURE = re.compile(r"[A-Z][A-Za-z0-9_]*For[A-Z][A-Za-z]+")
MODEL_TYPE = re.compile(r"[a-z][a-z0-9_]*")


def test_families_are_the_ones_shipped():
    assert load_families() == eagle3_families.FAMILIES, "patches/ discovery misses or adds a family"
    assert len(eagle3_families.FAMILIES) >= 1


def test_family_ids_are_well_formed_and_unique():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names)), f"duplicate family names: {names}"
    archs = [a for f in FAMILIES for a in f.architectures]
    assert len(archs) == len(set(archs)), "an architecture in two families (the first one would win)"
    types = [t for f in FAMILIES for t in f.model_types]
    assert len(types) == len(set(types)), "a model type in two families"
    for f in FAMILIES:
        assert FAMILY_NAME.fullmatch(f.name), f"family name {f.name!r}"
        assert f.architectures and f.model_types, f"{f.name}: no architectures or no model types"
        bad = [a for a in f.architectures if not ARCHITECTURE.fullmatch(a)] + [
            t for t in f.model_types if not MODEL_TYPE.fullmatch(t)
        ]
        assert not bad, f"{f.name}: not a registry architecture / model type: {bad}"
        assert not any(a in p.architectures for p in PATCHES for a in f.architectures), (
            f"{f.name}: an architecture a shipped patch already serves"
        )


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_family_allow_list_patches(family, tmp_path):
    """What a family adds (its model types) becomes allow-list patches with honest metadata, whose
    codemod puts exactly those types on a list (the one-line case file of test_codemods)."""
    for model_type in family.model_types:
        patch = allow_list_patch(model_type, family.architectures[0])
        assert patch.id == allowlist_id(model_type)
        assert parse_id(patch.id) == ("allowlist", model_type)
        assert patch.codemod.kind in CATALOGUE
        assert patch.summary and patch.why and patch.reference and len(patch.codemod.expects) > 40
        assert patch.architectures == (family.architectures[0],)
        assert SpecifierSet(str(patch.vllm), prereleases=True) == patch.vllm and patch.vllm.prereleases
        assert Version("0.17.1") in patch.vllm and Version("0.10.1") not in patch.vllm
        case = next(c for c in test_codemods.FIXES if c.name == "allowlist_one_line")
        before = case.file("before")
        out, status = test_codemods.run(patch.codemod.load(), before, case.site)
        assert status == "applied"
        assert out == before.replace(b"'minicpm']", b"'minicpm', '" + model_type.encode() + b"']")


FAMILY_RELEASES = tuple(sweep(Sweep.FAMILY))
"""An A1 release, the last with an allow-list (A2) and the newest: every family has its architectures in one."""


@pytest.mark.release
def test_families_resolve_in_real_releases():
    """Every family architecture is a registry architecture of a real release, and plans without a
    refusal in at least one of them into ``eagle3:<...>`` patches of catalogue kinds, with the family's model types on
    the allow-list where the release has one."""
    from vllm_release import pristine_site_packages

    from patchkit.checks.verify import read_allow_list
    from patchkit.plan.arch_patches import select_architectures
    from patchkit.vllm.release.contract import admits, detect
    from patchkit.vllm.registry.table import Registry
    from patchkit.vllm.release.source import SourceTree

    seen: set[str] = set()
    resolved: set[str] = set()
    for version in FAMILY_RELEASES:
        tree = SourceTree(pristine_site_packages(version))
        registry, contract = Registry(tree), detect(tree)
        allow = read_allow_list(tree)
        entries = list(allow.entries) if allow is not None else None
        for family in FAMILIES:
            archs = [a for a in family.architectures if registry.resolve(a) is not None]
            seen.update(archs)
            selection = select_architectures(tree, registry, contract, archs, FAMILIES, allow_list=entries)
            planned = {p.id: p for p in selection.patches}
            for decision in selection.decisions:
                if decision.refusal is not None:  # a later release may move it (0.33.0: SeedOss to transformers)
                    assert "\n" not in decision.refusal and decision.architecture in decision.refusal
                    continue
                resolved.add(decision.architecture)
                for pid in decision.patch_ids:
                    kind = parse_id(pid)
                    assert kind is not None and kind[0] in CATALOGUE, f"{version}: id {pid!r}"
                    patch = planned[pid]
                    assert getattr(patch.codemod.load(), "patch_id", pid) == pid
                    assert patch.summary and patch.why and patch.reference and len(patch.codemod.expects) > 40
                if decision.patch_ids and entries is not None:
                    lacking = [
                        t
                        for t in family.model_types
                        if not admits(entries, t) and allowlist_id(t) not in decision.patch_ids
                    ]
                    assert not lacking, f"{version} {decision.architecture}: model types not put on the list: {lacking}"
    every = {a for f in FAMILIES for a in f.architectures}
    assert not every - seen, f"family architectures no release of {FAMILY_RELEASES} registers: {sorted(every - seen)}"
    assert not every - resolved, (
        f"family architectures refused in every release of {FAMILY_RELEASES}: {sorted(every - resolved)}"
    )
