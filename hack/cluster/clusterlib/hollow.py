"""Hollow nodes: kubemark's kubelet (the real kubelet's code, with kubemark's in-process
fake container runtime, cAdvisor and mounter) registered beside the real nodes, so that the
scheduler, the controllers and the operator meet many more nodes than this machine runs.

Each hollow node k is one process, ``kubemark --morph=kubelet``, with

    its identity       system:node:syncreplicas-hollow-k in system:nodes (the Node
                       authorizer and NodeRestriction admit it as any kubelet)
    its network        netns srj-hollow-k, eth0 10.243.0.(100+k) on the bridge: the kubelet's
                       server (plain HTTP, no authentication: kubemark's) listens there
                       only, and that address is its InternalIP
    its files          nodes/syncreplicas-hollow-k/tmp, mounted on /tmp in a mount
                       namespace of its own: kubemark puts its kubelet's root directory and
                       its fake runtime's socket in /tmp, so they are all in one place;
                       its kubeconfig (certificates inline) and hosts file are there too
    what sets it apart label node.syncreplicas.io/hollow=true and taint
                       node.syncreplicas.io/hollow=true:NoSchedule: only pods that select
                       and tolerate it land there (and run in no container at all)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from . import network
from .config import BIN, RUN, read_indices, write_indices
from .controlplane import api_get
from .pki import issue, write_kubeconfig
from .procs import ClusterError, kubectl, log, running_pid, start, stop, wait_for

PREFIX = "syncreplicas-hollow-"
LABEL = "node.syncreplicas.io/hollow"
TAINT = f"{LABEL}=true:NoSchedule"
MAX_HOLLOW = 100
MAX_PODS = 250
KUBELET_PORT_BASE = 10300
# The API client's rate, as a real kubelet's (KubeletConfiguration kubeAPIQPS 50,
# kubeAPIBurst 100), not kubemark's own default (10, 20). Alone on the cluster, 202 pods on
# two hollow nodes turned Running in 34-35 s and were gone in 33-35 s at 10; at 50, in
# 27-31 s and 25-27 s.
KUBE_API_QPS, KUBE_API_BURST = 50, 100
# Where kubemark leaves things when it is not given a /tmp of its own: its kubelet's root
# directories and its fake runtime's sockets (what `leftovers` looks for).
STRAY_GLOBS = ("hollow-kubelet.*", "kubelet_remote_*.sock")

# The command each hollow node runs in its own mount namespace: its directory on /tmp and a
# hosts file that names its address (the kubelet looks its node name up to find its
# InternalIP). The run directory and the binaries' cache may be below /tmp: kubemark is
# opened before the mount and run from that descriptor; nothing else there is read after.
_ISOLATE = ('exec 3<"$2" && mount --bind "$1" /tmp && mount --bind /tmp/hosts /etc/hosts '
            '&& shift 2 && exec /proc/self/fd/3 "$@"')


@dataclass(frozen=True)
class HollowNode:
    """One hollow node: a kubemark kubelet in a network namespace of its own."""

    index: int  # 1-based

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.index}"

    @property
    def netns(self) -> str:
        return f"srj-hollow-{self.index}"

    @property
    def veth(self) -> str:
        return f"srjh{self.index}"

    @property
    def ip(self) -> str:
        return f"10.243.0.{100 + self.index}"

    @property
    def port(self) -> int:
        return KUBELET_PORT_BASE + self.index

    @property
    def dir(self) -> Path:
        return RUN / "nodes" / self.name

    @property
    def process(self) -> str:
        """The name of its process (pid file and log)."""
        return f"{self.name}.kubemark"


def hollow_file() -> Path:
    return RUN / "hollow.json"


def current() -> list[HollowNode]:
    """The hollow nodes of the cluster that runs (or last ran) here."""
    return [HollowNode(i) for i in read_indices(hollow_file())]


def _save(members: list[HollowNode]) -> None:
    write_indices(hollow_file(), (h.index for h in members))


def argv(node: HollowNode) -> list[str | Path]:
    """The hollow node's command line, in its network namespace."""
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", _ISOLATE, "hollow", node.dir / "tmp", BIN / "kubemark",
        "--morph=kubelet",
        f"--name={node.name}",
        "--kubeconfig=/tmp/kubeconfig",
        "--use-host-image-service=false",
        f"--kubelet-port={node.port}",
        "--kubelet-read-only-port=0",
        f"--node-labels={LABEL}=true",
        f"--register-with-taints={TAINT}",
        f"--max-pods={MAX_PODS}",
        f"--kube-api-qps={KUBE_API_QPS}",
        f"--kube-api-burst={KUBE_API_BURST}",
        "--v=1",
    ]  # fmt: skip


def start_hollow(node: HollowNode) -> None:
    """Start the hollow node (idempotent) without waiting for it to be Ready."""
    network.plug(node.netns, node.veth, node.ip)
    tmp = node.dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    if running_pid(node.process) is None:  # what a run that exited left: kubemark starts afresh
        for stale in [p for pattern in STRAY_GLOBS for p in tmp.glob(pattern)]:
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
    (tmp / "hosts").write_text(f"127.0.0.1 localhost\n{node.ip} {node.name}\n")
    issue(node.name, f"/O=system:nodes/CN=system:node:{node.name}")
    write_kubeconfig(tmp / "kubeconfig", node.name, embed=True)
    start(node.process, argv(node), netns=node.netns)


def ready(node: HollowNode) -> bool:
    found = json.loads(api_get(f"/api/v1/nodes/{node.name}"))
    conditions = found.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def stop_hollow(node: HollowNode, delete: bool = True) -> None:
    """Stop the hollow node and remove everything of it; with ``delete``, its Node object
    and the pods bound to it too (no kubelet is left to finish them)."""
    stop(node.process)
    if delete:
        kubectl("delete", "node", node.name, "--wait=false", check=False)
        kubectl("delete", "pods", "--all-namespaces", f"--field-selector=spec.nodeName={node.name}",
                "--force", "--grace-period=0", "--wait=false", check=False)  # fmt: skip
    network.unplug(node.netns, node.veth)
    shutil.rmtree(node.dir, ignore_errors=True)


def converge(count: int, timeout: float | None = None) -> None:
    """Run exactly ``count`` hollow nodes (syncreplicas-hollow-1 .. -count), all Ready."""
    if not 0 <= count <= MAX_HOLLOW:
        raise ValueError(f"hollow nodes must be in 0..{MAX_HOLLOW}, got {count}")
    started = time.monotonic()
    wanted = [HollowNode(i) for i in range(1, count + 1)]
    for extra in [h for h in current() if h not in wanted]:
        stop_hollow(extra)
        log(f"{extra.name} removed")
    _save(wanted)
    for node in wanted:
        start_hollow(node)
    deadline = started + (timeout if timeout is not None else 60 + 3 * count)
    for node in wanted:
        wait_for(f"hollow node {node.name}", partial(ready, node),
                 max(deadline - time.monotonic(), 1), node.process)  # fmt: skip
    if wanted:
        log(f"{count} hollow nodes Ready in {time.monotonic() - started:.0f} s "
            f"({wanted[0].name} .. {wanted[-1].name})")  # fmt: skip
    else:
        log("no hollow nodes")


def remove_all() -> None:
    """Stop every hollow node, leaving the API alone (``down`` removes etcd's data)."""
    members = current() or [HollowNode(int(p.name.split("-")[-1]))
                            for p in Path("/run/netns").glob("srj-hollow-*")]  # fmt: skip
    for node in members:
        stop_hollow(node, delete=False)
    hollow_file().unlink(missing_ok=True)


def describe(node: HollowNode) -> dict[str, object]:
    state: dict[str, object] = {
        "ip": node.ip,
        "kubeletPort": node.port,
        "kubemark": running_pid(node.process),
    }
    with contextlib.suppress(Exception):
        state["ready"] = ready(node)
    return state


def strays() -> list[str]:
    """What a kubemark left in the machine's /tmp (it never does when run as above)."""
    return sorted(str(p) for pattern in STRAY_GLOBS for p in Path("/tmp").glob(pattern))


def netns_names() -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob("srj-hollow-*"))


def check_built() -> None:
    if not (BIN / "kubemark").exists():
        raise ClusterError("not built: kubemark (run hack/cluster/build-binaries.sh)")
