"""The connection to a Ray cluster: connecting with patchkit (and, for ``apply``, libcst) shipped as
the job's working_dir, and running one task pinned to each alive node.

:func:`connect` yields a :class:`Session`; :meth:`Session.run` (and :func:`ask`, which reads each
answer once into a :class:`~patchkit.ui.cluster_report.NodeAnswer`) runs a
:class:`~patchkit.ui.cluster_report.ClusterCommand` on the given nodes and returns each node's
answer by node id. :mod:`patchkit.ui.cluster` drives the commands over it. Ray is imported only by
the functions that need it; nothing here prints.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import patchkit
from patchkit.errors import ClusterError, ExitCode
from patchkit.plan.spec import patches_package
from patchkit.ui.cluster_node import run_on_node
from patchkit.ui.cluster_report import ClusterCommand, NodeAnswer


RAY_INSTALL = "pip install 'vllm-patchkit[ray]'"
"""The install command the error names when Ray is missing."""

NODE_TIMEOUT_S = float(os.environ.get("PATCHKIT_RAY_TIMEOUT", "600"))
"""How long the driver waits for one node's task (seconds; env ``PATCHKIT_RAY_TIMEOUT``)."""


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster: its Ray node id, host name and address."""

    node_id: str
    host: str
    address: str


def _import_ray():
    """The ``ray`` module; raises a :class:`ClusterError` naming :data:`RAY_INSTALL` when Ray is missing."""
    try:
        import ray  # noqa: F401  # lazy: Ray is optional (the 'ray' extra); a missing one is a ClusterError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: F401  # lazy: as above
    except ImportError:
        raise ClusterError("--ray needs Ray, which is not installed", f"install it: {RAY_INSTALL}") from None
    return ray


def _ship(staging: Path, with_libcst: bool) -> None:
    """Copy patchkit (with its patch definitions) and, for apply, libcst into ``staging``, the job's working_dir.

    The patch definitions are the package ``patchkit.patches``; in an editable install they live
    outside ``patchkit/`` (``pyproject.toml`` maps ``patches/``), so the copy is assembled from
    where Python imports each package from.
    """
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "tests")
    dest = staging / "patchkit"
    shutil.copytree(Path(patchkit.__file__).parent, dest, ignore=ignore, dirs_exist_ok=True)
    shutil.copytree(Path(patches_package().__file__).parent, dest / "patches", ignore=ignore, dirs_exist_ok=True)
    if with_libcst:
        import libcst  # lazy: only apply ships it; status/verify/revert --ray never import it

        shutil.copytree(Path(libcst.__file__).parent, staging / "libcst", ignore=ignore)


class Session:
    """A connection to the cluster, with the remote task ready to pin to a node."""

    def __init__(self, ray: Any, address: str) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # lazy: Ray is optional

        self.ray = ray
        self.address = address
        self._strategy = NodeAffinitySchedulingStrategy
        self._task = ray.remote(run_on_node)

    def alive(self) -> dict[str, Node]:
        """The alive nodes, by id."""
        return {
            n["NodeID"]: Node(n["NodeID"], n.get("NodeManagerHostname", ""), n.get("NodeManagerAddress", ""))
            for n in self.ray.nodes()
            if n.get("Alive")
        }

    def run(
        self, nodes: dict[str, Node], command: ClusterCommand, options: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Run ``command`` on each node at once, one task pinned to each; a node that does not answer
        gets ``{"lost": True, "error": ...}``."""
        refs = {
            node_id: self._task.options(
                scheduling_strategy=self._strategy(node_id, soft=False),
                num_cpus=0,
                max_retries=0,
            ).remote(command.value, options)  # the value crosses: the node reads it back
            for node_id in nodes
        }
        out: dict[str, dict[str, Any]] = {}
        for node_id, ref in refs.items():
            try:
                out[node_id] = self.ray.get(ref, timeout=NODE_TIMEOUT_S)
            except self.ray.exceptions.GetTimeoutError:
                self.ray.cancel(ref, force=True)
                out[node_id] = _lost(f"no answer within {NODE_TIMEOUT_S:.0f} s")
            except self.ray.exceptions.RayError as exc:
                first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
                first = first.split(". ")[0].rstrip(".")[:200]  # Ray's first sentence
                out[node_id] = _lost(
                    f"the node's task did not finish: {type(exc).__name__}" + (f" ({first})" if first else "")
                )
        return out


def ask(
    session: "Session", nodes: dict[str, Node], command: ClusterCommand, options: dict[str, Any]
) -> dict[str, NodeAnswer]:
    """:meth:`Session.run`, each node's answer read once."""
    return _answers(session.run(nodes, command, options))


def _answers(raw: dict[str, dict[str, Any]]) -> dict[str, NodeAnswer]:
    """Each node's answer, read once (:class:`NodeAnswer`)."""
    return {nid: NodeAnswer.parse(a) for nid, a in raw.items()}


def _lost(message: str) -> dict[str, Any]:
    """The answer recorded for a node that gave none: ``lost``, with ``message`` and a hint (exit 4)."""
    return {
        "lost": True,
        "vllm_version": None,
        "result": None,
        "digest": None,
        "error": {
            "message": message,
            "hint": "check the node ('ray status'; Ray's logs on the node: "
            "/tmp/ray/session_latest/logs), then run the command again",
            "exit_code": int(ExitCode.ENVIRONMENT),
        },
    }


@contextmanager
def connect(address: str | None, *, with_libcst: bool = False) -> Iterator[Session]:
    """Connect to the Ray cluster at ``address`` (None: what ``ray.init`` finds), shipping patchkit.

    While connected, whatever is printed on ``sys.stdout`` is dropped: Ray's driver prints the
    cluster's error messages on stdout from a thread of its own (for a node that died: the last
    lines of its raylet's log, dozens of lines), and stdout carries only patchkit's table or JSON.
    The report names the node instead; Ray keeps its logs on each node
    (``/tmp/ray/session_latest/logs``).

    Raises:
        ClusterError: Ray is not installed, or no cluster answers at the address.
    """
    ray = _import_ray()
    given = address or "auto"
    with redirect_stdout(io.StringIO()):
        with tempfile.TemporaryDirectory(prefix="patchkit-ship-") as staging:
            _ship(Path(staging), with_libcst)
            try:
                ray.init(
                    address=given,
                    runtime_env={"working_dir": staging},
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    configure_logging=False,
                    include_dashboard=False,
                )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ClusterError(
                    f"cannot connect to the Ray cluster at {given}: {first}",
                    "start the cluster (ray start --head), or give its address: --ray HOST:6379",
                ) from None
        try:
            yield Session(ray, given)
        finally:
            ray.shutdown()
