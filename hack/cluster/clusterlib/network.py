"""The node network (config.py has the picture): the host's bridge and firewall, each
node's network namespace, its link to the bridge, and the routes between pod ranges."""

from __future__ import annotations

import json
from pathlib import Path

from .config import (
    BRIDGE,
    CLUSTER_CIDR,
    CONTROL_PLANE_IP,
    NODE_NETWORK,
    OWN_CHAIN,
    RUN,
    SERVICE_CIDR,
    Node,
)  # fmt: skip
from .procs import in_netns, run


def set_sysctl(key: str, value: str, netns: str | None = None) -> None:
    """Set a sysctl; on the host, remember the value it had (restored by ``down``)."""
    path = Path("/proc/sys") / key.replace(".", "/")
    if netns is not None:
        run(*in_netns(netns, "sh", "-c", f"echo {value} > {path}"))
        return
    saved = RUN / "sysctl.json"
    before = json.loads(saved.read_text()) if saved.exists() else {}
    if key not in before:
        before[key] = path.read_text().strip()
        saved.write_text(json.dumps(before))
    path.write_text(value)


def restore_sysctls() -> None:
    saved = RUN / "sysctl.json"
    if saved.exists():
        for key, value in json.loads(saved.read_text()).items():
            (Path("/proc/sys") / key.replace(".", "/")).write_text(value)


def setup_host() -> None:
    """The bridge the nodes plug into (its address is the control plane's), the service
    range routed to it, and a firewall that forwards nothing of the cluster elsewhere."""
    set_sysctl("net.ipv4.ip_forward", "1")
    set_sysctl("net.bridge.bridge-nf-call-iptables", "1")
    if run("ip", "link", "show", BRIDGE, check=False).strip() == "":
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{CONTROL_PLANE_IP}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
    # A service address that the host's kube-proxy has not (yet) translated must not
    # follow the default route off this machine.
    if SERVICE_CIDR not in run("ip", "route", "show", SERVICE_CIDR):
        run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE)
    if run("iptables", "-w", "-S", OWN_CHAIN, check=False) == "":
        run("iptables", "-w", "-N", OWN_CHAIN)
        run("iptables", "-w", "-A", OWN_CHAIN, "-o", BRIDGE, "-j", "RETURN")
        run("iptables", "-w", "-A", OWN_CHAIN, "-s", CLUSTER_CIDR, "-j", "DROP")
        run("iptables", "-w", "-A", OWN_CHAIN, "-s", NODE_NETWORK, "-j", "DROP")
        run("iptables", "-w", "-I", "FORWARD", "1", "-j", OWN_CHAIN)


def netns_exists(node: Node) -> bool:
    return node.netns_path.exists()


def plug(netns: str, veth: str, ip: str) -> None:
    """A network namespace with one link to the bridge (the host's end ``veth``, ``eth0``
    inside with address ``ip``) and its default route via the host (idempotent)."""
    if not (Path("/run/netns") / netns).exists():
        run("ip", "netns", "add", netns)
    if run("ip", "link", "show", veth, check=False).strip() == "":
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        run("ip", "link", "set", veth, "master", BRIDGE)
        run(*in_netns(netns, "ip", "addr", "add", f"{ip}/24", "dev", "eth0"))
        run(*in_netns(netns, "ip", "link", "set", "lo", "up"))
        run(*in_netns(netns, "ip", "link", "set", "eth0", "up"))
        run(*in_netns(netns, "ip", "route", "add", "default", "via", CONTROL_PLANE_IP))
    run("ip", "link", "set", veth, "up")


def unplug(netns: str, veth: str) -> None:
    """The namespace and its link (what ``plug`` made)."""
    run("ip", "link", "delete", veth, check=False)
    if (Path("/run/netns") / netns).exists():
        run("ip", "netns", "delete", netns, check=False)


def add_node(node: Node, others: list[Node]) -> None:
    """The node's namespace, its link to the bridge, its address and routes (idempotent)."""
    plug(node.netns, node.veth, node.ip)
    for key in ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables"):
        set_sysctl(key, "1", netns=node.netns)
    route_pods(node, others)


def route_pods(node: Node, others: list[Node]) -> None:
    """Each node's pod range reaches every other node and the host through its address."""
    run("ip", "route", "replace", node.pod_cidr, "via", node.ip, "dev", BRIDGE)
    for other in others:
        if other.index == node.index or not netns_exists(other):
            continue
        run(*in_netns(node.netns, "ip", "route", "replace", other.pod_cidr, "via", other.ip))
        run(*in_netns(other.netns, "ip", "route", "replace", node.pod_cidr, "via", node.ip))


def set_link(node: Node, up: bool) -> None:
    """Cut (or restore) the node's one link to the control plane and the other nodes."""
    run("ip", "link", "set", node.veth, "up" if up else "down", check=False)


def link_up(node: Node) -> bool:
    return "state UP" in run("ip", "link", "show", node.veth, check=False) or (
        "UP" in run("ip", "-o", "link", "show", node.veth, check=False).split(">")[0]
    )


def remove_node(node: Node, others: list[Node]) -> None:
    """The node's namespace (its interfaces, iptables and routes go with it) and the
    routes that led to it."""
    run("ip", "route", "del", node.pod_cidr, check=False)
    for other in others:
        if other.index != node.index and netns_exists(other):
            run(*in_netns(other.netns, "ip", "route", "del", node.pod_cidr), check=False)
    unplug(node.netns, node.veth)


def remove_host() -> None:
    run("ip", "route", "del", SERVICE_CIDR, check=False)
    run("ip", "link", "delete", BRIDGE, check=False)
