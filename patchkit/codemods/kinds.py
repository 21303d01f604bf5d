"""The codemods' kinds and the capture codemod's forms, as types (no imports: the codemod modules and
the catalogue in :mod:`patchkit.codemods` both read them)."""

from __future__ import annotations

from enum import Enum


class CodemodKind(str, Enum):
    """Which codemod a patch definition names; the value is the word a definition may give
    (``CodemodRef.of("capture", ...)``) and what ``explain --json`` prints."""

    CAPTURE = "capture"
    INTERFACE = "interface"
    ALLOWLIST = "allowlist"
    EMBEDDING_ALIAS = "embedding-alias"
    HEAD_ALIAS = "head-alias"
    PROPOSER_BRANCH = "proposer-branch"

    __str__ = str.__str__  # printed as its value
    __format__ = str.__format__


class CaptureForm(str, Enum):
    """The ``form`` option of the capture codemod: where the capture goes."""

    INLINE = "inline"  # in the backbone's forward (A1 releases)
    MIXIN = "mixin"  # through the release's EagleModelMixin

    __str__ = str.__str__
    __format__ = str.__format__


__all__ = ["CaptureForm", "CodemodKind"]
