"""``Check.kind`` values and labels of the chain check's nodes (:mod:`patchkit.vllm.chain`), read by the
classifier (:mod:`patchkit.vllm.shapes.classify`), verify, doctor and the draft checks."""

from __future__ import annotations

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
UNPINNED = "unpinned"
"""``Check.kind`` of the node saying a verdict rests on vLLM code changed since the qualified releases
(:mod:`patchkit.vllm.runner.pins`): "not checked", never broken; ``apply --force`` writes past it."""
