"""What ``scan`` derives once per release instead of once per architecture (issue 8's scan ratio).

Real release trees only; each test also checks the result is the one the per-architecture
computation gives.
"""

from __future__ import annotations

import ast
import sys

import pytest
from releases import Sweep, sweep
from vllm_release import pristine_site_packages

from patchkit.vllm.classes import class_attrs
from patchkit.vllm.registry.table import Registry, TRANSFORMERS_BACKEND_MODULES
from patchkit.checks.scan import scan
from patchkit.vllm.release.install import from_site_packages
from patchkit.vllm.release.source import SourceTree

pytestmark = pytest.mark.release


@pytest.mark.parametrize("version", sweep(Sweep.SCAN))
def test_the_multimodal_markers_are_found_once_per_release(version, monkeypatch):
    """``get_language_model``'s markers (``SupportsMultiModal._mark_language_model``, vLLM 0.16.0 on)
    are looked for in the protocol's methods once, not once per multimodal wrapper."""
    site = pristine_site_packages(version)
    walked: list[str] = []
    real = ast.walk

    def spy(node):  # walks of the marker method by class_attrs (other modules may walk it for their own reasons)
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == "_mark_language_model"
            and sys._getframe(1).f_globals.get("__name__") == "patchkit.vllm.classes.class_attrs"
        ):
            walked.append(node.name)
        return real(node)

    monkeypatch.setattr(ast, "walk", spy)
    report = scan(from_site_packages(site))
    assert sum(r.group == "_MULTIMODAL_MODELS" for r in report.rows) > 20
    assert len(walked) == 1


@pytest.mark.parametrize("version", sweep(Sweep.SCAN))
def test_language_model_attr_is_what_a_fresh_tree_gives(version):
    """The markers found for one wrapper serve the next: each wrapper's answer is the one a tree
    that never saw another wrapper gives."""
    site = pristine_site_packages(version)
    tree = SourceTree(site)
    registry = Registry(tree)
    wrappers = [
        r.cls
        for a in registry.entries
        if registry.group_of(a) == "_MULTIMODAL_MODELS" and (r := registry.resolve(a)) is not None and r.cls is not None
    ]
    answers = [class_attrs.language_model_attr(tree, c) for c in wrappers]
    assert sum(a is not None for a in answers) > 20
    for cls, answer in zip(wrappers, answers):
        fresh = SourceTree(site)
        assert class_attrs.language_model_attr(fresh, fresh.find_class(cls.module, cls.name)) == answer, cls


@pytest.mark.parametrize("version", ["0.10.2", *sweep(Sweep.SCAN)])
def test_registry_aliases_are_every_row_naming_the_class(version):
    """``Resolution.aliases``: every row naming the same module and class, and every row reaching the
    class through a re-export; computed here row by row over the whole registry."""
    tree = SourceTree(pristine_site_packages(version))
    registry = Registry(tree)
    with_aliases = 0
    for arch, entry in registry.entries.items():
        found = registry.resolve(arch)
        same = {a for a, e in registry.entries.items() if (e.module, e.class_name) == (entry.module, entry.class_name)}
        if found.cls is not None:
            same |= {
                a
                for a, e in registry.entries.items()
                if e.class_name == found.cls.name
                and e.module != found.cls.module
                and e.module not in TRANSFORMERS_BACKEND_MODULES
                and tree.find_class(e.module, e.class_name) == found.cls
            }
        assert found.aliases == tuple(sorted(same)), arch
        with_aliases += len(found.aliases) > 1
    assert with_aliases > 10
