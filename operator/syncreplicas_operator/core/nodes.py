"""When a node is lost: the rules, over what the operator last read of Nodes and Leases.

Pure: raw Node dicts and the times the operator saw each kubelet's Lease renewed in, a
frozen verdict out; the caller passes its clock (seconds, monotonic or not, one clock).

A node is lost when its Node object is gone, its Ready condition is Unknown or False, its
kubelet has not renewed its Lease for ``lease_grace`` seconds (the kubelet renews every
10 s; Kubernetes' node controller waits its 50 s grace period, then its pods' 300 s
tolerations), or it carries the ``node.kubernetes.io/out-of-service`` taint. Its replica
pods are then force-deleted and re-created elsewhere: the runtime fences the old
processes (``SYNCREPLICAS_INCARNATION``), so a partitioned node that comes back cannot
run two processes of one replica against the parameter servers.

A Lease's age is measured on the operator's own clock from when the operator saw its
``renewTime`` change, not from ``renewTime`` itself, as Kubernetes' node controller
does: the kubelet's clock and the operator's may differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from . import naming

# The operator's default for how long a kubelet's Lease may go unrenewed (two renewals).
DEFAULT_LEASE_GRACE_SECONDS: Final = 20.0
LOST_READY: Final = ("False", "Unknown")


@dataclass(frozen=True)
class NodeFacts:
    """What the operator needs of one Node object."""

    name: str
    ready: str = "True"  # its Ready condition's status; "" when it has none yet
    out_of_service: bool = False
    unschedulable: bool = False  # cordoned (kubectl cordon / drain)


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Facts of one raw Node."""
    spec = node.get("spec") or {}
    ready = ""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == naming.NODE_CONDITION_READY:
            ready = str(cond.get("status") or "")
    return NodeFacts(
        name=str((node.get("metadata") or {}).get("name") or ""),
        ready=ready,
        out_of_service=any(
            t.get("key") == naming.TAINT_OUT_OF_SERVICE for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")),
    )


def lease_renew_time(lease: Mapping[str, Any]) -> str:
    """A kubelet Lease's ``spec.renewTime`` as written ("" if none): compared, not parsed."""
    return str((lease.get("spec") or {}).get("renewTime") or "")


def why_lost(facts: NodeFacts, silent_for: float | None, lease_grace: float) -> str:
    """Why this node is lost, in words; "" while it is not.

    ``silent_for``: seconds since the operator saw its Lease renewed (None: no Lease seen).
    """
    if facts.out_of_service:
        return f"taint {naming.TAINT_OUT_OF_SERVICE}"
    if facts.ready in LOST_READY:
        return f"condition Ready is {facts.ready}"
    if silent_for is not None and silent_for >= lease_grace:
        return f"kubelet Lease not renewed for {silent_for:.0f}s"
    return ""


@dataclass(frozen=True)
class NodeHealth:
    """The verdict on every node at one moment, as a planning pass reads it."""

    lost: Mapping[str, str] = field(default_factory=dict)  # node name -> why
    cordoned: frozenset[str] = frozenset()
    known: frozenset[str] = frozenset()
    # The Node list has been read for long enough that a node not known is gone (not a
    # node so new that its watch event has not arrived yet).
    complete: bool = False
    # Seconds until the next Lease of a node could go stale (when to look again).
    next_deadline: float | None = None

    def why_lost(self, node: str) -> str:
        """Why the node a pod runs on is lost; "" if it is not (or the pod has none)."""
        if not node:
            return ""
        if node in self.lost:
            return self.lost[node]
        if self.complete and node not in self.known:
            return "Node object deleted"
        return ""


def assess(
    nodes: Mapping[str, NodeFacts],
    lease_seen: Mapping[str, float],
    now: float,
    lease_grace: float,
    listed_at: float | None,
) -> NodeHealth:
    """Every node's verdict. ``lease_seen``: node -> when its Lease was last seen renewed;
    ``listed_at``: when the Node list was first read (None: not yet)."""
    lost: dict[str, str] = {}
    deadlines: list[float] = []
    for name, facts in nodes.items():
        seen = lease_seen.get(name)
        silent_for = None if seen is None else max(0.0, now - seen)
        why = why_lost(facts, silent_for, lease_grace)
        if why:
            lost[name] = why
        elif silent_for is not None:
            deadlines.append(lease_grace - silent_for)
    return NodeHealth(
        lost=lost,
        cordoned=frozenset(n for n, f in nodes.items() if f.unschedulable),
        known=frozenset(nodes),
        complete=listed_at is not None and now - listed_at >= lease_grace,
        next_deadline=min(deadlines) if deadlines else None,
    )
