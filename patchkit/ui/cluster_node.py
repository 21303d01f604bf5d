"""The task each node of a ``--ray`` command runs: one patchkit API call on the node's own install.

Ray pickles :func:`run_on_node` by reference; each node imports it from the copy of patchkit the
driver shipped (:mod:`patchkit.ui.cluster`). Its answer is plain dicts (each report's
``to_dict()``), read on the driver by :class:`patchkit.ui.cluster_report.NodeAnswer`.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import Any

import patchkit
from patchkit import api
from patchkit.errors import PatchkitError
from patchkit.plan.request import Request
from patchkit.store.files import sha256
from patchkit.store.journal import Journal
from patchkit.ui.cluster_report import ClusterCommand
from patchkit.vllm.release.install import locate


def _expand(path: str | None) -> Path | None:
    """A path as the node reads it: ``~`` and ``$VARS`` expanded with the node's environment."""
    return None if path is None else Path(os.path.expandvars(os.path.expanduser(path)))


def patched_digest(site_packages: Path, target: str = "vllm") -> str | None:
    """Hash of the files patchkit changed in one install, as they are on disk now.

    Args:
        site_packages: the install's folder.
        target: the distribution.
    Returns:
        The first 16 hex digits of SHA-256 over ``"<path> <sha256 of its bytes>\\n"`` for every
        journaled file in path order (``missing`` for a file that is gone); None when the
        journal lists no file.
    Raises:
        StateError: the journal cannot be read.
    """
    entries = sorted(Journal(site_packages, target).entries)
    if not entries:
        return None
    lines = []
    for rel in entries:
        path = site_packages / rel
        lines.append(f"{rel} {sha256(path.read_bytes()) if path.is_file() else 'missing'}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


def run_on_node(command: str, options: dict[str, Any]) -> dict[str, Any]:
    """The task each node runs: one patchkit API call on the node's own install.

    Args:
        command: a :class:`~patchkit.ui.cluster_report.ClusterCommand`'s value (what crosses to the node):
            ``plan`` (``apply`` as a dry run), ``apply``, ``verify``, ``status`` or ``revert``.
        options: ``site_packages``/``python`` (strings, expanded on the node, or None), ``target``,
            ``patch_ids``, ``force``, ``architectures`` (``--arch`` names) and ``model`` (a checkpoint
            folder, expanded on the node, or None): the :class:`~patchkit.plan.request.Request` of every
            command but ``plan`` with ``patch_ids``.
    Returns:
        A plain dict: ``node_id``, ``host``, ``patchkit_path``, ``vllm_version``, ``result`` (the
        report's ``to_dict()``), ``status`` (``verify`` only: the status report's ``to_dict()``),
        ``digest`` (:func:`patched_digest` after the command), and ``error`` (message, hint and
        exit code of a :class:`~patchkit.errors.PatchkitError`, else None).
    """
    node: dict[str, Any] = {
        "host": socket.gethostname(),
        "patchkit_path": str(Path(patchkit.__file__).parent),
        "vllm_version": None,
        "result": None,
        "status": None,
        "digest": None,
        "error": None,
    }
    try:
        import ray  # lazy: Ray is optional, and present only in a worker of the cluster

        node["node_id"] = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside a Ray worker (a direct call) there is no node id
        node["node_id"] = None
    target = options.get("target", "vllm")
    kind = ClusterCommand(command)
    try:
        install = locate(site_packages=_expand(options.get("site_packages")), python=_expand(options.get("python")))
        node["vllm_version"] = str(install.version)
        request = Request(tuple(options.get("architectures") or ()), _expand(options.get("model")))
        if kind in (ClusterCommand.PLAN, ClusterCommand.APPLY):
            where = [
                (flag, _expand(options.get(key)))
                for flag, key in (("--python", "python"), ("--site-packages", "site_packages"))
            ]
            report = api.apply(
                install,
                dry_run=kind is ClusterCommand.PLAN,
                patch_ids=options.get("patch_ids"),
                target=target,
                force=bool(options.get("force")),
                request=request,
                guard=bool(options.get("guard")),
                watch=bool(options.get("watch")),
                watch_drafts=options.get("watch_drafts"),
                watch_threshold=options.get("watch_threshold"),
                command_options=[o for flag, path in where if path is not None for o in (flag, str(path))],
            )
        elif kind is ClusterCommand.VERIFY:
            report = api.verify(install, request=request)
            node["status"] = api.status(install, target=target).to_dict()
        elif kind is ClusterCommand.STATUS:
            report = api.status(install, target=target, request=request)
        else:  # ClusterCommand.REVERT
            report = api.revert(install, target=target, force=bool(options.get("force")), request=request)
        node["result"] = report.to_dict()
        node["digest"] = patched_digest(install.site_packages, target)
    except PatchkitError as exc:
        node["error"] = {"message": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}
    return node
