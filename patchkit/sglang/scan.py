"""``patchkit scan --target sglang``: every registered SGLang architecture with its EAGLE-3 state, as a frozen value.

Nothing is written and SGLang is not imported: the registry (:mod:`patchkit.sglang.registry`) and each class
(:mod:`patchkit.sglang.states`) are read from the install's files. A class without EAGLE-3 is reported as missing
it, never as patchable: whether ``apply --target sglang`` can patch it is the codemod's decision, made when it runs
(:data:`NOT_YET`).
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.sglang import contract as c
from patchkit.sglang.classes import Package
from patchkit.sglang.install import SglangInstall
from patchkit.sglang.registry import entries, not_generative
from patchkit.sglang.states import Classified, State, classify, with_sibling_idioms

NOT_YET = "apply --target sglang --arch NAME patches it only where its shape is the standard one (docs/sglang.md)"
"""What a missing row says about fixing it (issue 44): apply refuses, with its reason, any other shape."""


@dataclass(frozen=True)
class SglangRow:
    """One architecture of the scan.

    Attributes:
        architecture: the registry key (the class's ``__name__``).
        state: its :class:`~patchkit.sglang.states.State`.
        module: the module whose ``EntryClass`` registers it.
        cls: the class's dotted name (``sglang.srt.models.llama.LlamaForCausalLM``), or None when unread.
        idioms: the capture idioms (native: its own; missing: its native siblings'), as their words.
        embed_and_head: its lineage defines ``get_embed_and_head``.
        reason: one line saying why it has this state.
    """

    architecture: str
    state: State
    module: str
    cls: str | None
    idioms: tuple[str, ...]
    embed_and_head: bool
    reason: str

    def to_dict(self) -> dict:
        return {
            "architecture": self.architecture,
            "state": self.state.value,
            "module": self.module,
            "class": self.cls,
            "idioms": list(self.idioms),
            "get_embed_and_head": self.embed_and_head,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class SglangScan:
    """The scan of one SGLang install.

    Attributes:
        install: where it was read.
        rows: one per registered architecture, in SGLang's registration order.
    """

    install: SglangInstall
    rows: tuple[SglangRow, ...]

    def counts(self) -> dict[State, int]:
        """How many rows have each state, in ``State`` order (a state with none left out)."""
        found = [row.state for row in self.rows]
        return {state: found.count(state) for state in State if state in found}

    def to_dict(self) -> dict:
        """The JSON form (``scan --target sglang --json``)."""
        return {
            "command": "scan",
            "target": c.DISTRIBUTION,
            "install": {
                "site_packages": str(self.install.site_packages),
                "version": str(self.install.version),
                "distribution": self.install.distribution,
                "python": None if self.install.python is None else str(self.install.python),
            },
            # every state, 0 included: a JSON reader finds each key (the text leaves out a state with none)
            "counts": {state.value: self.counts().get(state, 0) for state in State},
            "architectures": [row.to_dict() for row in self.rows],
        }


def _reason(row: Classified) -> str:
    """The one-line reason of a row, by state."""
    if row.state is State.NATIVE:
        return f"{c.CAPTURE_SETTER} from {row.setter.name} ({row.setter.module})"
    if row.state is State.MISSING:
        return f"no {c.CAPTURE_SETTER} in its lineage; {NOT_YET}"
    if row.state is State.DRAFT:
        return "a draft model (it reads the target's hidden states), not a target"
    if row.state is State.NOT_GENERATIVE:
        return "an embedding, reward or classification model"
    return f"{c.ENTRY} names {row.entry.architecture!r}, not a class patchkit can read"


def scan(install: SglangInstall) -> SglangScan:
    """Read every registered architecture of ``install`` and classify it.

    Args:
        install: an SGLang install (:func:`patchkit.sglang.install.locate`).
    Returns:
        The :class:`SglangScan`; an install whose ``sglang/srt/models/`` is missing gives no rows.
    """
    package = Package(install.site_packages, c.PACKAGE)
    pooling = not_generative(package, c.GENERATION_CONFIG, c.GENERATION_FUNCTION)
    classified = with_sibling_idioms(package, [classify(package, e, pooling) for e in entries(package)])
    rows = tuple(
        SglangRow(
            architecture=r.entry.architecture,
            state=r.state,
            module=r.entry.registered_in,
            cls=None if r.entry.cls is None else r.entry.cls.qualname,
            idioms=tuple(i.value for i in r.idioms),
            embed_and_head=r.embed_and_head,
            reason=_reason(r),
        )
        for r in classified
    )
    return SglangScan(install, rows)


__all__ = ["NOT_YET", "SglangRow", "SglangScan", "scan"]
