"""``scan`` says what ``apply`` does: an architecture apply refuses without ``--force`` is marked so in scan
(issue 42, finding 3). Failed before: on 0.34.0 scan called 24 architectures "patchable" that apply refuses
without ``--force`` (their shape is not shown to keep greedy output under the V2 runner), and for 22 of
them said nothing of the refusal.
"""

from __future__ import annotations

import pytest

from patchkit.checks.scan import scan_row
from patchkit.plan.request import Request
from patchkit.plan.selection import arch_selection
from patchkit.results import Outcome
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.install import from_site_packages
from patchkit.vllm.release.source import SourceTree

pytestmark = pytest.mark.release


@pytest.mark.parametrize(
    "arch,held_back,needs_force",
    [
        ("Gemma3ForConditionalGeneration", True, True),
        ("Gemma3ForConditionalGeneration", False, False),
        ("Glm4ForCausalLM", False, False),
        ("Glm4MoeForCausalLM", False, False),
    ],
)
def test_scan_marks_what_apply_refuses_without_force(arch, held_back, needs_force, request):
    """One row each (a whole scan costs seconds): with the wrapper-only shape not shown under 0.34.0's V2 runner
    (the table before the H100's second campaign, ``held_back``), apply refuses it without --force and scan says
    so; with the records as they are now, every shape is shown there (the interface-only GLM-4 by the first
    campaign, the wrapper by the second) and nothing needs --force."""
    if held_back:
        request.getfixturevalue("wrapper_not_shown")
    from vllm_release import pristine_site_packages

    tree = SourceTree(from_site_packages(pristine_site_packages("0.34.0")).site_packages)
    registry, contract = Registry(tree), contract_mod.detect(tree)
    row = scan_row(tree, registry, contract, arch, "_TEXT_GENERATION_MODELS", set())
    _, decided, _, _ = arch_selection(tree, registry, contract, Request((arch,)))
    assert row.state == "patchable" and row.needs_force is needs_force, row
    assert any(d.outcome is Outcome.REFUSED for d in decided) is needs_force
    assert ("apply refuses it without --force" in row.reason) is needs_force, row.reason
