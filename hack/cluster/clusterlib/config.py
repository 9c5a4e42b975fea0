"""Pinned versions, paths and addresses of the local cluster, and its table of nodes.

The control plane (etcd, the API server, the controller manager, the scheduler, CoreDNS)
runs on this machine's own network stack; each node is a network namespace of its own
with its own containerd, kubelet and kube-proxy. They meet on one bridge:

    host (control plane)  srj0  10.243.0.1/24  API server :6443, CoreDNS :53
    node k                netns srj-node-k, eth0 10.243.0.(10+k), pods 10.244.k.0/24
                          (bridge cni0 inside the namespace, gateway 10.244.k.1)

Every node routes every other node's pod range to that node's address (host-gw style),
and so does the host; services (10.96.0.0/16) are kube-proxy's on every node and on the
host. Nothing of it listens on, or is forwarded to, the machine's real interfaces.

A second cluster, MultiKueue's worker, runs beside it when SYNCREPLICAS_CLUSTER=worker is
set for these scripts (cluster.py, images.sh): the same parts on ranges of its own, its
control plane on the host too (other ports), without a kube-proxy on the host (its API
server reaches webhooks at their endpoints, --enable-aggregator-routing):

    host (control plane)  srjw0 10.245.0.1/24  API server :6443, CoreDNS :53
    node k                netns srjw-node-k, eth0 10.245.0.(10+k), pods 10.246.k.0/24
                          services 10.97.0.0/16; run state /tmp/syncreplicas-worker,
                          kubeconfig .cluster/worker/kubeconfig

The manager's pods reach the worker's API server through the host (its address is the
host's own), which is how Kueue on the manager talks to it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent


def _versions() -> dict[str, str]:
    pins = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


VERSIONS = _versions()
CACHE = Path(
    os.environ.get("SYNCREPLICAS_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "syncreplicas"
)
BIN = CACHE / f"kubernetes-{VERSIONS['KUBERNETES_VERSION']}" / "bin"
ETCD = CACHE / f"etcd-{VERSIONS['ETCD_VERSION']}" / "bin" / "etcd"
COREDNS = CACHE / f"coredns-{VERSIONS['COREDNS_VERSION']}" / "bin" / "coredns"
KUBE_ROUTER = CACHE / f"kube-router-{VERSIONS['KUBE_ROUTER_VERSION']}" / "bin" / "kube-router"


@dataclass(frozen=True)
class Profile:
    """What sets one cluster of this machine apart from the other: names, ranges, ports."""

    name: str
    run: str  # the run state's directory (SYNCREPLICAS_CLUSTER_DIR overrides it)
    kubeconfig: str  # the admin kubeconfig's copy, relative to the repository
    bridge: str
    net: str  # the node network's first three octets
    pods: str  # the pod ranges' first two octets (a /16)
    services: str  # the service range's first two octets (a /16)
    etcd_port: int  # client; the peer and metrics ports follow it
    controller_manager_port: int
    scheduler_port: int
    chain: str
    node_prefix: str  # node k: <node_prefix>k
    netns_prefix: str  # also its cgroups' prefix
    veth_prefix: str
    host_proxy: bool  # a kube-proxy on the host (the API server reaches webhooks through it)


PROFILES = {
    "manager": Profile(
        "manager", "/tmp/syncreplicas-cluster", ".cluster/kubeconfig", "srj0", "10.243.0",
        "10.244", "10.96", 12379, 10257, 10259, "SYNCREPLICAS-CLUSTER", "syncreplicas-node-",
        "srj-node-", "srjn", True,
    ),
    "worker": Profile(
        "worker", "/tmp/syncreplicas-worker", ".cluster/worker/kubeconfig", "srjw0",
        "10.245.0", "10.246", "10.97", 13379, 11257, 11259, "SYNCREPLICAS-WORKER",
        "syncreplicas-worker-node-", "srjw-node-", "srjwn", False,
    ),
}  # fmt: skip


def _profile() -> Profile:
    name = os.environ.get("SYNCREPLICAS_CLUSTER") or "manager"
    if name not in PROFILES:
        raise SystemExit(f"SYNCREPLICAS_CLUSTER must be one of {', '.join(PROFILES)}, got {name!r}")
    return PROFILES[name]


PROFILE = _profile()
IS_MANAGER = PROFILE.name == "manager"
RUN = Path(os.environ.get("SYNCREPLICAS_CLUSTER_DIR", PROFILE.run))
KUBECONFIG_LINK = REPO / PROFILE.kubeconfig
PKI = RUN / "pki"

# The node network: the control plane's address is the bridge's.
BRIDGE = PROFILE.bridge
NODE_NETWORK = f"{PROFILE.net}.0/24"
CONTROL_PLANE_IP = f"{PROFILE.net}.1"
CLUSTER_CIDR = f"{PROFILE.pods}.0.0/16"
SERVICE_CIDR = f"{PROFILE.services}.0.0/16"
KUBERNETES_SERVICE_IP = f"{PROFILE.services}.0.1"
APISERVER = f"https://{CONTROL_PLANE_IP}:6443"
ETCD_CLIENT = f"http://127.0.0.1:{PROFILE.etcd_port}"
ETCD_PEER = f"http://127.0.0.1:{PROFILE.etcd_port + 1}"
ETCD_METRICS = f"http://127.0.0.1:{PROFILE.etcd_port + 2}"
CLUSTER_DOMAIN = "cluster.local"
# Chains of kube-proxy (KUBE-*) and of the CNI plugins (CNI-*), and our own, on the host
# (the worker runs no kube-proxy there: only its own chain is its).
OWN_CHAIN = PROFILE.chain
CHAIN_PREFIXES = ("KUBE-", "CNI-", OWN_CHAIN) if PROFILE.host_proxy else (OWN_CHAIN,)
# Every node's cgroups (the kubelet's cgroupRoot, and the node's own daemons) live under
# /<CGROUP_PREFIX><k> in each controller, so a node's processes are found by cgroup.
CGROUP_PREFIX = PROFILE.netns_prefix
NETNS_PREFIX = PROFILE.netns_prefix
VETH_PREFIX = PROFILE.veth_prefix
NODE_PREFIX = PROFILE.node_prefix
MAX_NODES = 50
DEFAULT_NODES = 3 if IS_MANAGER else 1

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 "coredns") + (("kube-proxy",) if PROFILE.host_proxy else ())  # fmt: skip
# kube-router runs its network-policy controller only: NetworkPolicy enforced on the node.
NODE_DAEMONS = ("containerd", "kubelet", "kube-proxy", "kube-router")


# Node labels the kubelet registers with (node.py): its rack, and the node group that
# Kueue's ResourceFlavor tas-flavor selects (a flavor with a topology names some label).
RACK_LABEL = "syncreplicas.io/rack"
NODE_GROUP_LABEL = "syncreplicas.io/node-group"
NODE_GROUP = "tas"


@dataclass(frozen=True)
class Node:
    """One node: a network namespace with its own containerd, kubelet, kube-proxy and
    kube-router (NetworkPolicy)."""

    index: int  # 1-based

    @property
    def name(self) -> str:
        return f"{NODE_PREFIX}{self.index}"

    @property
    def rack(self) -> str:
        """Its value of RACK_LABEL: two nodes a rack, in node order (rack-1: nodes 1 and 2),
        the level Kueue's Topology ``racks`` groups nodes by (install-kueue.sh)."""
        return f"rack-{(self.index + 1) // 2}"

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.index}"

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns

    @property
    def veth(self) -> str:
        """The host's end of the node's link to the bridge."""
        return f"{VETH_PREFIX}{self.index}"

    @property
    def ip(self) -> str:
        return f"{PROFILE.net}.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"{PROFILE.pods}.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"{PROFILE.pods}.{self.index}.1"

    @property
    def cgroup(self) -> str:
        return f"/{CGROUP_PREFIX}{self.index}"

    @property
    def dir(self) -> Path:
        return RUN / "nodes" / self.name

    @property
    def containerd_root(self) -> Path:
        """containerd's image store, kept between runs so that images load once."""
        return CACHE / "containerd" / self.name

    @property
    def containerd_sock(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def daemon(self, name: str) -> str:
        """The name of one of the node's processes (pid file and log)."""
        return f"{self.name}.{name}"


def node_named(name: str) -> Node:
    prefix = NODE_PREFIX
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return Node(int(name[len(prefix):]))
    if name.isdigit():
        return Node(int(name))
    raise ValueError(f"no such node: {name!r} (nodes are {prefix}1, {prefix}2, ...)")


def nodes_file() -> Path:
    return RUN / "nodes.json"


def read_indices(path: Path) -> list[int]:
    """The node indices a list file holds (none when it is missing or unreadable)."""
    try:
        return list(json.loads(path.read_text()))
    except (OSError, ValueError):
        return []


def write_indices(path: Path, indices: Iterable[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sorted(indices)))


def current_nodes() -> list[Node]:
    """The nodes of the cluster that runs (or last ran) here."""
    return [Node(i) for i in read_indices(nodes_file())]


def save_nodes(nodes: list[Node]) -> None:
    write_indices(nodes_file(), (n.index for n in nodes))


def wanted_count(arg: int | None) -> int:
    """NODES (or --nodes) when given; else as many as run now; else DEFAULT_NODES."""
    running = len(current_nodes())
    count = arg if arg is not None else int(os.environ.get("NODES") or running or DEFAULT_NODES)
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"NODES must be in 1..{MAX_NODES}, got {count}")
    return count
