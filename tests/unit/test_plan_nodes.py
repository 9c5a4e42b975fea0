"""plan/nodes.py: the replicas of a lost node are force-deleted, named in one NodeLost
Event, each a recovery, none counted against backoffLimit; and re-created elsewhere with a
newer incarnation."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming, recovery
from syncreplicas_operator.core.actions import CreateChild, DeletePod, EmitEvent
from syncreplicas_operator.core.nodes import NodeHealth
from syncreplicas_operator.core.plan.context import Observed
from syncreplicas_operator.core.plan.nodes import replace_lost
from syncreplicas_operator.core.plan.pipeline import plan_job
from syncreplicas_operator.core.status import ObservedPod

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, pods_of, reasons

JOB = planner_job(2)
KNOWN = frozenset({"n1", "n2", "n3"})
FAILED = {"conditions": [{"type": "Failed", "status": "True", "reason": "r", "message": "",
                          "lastTransitionTime": "t"}]}  # fmt: skip


def placed(**nodes: str) -> list[ObservedPod]:
    """Every replica running, on n1 unless ``nodes`` says (``j_ps_0="n2"``)."""
    return [replace(p, node_name=nodes.get(p.name.replace("-", "_"), "n1")) for p in pods_of(JOB)]


def forced(ctx: Any) -> list[str]:
    return [a.name for a in ctx.actions if isinstance(a, DeletePod) and a.grace_period_seconds == 0]


@pytest.mark.parametrize(
    ("health", "pods", "status", "deleted"),
    [
        # Nothing known of the nodes (handling off, or not read yet): nothing done.
        (None, placed(j_ps_0="n2"), {}, []),
        (NodeHealth(known=KNOWN, complete=True), placed(j_ps_0="n2"), {}, []),
        (
            NodeHealth(lost={"n2": "condition Ready is Unknown"}, known=KNOWN),
            placed(j_ps_0="n2", j_worker_1="n2"),
            {},
            ["j-ps-0", "j-worker-1"],
        ),
        # The Node object is gone.
        (NodeHealth(known=frozenset({"n1"}), complete=True), placed(j_ps_0="n9"), {}, ["j-ps-0"]),
        # Not yet sure the node list is complete: a node not known may be new.
        (NodeHealth(known=frozenset({"n1"}), complete=False), placed(j_ps_0="n9"), {}, []),
        # A pod not scheduled yet is on no node.
        (NodeHealth(lost={"n2": "x"}, known=KNOWN), placed(j_ps_0=""), {}, []),
        # A finished job's pods are left alone (cleanPodPolicy decides).
        (NodeHealth(lost={"n1": "x"}, known=KNOWN), placed(), FAILED, []),
    ],
)
def test_pods_on_lost_nodes_are_force_deleted(
    health: NodeHealth | None, pods: list[ObservedPod], status: dict[str, Any], deleted: list[str]
) -> None:
    ctx = context(JOB, pods, status, nodes=health)
    assert replace_lost(ctx) is False
    assert forced(ctx) == deleted
    assert reasons(ctx) == ([naming.REASON_NODE_LOST] if deleted else [])
    assert sorted(n for n, p in ctx.pods.items() if p.deleting) == deleted
    assert [f.replica for f in ctx.failures] == [
        naming.replica_key(*naming.parse_replica_name("j", n) or ("", 0)) for n in deleted
    ]
    assert all(f.cause == recovery.CAUSE_NODE_LOST for f in ctx.failures)
    if deleted:
        assert condition(ctx, naming.CONDITION_RESTARTING) == ("True", naming.REASON_NODE_LOST)


def test_the_event_names_the_node_why_and_the_replicas() -> None:
    health = NodeHealth(lost={"n2": "kubelet Lease not renewed for 21s"}, known=KNOWN)
    ctx = context(JOB, placed(j_ps_0="n2", j_worker_0="n2"), nodes=health)
    replace_lost(ctx)
    (event,) = [a for a in ctx.actions if isinstance(a, EmitEvent)]
    assert event.message.startswith(
        "node n2 lost (kubelet Lease not renewed for 21s): j-ps-0, j-worker-0 force-deleted"
    )
    assert "not counted against backoffLimit" in event.message


def test_a_pod_stuck_terminating_on_a_lost_node_goes_at_once_and_is_no_new_failure() -> None:
    """The taint manager evicted it (its failure was seen then); its kubelet never confirms."""
    due = (T0 - timedelta(seconds=5)).isoformat()
    pods = placed(j_worker_0="n2")
    pods[2] = replace(pods[2], deleting=True, deletion_timestamp=due, disruption="Taint")
    ctx = context(JOB, pods, nodes=NodeHealth(lost={"n2": "x"}, known=KNOWN))
    replace_lost(ctx)
    assert forced(ctx) == ["j-worker-0"]
    assert ctx.failures == []


def test_this_operators_own_deletion_in_flight_is_not_repeated() -> None:
    pods = placed(j_worker_0="n2")
    pods[2] = replace(pods[2], deleting=True)  # expectations: deleted, not yet seen gone
    ctx = context(JOB, pods, nodes=NodeHealth(lost={"n2": "x"}, known=KNOWN))
    replace_lost(ctx)
    assert forced(ctx) == [] and reasons(ctx) == []


def test_in_place_restarts_of_a_lost_pod_still_count_its_loss_does_not() -> None:
    pods = placed(j_worker_0="n2")
    pods[2] = replace(pods[2], restart_count=2)
    ctx = context(JOB, pods, nodes=NodeHealth(lost={"n2": "x"}, known=KNOWN))
    replace_lost(ctx)
    assert ctx.recreations == {naming.WORKER: 2}


def test_a_lost_replica_comes_back_with_a_newer_incarnation_avoiding_the_lost_node() -> None:
    """Whole passes: force-delete, then (the pod gone) re-create; backoffLimit 0 unspent."""
    job = planner_job(2, runPolicy={"backoffLimit": 0, "restartPolicy": "ExitCode"})
    first = plan_job(job, Observed((), network_policy=True), {}, T0)
    bodies = {a.name: a.body for a in first.actions if isinstance(a, CreateChild)}
    before = int(bodies["j-ps-0"]["metadata"]["annotations"][naming.ANNOTATION_INCARNATION])
    assert before == int(T0.timestamp() * 1000)
    env = {e["name"]: e["value"] for e in bodies["j-ps-0"]["spec"]["containers"][0]["env"]}
    assert env[naming.ENV_INCARNATION] == str(before)
    pods = [
        replace(p, node_name="n2" if p.name == "j-ps-0" else "n1", incarnation=before)
        for p in pods_of(job)
    ]
    health = NodeHealth(lost={"n2": "condition Ready is Unknown"}, known=KNOWN)
    services = frozenset(bodies[n]["metadata"]["name"] for n in bodies if n.startswith("j-"))
    observed = Observed(tuple(pods), services, True, nodes=health, disruption_budget=True)
    lost = plan_job(job, observed, first.status, T0 + timedelta(seconds=30))
    assert forced(lost) == ["j-ps-0"]
    assert lost.status["lastRecovery"]["cause"] == recovery.CAUSE_NODE_LOST
    # The pod is gone; the next pass creates it again, off the lost node.
    rest = tuple(p for p in pods if p.name != "j-ps-0")
    observed = replace(observed, pods=rest, seen_pods=lost.seen_pods)
    again = plan_job(job, observed, lost.status, T0 + timedelta(seconds=31))
    (pod,) = [a.body for a in again.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    after = int(pod["metadata"]["annotations"][naming.ANNOTATION_INCARNATION])
    assert after > before
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                       "values": ["n2"]}]}]  # fmt: skip
    assert again.status["phase"] != naming.PHASE_FAILED
    assert again.status["replicaStatuses"]["ps"]["restarts"] == 0
    assert naming.REASON_REPLICA_RESTARTED not in [
        a.reason for a in again.actions if isinstance(a, EmitEvent)
    ]


def test_an_incarnation_never_goes_below_one_the_pods_show() -> None:
    """A clock stepped back: the new pods still outrank every pod of the job."""
    job = planner_job(2)
    high = int(T0.timestamp() * 1000) + 5000
    pods = [replace(p, incarnation=high) for p in pods_of(job) if p.name != "j-worker-1"]
    services = frozenset(p.name for p in pods_of(job))
    plan = plan_job(job, Observed(tuple(pods), services, True, disruption_budget=True), {}, T0)
    (pod,) = [a.body for a in plan.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    assert pod["metadata"]["annotations"][naming.ANNOTATION_INCARNATION] == str(high + 1)
