"""Children steps: force-delete stuck pods; keep a going pod's address out of DNS; create,
prune and report the job's children."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import CreateChild, DeletePod, DeleteService, PublishPod
from syncreplicas_operator.core.nodes import NodeHealth
from syncreplicas_operator.core.plan.children import (
    FORCE_DELETE_AFTER_SECONDS,
    force_delete_stuck,
    publish_addresses,
    reconcile_children,
)
from syncreplicas_operator.core.status import ObservedPod

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, pods_of, reasons

JOB = planner_job(2)
CREATED = {"type": "Created", "status": "True", "reason": "r", "message": "",
           "lastTransitionTime": "t"}  # fmt: skip


@pytest.mark.parametrize(
    ("deleting", "since_due", "forced", "requeue"),
    [
        (False, 500, False, []),  # a deletionTimestamp alone is no deletion in progress
        (True, None, False, []),  # going, no timestamp known
        (True, -30, False, [30 + FORCE_DELETE_AFTER_SECONDS]),  # still in its grace period
        (True, 59, False, [1.0]),
        (True, FORCE_DELETE_AFTER_SECONDS, True, []),
        (True, 3600, True, []),
    ],
)
def test_force_delete_stuck(
    deleting: bool, since_due: float | None, forced: bool, requeue: list[float]
) -> None:
    due = "" if since_due is None else (T0 - timedelta(seconds=since_due)).isoformat()
    pod = ObservedPod("j-worker-0", "worker", 0, deleting=deleting, deletion_timestamp=due)
    ctx = context(JOB, [pod])
    assert force_delete_stuck(ctx) is False
    assert (DeletePod("j-worker-0", grace_period_seconds=0) in ctx.actions) is forced
    assert reasons(ctx) == ([naming.REASON_FORCE_DELETED] if forced else [])
    assert ctx.requeue == pytest.approx(requeue)


@pytest.mark.parametrize(
    ("name", "replica_type", "index", "published", "deleting", "action"),
    [
        # Being deleted: out of its Service at once (its successor is not confused with it).
        ("j-ps-0", "ps", 0, True, True, PublishPod("j-ps-0", published=False)),
        ("j-worker-1", "worker", 1, True, True, PublishPod("j-worker-1", published=False)),
        # Already out, or running and in: nothing to write.
        ("j-ps-0", "ps", 0, False, True, None),
        ("j-chief-0", "chief", 0, True, False, None),
        # Running without the label (made by an older operator): put in its Service.
        ("j-chief-0", "chief", 0, False, False, PublishPod("j-chief-0", published=True)),
        # Scaled down (index 2 of 2 workers): no successor, no write.
        ("j-worker-2", "worker", 2, True, True, None),
        ("j-worker-2", "worker", 2, False, False, None),
    ],
)
def test_publish_addresses(
    name: str, replica_type: str, index: int, published: bool, deleting: bool,
    action: PublishPod | None,
) -> None:  # fmt: skip
    pod = ObservedPod(name, replica_type, index, published=published, deleting=deleting)
    ctx = context(JOB, [pod])
    assert publish_addresses(ctx) is False
    assert ctx.actions == ([action] if action else [])
    assert reasons(ctx) == []


@pytest.mark.parametrize(
    ("health", "forced"),
    [
        # A busy kubelet (scale-downs on a loaded node) confirms late: no second deletion.
        (NodeHealth(known=frozenset({"n1"}), complete=True), False),
        # Lost: plan/nodes.py force-deletes it, with its reason.
        (NodeHealth(lost={"n1": "condition Ready is Unknown"}, known=frozenset({"n1"}),
                    complete=True), False),
        # Lost, seen before the Node list is complete, or its Node object deleted:
        # plan/nodes.py's too.
        (NodeHealth(lost={"n1": "condition Ready is Unknown"}, complete=False), False),
        (NodeHealth(known=frozenset({"n2"}), complete=True), False),
        # The Node list not read long enough to know: the timer decides.
        (NodeHealth(complete=False), True),
        (None, True),  # the operator does not watch nodes
    ],
)
def test_a_pod_overdue_on_a_node_seen_is_not_deleted_again(health: NodeHealth | None,
                                                            forced: bool) -> None:  # fmt: skip
    due = (T0 - timedelta(seconds=FORCE_DELETE_AFTER_SECONDS + 90)).isoformat()
    pod = ObservedPod("j-worker-0", "worker", 0, deleting=True, deletion_timestamp=due,
                      node_name="n1")  # fmt: skip
    ctx = context(JOB, [pod], nodes=health)
    force_delete_stuck(ctx)
    assert (DeletePod("j-worker-0", grace_period_seconds=0) in ctx.actions) is forced


def created(ctx: Any) -> list[tuple[str, str]]:
    return [(a.kind, a.name) for a in ctx.actions if isinstance(a, CreateChild)]


ALL_CHILDREN = [
    ("NetworkPolicy", "j-grpc"), ("Service", "j"),
    ("Pod", "j-ps-0"), ("Pod", "j-chief-0"), ("Pod", "j-worker-0"), ("Pod", "j-worker-1"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "present", "observed", "status", "children", "events"),
    [
        # The first pass: policy, services, then pods; the job is Created.
        ({}, [], {"services": frozenset(), "network_policy": False}, {}, ALL_CHILDREN,
         [naming.REASON_CREATED]),
        # Gang scheduling: the PodGroup before anything else, unless it exists.
        ({"runPolicy": {"schedulingPolicy": {"gangScheduler": "Coscheduling"}}}, [],
         {"services": frozenset(), "network_policy": False}, {},
         [("PodGroup", "j"), *ALL_CHILDREN], [naming.REASON_CREATED]),
        ({"runPolicy": {"schedulingPolicy": {"gangScheduler": "Coscheduling"}}}, [],
         {"services": frozenset(), "network_policy": False, "pod_group": True}, {},
         ALL_CHILDREN, [naming.REASON_CREATED]),
        # A pod gone after the job was created, nothing explains it: replaced and named.
        ({}, ["j-ps-0", "j-chief-0", "j-worker-1"], {}, {"conditions": [CREATED]},
         [("Pod", "j-worker-0")],
         [naming.REASON_REPLICA_RESTARTED, naming.REASON_CHILD_CREATED]),
        # The same while the job restarts replicas: no news.
        ({}, ["j-ps-0", "j-chief-0", "j-worker-1"], {},
         {"conditions": [CREATED], "restartJob": {"round": 2}},
         [("Pod", "j-worker-0")], [naming.REASON_CHILD_CREATED]),
        # The same under the job's Service (no Service per replica remembers the slot).
        ({}, ["j-ps-0", "j-chief-0", "j-worker-1"], {"services": frozenset({"j"})},
         {"conditions": [CREATED]}, [("Pod", "j-worker-0")],
         [naming.REASON_REPLICA_RESTARTED, naming.REASON_CHILD_CREATED]),
        # A job whose replicas have Services each (made by an earlier operator) keeps them:
        # the missing one is made, no job Service.
        ({}, ["j-ps-0", "j-chief-0", "j-worker-1"],
         {"services": frozenset({"j-ps-0", "j-chief-0", "j-worker-1"})},
         {"conditions": [CREATED]}, [("Service", "j-worker-0"), ("Pod", "j-worker-0")],
         [naming.REASON_CHILD_CREATED]),
        # An earlier job's out-of-range Service is no sign of one: the job's Service.
        ({}, [], {"services": frozenset({"j-worker-7"}), "network_policy": False}, {},
         ALL_CHILDREN, [naming.REASON_CREATED]),
        # RestartJob: workers wait for every PS to run again.
        ({}, ["j-chief-0"], {}, {"conditions": [CREATED], "restartJob": {"round": 2}},
         [("Pod", "j-ps-0")], [naming.REASON_CHILD_CREATED]),
    ],
)  # fmt: skip
def test_reconcile_children_creates_what_is_missing(
    spec: dict[str, Any],
    present: list[str],
    observed: dict[str, Any],
    status: dict[str, Any],
    children: list[tuple[str, str]],
    events: list[str],
) -> None:
    job = planner_job(2, **spec)
    pods = [p for p in pods_of(job) if p.name in present]
    ctx = context(job, pods, status, **observed)
    assert reconcile_children(ctx) is False
    assert created(ctx) == children
    assert reasons(ctx) == events
    if not present:
        assert condition(ctx, "Created") == ("True", naming.REASON_CREATED)


def test_reconcile_children_annotates_the_restart_round_and_ends_it() -> None:
    ps = replace(pods_of(JOB)[0], phase="Pending")
    ctx = context(JOB, [ps, pods_of(JOB)[1]], {"restartJob": {"round": 3}})
    reconcile_children(ctx)
    assert created(ctx) == []  # workers wait for the PS to run
    assert "restartJob" in ctx.status
    ctx = context(JOB, pods_of(JOB)[:2], {"restartJob": {"round": 3}})
    reconcile_children(ctx)
    bodies = [a.body for a in ctx.actions if isinstance(a, CreateChild)]
    assert [b["metadata"]["annotations"][naming.ANNOTATION_RESTART_ROUND] for b in bodies] == [
        "3", "3",
    ]  # fmt: skip
    assert "restartJob" not in ctx.status  # every replica there, every PS running


def test_reconcile_children_deletes_what_is_out_of_range() -> None:
    extra = ObservedPod("j-worker-5", "worker", 5, phase="Running")
    services = frozenset(p.name for p in pods_of(JOB)) | {"j-worker-5", "other"}
    ctx = context(JOB, [*pods_of(JOB), extra], services=services)
    reconcile_children(ctx)
    assert [a for a in ctx.actions if isinstance(a, DeletePod | DeleteService)] == [
        DeletePod("j-worker-5"),
        DeleteService("j-worker-5"),
    ]
    assert reasons(ctx) == [naming.REASON_CHILD_DELETED, naming.REASON_CREATED]


def test_an_earlier_jobs_out_of_range_service_is_deleted_under_the_jobs_service() -> None:
    ctx = context(JOB, pods_of(JOB), services=frozenset({"j", "j-worker-7"}))
    reconcile_children(ctx)
    assert [a for a in ctx.actions if isinstance(a, DeletePod | DeleteService)] == [
        DeleteService("j-worker-7")
    ]
    assert created(ctx) == []


def test_reconcile_children_never_creates_over_a_terminating_pod() -> None:
    pods = pods_of(JOB)
    pods[-1] = replace(pods[-1], deleting=True)
    ctx = context(JOB, pods, {"conditions": [CREATED]})
    reconcile_children(ctx)
    assert ctx.actions == []


REFUSED = {"type": naming.CONDITION_REPLICA_FAILURE, "status": "True",
           "reason": naming.REASON_FAILED_CREATE, "lastTransitionTime": "t",
           "message": 'create Pod j-ps-0: HTTP 403: pods "j-ps-0" is forbidden'}  # fmt: skip


@pytest.mark.parametrize(
    "present",
    [
        ["j-ps-0", "j-chief-0", "j-worker-0"],  # this pass creates the missing pod
        ["j-ps-0", "j-chief-0", "j-worker-0", "j-worker-1"],  # nothing is missing
    ],
)
def test_a_refused_create_is_cleared_once_every_replica_has_its_pod(present: list[str]) -> None:
    """Cleared in the pass that creates the last pod: its status patch goes out only after
    the creates succeed (a refusal stops the pass and sets the condition again)."""
    pods = [p for p in pods_of(JOB) if p.name in present]
    ctx = context(JOB, pods, {"conditions": [CREATED, REFUSED]})
    reconcile_children(ctx)
    assert condition(ctx, naming.CONDITION_REPLICA_FAILURE) == ("False", naming.REASON_PODS_CREATED)
    assert created(ctx) == [("Pod", n) for n in ("j-worker-1",) if n not in present]
