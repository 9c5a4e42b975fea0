"""Stopping the cluster so that nothing of it is left, and listing whatever is."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from . import hollow, network
from . import node as nodes
from .config import (
    BIN,
    BRIDGE,
    CACHE,
    CGROUP_PREFIX,
    CHAIN_PREFIXES,
    CONTROL_PLANE,
    IS_MANAGER,
    KUBECONFIG_LINK,
    NETNS_PREFIX,
    NODE_PREFIX,
    PROFILE,
    RUN,
    SERVICE_CIDR,
    VETH_PREFIX,
    Node,
    current_nodes,
)  # fmt: skip
from .procs import ClusterError, kubectl, log, run, running_pid, stop, wait_for


def remove_pods(healthy: list[Node]) -> None:
    """Let the kubelets stop every pod, so that the CNI plugins release their addresses
    (only the healthy nodes' pods can be waited for). The healthy nodes' pods only:
    kubectl deletes one pod per request, and a hollow node's (a thousand after a scale
    run) hold no address and no container."""
    if running_pid("kube-apiserver") is None:
        return
    stop("kube-controller-manager")
    stop("kube-scheduler")
    for node in healthy:
        kubectl("delete", "pods", "--all-namespaces", f"--field-selector=spec.nodeName={node.name}",
                "--grace-period=1", "--wait=false", check=False)  # fmt: skip
    with contextlib.suppress(ClusterError):
        wait_for("the pods to stop", lambda: not any(nodes.tasks(n) for n in healthy), 90)


def our_mounts() -> list[str]:
    """Mounts of this cluster. The pods' network namespaces (/run/netns/cni-*) and
    containerd's shared run state are the manager's to sweep: MultiKueue's worker cluster
    (config.py) stops before it, and cannot tell its own from the manager's."""
    prefixes: tuple[str, ...] = (str(RUN) + "/", f"/run/netns/{NETNS_PREFIX}",
                                 str(CACHE / "containerd" / NODE_PREFIX))  # fmt: skip
    if IS_MANAGER:
        prefixes += ("/run/netns/cni-", "/var/run/netns/cni-", "/run/netns/srj-hollow-",
                     "/run/containerd/io.containerd", str(CACHE / "containerd") + "/")  # fmt: skip
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefixes) or target == str(RUN):
            mounts.append(target)
    return mounts


def in_node_cgroup(proc: Path) -> bool:
    """A node's process or a container's (its cgroup is a node's, or a kubelet's
    kubepods), whatever its executable is called inside its own root."""
    try:
        text = (proc / "cgroup").read_text()
    except OSError:
        return False
    return f"/{CGROUP_PREFIX}" in text or (IS_MANAGER and "/kubepods" in text)


def our_processes() -> list[tuple[int, str]]:
    names = {*CONTROL_PLANE, "containerd", "kubelet", "containerd-shim-runc-v2",
             "containerd-shim", "pause"}  # fmt: skip
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            exe = os.readlink(proc / "exe")
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        base = Path(exe.split(" ")[0]).name
        mentions_run = str(RUN).encode() in b" ".join(cmdline)
        ours = base in names or base.startswith("containerd-shim")
        # The worker cluster's binaries are the manager's too: its own mention its run
        # directory, or run in its nodes' cgroups.
        cached = exe.startswith(str(CACHE)) and (IS_MANAGER or mentions_run)
        if cached or (ours and mentions_run) or in_node_cgroup(proc):
            found.append((int(proc.name), exe))
    return found


def our_cgroups() -> list[Path]:
    """The nodes' cgroup trees (and any kubelet's at the root), deepest first."""
    found: list[Path] = []
    patterns = (f"*/{CGROUP_PREFIX}*", "*/kubepods") if IS_MANAGER else (f"*/{CGROUP_PREFIX}*",)
    for pattern in patterns:
        for top in Path("/sys/fs/cgroup").glob(pattern):
            found += [p for p in top.rglob("*") if p.is_dir()] + [top]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def our_chains() -> list[str]:
    leftovers = []
    for save in ("iptables-save", "ip6tables-save"):
        if shutil.which(save) is None:
            continue
        for line in run(save, check=False).splitlines():
            if any(prefix in line for prefix in CHAIN_PREFIXES):
                leftovers.append(f"{save}: {line}")
    return leftovers


def our_interfaces() -> list[str]:
    names = []
    prefixes = (VETH_PREFIX, "srjh") if IS_MANAGER else (VETH_PREFIX,)
    for line in run("ip", "-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or name.startswith(prefixes) or (
            name.startswith("veth") and f"master {BRIDGE}" in line
        ):
            names.append(name)
    return names


def our_netns() -> list[str]:
    found = sorted(p.name for p in Path("/run/netns").glob(f"{NETNS_PREFIX}*"))
    return found + hollow.netns_names() if IS_MANAGER else found


def our_routes() -> list[str]:
    found = [line for line in run("ip", "route", "show").splitlines()
             if line.startswith((SERVICE_CIDR, f"{PROFILE.pods}."))]  # fmt: skip
    return found


def clean_iptables() -> None:
    """Delete every rule that jumps to, and every chain named like, kube-proxy's, the CNI
    plugins' or ours, in every table of the host (the nodes' go with their namespaces)."""
    for save, binary in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        if shutil.which(save) is None:
            continue
        table = ""
        rules: list[tuple[str, str]] = []
        chains: list[tuple[str, str]] = []
        for line in run(save, check=False).splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                chain = line[1:].split()[0]
                if chain.startswith(CHAIN_PREFIXES):
                    chains.append((table, chain))
            elif line.startswith("-A ") and any(p in line for p in CHAIN_PREFIXES):
                rules.append((table, line))
        for table, rule in rules:
            chain = rule.split()[1]
            if not chain.startswith(CHAIN_PREFIXES):
                # As iptables-save quotes them: a comment of several words is one argument.
                spec = shlex.split(rule)[2:]
                run(binary, "-w", "-t", table, "-D", chain, *spec, check=False)
        for table, chain in chains:
            run(binary, "-w", "-t", table, "-F", chain, check=False)
        for table, chain in chains:
            run(binary, "-w", "-t", table, "-X", chain, check=False)


def remove_node(node: Node, others: list[Node]) -> None:
    """Stop one node and remove everything of it (its Node object is the caller's)."""
    if nodes.daemons_running(node) and network.link_up(node):
        nodes.stop_node(node)
    nodes.kill_all(node)
    nodes.forget_runtime_state(node)
    network.remove_node(node, others)
    nodes.remove_cgroups(node)
    shutil.rmtree(node.dir, ignore_errors=True)


def down(before_sweep: Callable[[], None] = lambda: None) -> None:
    """Everything of the cluster stopped and removed; ``before_sweep`` once its pods and
    hollow nodes are gone, before its nodes stop (the manager's: MultiKueue's worker
    cluster, brought down meanwhile, done)."""
    started = time.monotonic()
    if not RUN.exists() and not leftovers():
        log("not running")
        before_sweep()
        return
    members = current_nodes() or [Node(i) for i in range(1, 51) if Node(i).netns_path.exists()]
    healthy = [n for n in members if nodes.daemons_running(n) and network.link_up(n)]
    remove_pods(healthy)
    if IS_MANAGER:
        hollow.remove_all()
    before_sweep()
    for node in members:
        remove_node(node, members)
    # The API server stops listening and ends its shutdown within milliseconds of SIGTERM,
    # then its process lingers 15 s (measured: ShutdownInitiated to HTTPServerStoppedListening
    # in 21 ms, the exit at 15 s); nothing is left for it to do once its clients are gone.
    for name in ("coredns", "kube-proxy", "kube-controller-manager", "kube-scheduler",
                 "kube-apiserver", "etcd"):  # fmt: skip
        stop(name, timeout=2 if name == "kube-apiserver" else 15)
    # Shims and containers whose containerd is gone, and any process of a node.
    for pid, _ in our_processes():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if PROFILE.host_proxy and (BIN / "kube-proxy").exists():
        run(BIN / "kube-proxy", "--cleanup", check=False)
    clean_iptables()
    for target in sorted(our_mounts(), key=len, reverse=True):
        run("umount", "-l", target, check=False)
    for netns in Path("/run/netns").glob("cni-*") if IS_MANAGER else ():
        netns.unlink(missing_ok=True)
    for name in our_netns():
        run("ip", "netns", "delete", name, check=False)
    for name in our_interfaces():
        run("ip", "link", "delete", name, check=False)
    for route in our_routes():
        run("ip", "route", "del", route.split()[0], check=False)
    network.remove_host()
    for cgroup in our_cgroups():
        with contextlib.suppress(OSError):
            cgroup.rmdir()
    network.restore_sysctls()
    shutil.rmtree(RUN, ignore_errors=True)
    KUBECONFIG_LINK.unlink(missing_ok=True)
    if not IS_MANAGER:
        with contextlib.suppress(OSError):
            KUBECONFIG_LINK.parent.rmdir()  # .cluster/worker, when nothing else is in it
    log(f"down in {time.monotonic() - started:.0f} s")


def leftovers() -> list[str]:
    found = [f"process {pid} {exe}" for pid, exe in our_processes()]
    found += [f"mount {m}" for m in our_mounts()]
    found += [f"iptables {c}" for c in our_chains()]
    found += [f"interface {i}" for i in our_interfaces()]
    found += [f"network namespace {n}" for n in our_netns()]
    found += [f"cgroup {c}" for c in our_cgroups()]
    found += [f"route {r}" for r in our_routes()]
    if IS_MANAGER:
        found += [f"hollow node debris {p}" for p in hollow.strays()]
    if RUN.exists():
        found.append(f"directory {RUN}")
    return found
