"""core/nodes.py: when a node is lost, from its Node object and its kubelet's Lease."""

from __future__ import annotations

from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.nodes import NodeFacts, NodeHealth, assess, node_facts, why_lost


def node(ready: str | None = "True", taints: list[str] = (), **spec: Any) -> dict[str, Any]:  # type: ignore[assignment]
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": k, "effect": "NoExecute"} for k in taints], **spec},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, *conditions]},
    }


@pytest.mark.parametrize(
    ("raw", "facts"),
    [
        (node(), NodeFacts("n1")),
        (node("Unknown"), NodeFacts("n1", ready="Unknown")),
        (node(None), NodeFacts("n1", ready="")),
        (node(taints=[naming.TAINT_OUT_OF_SERVICE]), NodeFacts("n1", out_of_service=True)),
        (node(taints=[naming.TAINT_UNREACHABLE]), NodeFacts("n1")),
        (node(unschedulable=True), NodeFacts("n1", unschedulable=True)),
    ],
)
def test_node_facts(raw: dict[str, Any], facts: NodeFacts) -> None:
    assert node_facts(raw) == facts


@pytest.mark.parametrize(
    ("facts", "silent_for", "why"),
    [
        (NodeFacts("n"), 5.0, ""),
        (NodeFacts("n"), None, ""),  # no Lease seen: the Node alone decides
        (NodeFacts("n"), 19.9, ""),
        (NodeFacts("n"), 20.0, "kubelet Lease not renewed for 20s"),
        (NodeFacts("n", ready="Unknown"), 1.0, "condition Ready is Unknown"),
        (NodeFacts("n", ready="False"), None, "condition Ready is False"),
        (NodeFacts("n", ready=""), None, ""),  # a new node, not reporting yet
        (NodeFacts("n", unschedulable=True), 1.0, ""),  # cordoned is not lost
        (
            NodeFacts("n", ready="True", out_of_service=True),
            1.0,
            f"taint {naming.TAINT_OUT_OF_SERVICE}",
        ),
    ],
)
def test_why_lost(facts: NodeFacts, silent_for: float | None, why: str) -> None:
    assert why_lost(facts, silent_for, lease_grace=20.0) == why


def test_assess_judges_every_node_and_says_when_to_look_again() -> None:
    nodes = {
        "ok": NodeFacts("ok"),
        "silent": NodeFacts("silent"),
        "down": NodeFacts("down", ready="Unknown"),
        "cordoned": NodeFacts("cordoned", unschedulable=True),
    }
    seen = {"ok": 95.0, "silent": 70.0, "cordoned": 99.0}
    health = assess(nodes, seen, now=100.0, lease_grace=20.0, listed_at=50.0)
    assert health.lost == {
        "silent": "kubelet Lease not renewed for 30s",
        "down": "condition Ready is Unknown",
    }
    assert health.cordoned == {"cordoned"}
    assert health.complete
    assert health.next_deadline == 15.0  # "ok" goes stale 20 s after 95


@pytest.mark.parametrize(
    ("health", "pod_node", "why"),
    [
        (NodeHealth(known=frozenset({"a"}), complete=True), "a", ""),
        (NodeHealth(known=frozenset({"a"}), complete=True), "b", "Node object deleted"),
        # A node not known before the list has been read long enough may just be new.
        (NodeHealth(known=frozenset({"a"}), complete=False), "b", ""),
        (NodeHealth(lost={"a": "x"}, known=frozenset({"a"})), "a", "x"),
        (NodeHealth(complete=True), "", ""),  # not scheduled yet
    ],
)
def test_node_health_why_lost(health: NodeHealth, pod_node: str, why: str) -> None:
    assert health.why_lost(pod_node) == why


def test_a_node_not_listed_long_enough_is_not_complete() -> None:
    assert not assess({}, {}, now=60.0, lease_grace=20.0, listed_at=50.0).complete
    assert not assess({}, {}, now=60.0, lease_grace=20.0, listed_at=None).complete
