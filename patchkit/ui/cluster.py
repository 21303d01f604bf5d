"""Run ``apply``, ``verify``, ``status`` and ``revert`` on every node of a Ray cluster.

vLLM serves a model across several nodes through Ray, and each node has its own site-packages:
each must carry the same patched bytes. This module connects to the cluster the user already has
(``ray.init``), runs one task pinned to each alive node (``NodeAffinitySchedulingStrategy``,
hard), and gathers the per-node results (plain dicts: each report's ``to_dict()``) into one
immutable :class:`~patchkit.ui.cluster_report.ClusterReport`. This module is the driver (the
connection, the shipping and the pinned tasks are :mod:`patchkit.ui.cluster_session`); the task
each node runs is :func:`patchkit.ui.cluster_node.run_on_node`, and the report types (with each
node's answer read once into typed fields) are in :mod:`patchkit.ui.cluster_report`.

- patchkit itself (with its patch definitions) and, for ``apply``, libcst are shipped to the nodes
  as the job's runtime environment (``runtime_env={"working_dir": ...}``, which Ray uploads and
  puts first on each worker's import path), so they need not be installed there. ``working_dir``
  rather than ``py_modules``: with ``py_modules`` Ray still puts the driver's current folder ahead
  of the shipped copy, so a checkout there would shadow it. libcst has a compiled part: the nodes
  must share the driver's platform and Python version, which Ray requires of a cluster anyway. Its
  one dependency, PyYAML, comes with Ray.
- On each node, ``--site-packages``/``--python`` are read there: ``~`` and ``$VARS`` are expanded
  with that node's own environment (the same literal path on every node, as on real clusters).
- ``apply`` is atomic across the cluster: it plans (a dry run) on every node first; a node that
  would refuse, fails, runs another vLLM release, dies or joins stops the run before anything is
  written anywhere. If a node fails while writing, the nodes already written are reverted, and
  every node's final state is reported. ``revert`` reads every node's status first and reverts
  nowhere when a node would refuse.

Ray is an optional dependency (the ``ray`` extra), imported only by the functions here that need
it (this module itself is imported only with ``--ray``). Nothing here prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchkit.errors import ExitCode
from patchkit.plan.file_states import RevertAction, revert_action
from patchkit.ui.cluster_report import ClusterCommand, ClusterReport, NodeAnswer, NodeResult, NodeState
from patchkit.ui.cluster_session import Node, ask, connect


def _options(
    site_packages: Path | str | None,
    python: Path | str | None,
    *,
    architectures: list[str] | tuple[str, ...] | None = None,
    model: Path | str | None = None,
    **rest: Any,
) -> dict[str, Any]:
    return {
        "site_packages": None if site_packages is None else str(site_packages),
        "python": None if python is None else str(python),
        "architectures": list(architectures or ()),
        "model": None if model is None else str(model),
        **rest,
    }


def _patch_outcomes(command: ClusterCommand, answer: NodeAnswer) -> dict[str, str]:
    """Patch id -> outcome on one node, from the node's report (and, for verify, its status)."""
    if answer.result is None:
        return {}
    if command is ClusterCommand.APPLY:
        return {p.id: p.outcome.value for p in answer.patches}
    if command is ClusterCommand.REVERT:
        out: dict[str, str] = {}
        for f in answer.files:
            for pid in f.patches:
                out[pid] = "restored" if f.restored else ("refused" if answer.refused else "nothing to revert")
        return out
    states: dict[str, set[str]] = {}
    for e in answer.status_entries if command is ClusterCommand.VERIFY else answer.entries:
        for pid in e.patches:
            states.setdefault(pid, set()).add(e.state)
    return {pid: ", ".join(sorted(s)) for pid, s in sorted(states.items())}


def _row(node: Node, answer: NodeAnswer, command: ClusterCommand, state: NodeState, **extra: Any) -> NodeResult:
    raw = answer.raw
    return NodeResult(
        node_id=node.node_id,
        host=node.host,
        address=node.address,
        state=state,
        vllm_version=raw.get("vllm_version"),
        patches=_patch_outcomes(command, answer),
        digest=raw.get("digest"),
        result=answer.result,
        error=answer.error,
        patchkit_path=raw.get("patchkit_path"),
        answer=answer,
        **extra,
    )


def _membership(
    before: dict[str, Node], after: dict[str, Node], answers: dict[str, NodeAnswer]
) -> tuple[set[str], set[str]]:
    """Nodes that died (gone from the alive set, or lost their task) and nodes that joined."""
    died = {nid for nid in before if nid not in after or (nid in answers and answers[nid].lost)}
    joined = set(after) - set(before)
    return died, joined


def _joined_rows(nodes: dict[str, Node], joined: set[str]) -> list[NodeResult]:
    return [
        NodeResult(
            nodes[nid].node_id,
            nodes[nid].host,
            nodes[nid].address,
            NodeState.JOINED,
            error={
                "message": "joined the cluster during the run; not planned or changed",
                "hint": "run the command again to include it",
                "exit_code": int(ExitCode.ENVIRONMENT),
            },
        )
        for nid in sorted(joined)
    ]


_RUN_COMMANDS = (ClusterCommand.VERIFY, ClusterCommand.STATUS, ClusterCommand.REVERT)
"""The commands :func:`run` takes (``apply`` has :func:`apply`: it plans first)."""


def run(
    command: ClusterCommand,
    address: str | None,
    *,
    site_packages: Path | str | None = None,
    python: Path | str | None = None,
    target: str = "vllm",
    force: bool = False,
    architectures: list[str] | tuple[str, ...] | None = None,
    model: Path | str | None = None,
) -> ClusterReport:
    """Run ``verify``, ``status`` or ``revert`` on every alive node of the cluster.

    ``revert`` first reads every node's status: when a node would refuse (a file edited by hand
    since patchkit wrote it, without ``force``), fails, dies or joins, nothing is reverted on any
    node. A node that fails while reverting is reported; the others stay reverted.

    Args:
        command: ``VERIFY``, ``STATUS`` or ``REVERT``.
        address: the cluster's address, or None for what ``ray.init`` finds.
        site_packages / python: the install on each node (expanded there; at most one given).
        target: the distribution.
        force: ``revert --force`` on every node.
        architectures / model: ``--arch`` / ``--model`` on every node (the folder is read there,
            expanded like ``site_packages``).
    Returns:
        A :class:`ClusterReport`; ``verify`` is ok only when every node is in effect and all nodes
        have the same release and the same hash of their patched files.
    Raises:
        ClusterError: Ray is missing or the cluster cannot be reached.
    """
    if command not in _RUN_COMMANDS:
        raise ValueError(f"run() takes verify, status or revert, not {command.value!r}")
    opts = _options(site_packages, python, target=target, force=force, architectures=architectures, model=model)
    with connect(address) as session:
        start = session.alive()
        if command is ClusterCommand.REVERT:
            plans = ask(session, start, ClusterCommand.STATUS, opts)
            planned = session.alive()
            refused = _refused_revert(start, planned, plans, force, session.address)
            if refused is not None:
                return refused
            start = planned
        answers = ask(session, start, command, opts)
        after = session.alive()
    died, joined = _membership(start, after, answers)
    rows = []
    for nid, node in sorted(start.items(), key=lambda kv: (kv[1].address, kv[0])):
        a = answers[nid]
        state = (
            NodeState.DIED
            if nid in died
            else NodeState.FAILED
            if a.error
            else NodeState.REFUSED
            if command is ClusterCommand.REVERT and a.refused
            else NodeState.REVERTED
            if command is ClusterCommand.REVERT
            else NodeState.DONE
        )
        rows.append(_row(node, a, command, state))
    rows += _joined_rows(after, joined)
    failed = any(r.state in (NodeState.DIED, NodeState.FAILED, NodeState.JOINED) for r in rows)
    refused_here = any(r.state is NodeState.REFUSED for r in rows)
    reason = _failure_reason(rows) if failed else ("a node refused to revert" if refused_here else "")
    return ClusterReport(command, session.address, tuple(rows), refused=refused_here, failed=failed, reason=reason)


def _refused_revert(
    start: dict[str, Node], planned: dict[str, Node], plans: dict[str, NodeAnswer], force: bool, address: str
) -> ClusterReport | None:
    """The report of a ``revert --ray`` stopped by its status phase, or None when every node can revert."""
    died, joined = _membership(start, planned, plans)
    refusing = {
        nid
        for nid, a in plans.items()
        if a.result and any(revert_action(e.state, force) is RevertAction.REFUSE for e in a.entries)
    }
    errors = {nid for nid, a in plans.items() if a.error and nid not in died}
    if not (died or joined or errors or refusing):
        return None
    rows = []
    for nid, node in sorted(start.items(), key=lambda kv: (kv[1].address, kv[0])):
        state = (
            NodeState.DIED
            if nid in died
            else NodeState.FAILED
            if nid in errors
            else NodeState.REFUSED
            if nid in refusing
            else NodeState.UNCHANGED
        )
        rows.append(_row(node, plans[nid], ClusterCommand.STATUS, state))
    rows += _joined_rows(planned, joined)
    failed = bool(died or joined or errors)
    reason = (
        _failure_reason(rows) + "; nothing was reverted on any node"
        if failed
        else f"node(s) {', '.join(sorted(n[:8] for n in refusing))} hold files edited by hand since patchkit "
        "wrote them (their 'patches' column says which); nothing was reverted on any node"
    )
    return ClusterReport(ClusterCommand.REVERT, address, tuple(rows), refused=not failed, failed=failed, reason=reason)


def _failure_reason(rows: list[NodeResult]) -> str:
    bad = [r for r in rows if r.state in (NodeState.DIED, NodeState.FAILED, NodeState.JOINED)]
    return "; ".join(
        f"node {r.node_id[:8]} {r.state.value}" + (f": {r.error['message']}" if r.error else "") for r in bad
    )


def apply(
    address: str | None,
    *,
    site_packages: Path | str | None = None,
    python: Path | str | None = None,
    dry_run: bool = False,
    patch_ids: list[str] | None = None,
    target: str = "vllm",
    force: bool = False,
    architectures: list[str] | tuple[str, ...] | None = None,
    model: Path | str | None = None,
    guard: bool = False,
    watch: bool = False,
    watch_drafts: int | None = None,
    watch_threshold: float | None = None,
) -> ClusterReport:
    """Apply the patches on every alive node of the cluster, all nodes or none.

    1. Plan (``apply --dry-run``) on every node at once. Nothing is written anywhere when a node
       would refuse, fails, runs another vLLM release than the others, or died or joined since
       the start (or with ``dry_run``).
    2. Apply on every node at once. If a node fails, dies or refuses while writing, every node
       this run wrote to is reverted (``revert``), and the report gives each node's final state.
    3. A node that joined while writing is reported (not patched); the run counts as failed.

    Args:
        address: the cluster's address, or None for what ``ray.init`` finds.
        site_packages / python: the install on each node (expanded there; at most one given).
        dry_run, patch_ids, target, force: as :func:`patchkit.api.apply`, on every node.
        architectures / model: ``--arch`` / ``--model`` (the :class:`~patchkit.plan.request.Request`), on
            every node; the folder is read there, expanded like ``site_packages``.
        guard: ``--guard``: install patchkit's guard on every node too (:mod:`patchkit.guard.guard`; it
            names the node's own expanded ``--python``/``--site-packages`` in its line).
        watch, watch_drafts, watch_threshold: ``--watch``: install the acceptance watch on every node too
            (:mod:`patchkit.watch.watch`); a node whose vLLM lacks the plugin group refuses in the plan step,
            so nothing is written anywhere.
    Returns:
        A :class:`ClusterReport`.
    Raises:
        ClusterError: Ray is missing or the cluster cannot be reached.
    """
    opts = _options(
        site_packages,
        python,
        target=target,
        force=force,
        patch_ids=patch_ids,
        architectures=architectures,
        model=model,
        guard=guard,
        watch=watch,
        watch_drafts=watch_drafts,
        watch_threshold=watch_threshold,
    )
    with connect(address, with_libcst=True) as session:
        start = session.alive()
        plans = ask(session, start, ClusterCommand.PLAN, opts)
        planned = session.alive()
        died, joined = _membership(start, planned, plans)
        order = sorted(start, key=lambda nid: (start[nid].address, nid))
        errors = [nid for nid in order if plans[nid].error and nid not in died]
        reason = _plan_refusal(order, plans, died, joined, errors)
        if reason or dry_run:
            return _planned_report(session.address, start, planned, order, plans, died, joined, errors, reason, dry_run)

        writes = ask(session, planned, ClusterCommand.APPLY, opts)
        after = session.alive()
        died, joined = _membership(planned, after, writes)
        wrote = [nid for nid in order if writes[nid].written]
        broken = [nid for nid in order if nid in died or writes[nid].error or writes[nid].refused]
        rollbacks = (
            ask(session, {nid: planned[nid] for nid in wrote}, ClusterCommand.REVERT, opts) if broken and wrote else {}
        )

    return _written_report(
        session.address, order, planned, after, plans, writes, rollbacks, died, joined, wrote, broken
    )


def _plan_refusal(
    order: list[str], plans: dict[str, NodeAnswer], died: set[str], joined: set[str], errors: list[str]
) -> str:
    """Why the plan step stops ``apply --ray`` before any write, or "" when every node can write."""
    versions = sorted({a.raw["vllm_version"] for a in plans.values() if a.raw.get("vllm_version")})
    refusing = [nid for nid in order if plans[nid].result and plans[nid].refused]
    if died or joined or errors:
        return "a node failed, died or joined while planning; nothing was written on any node"
    if refusing:
        return f"node(s) {', '.join(n[:8] for n in refusing)} would refuse; nothing was written on any node"
    if len(versions) > 1:
        return (
            f"the nodes run different vLLM releases ({', '.join(versions)}); every node of a deployment "
            "must run the same release: nothing was written on any node"
        )
    return ""


def _planned_report(
    address: str,
    start: dict[str, Node],
    planned: dict[str, Node],
    order: list[str],
    plans: dict[str, NodeAnswer],
    died: set[str],
    joined: set[str],
    errors: list[str],
    reason: str,
    dry_run: bool,
) -> ClusterReport:
    """The report of an ``apply --ray`` that wrote nothing: a dry run, or stopped by its plan step (``reason``)."""
    rows = []
    for nid in order:
        state = (
            NodeState.DIED
            if nid in died
            else NodeState.FAILED
            if nid in errors
            else NodeState.PLANNED
            if dry_run and not reason
            else NodeState.UNCHANGED
        )
        answer = plans[nid].held_back() if reason else plans[nid]
        rows.append(_row(start[nid], answer, ClusterCommand.APPLY, state, plan=plans[nid].result))
    rows += _joined_rows(planned, joined)
    failed = bool(died or joined or errors)
    return ClusterReport(
        ClusterCommand.APPLY,
        address,
        tuple(rows),
        refused=bool(reason) and not failed,
        failed=failed,
        dry_run=dry_run,
        reason=reason,
    )


def _written_row(
    node: Node, plan: NodeAnswer, write: NodeAnswer, rollback: NodeAnswer | None, died: bool, wrote: bool, broken: bool
) -> NodeResult:
    """One node's row after the write step (and, when a node broke, the rollback of the nodes written)."""
    answer, extra = write, {"plan": plan.result}
    if died:
        state = NodeState.DIED
    elif write.error:
        state = NodeState.FAILED
    elif rollback is not None:
        extra["rollback"] = rollback.result
        ok = rollback.result is not None and not rollback.refused and not rollback.error
        state = NodeState.ROLLED_BACK if ok else NodeState.ROLLBACK_FAILED
        answer = answer.with_digest(rollback.raw.get("digest") if ok else answer.raw.get("digest"))
    elif broken:
        state = NodeState.UNCHANGED
    else:
        state = NodeState.PATCHED if wrote else NodeState.ALREADY
    return _row(node, answer, ClusterCommand.APPLY, state, **extra)


def _written_report(
    address: str,
    order: list[str],
    planned: dict[str, Node],
    after: dict[str, Node],
    plans: dict[str, NodeAnswer],
    writes: dict[str, NodeAnswer],
    rollbacks: dict[str, NodeAnswer],
    died: set[str],
    joined: set[str],
    wrote: list[str],
    broken: list[str],
) -> ClusterReport:
    """``apply``'s report once it wrote: one row per planned node (in ``order``) from its plan, its write
    and its rollback (``rollbacks``, by node id), one per node that ``joined``, failed when a node is
    ``broken`` or joined, and the reason why."""
    rows = [
        _written_row(planned[nid], plans[nid], writes[nid], rollbacks.get(nid), nid in died, nid in wrote, bool(broken))
        for nid in order
    ]
    rows += _joined_rows(after, joined)
    reason = ""
    if broken:
        reason = (
            "node(s) "
            + ", ".join(n[:8] for n in broken)
            + " failed while writing; "
            + ("the nodes written were reverted" if wrote else "no node had been written")
        )
    elif joined:
        reason = "node(s) joined while writing and were not patched; run 'patchkit apply --ray' again"
    return ClusterReport(ClusterCommand.APPLY, address, tuple(rows), failed=bool(broken or joined), reason=reason)
