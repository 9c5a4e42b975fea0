#!/usr/bin/env python3
"""Start and stop a multi-node Kubernetes cluster built from upstream sources.

The control plane on this machine, every component a process of its own, as in a real
cluster: etcd, kube-apiserver (TLS, service-account keys, Node and RBAC authorization),
kube-controller-manager, kube-scheduler, CoreDNS. N nodes beside it, each a network
namespace with its own containerd + runc and CNI bridge, kubelet and kube-proxy, and a pod
range routed to it from everywhere (clusterlib/config.py has the picture).

    cluster.py up [--nodes N] [--hollow H]
                                start it, or converge a running one to N nodes
                                (default: NODES, else as many as run, else 3) and, when
                                given, H hollow nodes
    cluster.py hollow H         converge a running cluster to H hollow nodes (kubemark's
                                kubelet, fake runtime; 0 removes them; clusterlib/hollow.py)
    cluster.py down             stop it and remove every process, mount, rule, interface,
                                namespace and cgroup (the manager's: MultiKueue's worker
                                cluster's first, when one runs)
    cluster.py status           say what runs
    cluster.py is-up            exit 0 when it runs and every node is Ready
    cluster.py leftovers        list what a stopped cluster left behind (exit 1 if anything)
    cluster.py nodes            the nodes (hollow ones too), one line each
    cluster.py sockets          each node's containerd socket (images.sh loads into each)
    cluster.py credentials USER a kubeconfig for USER (a client certificate of this
                                cluster's CA, everything inline), written next to the
                                others; prints its path (RBAC is the caller's)
    cluster.py node NAME FAULT  crash | partition | heal | start | drain | uncordon |
                                preempt [--grace S] (clusterlib/faults.py)

Binaries come from build-binaries.sh (cached under ~/.cache/syncreplicas); images from
images.sh. Run state (certificates, etcd data, logs, each node's state) lives in one
directory, /tmp/syncreplicas-cluster; only each node's containerd image store is kept
between runs (in the cache) so that a second `up` does not import the images again.
With SYNCREPLICAS_CLUSTER=worker every command works on MultiKueue's worker cluster
instead, which runs beside this one on ranges of its own (clusterlib/config.py); the
manager's `down` and `leftovers` cover it too.
Standard library only: it runs with any Python 3.11.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clusterlib import controlplane, faults, hollow, network
from clusterlib import node as nodes
from clusterlib.config import (  # noqa: F401  (the tests read these through this module)
    APISERVER,
    BIN,
    CACHE,
    CONTROL_PLANE,
    CONTROL_PLANE_IP,
    COREDNS,
    ETCD,
    IS_MANAGER,
    KUBE_ROUTER,
    KUBECONFIG_LINK,
    RUN,
    VERSIONS,
    Node,
    current_nodes,
    node_named,
    save_nodes,
    wanted_count,
)
from clusterlib.pki import issue, issue_kube_router, kubeconfig, make_pki, write_kubeconfig
from clusterlib.procs import ClusterError, kubectl, log, running_pid
from clusterlib.teardown import down, leftovers, remove_node

CONTROL_PLANE_USERS = ("admin", "kube-controller-manager", "kube-scheduler", "kube-proxy",
                       "coredns", "kube-router")  # fmt: skip


def check_host() -> None:
    if not Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        raise ClusterError("this kernel has no br_netfilter: services would not reach pods")
    if os.geteuid() != 0:
        raise ClusterError("the cluster runs its nodes as root (kubelets, containerd, bridges)")
    binaries = [BIN / c for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                  "kubelet", "kube-proxy")]  # fmt: skip
    binaries += [ETCD, COREDNS, KUBE_ROUTER]
    missing = [b.name for b in binaries if not b.exists()]
    if missing:
        raise ClusterError(f"not built: {', '.join(missing)} (run hack/cluster/build-binaries.sh)")
    for tool in ("containerd", "runc", "ctr", "openssl", "iptables", "ipset", "ip", "nsenter"):
        if shutil.which(tool) is None:
            raise ClusterError(f"{tool} is not installed (run hack/cluster/install-host.sh)")


def control_plane_up() -> bool:
    if any(running_pid(c) is None for c in CONTROL_PLANE):
        return False
    try:
        return controlplane.api_get("/readyz") == "ok"
    except Exception:
        return False


def is_up() -> bool:
    members = current_nodes()
    if not members or not control_plane_up():
        return False
    try:
        return all(nodes.daemons_running(n) and nodes.ready(n) for n in members)
    except Exception:
        return False


def up(count: int, hollow_count: int | None = None) -> None:
    """Start the cluster (or converge it) to ``count`` nodes and, when given,
    ``hollow_count`` hollow nodes (else the hollow nodes stay as they are)."""
    started = time.monotonic()
    check_host()
    if hollow_count and not IS_MANAGER:
        raise ClusterError("hollow nodes join the manager's cluster only")
    if hollow_count:
        hollow.check_built()
    wanted = [Node(i) for i in range(1, count + 1)]
    if is_up() and current_nodes() == wanted:
        log(f"already up ({APISERVER}, {count} nodes); kubeconfig: {KUBECONFIG_LINK}")
        if hollow_count is not None:
            hollow.converge(hollow_count)
        return
    RUN.mkdir(parents=True, exist_ok=True)
    for sub in ("logs", "pids", "etcd"):
        (RUN / sub).mkdir(parents=True, exist_ok=True)
    network.setup_host()
    make_pki()
    issue_kube_router()
    for user in CONTROL_PLANE_USERS:
        write_kubeconfig(kubeconfig(user), user)
    KUBECONFIG_LINK.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(kubeconfig("admin"), KUBECONFIG_LINK)
    controlplane.write_configs()
    controlplane.start_control_plane()
    for extra in [n for n in current_nodes() if n not in wanted]:
        kubectl("delete", "node", extra.name, "--wait=false", check=False)
        remove_node(extra, current_nodes())
        log(f"{extra.name} removed")
    save_nodes(wanted)
    for node in wanted:
        nodes.start_node(node, wanted)
    for node in wanted:
        nodes.wait_ready(node)
    log(f"up in {time.monotonic() - started:.0f} s: {APISERVER}, {count} nodes Ready "
        f"({', '.join(n.name for n in wanted)})")  # fmt: skip
    log(f"kubeconfig: {KUBECONFIG_LINK}")
    if hollow_count is not None:
        hollow.converge(hollow_count)


def on_worker(*args: str) -> subprocess.CompletedProcess[str]:
    """This script's ``args`` on MultiKueue's worker cluster (a process of its own:
    config.py reads which cluster at import)."""
    worker = start_on_worker(*args)
    out, _ = worker.communicate()
    return subprocess.CompletedProcess(worker.args, worker.returncode, out)


def start_on_worker(*args: str) -> subprocess.Popen[str]:
    """on_worker(), started: its output read when it is waited for."""
    env = {k: v for k, v in os.environ.items() if k != "SYNCREPLICAS_CLUSTER_DIR"}
    env["SYNCREPLICAS_CLUSTER"] = "worker"
    return subprocess.Popen([sys.executable, __file__, *args], env=env, text=True,
                            stdout=subprocess.PIPE)  # fmt: skip


def down_both() -> None:
    """The worker cluster down while this one's pods stop (most of either's time), and
    done before this one sweeps what they share (teardown.py: our_mounts)."""
    worker = start_on_worker("down")

    def worker_done() -> None:
        out, _ = worker.communicate()
        print(out, end="")
        if worker.returncode != 0:
            raise ClusterError("MultiKueue's worker cluster did not come down (above)")

    try:
        down(before_sweep=worker_done)
    finally:
        if worker.poll() is None:
            worker.communicate()


def converge_hollow(count: int) -> None:
    # The control plane is all a hollow node needs: a real node may be down meanwhile.
    if not control_plane_up():
        raise ClusterError("the cluster is not up (cluster.py up)")
    if count:
        hollow.check_built()
    hollow.converge(count)


def status() -> dict[str, object]:
    return {
        "up": is_up(),
        "apiserver": APISERVER,
        "kubeconfig": str(KUBECONFIG_LINK),
        "runDir": str(RUN),
        "controlPlane": {c: running_pid(c) for c in CONTROL_PLANE},
        "nodes": {n.name: faults.describe(n) for n in current_nodes()},
        "hollowNodes": {h.name: hollow.describe(h) for h in hollow.current()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up")
    up_parser.add_argument("--nodes", type=int, default=None)
    up_parser.add_argument("--hollow", type=int, default=None,
                           help="hollow nodes (kubemark); default: leave them as they are")
    sub.add_parser("hollow").add_argument("count", type=int)
    for name in ("down", "status", "is-up", "leftovers", "nodes", "sockets"):
        sub.add_parser(name)
    sub.add_parser("credentials").add_argument("user")
    fault = sub.add_parser("node")
    fault.add_argument("name")
    fault.add_argument("fault", choices=sorted(faults.FAULTS))
    fault.add_argument("--grace", type=float, default=15,
                       help="preempt: seconds between SIGTERM and the machine's end")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            up(wanted_count(args.nodes), args.hollow)
        elif args.command == "hollow":
            converge_hollow(args.count)
        elif args.command == "down":
            if IS_MANAGER:
                down_both()
            else:
                down()
        elif args.command == "is-up":
            return 0 if is_up() else 1
        elif args.command == "status":
            print(json.dumps(status(), indent=2))
        elif args.command == "nodes":
            for node in current_nodes():
                print(node.name, json.dumps(faults.describe(node)))
            for member in hollow.current():
                print(member.name, json.dumps(hollow.describe(member)))
        elif args.command == "credentials":
            if not args.user.replace("-", "").isalnum():
                raise ValueError(f"a user name is letters, digits and '-': {args.user!r}")
            issue(args.user, f"/CN={args.user}")
            write_kubeconfig(kubeconfig(args.user), args.user, embed=True)
            print(kubeconfig(args.user))
        elif args.command == "sockets":
            for node in current_nodes():
                print(node.name, node.containerd_sock)
        elif args.command == "node":
            target = node_named(args.name)
            if args.fault == "preempt":
                faults.preempt(target, grace=args.grace)
            else:
                faults.FAULTS[args.fault](target)
        else:
            found = leftovers()
            if IS_MANAGER:
                found += [f"worker: {line}" for line in on_worker("leftovers").stdout.splitlines()]
            for item in found:
                print(item)
            return 1 if found else 0
    except (ClusterError, ValueError) as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
