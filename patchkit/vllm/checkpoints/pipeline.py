"""Pipeline parallelism and the aux states: which layers the last stage owns, and whether the target's backbone
carries the states of earlier stages to it. Every aux-state method shares this rule: the runner's setter checks
the same flag (vLLM 0.34.0 ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py``
``verify_supports_aux_hidden_states_over_pp``, for ``eagle3``, ``dflash``, ``dspark`` and
``extract_hidden_states`` alike).
"""

from __future__ import annotations

import ast

from patchkit.vllm.checkpoints.drafts import ReleaseReading, assigns
from patchkit.vllm.classes import composition
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.contract import PP_FLAG
from patchkit.vllm.release.source import ClassRef, SourceTree


def last_stage_start(n: int, pp: int) -> int:
    """First layer the last of ``pp`` pipeline stages owns, for a target of ``n`` layers.

    Fact (vLLM 0.10.2 - 0.33.0 ``distributed/utils.py`` ``get_pp_indices``, without
    ``VLLM_PP_LAYER_PARTITION``): each stage gets ``n // pp`` layers; the remainder goes one each to
    the stages before the last, from the second-to-last backwards.
    """
    parts = [n // pp] * pp
    for i in range(2, n % pp + 2):
        parts[-i] += 1
    return sum(parts[:-1])


def backbone_transport(
    tree: SourceTree, registry: Registry, cls: ClassRef | None, reading: ReleaseReading
) -> tuple[bool, str]:
    """Whether the target's backbone carries aux states between pipeline stages, and what was found.

    Args:
        tree: the install's sources.
        registry: its model registry.
        cls: the target's resolved class (None: not a native model).
        reading: this release's :class:`ReleaseReading` (whether :data:`patchkit.vllm.release.contract.PP_FLAG` exists).
    Returns:
        ``(carried, why)``: ``carried`` is the value the backbone's MRO sets
        :data:`patchkit.vllm.release.contract.PP_FLAG` to (False when unset or absent from the release); ``why`` says
        what was found, with ``file:line``.
    Raises:
        SourceError: a file read does not parse.
    """
    if not reading.pp_transport_flag:
        return (
            False,
            f"this release has no pipeline-parallel transport of aux states ({PP_FLAG} is not in interfaces.py)",
        )
    if cls is None:
        return False, "the target is not one of vLLM's own models"
    backbone: ClassRef = cls
    try:
        links = composition.chain(tree, registry, cls)
    except composition.CompositionError:
        links = []
    if links:
        backbone = links[-1][1]
    else:  # built through a helper (``self.model = self._init_model(...)``): the one backbone its module defines
        found = [
            ref
            for node in tree.module_tree(cls.module).body
            if isinstance(node, ast.ClassDef)
            for ref in [tree.find_class(cls.module, node.name)]
            if ref is not None and composition.kind_of(tree, ref) == "backbone"
        ]
        if len(found) == 1:
            backbone = found[0]
    for klass in tree.mro(backbone):
        for stmt in tree.class_node(klass).body:
            if (
                isinstance(stmt, (ast.Assign, ast.AnnAssign))
                and assigns(stmt, PP_FLAG)
                and isinstance(stmt.value, ast.Constant)
            ):
                return bool(
                    stmt.value.value
                ), f"{klass.name}.{PP_FLAG} = {stmt.value.value!r} ({klass.relpath}:{stmt.lineno})"
    return False, f"{backbone.name} does not set {PP_FLAG}"


__all__ = ["backbone_transport", "last_stage_start"]
