"""Every patch definition in patches/ keeps its metadata honest (a meta-test, as refurb does for checks)."""

from __future__ import annotations

import importlib

import pytest
from packaging.version import Version

from patchkit.plan.spec import ClassTarget, ModuleTarget, load_patches

PATCHES = load_patches("vllm")


def test_the_set_is_the_eagle3_set_in_dependency_order():
    ids = [p.id for p in PATCHES]
    assert sorted(ids) == sorted({
        "eagle3-allowlist", "eagle3-deepseek-backbone", "eagle3-deepseek-interface",
        "eagle3-kimi-k25-interface", "eagle3-kimi-k25-proposer",
    })
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
