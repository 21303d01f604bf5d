"""The ids of the patches patchkit plans per architecture, and reading an id back (:func:`parse_id`).

An ``--arch`` run's patch id is ``eagle3:<class>:<kind>`` (``eagle3:allowlist:<model_type>`` for the
allow-list); :class:`PatchKind` names the kinds. Made in :mod:`patchkit.plan.arch_patches`, read by the
journal's readers (which architectures a journaled patch serves).
"""

from __future__ import annotations

from enum import Enum

from patchkit.codemods import CodemodKind


def capture_id(backbone: str) -> str:
    """Patch id of the capture in backbone class ``backbone``."""
    return f"eagle3:{backbone}:capture"


def interface_id(cls: str) -> str:
    """Patch id of the interface on class ``cls``."""
    return f"eagle3:{cls}:interface"


def allowlist_id(model_type: str) -> str:
    """Patch id of the allow-list entry for ``model_type``."""
    return f"eagle3:allowlist:{model_type}"


def alias_id(backbone: str) -> str:
    """Patch id of the embedding alias on backbone class ``backbone``."""
    return f"eagle3:{backbone}:embedding-alias"


def head_alias_id(cls: str) -> str:
    """Patch id of the head alias on causal LM class ``cls``."""
    return f"eagle3:{cls}:head-alias"


class PatchKind(str, Enum):
    """What a per-architecture patch changes; the value is its part of the patch id (:func:`parse_id`),
    the same word as its codemod's kind (:attr:`codemod`)."""

    CAPTURE = CodemodKind.CAPTURE.value
    INTERFACE = CodemodKind.INTERFACE.value
    EMBEDDING_ALIAS = CodemodKind.EMBEDDING_ALIAS.value
    HEAD_ALIAS = CodemodKind.HEAD_ALIAS.value
    ALLOWLIST = CodemodKind.ALLOWLIST.value

    __str__ = str.__str__  # printed as its value
    __format__ = str.__format__

    @property
    def codemod(self) -> CodemodKind:
        """The codemod that writes this kind of patch."""
        return CodemodKind(self.value)

    @property
    def on_backbone(self) -> bool:
        """The patch lands in the architecture's decoder backbone (else in its registry class or, for
        the allow-list, in the speculative config)."""
        return self in (PatchKind.CAPTURE, PatchKind.EMBEDDING_ALIAS)

    def patch_id(self, name: str) -> str:
        """The id ``apply`` prints for this kind on class (or model type) ``name``."""
        return {
            PatchKind.CAPTURE: capture_id,
            PatchKind.INTERFACE: interface_id,
            PatchKind.EMBEDDING_ALIAS: alias_id,
            PatchKind.HEAD_ALIAS: head_alias_id,
            PatchKind.ALLOWLIST: allowlist_id,
        }[self](name)


def parse_id(patch_id: str) -> tuple[PatchKind, str] | None:
    """``(PatchKind.CAPTURE, backbone)``, ``(PatchKind.INTERFACE, cls)``, ``(PatchKind.EMBEDDING_ALIAS, backbone)``,
    ``(PatchKind.HEAD_ALIAS, cls)`` or ``(PatchKind.ALLOWLIST, model_type)`` for an id made by :func:`capture_id`,
    :func:`interface_id`, :func:`alias_id`, :func:`head_alias_id` or :func:`allowlist_id`; None for
    any other id."""
    parts = patch_id.split(":", 2)
    if len(parts) != 3 or parts[0] != "eagle3":
        return None
    if parts[1] == PatchKind.ALLOWLIST.value:
        return PatchKind.ALLOWLIST, parts[2]
    if parts[2] in (
        PatchKind.CAPTURE.value,
        PatchKind.INTERFACE.value,
        PatchKind.EMBEDDING_ALIAS.value,
        PatchKind.HEAD_ALIAS.value,
    ):
        return PatchKind(parts[2]), parts[1]
    return None


__all__ = ["PatchKind", "alias_id", "allowlist_id", "capture_id", "head_alias_id", "interface_id", "parse_id"]
