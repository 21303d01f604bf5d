"""The codemods patchkit ships, by kind, and a lazy reference to one (so reading never imports libcst).

A patch definition names its codemod with a :class:`CodemodRef`: the kind and its options. The
codemod class (and with it libcst) is imported only when a run plans the patch
(:meth:`CodemodRef.load`); ``list``, ``explain``, ``verify`` and the other read-only commands use
the texts of :data:`CATALOGUE` alone.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from patchkit.codemods.kinds import CaptureForm, CodemodKind

if TYPE_CHECKING:
    from patchkit.codemods.base import Codemod


@dataclass(frozen=True)
class Kind:
    """One codemod kind.

    Attributes:
        module: the module (``patchkit.codemods.capture``) defining ``cls``.
        cls: the class name.
        description: one line on what it changes.
        expects: the file shape the transform needs, in words, from the options.
        doc: one sentence on the kind, for ``explain``.
    """

    module: str
    cls: str
    description: str
    expects: Callable[[dict[str, Any]], str]
    doc: str


def _capture_expects(o: dict[str, Any]) -> str:
    layer = (
        "'hidden_states, residual = layer(..., residual, ...)'"
        if o.get("residual", True)
        else "'hidden_states = layer(...)' (or 'hidden_states, residual = layer(...)' with no residual passed in)"
    )
    if CaptureForm(o.get("form", CaptureForm.INLINE)) is CaptureForm.MIXIN:
        return (
            "the backbone class exactly once at module level, with exactly one forward; forward holds exactly one "
            f"top-level 'for <layer> in ...self.layers...' loop whose body has exactly one {layer} and exactly one "
            "top-level 'return hidden_states'; the module imports from vllm.model_executor.models.interfaces; "
            "the names layer_idx and aux_hidden_states are unused"
        )
    return (
        "the target class exactly once at module level, with exactly one __init__ and one forward; "
        "forward holds exactly one top-level 'for <layer> in ...self.layers...' loop whose body has exactly one "
        f"{layer}, and exactly one top-level 'return hidden_states' after it; the names "
        "layer_idx and aux_hidden_states are unused"
    )


def _interface_expects(o: dict[str, Any]) -> str:
    return (
        "the target class exactly once at module level, with at least one base and at most one __init__; "
        "exactly one module-level 'from ... import' of vllm.model_executor.models.interfaces (relative or absolute, "
        "not '*')" + ("" if o.get("methods", True) else "; the release's default SupportsEagle3 methods are used")
    )


CATALOGUE: dict[CodemodKind, Kind] = {
    CodemodKind.CAPTURE: Kind(
        "patchkit.codemods.capture",
        "CaptureAuxHiddenStates",
        "the residual-stream capture of EAGLE-3 aux hidden states in the backbone's forward",
        _capture_expects,
        "Make a decoder backbone capture EAGLE-3 aux hidden states, in the form the release's native classes use.",
    ),
    CodemodKind.INTERFACE: Kind(
        "patchkit.codemods.interface",
        "AddEagle3Interface",
        "SupportsEagle3 base and its import (and, on A1 releases, the two methods)",
        _interface_expects,
        "Give a model class the SupportsEagle3 interface the release's runner checks for.",
    ),
    CodemodKind.ALLOWLIST: Kind(
        "patchkit.codemods.allowlist",
        "ExtendAllowList",
        "model types added to the EAGLE-3 allow-list",
        lambda o: f"exactly one assignment '{' or '.join(o['names'])} = [\"...\", ...]' (a list of string literals)",
        "Add model types to the EAGLE-3 start-up allow-list of the speculative config.",
    ),
    CodemodKind.EMBEDDING_ALIAS: Kind(
        "patchkit.codemods.alias",
        "AddEmbeddingAlias",
        "a read-only property naming the backbone's embedding the way vLLM's EAGLE proposer reads it",
        lambda o: (
            f"the target class exactly once at module level, with exactly one __init__ and no member {o['alias']}"
        ),
        "Let vLLM's EAGLE proposer find a backbone's embedding under the name it reads (embed_tokens).",
    ),
    CodemodKind.HEAD_ALIAS: Kind(
        "patchkit.codemods.alias",
        "AddHeadAlias",
        "a read-only property naming the model's head the way vLLM's EAGLE proposer reads it",
        lambda o: (
            f"the target class exactly once at module level, with exactly one __init__ and no member {o['alias']}"
        ),
        "Let vLLM's EAGLE proposer share a target's head it reads under another name (lm_head).",
    ),
    CodemodKind.PROPOSER_BRANCH: Kind(
        "patchkit.codemods.proposer",
        "AddModelNameBranch",
        "elif branch in the EAGLE proposer's image-token mapping",
        lambda o: (
            f"exactly one 'self.get_model_name(...) == \"{o['after']}\"' branch, followed by an "
            "'else:' that assigns '... = ....image_token_index'"
        ),
        "Map a multimodal target's image token field in the EAGLE proposer.",
    ),
}


@dataclass(frozen=True)
class CodemodRef:
    """A codemod by kind and options; the class is imported only by :meth:`load`.

    Attributes:
        kind: the codemod (a key of :data:`CATALOGUE`).
        options: keyword arguments of the codemod class, as sorted ``(name, value)`` pairs.
    """

    kind: CodemodKind
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, kind: CodemodKind | str, **options: Any) -> "CodemodRef":
        """``CodemodRef.of(CodemodKind.CAPTURE, patch_id=..., form="mixin")`` (or the kind's value, ``"capture"``).

        Raises:
            KeyError: ``kind`` is not in :data:`CATALOGUE`.
        """
        try:
            kind = CodemodKind(kind)  # fail at definition time for an unknown kind
        except ValueError:
            raise KeyError(kind) from None
        return cls(kind, tuple(sorted(options.items())))

    @property
    def opts(self) -> dict[str, Any]:
        """The options as a dict."""
        return dict(self.options)

    @property
    def name(self) -> str:
        """The codemod class name."""
        return CATALOGUE[self.kind].cls

    @property
    def description(self) -> str:
        """One line on what it changes."""
        return CATALOGUE[self.kind].description

    @property
    def expects(self) -> str:
        """The file shape the transform needs, in words."""
        return CATALOGUE[self.kind].expects(self.opts)

    @property
    def doc(self) -> str:
        """One sentence on the kind."""
        return CATALOGUE[self.kind].doc

    def load(self) -> "Codemod":
        """Import the codemod class (and libcst) and build it with the options."""
        kind = CATALOGUE[self.kind]
        return getattr(importlib.import_module(kind.module), kind.cls)(**self.opts)
