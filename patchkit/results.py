"""Result values returned by the API; the CLI renders them as text or JSON.

Every result converts to plain JSON-ready data with :meth:`to_dict`; that is the ``--json``
schema (documented in the README).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    """What happened to one patch in a run."""

    APPLIED = "applied"
    """Written (or, with ``--dry-run``, would be written)."""
    ALREADY_APPLIED = "already applied"
    """patchkit's change is in the file already (journaled); nothing written."""
    UPSTREAM = "supported upstream"
    """This vLLM has the support natively; nothing written."""
    NOT_APPLICABLE = "not applicable"
    """Not for this release (reason given); nothing written."""
    REFUSED = "refused"
    """The patch cannot be made safely (reason given); the whole run writes nothing."""
    NOT_WRITTEN = "not written"
    """The patch was ready, but another patch of the run was refused, so nothing was written."""


@dataclass
class PatchResult:
    """The outcome of one patch.

    Attributes:
        id: the patch id.
        outcome: see :class:`Outcome`.
        reason: one line explaining the outcome.
        files: files (relative to site-packages) the patch changes or would change.
        target: where it lands, ``file:line Class`` when resolved.
    """

    id: str
    outcome: Outcome
    reason: str
    files: list[str] = field(default_factory=list)
    target: str | None = None


@dataclass
class FileChange:
    """One file a run changes.

    Attributes:
        path: relative to site-packages.
        sha256_before / sha256_after: hex digests of the file's bytes.
        patches: ids of the patches that changed it.
    """

    path: str
    sha256_before: str
    sha256_after: str
    patches: list[str]


@dataclass
class InstallInfo:
    """The vLLM install a command worked on.

    Attributes:
        era: its EAGLE-3 contract (:mod:`patchkit.contract`), ``era_description`` in words.
        patchable: patchkit's patches are for this contract (the A1 eras).
        native: this release supports EAGLE-3 for DeepSeek and Kimi-K2.5 itself (A2).
    """

    site_packages: str
    version: str
    era: str
    era_description: str
    patchable: bool = False
    native: bool = False


@dataclass(frozen=True)
class Problem:
    """An error that stopped part of a command: its message, hint and exit code (see :mod:`patchkit.errors`)."""

    message: str
    hint: str
    exit_code: int


@dataclass
class ApplyReport:
    """Result of ``apply`` (also with ``--dry-run``).

    Attributes:
        written: True when files were changed on disk.
        diff: unified diff of the planned change (empty when nothing changes).
        verify: the chain check of the patched result, when one was run.
        recovered: files of an earlier, unfinished run that were rolled back first.
    """

    install: InstallInfo
    dry_run: bool
    patches: list[PatchResult]
    files: list[FileChange]
    written: bool
    diff: str = ""
    verify: "VerifyReport | None" = None
    recovered: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """True when any patch was refused (then nothing was written)."""
        return any(p.outcome is Outcome.REFUSED for p in self.patches)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = _plain(asdict(self))
        out["command"] = "apply"
        out["refused"] = self.refused
        out["verify"] = self.verify.to_dict() if self.verify is not None else None
        return out


@dataclass
class Check:
    """One node of the verification tree.

    Attributes:
        label: what is checked, e.g. ``"SupportsEagle3 in bases"``.
        ok: whether it holds; None for an informational node that cannot fail.
        detail: one line of evidence or of what is missing.
        location: ``file:line`` of the evidence, when there is one.
        children: nested checks (the chain continues into held classes).
    """

    label: str
    ok: bool | None
    detail: str = ""
    location: str | None = None
    children: list["Check"] = field(default_factory=list)

    def failures(self) -> list["Check"]:
        """The failing checks in this subtree that are failures themselves, not only through a child."""
        below = [f for child in self.children for f in child.failures()]
        return below or ([self] if self.ok is False else [])


@dataclass
class VerifyReport:
    """Result of ``verify``: ``ok`` is True only when EAGLE-3 is in effect for every resolved class."""

    install: InstallInfo
    checks: list[Check]
    runtime_error: Problem | None = None
    """Why ``--runtime`` could not run (the static checks above it still stand), or None."""

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not any(c.failures() for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``missing``: the labels and details of failing checks."""
        out = _plain(asdict(self))
        out["command"] = "verify"
        out["ok"] = self.ok
        out["missing"] = [f"{c.label}: {c.detail}" for top in self.checks for c in top.failures()]
        return out


@dataclass
class RevertedFile:
    """A file ``revert`` handled: ``restored`` True when its original bytes were written back."""

    path: str
    restored: bool
    reason: str
    patches: list[str]


@dataclass
class RevertReport:
    """Result of ``revert``."""

    install: InstallInfo
    files: list[RevertedFile]
    refused: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = _plain(asdict(self))
        out["command"] = "revert"
        return out


@dataclass
class StatusEntry:
    """One journaled file: what patchkit wrote and whether the file still holds it.

    Attributes:
        state: ``"patched"`` (bytes are what patchkit wrote), ``"original"`` (bytes are the
            pre-patch original again, e.g. after a reinstall), ``"changed"`` (neither).
    """

    path: str
    patches: list[str]
    vllm_version: str
    state: str
    applied_at: str


@dataclass
class StatusReport:
    """Result of ``status``."""

    install: InstallInfo
    entries: list[StatusEntry]
    pending: list[str] = field(default_factory=list)
    """Files of a run that started writing and did not finish; the next apply or revert rolls it back."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = _plain(asdict(self))
        out["command"] = "status"
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
