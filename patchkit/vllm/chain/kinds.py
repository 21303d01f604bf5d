"""``Check.kind`` values and labels of the chain check's nodes (:mod:`patchkit.vllm.chain`), read by the
classifier (:mod:`patchkit.vllm.shapes.classify`), verify, doctor and the draft checks."""

from __future__ import annotations

from dataclasses import replace

from patchkit.results import Check

FINAL_LAYER_CHECK = "captures the final layer output (id n)"
"""Label of the informational capture check for id n; its ``location`` is set only when the capture exists."""
FINAL_LAYER_CAPTURED = "final-layer-captured"
FINAL_LAYER_MISSED = "final-layer-missed"
"""``Check.kind`` of the node saying whether the backbone captures id n (read by :mod:`patchkit.checks.drafts`)."""
NOT_FOLLOWED = "not-followed"
"""``Check.kind`` of a failed link patchkit cannot follow statically (a composition or loop form it does
not read): never evidence that a class is broken (:func:`patchkit.vllm.shapes.classify.classify`,
:func:`patchkit.checks.verify.settle`)."""
BRANCH_LABEL = "platform branch "
"""Prefix of a platform branch node's label; the rest is the branch's ``module.Class``."""
VERDICT = "verdict"
"""``Check.kind`` of the classifier's verdict under an architecture's node (:func:`patchkit.checks.verify.settle`)."""
UNPINNED = "unpinned"
"""``Check.kind`` of the node saying a verdict rests on vLLM code changed since the qualified releases
(:mod:`patchkit.vllm.runner.pins`): "not checked", never broken; ``apply --force`` writes past it."""


def unpinned(node: Check, changed: str) -> Check:
    """``node`` when its verdict rests on vLLM code changed since the qualified releases: failed, "not
    checked" (a first child of kind :data:`UNPINNED` saying which unit and what patchkit assumes of it), and
    every failure below it shown as not decided (None); the classifier's verdict (:data:`VERDICT`) is left
    out: nothing is called broken or patchable on code patchkit cannot vouch for, and nothing passes.

    Args:
        node: a settled check (an architecture's, or the allow-list's); not changed.
        changed: :meth:`patchkit.vllm.runner.pins.Pins.not_checked`'s line.
    """
    first = Check(
        "not checked: vLLM code this verdict rests on changed",
        False,
        f"{changed}; patchkit decides nothing on that code: `patchkit rehearse` runs it in vLLM's own engine "
        "against transformers, and qualifying the release (benchmarks/qualify.py) pins it",
        kind=UNPINNED,
    )
    kept = (_undecided(c) for c in node.children if c.kind != VERDICT)
    return replace(node, ok=False, children=(first, *kept))


def _undecided(node: Check) -> Check:
    """``node`` with every failure in its subtree shown as not decided (None)."""
    return replace(node, ok=None if node.ok is False else node.ok, children=tuple(_undecided(c) for c in node.children))
