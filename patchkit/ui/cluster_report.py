"""What a ``--ray`` command returns: each node's answer read once into typed fields, each node's
row, and the cluster's report (:mod:`patchkit.ui.cluster` builds them; :mod:`patchkit.ui.cluster_view`
renders them).

A node answers with plain dicts (each report's ``to_dict()``, :func:`patchkit.ui.cluster_node.run_on_node`):
they are what ``--json`` prints. :class:`NodeAnswer` reads one answer once into the values the
driver decides on (the patches' :class:`~patchkit.results.Outcome`, refused, written, in effect,
the journaled files' states), so no decision compares the dicts' strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping

from patchkit.errors import ExitCode
from patchkit.plan.outcomes import held_back
from patchkit.results import Outcome, PatchResult, RevertedFile, StatusEntry


class ClusterCommand(Enum):
    """A command run on every node of a Ray cluster; its value is the CLI's word, what ``--json``
    prints as ``command`` and what crosses to the node (:func:`patchkit.ui.cluster_node.run_on_node`)."""

    PLAN = "plan"  # ``apply --dry-run`` on a node: the first phase of ``apply --ray``
    APPLY = "apply"
    VERIFY = "verify"
    STATUS = "status"
    REVERT = "revert"

    @classmethod
    def read(cls, value: Any) -> "ClusterCommand | None":
        """The command a report's ``to_dict()`` names (None: not one of these)."""
        try:
            return cls(value)
        except ValueError:
            return None


@dataclass(frozen=True)
class NodeAnswer:
    """One node's answer to one task, read once.

    Attributes:
        raw: the dict the node returned (``vllm_version``, ``result``, ``status``, ``digest``,
            ``error``, ``patchkit_path``; ``lost`` when the task did not finish), kept for the report.
        patches: ``apply``/``plan``: the node's patch results, typed.
        files: ``revert``: the files the node handled, typed.
        entries: ``status`` (and ``verify``'s status): the journaled files, typed.
        status_entries: ``verify``: the journaled files of the node's status, typed.
        refused: the node's ``apply`` or ``revert`` refused (nothing written there).
        written: the node's ``apply`` wrote files.
        in_effect: ``verify``: the node reported EAGLE-3 in effect.
    """

    raw: Mapping[str, Any]
    patches: tuple[PatchResult, ...] = ()
    files: tuple[RevertedFile, ...] = ()
    entries: tuple[StatusEntry, ...] = ()
    status_entries: tuple[StatusEntry, ...] = ()
    refused: bool = False
    written: bool = False
    in_effect: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "NodeAnswer":
        """Read a node's answer (None: no answer) into its typed fields."""
        raw = raw or {}
        result = raw.get("result")
        got = result or {}
        kind = ClusterCommand.read(got.get("command"))  # every report's to_dict() names its command
        return cls(
            raw=raw,
            patches=tuple(PatchResult.from_dict(p) for p in got.get("patches", [])),
            files=tuple(RevertedFile(**f) for f in got.get("files", [])) if kind is ClusterCommand.REVERT else (),
            entries=tuple(StatusEntry(**e) for e in got.get("entries", [])),
            status_entries=tuple(StatusEntry(**e) for e in (raw.get("status") or {}).get("entries", [])),
            refused=bool(got.get("refused")),
            written=bool(got.get("written")),
            in_effect=result is not None and bool(got.get("ok")),
        )

    @property
    def error(self) -> dict[str, Any] | None:
        """``{"message", "hint", "exit_code"}`` when patchkit stopped on the node or its task was lost."""
        return self.raw.get("error")

    @property
    def lost(self) -> bool:
        """The node's task did not finish (it died, or did not answer in time)."""
        return bool(self.raw.get("lost"))

    @property
    def result(self) -> dict[str, Any] | None:
        """The node's report, ``to_dict()`` of its :mod:`patchkit.results` value (None after an error)."""
        return self.raw.get("result")

    def held_back(self) -> "NodeAnswer":
        """The node's plan as a cluster run that wrote nothing left it: its ready patches were not written
        (:func:`patchkit.plan.outcomes.held_back`); an answer without a report stays as it is."""
        if self.result is None:
            return self
        patches = held_back(self.patches)
        result = {**self.result, "patches": [p.to_dict() for p in patches]}
        return replace(self, raw={**self.raw, "result": result}, patches=patches)

    def with_digest(self, digest: str | None) -> "NodeAnswer":
        """The answer with another ``digest`` (a rolled-back node's, after its revert)."""
        return replace(self, raw={**self.raw, "digest": digest})


class NodeState(str, Enum):
    """A node's final state after a cluster command."""

    PATCHED = "patched"
    """``apply`` wrote its patches on this node."""
    ALREADY = "already patched"
    """``apply`` had nothing to write here: every patch was applied already (or is upstream)."""
    PLANNED = "planned"
    """``apply --dry-run``: the node was planned; nothing was written."""
    UNCHANGED = "unchanged"
    """Nothing was written on this node: the run was refused or stopped before writing."""
    ROLLED_BACK = "rolled back"
    """``apply`` wrote here, then reverted it because another node failed while writing."""
    ROLLBACK_FAILED = "rollback failed"
    """``apply`` wrote here and the revert after another node's failure did not succeed."""
    FAILED = "failed"
    """patchkit stopped on this node with an error (the message says why)."""
    DIED = "died"
    """The node left the cluster (or did not answer) during the run; its state is unknown."""
    JOINED = "joined"
    """The node joined the cluster during the run; it was not planned or changed."""
    DONE = "done"
    """``verify``/``status`` ran on this node (its result says what it found)."""
    REVERTED = "reverted"
    """``revert`` ran on this node: every file patchkit changed holds its original bytes again."""
    REFUSED = "refused"
    """``revert`` refused on this node (a file edited by hand); nothing was reverted there."""


@dataclass(frozen=True)
class NodeResult:
    """One node's part of a cluster command.

    Attributes:
        node_id: Ray's node id (hex).
        host: the node's host name, as Ray reports it.
        address: the node's IP address, as Ray reports it.
        state: the node's final state.
        vllm_version: the release found on the node, or None when none was found.
        patches: patch id -> outcome on this node (``apply``: the run's outcome; ``verify`` and
            ``status``: the state of the files holding the patch; ``revert``: restored or not).
        digest: SHA-256 (hex, first 16 digits) over the path and current bytes of every file
            patchkit changed on the node; None when patchkit changed no file there.
        result: the node's report, ``to_dict()`` of its :mod:`patchkit.results` value.
        plan: ``apply`` only: the node's dry-run report (the plan phase).
        rollback: ``apply`` only: the node's revert report, when it was rolled back.
        error: ``{"message", "hint", "exit_code"}`` when patchkit stopped on the node, or the node
            died or did not answer.
        patchkit_path: where the node imported patchkit from (the shipped copy).
        answer: the node's answer, read once into typed fields (:class:`NodeAnswer`).
    """

    node_id: str
    host: str
    address: str
    state: NodeState
    vllm_version: str | None = None
    patches: dict[str, str] = field(default_factory=dict)
    digest: str | None = None
    result: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    rollback: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    patchkit_path: str | None = None
    answer: NodeAnswer = field(default_factory=lambda: NodeAnswer.parse(None), compare=False, repr=False)
    """The node's answer, typed (what the view and :class:`ClusterReport` decide on); not in :meth:`to_dict`."""

    def outcome(self, patch_id: str) -> Outcome | None:
        """``apply``: the outcome of ``patch_id`` on this node, or None when the node did not plan it."""
        return next((p.outcome for p in self.answer.patches if p.id == patch_id), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "node_id": self.node_id,
            "host": self.host,
            "address": self.address,
            "state": self.state.value,
            "vllm_version": self.vllm_version,
            "patches": dict(self.patches),
            "hash": self.digest,
            "error": self.error,
            "result": self.result,
            "plan": self.plan,
            "rollback": self.rollback,
            "patchkit_path": self.patchkit_path,
        }


@dataclass(frozen=True)
class ClusterReport:
    """Result of a command run across a Ray cluster.

    Attributes:
        command: ``APPLY``, ``VERIFY``, ``STATUS`` or ``REVERT``.
        address: the cluster address given (``auto``: what ``ray.init`` finds).
        nodes: one row per node seen during the run (alive at the start, or joined since).
        refused: nothing was written because a node would refuse or the nodes differ
            (``reason`` says which); no node's state is changed.
        failed: a node failed, died or joined (its row says which).
        dry_run: ``apply --dry-run``.
        reason: one line saying why the run was refused or stopped, or "".
    """

    command: ClusterCommand
    address: str
    nodes: tuple[NodeResult, ...]
    refused: bool = False
    failed: bool = False
    dry_run: bool = False
    reason: str = ""

    @property
    def in_effect(self) -> bool:
        """``verify``: every node reported EAGLE-3 in effect."""
        return bool(self.nodes) and all(n.answer.in_effect for n in self.nodes)

    @property
    def same_bytes(self) -> bool:
        """Every node answered with the same release and the same hash of its patched files."""
        return len({(n.vllm_version, n.digest) for n in self.nodes}) == 1 and all(n.result for n in self.nodes)

    @property
    def ok(self) -> bool:
        """``verify``: in effect and alike on every node; other commands: nothing failed or was refused."""
        if self.command is ClusterCommand.VERIFY:
            return not self.failed and self.in_effect and self.same_bytes
        return not (self.failed or self.refused)

    @property
    def exit_code(self) -> ExitCode:
        """4 when a node failed, died or joined; 3 when refused; ``verify``: 1 when not ok; else 0."""
        if self.failed:
            return ExitCode.ENVIRONMENT
        if self.refused:
            return ExitCode.REFUSED
        if self.command is ClusterCommand.VERIFY and not self.ok:
            return ExitCode.NOT_IN_EFFECT
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (schema: docs/json.md)."""
        return {
            "command": self.command.value,
            "ray": self.address,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "refused": self.refused,
            "failed": self.failed,
            "reason": self.reason,
            "in_effect": self.in_effect,
            "same_bytes": self.same_bytes,
            "nodes": [n.to_dict() for n in self.nodes],
        }
