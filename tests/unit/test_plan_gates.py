"""TopologyGated: a pod Kueue's topology gate holds well past its creation is said on the
job (which replicas, which Workload), a young one is not (the ungater lifts the gate in a
second or two) but is looked at again when it would be; the condition clears, with an
Event, once every pod is past the gate."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from syncreplicas_operator.core import kueuetas, naming
from syncreplicas_operator.core.plan.gates import GATED_REPORT_SECONDS, report_gated
from syncreplicas_operator.core.status import observe_pod
from syncreplicas_operator.core.timefmt import format_time

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, pods_of, reasons
from tests.unit.test_plan_queue_tas import TAS_JOB, tas_admission

GATED = naming.CONDITION_TOPOLOGY_GATED


def gated_worker(age: float, **changes: Any) -> list[Any]:
    """The job's pods, running, but worker-1's replacement still at the gate, ``age`` s old."""
    pods = pods_of(TAS_JOB, created=format_time(T0 - timedelta(seconds=600)))
    gated = {"phase": "Pending", "ready": False, "scheduling_gates": (kueuetas.GATE,),
             "created": format_time(T0 - timedelta(seconds=age)), **changes}  # fmt: skip
    return [replace(p, **gated) if p.name.endswith("-worker-1") else p for p in pods]


def test_a_pod_gated_past_the_bound_is_said_with_its_replica_and_workload() -> None:
    wl = tas_admission(TAS_JOB, ("worker",))
    ctx = context(TAS_JOB, gated_worker(45), workload=wl, kueue=True, kueue_served=True)
    assert report_gated(ctx) is False
    assert condition(ctx, GATED) == ("True", naming.REASON_WAITING_FOR_TOPOLOGY)
    (said,) = [c["message"] for c in ctx.status["conditions"] if c["type"] == GATED]
    assert "worker-1 (45s)" in said and wl.name in said and kueuetas.GATE in said
    assert "worker-0" not in said
    assert reasons(ctx) == [naming.REASON_WAITING_FOR_TOPOLOGY]
    assert [a.type for a in ctx.actions] == ["Warning"]

    # Still gated a pass later: the message follows, no second Event.
    again = context(TAS_JOB, gated_worker(50), status=ctx.status, workload=wl, kueue=True,
                    kueue_served=True)  # fmt: skip
    report_gated(again)
    assert condition(again, GATED) == ("True", naming.REASON_WAITING_FOR_TOPOLOGY)
    assert reasons(again) == []


def test_a_young_gated_pod_is_not_said_but_looked_at_when_it_would_be() -> None:
    ctx = context(TAS_JOB, gated_worker(10))
    report_gated(ctx)
    assert condition(ctx, GATED) is None and reasons(ctx) == []
    assert ctx.requeue == [GATED_REPORT_SECONDS - 10]


def test_a_gated_pod_being_deleted_or_a_plain_pending_one_is_not_said() -> None:
    ctx = context(TAS_JOB, gated_worker(90, deleting=True))
    report_gated(ctx)
    assert condition(ctx, GATED) is None
    ungated = context(TAS_JOB, gated_worker(90, scheduling_gates=("example.com/mine",)))
    report_gated(ungated)
    assert condition(ungated, GATED) is None and reasons(ungated) == []


def test_the_condition_clears_with_an_event_once_every_pod_is_past_the_gate() -> None:
    ctx = context(TAS_JOB, gated_worker(45))
    report_gated(ctx)
    after = context(TAS_JOB, pods_of(TAS_JOB), status=ctx.status)
    report_gated(after)
    assert condition(after, GATED) == ("False", naming.REASON_UNGATED)
    assert reasons(after) == [naming.REASON_UNGATED]
    # A job never gated never gets the condition.
    plain = context(planner_job(), pods_of(planner_job()))
    report_gated(plain)
    assert condition(plain, GATED) is None


def test_the_pods_gates_and_creation_time_are_read() -> None:
    body = {"metadata": {"name": "j-worker-0", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {naming.LABEL_JOB_NAME: "j"}},
            "spec": {"schedulingGates": [{"name": kueuetas.GATE}, {"name": "example.com/x"}]},
            "status": {"phase": "Pending"}}  # fmt: skip
    pod = observe_pod(body)
    assert pod is not None and pod.created == "2026-01-01T00:00:00Z"
    assert pod.scheduling_gates == (kueuetas.GATE, "example.com/x")
