"""One node: containerd (with runc and the CNI bridge plugin), the kubelet, kube-proxy and
kube-router's network-policy controller, each a process in the node's network namespace
and the node's cgroup, with the node's own state directory, image store, pod range and
certificates."""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

from . import network
from .config import (
    BIN,
    CLUSTER_DOMAIN,
    CONTROL_PLANE_IP,
    KUBE_ROUTER,
    NODE_DAEMONS,
    NODE_GROUP,
    NODE_GROUP_LABEL,
    PKI,
    RACK_LABEL,
    SERVICE_CIDR,
    VERSIONS,
    Node,
)  # fmt: skip
from .controlplane import api_get, kube_proxy_config
from .pki import kubeconfig, make_node_pki, write_kubeconfig
from .procs import (
    ClusterError,
    cgroup_controllers,
    kubectl,
    make_cgroup,
    run,
    running_pid,
    start,
    stop,
    wait_for,
    write_config,
)  # fmt: skip


def containerd_config(node: Node) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    state = node.dir / "containerd"
    return f"""version = 2
root = "{node.containerd_root}"
state = "{state / "state"}"

[grpc]
  address = "{node.containerd_sock}"

[ttrpc]
  address = "{state / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state / "opt"}"

[{cri}]
  sandbox_image = "registry.k8s.io/pause:{VERSIONS["PAUSE_VERSION"]}"
  enable_selinux = false
  disable_apparmor = true
  # This host withholds CAP_SYS_RESOURCE: a sandbox may not lower its OOM score below
  # containerd's own (the kubelet asks for -998).
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{state / "runc"}"
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{node.dir / "cni"}"
"""


def cni_config(node: Node) -> str:
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": "syncreplicas",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    # Pods talk to each other and to the nodes, never beyond: no masquerade.
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(node.dir / "cni-ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubelet_config(node: Node) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(PKI / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(PKI / f"{node.name}-serving.crt"),
        "tlsPrivateKeyFile": str(PKI / f"{node.name}-serving.key"),
        # This host has cgroup v1 and no systemd: the release's default refuses v1.
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        # Every node's pods under a cgroup of their own (a machine holds several nodes).
        "cgroupRoot": node.cgroup,
        "podLogsDir": str(node.dir / "pod-logs"),
        "containerRuntimeEndpoint": f"unix://{node.containerd_sock}",
        "clusterDNS": [CONTROL_PLANE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # Pods see the cluster's DNS only (no search domains or resolvers of this host).
        "resolvConf": str(node.dir / "resolv.conf"),
        "staticPodPath": "",
        "serializeImagePulls": False,
        # Images are loaded by hand and cannot be pulled again: never collect them, and
        # evict pods only when the machine is really out of room.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "200Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 250,
        "podPidsLimit": -1,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
    }
    return json.dumps(config, indent=2)


def write_configs(node: Node) -> None:
    for sub in ("containerd", "cni", "cni-ipam", "kubelet", "pod-logs"):
        (node.dir / sub).mkdir(parents=True, exist_ok=True)
    make_node_pki(node)
    write_kubeconfig(kubeconfig(node.name), node.name)
    write_config(node.dir / "containerd" / "config.toml", containerd_config(node))
    write_config(node.dir / "cni" / "10-syncreplicas.conflist", cni_config(node))
    write_config(node.dir / "kubelet.yaml", kubelet_config(node))
    write_config(node.dir / "kube-proxy.yaml", kube_proxy_config(node.name, node.ip))
    write_config(node.dir / "resolv.conf", "")


def node_object(node: Node) -> dict[str, object]:
    return dict(json.loads(api_get(f"/api/v1/nodes/{node.name}")))


def ready(node: Node, since: float = 0.0) -> bool:
    """The node's Ready condition is True and its kubelet renewed its Lease at or after
    ``since`` (unix time): a crashed node stays Ready in the API until the node lifecycle
    controller notices, 50 s later, and a kubelet that finds its node Ready posts no new
    status for minutes; its Lease it renews every 10 s."""
    conditions = node_object(node)["status"]["conditions"]  # type: ignore[index]
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
        return False
    if since <= 0:
        return True
    lease = json.loads(api_get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/"
                               f"leases/{node.name}"))  # fmt: skip
    renewed = lease["spec"].get("renewTime", "").split(".")[0].rstrip("Z")
    return bool(renewed) and calendar.timegm(
        time.strptime(renewed, "%Y-%m-%dT%H:%M:%S")) >= int(since)


def daemons_running(node: Node) -> bool:
    return all(running_pid(node.daemon(d)) for d in NODE_DAEMONS)


def start_node(node: Node, others: list[Node]) -> None:
    """Bring the node up (idempotent) without waiting for it to be Ready."""
    network.add_node(node, others)
    make_cgroup(node.cgroup)
    write_configs(node)
    node.containerd_root.mkdir(parents=True, exist_ok=True)
    start(node.daemon("containerd"),
          ["containerd", "--config", node.dir / "containerd" / "config.toml"],
          netns=node.netns, cgroup=node.cgroup)  # fmt: skip
    wait_for(f"{node.name}'s containerd", node.containerd_sock.exists, 30,
             node.daemon("containerd"))  # fmt: skip
    start_agents(node)


def start_agents(node: Node) -> None:
    """The kubelet, kube-proxy and kube-router, when they do not run."""
    start(node.daemon("kubelet"), [
        BIN / "kubelet",
        "--config", node.dir / "kubelet.yaml",
        "--kubeconfig", kubeconfig(node.name),
        "--root-dir", node.dir / "kubelet",
        "--hostname-override", node.name,
        "--node-ip", node.ip,
        "--node-labels", f"{RACK_LABEL}={node.rack},{NODE_GROUP_LABEL}={NODE_GROUP}",
        "--v", "1",
    ], netns=node.netns, cgroup=node.cgroup)  # fmt: skip
    start(node.daemon("kube-proxy"),
          [BIN / "kube-proxy", "--config", node.dir / "kube-proxy.yaml", "--v", "1"],
          netns=node.netns, cgroup=node.cgroup)  # fmt: skip
    # NetworkPolicy, as k3s runs it: kube-router's firewall (its network-policy controller)
    # alone, beside kube-proxy and the bridge CNI. It filters the node's pods' ingress and
    # egress in the node's own iptables and ipsets, from the pods, namespaces and policies
    # it watches; a full resync every 30 s besides the one each change starts.
    start(node.daemon("kube-router"), [
        KUBE_ROUTER,
        "--kubeconfig", kubeconfig("kube-router"),
        "--hostname-override", node.name,
        "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
        "--enable-cni=false",
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--iptables-sync-period", "30s",
        "--metrics-port", "0",
        "--v", "1",
    ], netns=node.netns, cgroup=node.cgroup)  # fmt: skip


def wait_ready(node: Node, timeout: float = 120) -> None:
    """Wait for the node to be Ready, starting its kubelet and kube-proxy again whenever
    they exit, as a node's service manager does (a kubelet that finds containerd still
    recovering after a crash exits: "server is not initialized yet")."""

    since = time.time()

    def up() -> bool:
        if running_pid(node.daemon("containerd")) is None:
            raise ClusterError(f"{node.name}'s containerd exited")
        start_agents(node)
        return ready(node, since) and running_pid(node.daemon("kubelet")) is not None

    wait_for(node.name, up, timeout, node.daemon("containerd"))
    # The pod range the node's CNI configuration uses, on the Node object too (what a
    # NetworkPolicy implementation and `kubectl describe node` read).
    if not node_object(node)["spec"].get("podCIDR"):  # type: ignore[attr-defined]
        patch = {"spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]}}
        kubectl("patch", "node", node.name, "--type=merge", "-p", json.dumps(patch),
                check=False)  # fmt: skip


def tasks(node: Node) -> list[str]:
    if not node.containerd_sock.exists():
        return []
    out = run("ctr", "--address", node.containerd_sock, "-n", "k8s.io", "tasks", "ls", "-q",
              check=False)  # fmt: skip
    return [line for line in out.split() if line]


def sweep_containers(node: Node) -> None:
    """Whatever the kubelet left: kill and delete the tasks and containers by hand."""
    if running_pid(node.daemon("containerd")) is None:
        return
    ctr = ["ctr", "--address", str(node.containerd_sock), "-n", "k8s.io"]
    for task in tasks(node):
        run(*ctr, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    with contextlib.suppress(ClusterError):
        wait_for("killed tasks", lambda: not tasks(node), 20)
    for task in tasks(node):
        run(*ctr, "tasks", "delete", "-f", task, check=False)
    for container in run(*ctr, "containers", "ls", "-q", check=False).split():
        run(*ctr, "containers", "delete", container, check=False)


def stop_node(node: Node) -> None:
    """Stop the node's daemons and containers gracefully (its pods were deleted first)."""
    for name in ("kube-proxy", "kubelet"):
        stop(node.daemon(name))
    sweep_containers(node)
    stop(node.daemon("containerd"))


def cgroup_pids(node: Node) -> set[int]:
    """Every process in the node's cgroup (its daemons, their shims, its pods)."""
    pids: set[int] = set()
    for root in cgroup_controllers():
        top = root / node.cgroup.strip("/")
        if not top.exists():
            continue
        # os.walk, not rglob: cgroups of exiting containers vanish while it walks.
        for directory, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    text = (Path(directory) / "cgroup.procs").read_text()
                    pids |= {int(p) for p in text.split()}
    return pids


def kill_all(node: Node) -> int:
    """SIGKILL every process of the node at once (frozen first, so none forks or exits in
    between), as a power loss would. Returns how many there were."""
    freezer = next((r for r in cgroup_controllers() if r.name == "freezer"), None)
    state = freezer / node.cgroup.strip("/") / "freezer.state" if freezer else None
    if state is not None and state.exists():
        state.write_text("FROZEN")
    pids = cgroup_pids(node) | {p for d in NODE_DAEMONS if (p := running_pid(node.daemon(d)))}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if state is not None and state.exists():
        state.write_text("THAWED")
    deadline = time.monotonic() + 20
    while cgroup_pids(node) and time.monotonic() < deadline:
        for pid in cgroup_pids(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for daemon in NODE_DAEMONS:
        stop(node.daemon(daemon))  # reaps the pid files
    return len(pids)


def node_mounts(node: Node) -> list[str]:
    """Mounts of the node's state (container root filesystems, volumes, shm)."""
    prefixes = (str(node.dir) + "/", str(node.containerd_root) + "/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefixes):
            found.append(target)
    return found


def forget_runtime_state(node: Node) -> None:
    """What a reboot forgets: every mount, containerd's and runc's run state. The disk
    (kubelet's directory, containerd's metadata and images, CNI's leases) stays, as on a
    real node, and the kubelet and containerd clean up the dead pods when they start."""
    for target in sorted(node_mounts(node), key=len, reverse=True):
        run("umount", "-l", target, check=False)
    shutil.rmtree(node.dir / "containerd" / "state", ignore_errors=True)


def remove_cgroups(node: Node) -> None:
    for root in cgroup_controllers():
        top = root / node.cgroup.strip("/")
        if not top.exists():
            continue
        below = sorted((p for p in top.rglob("*") if p.is_dir()),
                       key=lambda p: len(p.parts), reverse=True)  # fmt: skip
        for path in [*below, top]:
            with contextlib.suppress(OSError):
                path.rmdir()
