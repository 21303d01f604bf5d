"""The ``--ray`` form of ``apply``, ``verify``, ``status`` and ``revert``: options in, one table out.

The CLI (:mod:`patchkit.ui.cli`) hands a command here when ``--ray`` is given; this module calls
:mod:`patchkit.ui.cluster` and renders its :class:`~patchkit.ui.cluster_report.ClusterReport`: one row per
node (node, host, vLLM version, its state, the outcome of each patch, the hash of its patched
files), then the reasons, as text or as one JSON object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from patchkit.errors import UsageError
from patchkit.plan.spec import check_target
from patchkit.results import Outcome
from patchkit.ui import cluster
from patchkit.ui.cluster_report import ClusterCommand, ClusterReport, NodeState
from patchkit.ui.console import emit_json, out
from patchkit.ui.outcome_style import OUTCOME_STYLE
from patchkit.ui.render import Piece

_STATE_STYLE = {
    NodeState.PATCHED: "green",
    NodeState.ALREADY: "green",
    NodeState.DONE: "green",
    NodeState.REVERTED: "green",
    NodeState.PLANNED: "yellow",
    NodeState.UNCHANGED: "yellow",
    NodeState.ROLLED_BACK: "yellow",
    NodeState.ROLLBACK_FAILED: "red",
    NodeState.FAILED: "red",
    NodeState.DIED: "red",
    NodeState.JOINED: "red",
    NodeState.REFUSED: "red",
}
_FILE_STYLE = {
    "patched": "green",
    "restored": "green",
    "edited": "red",
    "missing": "red",
    "refused": "red",
    "upgraded": "yellow",
    "reinstalled": "yellow",
    "nothing to revert": "yellow",
}
"""``status``/``verify``/``revert``: the style of the text in a node's patch column (the journaled files'
states, or what revert did), a lookup for display only; ``apply`` styles by :data:`OUTCOME_STYLE`."""


def _check(target: str, site_packages: Optional[Path], python: Optional[Path], model: Optional[Path] = None) -> None:
    check_target(target)
    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    for flag, path in (("--site-packages", site_packages), ("--python", python), ("--model", model)):
        text = "" if path is None else str(path)
        if text and not (Path(text).is_absolute() or text.startswith(("~", "$"))):
            raise UsageError(
                f"{flag} {text} is relative; each node would read it from its own working folder",
                "give the absolute path the nodes share, e.g. /opt/venv/bin/python "
                "(~ and $VARS are expanded on each node)",
            )


def apply(
    address: str,
    *,
    target: str,
    site_packages: Optional[Path],
    python: Optional[Path],
    dry_run: bool,
    patch: Optional[list[str]],
    force: bool,
    arch: Optional[list[str]] = None,
    model: Optional[Path] = None,
    as_json: bool,
    guard: bool = False,
    watch: bool = False,
    watch_drafts: Optional[int] = None,
    watch_threshold: Optional[float] = None,
) -> int:
    """``apply --ray``: plan on every node, then write on every node or on none; returns the exit code.

    The CLI has checked the ``--patch`` ids already; ``arch``/``model`` are ``--arch``/``--model``,
    read on each node (the checkpoint folder at the same absolute path on every node).
    """
    _check(target, site_packages, python, model)
    report = cluster.apply(
        None if address == "auto" else address,
        site_packages=site_packages,
        python=python,
        dry_run=dry_run,
        patch_ids=patch,
        target=target,
        force=force,
        architectures=arch,
        model=model,
        guard=guard,
        watch=watch,
        watch_drafts=watch_drafts,
        watch_threshold=watch_threshold,
    )
    return _show(report, as_json)


def run(
    command: ClusterCommand,
    address: str,
    *,
    target: str,
    site_packages: Optional[Path],
    python: Optional[Path],
    force: bool = False,
    arch: Optional[list[str]] = None,
    model: Optional[Path] = None,
    as_json: bool,
) -> int:
    """``verify|status|revert --ray``: the command on every node; returns the exit code.

    ``arch``/``model`` are ``--arch``/``--model``, read on each node.
    """
    _check(target, site_packages, python, model)
    report = cluster.run(
        command,
        None if address == "auto" else address,
        site_packages=site_packages,
        python=python,
        target=target,
        force=force,
        architectures=arch,
        model=model,
    )
    return _show(report, as_json)


def _show(report: ClusterReport, as_json: bool) -> int:
    if as_json:
        emit_json(report.to_dict())
    else:
        _render(report)
    return int(report.exit_code)


def _render(report: ClusterReport) -> None:
    w = out()
    ids: list[str] = []
    for n in report.nodes:
        ids += [pid for pid in n.patches if pid not in ids]
    extra = ["EAGLE-3"] if report.command is ClusterCommand.VERIFY else []
    rows: list[list[Piece]] = []
    for n in report.nodes:
        cells: list[Piece] = []
        for pid in ids:
            value = n.patches.get(pid, "-")
            would = report.dry_run and n.outcome(pid) is Outcome.APPLIED
            outcome = n.outcome(pid)
            style = OUTCOME_STYLE[outcome] if outcome is not None else _FILE_STYLE.get(value)
            label, style = ("would apply", "yellow") if would else (value, style)
            cells.append((label, style))
        if report.command is ClusterCommand.VERIFY:
            cells.append(
                "-" if n.result is None else ("in effect", "green") if n.answer.in_effect else ("not in effect", "red")
            )
        rows.append(
            [
                n.node_id[:8],
                f"{n.host} {n.address}",
                n.vllm_version or "-",
                (n.state.value, _STATE_STYLE[n.state]),
                *cells,
                n.digest or "-",
            ]
        )
    w.table(["node", "host", "vLLM", "state", *ids, *extra, "hash"], rows)
    for n in report.nodes:
        who = f"node {n.node_id[:8]}: "
        if n.error:
            hint: list[Piece] = [("  hint: " + n.error["hint"], "dim")] if n.error.get("hint") else []
            w.line(who, (n.error["message"], "red"), *hint)
        for p in n.answer.patches:
            if p.outcome is Outcome.REFUSED:
                w.line(who, f"{p.id} refused: {p.reason}")
        if report.command is ClusterCommand.VERIFY and n.result is not None:
            for line in n.result.get("missing", []):
                w.line(who, f"missing: {line}")
        if report.command is ClusterCommand.REVERT and n.result is not None:
            for f in n.answer.files:
                if not f.restored:
                    w.line(who, f"{f.path}: {f.reason}")
    w.line(*_summary(report))
    if report.command is ClusterCommand.REVERT and report.refused:
        w.line(("hint:", "dim"), " 'patchkit revert --ray --force' writes the originals over the edits on every node")


def _summary(report: ClusterReport) -> tuple[Piece, ...]:
    count = len(report.nodes)
    if report.reason:
        return ((f"{'refused' if report.refused else 'failed'}:", "red"), f" {report.reason}")
    if report.command is ClusterCommand.VERIFY:
        if report.ok:
            return ((f"EAGLE-3 is in effect on all {count} nodes", "green"), ", with the same bytes")
        why = [] if report.in_effect else ["not in effect on every node"]
        why += [] if report.same_bytes else ["the nodes differ in their vLLM release or patched bytes (see 'hash')"]
        return ((f"EAGLE-3 is not in effect alike on all {count} nodes:", "red"), f" {'; '.join(why)}")
    if report.command is ClusterCommand.APPLY:
        if report.dry_run:
            return (f"dry run on {count} nodes: nothing was written",)
        return (f"{count} nodes patched alike; 'patchkit verify --ray' checks them, 'patchkit revert --ray' undoes it",)
    if report.command is ClusterCommand.REVERT:
        return (f"reverted on all {count} nodes: every file patchkit changed holds its original bytes again",)
    return (f"status of {count} nodes",)
