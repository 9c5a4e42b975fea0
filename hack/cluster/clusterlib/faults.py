"""Node faults, as production meets them, for tests, benchmarks and users reproducing one:

    crash      every process of the node and of its pods killed at once, its link cut
               (a power loss: nothing answers, nothing is told)
    partition  the node's link to the control plane and the other nodes cut; everything
               on it keeps running
    heal       the partition undone
    start      a crashed (or preempted) node booted again: what a reboot forgets is gone
               (its old pods' processes, mounts and containerd's run state), its disk is kept
    drain      cordon, then evict every pod through the Eviction API (`kubectl drain
               --force`: bare pods are deleted too)
    uncordon   schedulable again after a drain
    preempt    what a spot node gets: cordoned, its pods' containers sent SIGTERM with a
               short grace period, then the machine gone (crash) and its Node object
               deleted, as the cloud's node controller does
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from . import network
from . import node as nodes
from .config import NODE_DAEMONS, Node, current_nodes
from .procs import ClusterError, kubectl, log, running_pid, stop


def _member(node: Node) -> None:
    if node not in current_nodes():
        names = ", ".join(n.name for n in current_nodes()) or "none"
        raise ClusterError(f"{node.name} is not a node of this cluster (nodes: {names})")


def crash(node: Node) -> None:
    _member(node)
    network.set_link(node, up=False)
    killed = nodes.kill_all(node)
    log(f"{node.name} crashed: {killed} processes killed, link down")


def partition(node: Node) -> None:
    _member(node)
    network.set_link(node, up=False)
    log(f"{node.name} partitioned: its link to the control plane and the other nodes is down")


def heal(node: Node) -> None:
    _member(node)
    network.set_link(node, up=True)
    log(f"{node.name} healed: link up")


def boot(node: Node) -> None:
    _member(node)
    if nodes.daemons_running(node):
        raise ClusterError(f"{node.name} is running: crash or preempt it first")
    nodes.kill_all(node)  # anything a partial crash left
    nodes.forget_runtime_state(node)
    nodes.start_node(node, current_nodes())
    nodes.wait_ready(node)
    log(f"{node.name} started and Ready")


def drain(node: Node, timeout: int = 300) -> None:
    _member(node)
    # --force: pods no controller would re-create (a test's bare pods) are deleted too,
    # as an upgrade's drain does; the job's pods go through the Eviction API either way.
    kubectl("drain", node.name, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
            f"--timeout={timeout}s")  # fmt: skip
    log(f"{node.name} drained (cordoned; `node {node.name} uncordon` makes it schedulable)")


def uncordon(node: Node) -> None:
    _member(node)
    kubectl("uncordon", node.name)
    log(f"{node.name} uncordoned")


def _container_pids(node: Node) -> list[int]:
    """The processes of the node's containers, but not the sandboxes' pause."""
    found = []
    for pid in nodes.cgroup_pids(node):
        with contextlib.suppress(OSError):
            in_pod = "/kubepods" in Path(f"/proc/{pid}/cgroup").read_text()
            if in_pod and os.path.basename(os.readlink(f"/proc/{pid}/exe")) != "pause":
                found.append(pid)
    return found


def preempt(node: Node, grace: float = 15) -> None:
    _member(node)
    started = time.monotonic()
    kubectl("cordon", node.name)
    # The machine is shutting down: its kubelet no longer restarts anything.
    stop(node.daemon("kubelet"), sig=signal.SIGKILL)
    terminated = _container_pids(node)
    for pid in terminated:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _container_pids(node) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = len(_container_pids(node))
    network.set_link(node, up=False)
    nodes.kill_all(node)
    kubectl("delete", "node", node.name, "--wait=false", check=False)
    log(f"{node.name} preempted: SIGTERM to {len(terminated)} container processes, "
        f"{left} still running after {grace:g} s were killed; machine gone and Node deleted "
        f"after {time.monotonic() - started:.1f} s")  # fmt: skip


def describe(node: Node) -> dict[str, object]:
    """What the node is doing, as this machine sees it."""
    state: dict[str, object] = {
        "ip": node.ip,
        "podCIDR": node.pod_cidr,
        "netns": network.netns_exists(node),
        "link": "up" if network.netns_exists(node) and network.link_up(node) else "down",
        "daemons": {d: running_pid(node.daemon(d)) for d in NODE_DAEMONS},
    }
    with contextlib.suppress(Exception):
        state["ready"] = nodes.ready(node)
    return state


FAULTS = {
    "crash": crash,
    "partition": partition,
    "heal": heal,
    "start": boot,
    "drain": drain,
    "uncordon": uncordon,
    "preempt": preempt,
}
