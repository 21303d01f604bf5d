"""``--ray``: apply, verify, status and revert across a real local multi-node Ray cluster.

The cluster is Ray's own multi-node test cluster (``ray.cluster_utils.Cluster``) on this machine:
a head and two worker nodes, one CPU each, small object stores, bound to loopback. Each node is a
real raylet with its own worker processes.

One machine cannot give each node its own ``/opt/venv`` at one literal path, so each node is
started with its own environment variable ``PATCHKIT_TEST_NODE`` (``Cluster.add_node(env_vars=)``,
inherited by the node's workers), and the tests pass
``--site-packages '$PATCHKIT_TEST_NODE/site-packages'``: the same string on every node, expanded
by each node in its own environment (as patchkit expands ``~`` and ``$VARS`` on every node).
Each node's folder holds its own copy of a real vLLM release, so nodes can differ.
"""

from __future__ import annotations

import fcntl
import filecmp
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_release import fresh_copy, pristine_site_packages

pytestmark = [pytest.mark.release, pytest.mark.cluster]

VAR = "PATCHKIT_TEST_NODE"
SITE = f"${VAR}/site-packages"
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 78 * 1024 * 1024, "include_dashboard": False}
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


@dataclass
class Node:
    """One node of the test cluster: Ray's node handle and the folder its env var names."""

    handle: object
    folder: Path

    @property
    def node_id(self) -> str:
        return self.handle.node_id

    @property
    def site(self) -> Path:
        return self.folder / "site-packages"


class LocalCluster:
    """The running cluster and its nodes (head first)."""

    def __init__(self, root: Path) -> None:
        from ray.cluster_utils import Cluster

        self.root = root
        self.count = 0
        self.cluster = Cluster(initialize_head=True, head_node_args=self._args())
        self.nodes = [Node(self.cluster.head_node, self._folder(0))]
        for _ in range(2):
            self.add()
        self.cluster.wait_for_nodes()

    def _folder(self, i: int) -> Path:
        return self.root / f"node-{i}"

    def _args(self) -> dict:
        folder = self._folder(self.count)
        folder.mkdir(parents=True, exist_ok=True)
        self.count += 1
        return {**NODE_ARGS, "env_vars": {VAR: str(folder)}}

    def add(self, version: str | None = None) -> Node:
        """Start one more node; with ``version``, its folder holds that release before it joins."""
        if version is not None:
            fresh_copy(version, self._folder(self.count) / "site-packages")
        handle = self.cluster.add_node(**self._args())
        node = Node(handle, self._folder(self.count - 1))
        self.nodes.append(node)
        return node

    def remove(self, node: Node, graceful: bool = False) -> None:
        self.cluster.remove_node(node.handle, allow_graceful=graceful)
        self.nodes.remove(node)

    @property
    def address(self) -> str:
        return self.cluster.address

    def install(self, *versions: str) -> None:
        """Give node i a fresh copy of release versions[i]."""
        assert len(versions) == len(self.nodes)
        for node, version in zip(self.nodes, versions):
            shutil.rmtree(node.site, ignore_errors=True)
            fresh_copy(version, node.site)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no telemetry off the machine
        # Ray's local-only mode (its default on macOS and Windows): every node, and the driver,
        # on the loopback address.
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # The join and kill tests hold one node's install lock while the others write; its
        # write waits for the lock (inherited by the nodes' workers) rather than giving up at 30 s.
        mp.setenv("PATCHKIT_LOCK_TIMEOUT", "180")
        mp.delenv("RAY_ADDRESS", raising=False)
        cluster = LocalCluster(tmp_path_factory.mktemp("ray-nodes"))
        try:
            yield cluster
        finally:
            cluster.cluster.shutdown()


def pristine(node: Node, version: str) -> bool:
    """True when the node's tree is byte for byte the release, with no patchkit state left."""
    ref = pristine_site_packages(version)

    def same(a: Path, b: Path) -> bool:
        cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
        if cmp.left_only or cmp.right_only or cmp.funny_files:
            return False
        _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
        return not mismatch and not errors and all(same(a / d, b / d) for d in cmp.common_dirs)

    return same(node.site, ref)


def by_node(data: dict) -> dict[str, dict]:
    return {n["node_id"]: n for n in data["nodes"]}


@contextmanager
def hold_lock(folder: Path):
    """Hold patchkit's install lock (an exclusive flock on the site-packages folder)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.2)


def test_apply_verify_status_revert_on_three_fresh_nodes(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    code, data = cli.json("apply", "--target", "vllm", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0, data
    nodes = by_node(data)
    assert set(nodes) == {n.node_id for n in ray_cluster.nodes}
    for n in ray_cluster.nodes:
        row = nodes[n.node_id]
        assert row["state"] == "patched" and row["vllm_version"] == "0.17.1"
        assert row["result"]["written"] and set(row["patches"].values()) == {"applied"}
        assert row["plan"]["dry_run"] is True
        # patchkit came from the job's runtime environment, not from this checkout
        assert not Path(row["patchkit_path"]).is_relative_to(Path(__file__).parents[1])
        assert (n.site / ".patchkit" / "vllm" / "journal.json").is_file()
        assert (n.site / DEEPSEEK).read_bytes() != (pristine_site_packages("0.17.1") / DEEPSEEK).read_bytes()
    assert len({row["hash"] for row in nodes.values()}) == 1 and data["nodes"][0]["hash"]

    result = cli("verify", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert result.exit_code == 0, result.stdout
    header = result.stdout.splitlines()[0].split()
    assert header[:4] == ["node", "host", "vLLM", "state"] and header[-2:] == ["EAGLE-3", "hash"]
    assert "EAGLE-3 is in effect on all 3 nodes" in result.stdout

    code, data = cli.json("status", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0
    for row in data["nodes"]:
        assert row["state"] == "done"
        assert set(row["patches"]) == {
            "eagle3-allowlist",
            "eagle3-deepseek-backbone",
            "eagle3-deepseek-interface",
            "eagle3-kimi-k25-interface",
            "eagle3-kimi-k25-proposer",
        }
        assert set(row["patches"].values()) == {"patched"}

    code, data = cli.json("revert", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0, data
    assert [row["state"] for row in data["nodes"]] == ["reverted"] * 3
    for n in ray_cluster.nodes:
        assert pristine(n, "0.17.1")


def test_apply_guard_installs_the_guard_and_the_watch_on_every_node_and_revert_removes_them(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    code, data = cli.json(
        "apply", "--site-packages", SITE, "--guard", "--watch", "--watch-drafts", "64", "--ray", ray_cluster.address
    )
    assert code == 0, data
    for n in ray_cluster.nodes:
        row = by_node(data)[n.node_id]
        assert row["result"]["guard"]["action"] == "installed"
        assert row["plan"]["guard"]["action"] == "would install"
        assert row["result"]["watch"]["action"] == "installed" and row["plan"]["watch"]["action"] == "would install"
        manifest = json.loads((n.site / "patchkit_guard" / "manifest.json").read_text())
        # each node's guard names that node's own install, as it expanded the option
        assert manifest["apply"] == f"patchkit apply --target vllm --site-packages {n.site}"
        assert len(manifest["files"]) == 4
        watched = json.loads((n.site / "patchkit_watch" / "watch.json").read_text())
        assert watched["options"] == ["--site-packages", str(n.site)] and watched["drafts"] == 64
        assert "DeepseekV3ForCausalLM" in watched["patched"]
    code, data = cli.json("status", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert [row["result"]["guard"]["installed"] for row in data["nodes"]] == [True] * 3
    assert [row["result"]["watch"]["installed"] for row in data["nodes"]] == [True] * 3
    code, data = cli.json("revert", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0 and [row["result"]["guard"]["action"] for row in data["nodes"]] == ["removed"] * 3
    assert [row["result"]["watch"]["action"] for row in data["nodes"]] == ["removed"] * 3
    for n in ray_cluster.nodes:
        assert pristine(n, "0.17.1")


def test_one_node_already_patched_states(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    first = ray_cluster.nodes[1]
    assert cli("apply", "--site-packages", str(first.site)).exit_code == 0
    # one node patched, two not: verify --ray fails and says where
    code, data = cli.json("verify", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 1 and not data["in_effect"] and not data["same_bytes"]
    assert {n["node_id"]: n["result"]["ok"] for n in data["nodes"]} == {
        n.node_id: n is first for n in ray_cluster.nodes
    }
    code, data = cli.json("apply", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0, data
    rows = by_node(data)
    assert rows[first.node_id]["state"] == "already patched"
    assert set(rows[first.node_id]["patches"].values()) == {"already applied"}
    others = [n for n in ray_cluster.nodes if n is not first]
    assert [rows[n.node_id]["state"] for n in others] == ["patched", "patched"]
    assert len({row["hash"] for row in data["nodes"]}) == 1
    code, data = cli.json("verify", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0 and data["same_bytes"] and data["in_effect"]
    code, data = cli.json("apply", "--site-packages", SITE, "--ray", ray_cluster.address, "--dry-run")
    assert code == 0
    assert {row["state"] for row in data["nodes"]} == {"planned"}
    assert {o for row in data["nodes"] for o in row["patches"].values()} == {"already applied"}


def test_arch_and_model_reach_every_node(ray_cluster, cli, tmp_path):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    deepseek = ["eagle3-allowlist", "eagle3-deepseek-backbone", "eagle3-deepseek-interface"]
    # --arch: only the patches DeepseekV3ForCausalLM needs, on every node (a plain apply writes all five)
    code, data = cli.json(
        "apply", "--site-packages", SITE, "--arch", "DeepseekV3ForCausalLM", "--ray", ray_cluster.address
    )
    assert code == 0, data
    assert [row["state"] for row in data["nodes"]] == ["patched"] * 3
    for row in data["nodes"]:
        assert row["patches"] == dict.fromkeys(deepseek, "applied")
        assert [p["id"] for p in row["plan"]["patches"]] == deepseek
    # --model: each node reads the checkpoint's config.json (same absolute path on every node)
    kimi = tmp_path / "kimi"
    kimi.mkdir()
    (kimi / "config.json").write_text(
        json.dumps({"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25"})
    )
    code, data = cli.json("verify", "--site-packages", SITE, "--model", str(kimi), "--ray", ray_cluster.address)
    assert code == 1 and not data["in_effect"] and data["same_bytes"]
    assert [row["result"]["ok"] for row in data["nodes"]] == [False] * 3
    result = cli("verify", "--site-packages", SITE, "--model", str(kimi), "--ray", ray_cluster.address)
    assert result.exit_code == 1
    for n in ray_cluster.nodes:
        assert f"node {n.node_id[:8]}: missing: SupportsEagle3 in its bases" in result.stdout
    assert "EAGLE-3 is not in effect alike on all 3 nodes: not in effect on every node" in result.stdout
    code, data = cli.json(
        "verify", "--site-packages", SITE, "--arch", "DeepseekV3ForCausalLM", "--ray", ray_cluster.address
    )
    assert code == 0 and [row["result"]["ok"] for row in data["nodes"]] == [True] * 3
    code, data = cli.json("revert", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0, data
    for n in ray_cluster.nodes:
        assert pristine(n, "0.17.1")


def test_a_node_on_another_release_refuses_the_run(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.16.0", "0.17.1")
    result = cli("apply", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert result.exit_code == 3, result.stdout
    assert "different vLLM releases (0.16.0, 0.17.1)" in result.stdout
    code, data = cli.json("apply", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 3 and data["refused"] and not data["failed"]
    rows = by_node(data)
    odd = ray_cluster.nodes[1]
    # each node was planned as its own release: the plans differ (0.16.0 has other targets)
    assert rows[odd.node_id]["vllm_version"] == "0.16.0"
    assert rows[odd.node_id]["plan"]["install"]["version"] == "0.16.0"
    assert {row["state"] for row in data["nodes"]} == {"unchanged"}
    assert {o for row in data["nodes"] for o in row["patches"].values()} == {"not written"}
    for n, version in zip(ray_cluster.nodes, ("0.17.1", "0.16.0", "0.17.1")):
        assert pristine(n, version)


def test_a_hand_edited_node_refuses_everywhere(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    edited = ray_cluster.nodes[2]
    target = edited.site / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"\n# local fix\n")
    code, data = cli.json("apply", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 3 and data["refused"], data
    rows = by_node(data)
    assert "would refuse" in data["reason"] and edited.node_id[:8] in data["reason"]
    assert rows[edited.node_id]["patches"]["eagle3-deepseek-backbone"] == "refused"
    for n in ray_cluster.nodes:
        assert rows[n.node_id]["state"] == "unchanged"
        assert not (n.site / ".patchkit").exists()
        if n is not edited:
            assert set(rows[n.node_id]["patches"].values()) == {"not written"}
            assert pristine(n, "0.17.1")


def test_verify_fails_when_nodes_differ_in_bytes(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    assert cli("apply", "--site-packages", SITE, "--ray", ray_cluster.address).exit_code == 0
    odd = ray_cluster.nodes[0]
    path = odd.site / DEEPSEEK
    path.write_bytes(path.read_bytes() + b"\n# edited after patching\n")
    code, data = cli.json("verify", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 1 and data["in_effect"] and not data["same_bytes"], data
    rows = by_node(data)
    assert rows[odd.node_id]["hash"] != rows[ray_cluster.nodes[1].node_id]["hash"]
    assert "edited" in rows[odd.node_id]["patches"]["eagle3-deepseek-backbone"]
    # revert reads every node's status first: the edited node refuses, so no node is reverted
    code, data = cli.json("revert", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 3 and data["refused"], data
    rows = by_node(data)
    assert rows[odd.node_id]["state"] == "refused" and odd.node_id[:8] in data["reason"]
    for n in ray_cluster.nodes[1:]:
        assert rows[n.node_id]["state"] == "unchanged"
        assert (n.site / ".patchkit" / "vllm" / "journal.json").is_file() and not pristine(n, "0.17.1")
    code, data = cli.json("revert", "--site-packages", SITE, "--ray", ray_cluster.address, "--force")
    assert code == 0
    for n in ray_cluster.nodes:
        assert pristine(n, "0.17.1")


def test_a_node_that_joins_during_apply_is_reported(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    slow, fast = ray_cluster.nodes[0], ray_cluster.nodes[1:]
    # The first node's write waits for its install lock, held here, until the new node is in.
    # (Ray starts nodes from the main thread only, so the CLI runs as a process of its own.)
    with hold_lock(slow.site):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "patchkit",
                "apply",
                "--site-packages",
                SITE,
                "--ray",
                ray_cluster.address,
                "--json",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: all((n.site / ".patchkit" / "vllm" / "journal.json").is_file() for n in fast))
        newcomer = ray_cluster.add("0.17.1")
    stdout, _ = proc.communicate(timeout=300)
    code, data = proc.returncode, json.loads(stdout)
    assert code == 4 and data["failed"], data
    rows = by_node(data)
    assert rows[newcomer.node_id]["state"] == "joined"
    assert "joined" in data["reason"]
    assert [rows[n.node_id]["state"] for n in ray_cluster.nodes[:3]] == ["patched"] * 3
    assert pristine(newcomer, "0.17.1")
    # run again: the newcomer is patched, the others are already
    code, data = cli.json("apply", "--site-packages", SITE, "--ray", ray_cluster.address)
    assert code == 0, data
    assert by_node(data)[newcomer.node_id]["state"] == "patched"
    assert len(data["nodes"]) == 4 and len({row["hash"] for row in data["nodes"]}) == 1
    ray_cluster.remove(newcomer, graceful=True)


def test_a_node_killed_during_apply_rolls_back_the_others(ray_cluster, cli):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    victim = ray_cluster.nodes[2]
    others = ray_cluster.nodes[:2]

    def kill_once_the_others_wrote():
        wait_for(lambda: all((n.site / ".patchkit" / "vllm" / "journal.json").is_file() for n in others))
        ray_cluster.remove(victim)

    # The victim's write blocks on its install lock (held here), so the others write first.
    with hold_lock(victim.site):
        killer = threading.Thread(target=kill_once_the_others_wrote)
        killer.start()
        code, data = cli.json("apply", "--site-packages", SITE, "--ray", ray_cluster.address)
        killer.join()
    assert code == 4 and data["failed"], data
    rows = by_node(data)
    assert rows[victim.node_id]["state"] == "died"
    assert victim.node_id[:8] in data["reason"]
    for n in others:
        assert rows[n.node_id]["state"] == "rolled back"
        assert rows[n.node_id]["rollback"]["files"] and not rows[n.node_id]["rollback"]["refused"]
        assert pristine(n, "0.17.1")
    assert pristine(victim, "0.17.1")  # it never got the lock: nothing written there
    ray_cluster.add()
    ray_cluster.cluster.wait_for_nodes()


def test_ray_without_address_finds_the_cluster(ray_cluster, cli, monkeypatch):
    ray_cluster.install("0.17.1", "0.17.1", "0.17.1")
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)  # what ray.init finds
    code, data = cli.json("status", "--site-packages", SITE, "--ray")
    assert code == 0 and len(data["nodes"]) == 3 and data["ray"] == "auto"
    assert all(row["patches"] == {} and row["hash"] is None for row in data["nodes"])


def test_without_ray_a_one_line_error_names_the_extra(cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    result = cli("verify", "--site-packages", str(tmp_path), "--ray")
    assert result.exit_code == 4
    assert result.stderr.splitlines() == [
        "error: --ray needs Ray, which is not installed",
        "hint: install it: pip install 'vllm-patchkit[ray]'",
    ]
    code, data = cli.json("apply", "--site-packages", str(tmp_path), "--ray")
    assert code == 4 and "vllm-patchkit[ray]" in data["hint"]


def test_ray_is_imported_only_for_ray():
    # nor libcst (only apply needs it) nor rich (the table goes through patchkit.ui.render)
    code = (
        "import sys; from patchkit.ui import cli, cluster, cluster_view; "
        "from typer.testing import CliRunner; CliRunner().invoke(cli.app, ['list']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'libcst', 'rich')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_bad_command_lines_are_refused_before_connecting(cli):
    result = cli("status", "--site-packages", "venv/lib/python3.12/site-packages", "--ray", "127.0.0.1:1")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --site-packages venv/lib/python3.12/site-packages is relative")
    result = cli("verify", "--python", "/opt/venv/bin/python", "--runtime", "--ray", "127.0.0.1:1")
    assert result.exit_code == 2 and result.stderr.startswith("error: --runtime is not available with --ray")
    result = cli("apply", "--python", "/opt/venv/bin/python", "--site-packages", "/opt/sp", "--ray")
    assert result.exit_code == 2 and result.stderr.startswith("error: give --site-packages or --python, not both")
    result = cli("apply", "--python", "/opt/venv/bin/python", "--patch", "eagle3-nope", "--ray", "127.0.0.1:1")
    assert result.exit_code == 2 and "eagle3-nope" in result.stderr.splitlines()[0]
    result = cli("verify", "--python", "/opt/venv/bin/python", "--model", "ckpt/kimi", "--ray", "127.0.0.1:1")
    assert result.exit_code == 2 and result.stderr.startswith("error: --model ckpt/kimi is relative")
    result = cli(
        "apply",
        "--python",
        "/opt/venv/bin/python",
        "--patch",
        "eagle3-allowlist",
        "--arch",
        "DeepseekV3ForCausalLM",
        "--ray",
        "127.0.0.1:1",
    )
    assert result.exit_code == 2 and result.stderr.startswith("error: give --patch or --arch/--model, not both")
