"""Lifecycle steps: finished, suspended, start, deadline, gang scheduler, TTL, clean-up."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import DeleteJob, DeletePod, DeletePodGroup
from syncreplicas_operator.core.nodes import NodeHealth
from syncreplicas_operator.core.plan import lifecycle

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, pods_of, reasons

FINISHED = {
    "conditions": [
        {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
    ],
    "completionTime": "2026-01-01T00:00:00Z",
}  # fmt: skip
COSCHEDULING = {"schedulingPolicy": {"gangScheduler": "Coscheduling"}}


@pytest.mark.parametrize(
    ("run_policy", "after", "pod_group", "deleted", "job_deleted", "requeue"),
    [
        ({}, 0, None, 4, False, []),  # cleanPodPolicy Running: every running pod
        ({"cleanPodPolicy": "None"}, 0, None, 0, False, []),
        ({"ttlSecondsAfterFinished": 60}, 20, None, 4, False, [40.0]),
        ({"ttlSecondsAfterFinished": 60}, 60, None, 0, True, []),  # the job goes, pods with it
        ({"ttlSecondsAfterFinished": 0}, 0, None, 0, True, []),
        ({**COSCHEDULING, "cleanPodPolicy": "None"}, 0, None, 0, False, []),
        ({**COSCHEDULING, "cleanPodPolicy": "None"}, 0, False, 0, False, []),
    ],
)
def test_plan_finished(
    run_policy: dict[str, Any],
    after: int,
    pod_group: bool | None,
    deleted: int,
    job_deleted: bool,
    requeue: list[float],
) -> None:
    job = planner_job(2, runPolicy=run_policy)
    ctx = context(job, pods_of(job), FINISHED, T0 + timedelta(seconds=after), pod_group=pod_group)
    assert lifecycle.plan_finished(ctx) is True
    assert sum(isinstance(a, DeletePod) for a in ctx.actions) == deleted
    assert (DeleteJob(naming.REASON_TTL_EXPIRED) in ctx.actions) is job_deleted
    released = any(isinstance(a, DeletePodGroup) for a in ctx.actions)
    assert released is ("schedulingPolicy" in run_policy and pod_group is not False)
    assert ctx.requeue == requeue


def test_plan_finished_passes_a_job_that_runs() -> None:
    job = planner_job(2)
    ctx = context(job, pods_of(job))
    assert lifecycle.plan_finished(ctx) is False
    assert ctx.actions == []


@pytest.mark.parametrize(
    ("clean", "phases", "deleted"),
    [
        ("Running", ("Running", "Pending", "Succeeded", "Failed"), ["j-ps-0", "j-chief-0"]),
        ("All", ("Running", "Pending", "Succeeded", "Failed"),
         ["j-ps-0", "j-chief-0", "j-worker-0", "j-worker-1"]),
        ("None", ("Running", "Pending", "Succeeded", "Failed"), []),
    ],
)  # fmt: skip
def test_clean_up_pods(clean: str, phases: tuple[str, ...], deleted: list[str]) -> None:
    job = planner_job(2, runPolicy={"cleanPodPolicy": clean})
    pods = [replace(p, phase=phase) for p, phase in zip(pods_of(job), phases, strict=True)]
    ctx = context(job, pods)
    lifecycle.clean_up_pods(ctx)
    assert [a.name for a in ctx.actions if isinstance(a, DeletePod)] == deleted
    assert reasons(ctx) == ([naming.REASON_CLEANED_UP] if deleted else [])


RUNNING = {"type": "Running", "status": "True", "reason": "r", "message": "",
           "lastTransitionTime": "t"}  # fmt: skip
SUSPENDED = {"type": "Suspended", "status": "True", "reason": "Suspended", "message": "",
             "lastTransitionTime": "t"}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "event", "running"),
    [
        ({"startTime": "t", "restartJob": {"round": 1}, "chief": {"uid": "u"},
          "conditions": [RUNNING]}, True, ("False", naming.REASON_SUSPENDED)),
        ({}, True, None),  # a condition never set is not set to False
        ({"conditions": [SUSPENDED]}, False, None),  # already suspended: nothing new to say
    ],
)  # fmt: skip
def test_plan_suspended(
    status: dict[str, Any], event: bool, running: tuple[str, str] | None
) -> None:
    job = planner_job(2, runPolicy={"suspend": True})
    ctx = context(job, pods_of(job), status)
    assert lifecycle.plan_suspended(ctx) is True
    # The chief and the workers; the PS once the chief's SIGTERM checkpoint is written.
    assert deleted(ctx) == ["j-chief-0", "j-worker-0", "j-worker-1"]
    assert condition(ctx, "Suspended") == ("True", naming.REASON_SUSPENDED)
    assert condition(ctx, "Running") == running
    assert not {"startTime", "restartJob", "chief"} & set(ctx.status)
    assert reasons(ctx) == ([naming.REASON_SUSPENDED] if event else [])


def deleted(ctx: Any) -> list[str]:
    return [a.name for a in ctx.actions if isinstance(a, DeletePod)]


GRACE_END = "2026-01-01T00:00:30Z"


@pytest.mark.parametrize(
    ("chief", "lost", "after", "ps_deleted", "requeue"),
    [
        # Its SIGTERM checkpoint may be under way: the PS stays until the chief's pod goes,
        # looked at again when its grace period ends.
        ({"deleting": True, "deletion_timestamp": GRACE_END}, False, 0, False, [30.0]),
        ({"deleting": True, "deletion_timestamp": GRACE_END}, False, 29, False, [1.0]),
        ({"deleting": True}, False, 0, False, [1.0]),  # deleted this pass, not yet seen
        # Past its grace period, on a lost node, not running, gone: nothing to wait for.
        ({"deleting": True, "deletion_timestamp": GRACE_END}, False, 30, True, []),
        ({"deleting": True, "deletion_timestamp": GRACE_END}, True, 0, True, []),
        ({"deleting": True, "phase": "Failed"}, False, 0, True, []),
        ({"deleting": True, "phase": "Pending"}, False, 0, True, []),
        (None, False, 0, True, []),
    ],
)  # fmt: skip
def test_a_stopping_job_deletes_its_ps_after_the_chief(
    chief: dict[str, Any] | None, lost: bool, after: int, ps_deleted: bool,
    requeue: list[float],
) -> None:  # fmt: skip
    job = planner_job(2, runPolicy={"suspend": True})
    pods = [replace(p, node_name="n1") for p in pods_of(job) if p.replica_type != "chief"]
    pods += [replace(p, node_name="n1", **chief) for p in pods_of(job)
             if p.replica_type == "chief" and chief is not None]  # fmt: skip
    health = NodeHealth(lost={"n1": "condition Ready is Unknown"} if lost else {},
                        known=frozenset({"n1"}))  # fmt: skip
    ctx = context(job, pods, {"conditions": [SUSPENDED]}, T0 + timedelta(seconds=after),
                  nodes=health)  # fmt: skip
    lifecycle.plan_suspended(ctx)
    assert ("j-ps-0" in deleted(ctx)) is ps_deleted
    assert {"j-worker-0", "j-worker-1"} <= set(deleted(ctx))
    assert ctx.requeue == requeue


@pytest.mark.parametrize(
    ("status", "resumed", "start"),
    [
        ({}, False, "2026-01-01T00:00:00Z"),
        ({"startTime": "2025-12-31T00:00:00Z"}, False, "2025-12-31T00:00:00Z"),
        ({"conditions": [SUSPENDED]}, True, "2026-01-01T00:00:00Z"),
    ],
)  # fmt: skip
def test_start(status: dict[str, Any], resumed: bool, start: str) -> None:
    ctx = context(planner_job(2), [], status)
    assert lifecycle.start(ctx) is False
    assert ctx.resumed is resumed
    assert ctx.status["startTime"] == start
    assert reasons(ctx) == ([naming.REASON_RESUMED] if resumed else [])


@pytest.mark.parametrize(
    ("deadline", "ran", "ended", "requeue"),
    [
        (None, 10_000, False, []),
        (100, 40, False, [60.0]),
        (100, 100, True, []),
        (100, 500, True, []),
    ],
)
def test_check_deadline(deadline: int | None, ran: int, ended: bool, requeue: list[float]) -> None:
    job = planner_job(2, runPolicy={"activeDeadlineSeconds": deadline} if deadline else {})
    now = T0 + timedelta(seconds=ran)
    ctx = context(job, pods_of(job), {"startTime": "2026-01-01T00:00:00Z"}, now)
    assert lifecycle.check_deadline(ctx) is ended
    assert ctx.requeue == requeue
    assert (condition(ctx, "Failed") == ("True", naming.REASON_DEADLINE_EXCEEDED)) is ended


@pytest.mark.parametrize(
    ("run_policy", "api", "created", "ended"),
    [
        ({}, False, False, False),  # no gang scheduler asked for
        (COSCHEDULING, True, False, False),
        (COSCHEDULING, False, False, True),
        (COSCHEDULING, False, True, False),  # its pods were placed already: they run on
    ],
)
def test_check_gang_scheduler(
    run_policy: dict[str, Any], api: bool, created: bool, ended: bool
) -> None:
    status: dict[str, Any] = {}
    if created:
        status["conditions"] = [
            {"type": "Created", "status": "True", "reason": "r", "message": "",
             "lastTransitionTime": "t"}
        ]  # fmt: skip
    ctx = context(planner_job(2, runPolicy=run_policy), [], status, pod_group_api=api)
    assert lifecycle.check_gang_scheduler(ctx) is ended
    assert (naming.REASON_GANG_SCHEDULER_MISSING in reasons(ctx)) is ended


def test_finish_turns_every_other_condition_off() -> None:
    job = planner_job(2)
    ctx = context(job, pods_of(job), {"restartJob": {"round": 1}})
    ctx.condition(naming.CONDITION_RUNNING, True, "r", "m")
    ctx.condition(naming.CONDITION_DEGRADED, True, "r", "m")
    lifecycle.finish(ctx, True, naming.REASON_SUCCEEDED, "done")
    assert condition(ctx, "Succeeded") == ("True", naming.REASON_SUCCEEDED)
    assert condition(ctx, "Running") == ("False", naming.REASON_SUCCEEDED)
    assert condition(ctx, "Degraded") == ("False", naming.REASON_SUCCEEDED)
    assert ctx.status["completionTime"] == "2026-01-01T00:00:00Z"
    assert "restartJob" not in ctx.status
    assert reasons(ctx) == [naming.REASON_SUCCEEDED, naming.REASON_CLEANED_UP]
