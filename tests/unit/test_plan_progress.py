"""Progress: Running, Restarting cleared, Degraded, the global step and Stalled (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.plan.progress import (
    report_degraded,
    report_progress,
    report_stalled,
    track_step,
)

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, pods_of, reasons

JOB = planner_job(2)


def cond(ctype: str, status: str = "True", reason: str = "r") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": "m",
            "lastTransitionTime": "t"}  # fmt: skip


@pytest.mark.parametrize(
    ("phases", "status", "running", "restarting", "events"),
    [
        # Every replica running: Running (with its Event), Restarting off.
        ({}, {"conditions": [cond("Restarting")]}, ("True", naming.REASON_RUNNING),
         ("False", naming.REASON_RUNNING), [naming.REASON_RUNNING]),
        # Running already: no news.
        ({}, {"conditions": [cond("Running", reason=naming.REASON_RUNNING)]},
         ("True", naming.REASON_RUNNING), None, []),
        # A PS not running: not Running yet, nor done restarting.
        ({"j-ps-0": "Pending"}, {"conditions": [cond("Restarting")]}, None, ("True", "r"), []),
        # Chief and PS up, a worker pending: Running, still restarting.
        ({"j-worker-1": "Pending"}, {"conditions": [cond("Restarting")]},
         ("True", naming.REASON_RUNNING), ("True", "r"), [naming.REASON_RUNNING]),
        # A RestartJob round keeps Restarting until it is over.
        ({}, {"conditions": [cond("Restarting")], "restartJob": {"round": 1}},
         ("True", naming.REASON_RUNNING), ("True", "r"), [naming.REASON_RUNNING]),
    ],
)  # fmt: skip
def test_report_progress_running_and_restarting(
    phases: dict[str, str],
    status: dict[str, Any],
    running: tuple[str, str] | None,
    restarting: tuple[str, str] | None,
    events: list[str],
) -> None:
    pods = [replace(p, phase=phases.get(p.name, p.phase)) for p in pods_of(JOB)]
    ctx = context(JOB, pods, status)
    assert report_progress(ctx) is False
    assert condition(ctx, "Running") == running
    assert condition(ctx, "Restarting") == restarting
    assert reasons(ctx) == events


@pytest.mark.parametrize(
    ("status", "observed", "lost", "degraded", "events", "message"),
    [
        ({}, {}, [], None, [], ""),  # never degraded, nothing to say
        ({}, {"replicas_to_aggregate": 2, "live_replicas": 3}, [], None, [], ""),
        ({}, {"replicas_to_aggregate": 1, "live_replicas": 1}, [],
         ("True", naming.REASON_AGGREGATING_FEWER), [naming.REASON_JOB_DEGRADED],
         "aggregating 1 of 2 gradients per update (replica worker-1 lost)"),
        ({}, {}, ["j-worker-0"], ("True", naming.REASON_DEGRADED),
         [naming.REASON_JOB_DEGRADED],
         "lost 1 worker(s) (j-worker-0: EXIT (1)); 2 of 3 replicas left for "
         "replicasToAggregate 2"),
        # Degraded already, R lower again: a new Event.
        ({"replicasToAggregate": 2, "conditions": [cond("Degraded")]},
         {"replicas_to_aggregate": 1}, [], ("True", naming.REASON_AGGREGATING_FEWER),
         [naming.REASON_JOB_DEGRADED], None),
        # R back to the spec's: Recovered.
        ({"replicasToAggregate": 1, "conditions": [cond("Degraded")]},
         {"replicas_to_aggregate": 2}, [], ("False", naming.REASON_PROGRESSING),
         [naming.REASON_RECOVERED], "aggregating 2 of 2 gradients per update"),
    ],
)  # fmt: skip
def test_report_degraded(
    status: dict[str, Any],
    observed: dict[str, Any],
    lost: list[str],
    degraded: tuple[str, str] | None,
    events: list[str],
    message: str | None,
) -> None:
    pods = [replace(p, phase="Failed", exit_code=1) if p.name in lost else p for p in pods_of(JOB)]
    if "replicas_to_aggregate" in observed and observed["replicas_to_aggregate"] < 2:
        pods = [replace(p, ready=False) if p.name == "j-worker-1" else p for p in pods]
    ctx = context(JOB, pods, status, **observed)
    report_degraded(ctx, lost)
    assert condition(ctx, "Degraded") == degraded
    assert reasons(ctx) == events
    found = next((c for c in ctx.status.get("conditions", []) if c["type"] == "Degraded"), None)
    if message is not None:
        assert (found["message"] if found else "") == message


@pytest.mark.parametrize(
    ("status", "read", "is_running", "step", "progress_time"),
    [
        ({}, None, False, None, None),
        ({}, None, True, None, "2026-01-01T00:00:00Z"),  # the stall clock starts
        ({"globalStep": 5, "lastProgressTime": "x"}, 5, True, 5, "x"),  # not moved
        ({"globalStep": 5, "lastProgressTime": "x"}, 6, True, 6, "2026-01-01T00:00:00Z"),
        ({"globalStep": 5, "lastProgressTime": "x"}, None, True, 5, "x"),  # not read
    ],
)
def test_track_step(
    status: dict[str, Any],
    read: int | None,
    is_running: bool,
    step: int | None,
    progress_time: str | None,
) -> None:
    ctx = context(JOB, pods_of(JOB), status, global_step=read)
    track_step(ctx, is_running)
    assert ctx.status.get("globalStep") == step
    assert ctx.status.get("lastProgressTime") == progress_time


@pytest.mark.parametrize(
    ("timeout", "idle", "lost", "is_running", "stalled", "requeue"),
    [
        (0, 10_000, [], True, False, []),  # no stall timeout
        (60, 30, [], True, False, [30.0]),
        (60, 60, [], True, True, []),
        (60, 600, [], False, False, []),  # not running: not stalled, whatever the clock
        (0, 0, ["j-worker-0", "j-worker-1"], True, True, []),  # 1 left < R 2
        (0, 0, ["j-worker-0"], True, False, []),  # 2 left, R 2
    ],
)
def test_report_stalled(
    timeout: int,
    idle: int,
    lost: list[str],
    is_running: bool,
    stalled: bool,
    requeue: list[float],
) -> None:
    job = planner_job(2, stallTimeoutSeconds=timeout)
    status = {"globalStep": 7, "lastProgressTime": "2026-01-01T00:00:00Z"}
    ctx = context(job, pods_of(job), status, T0 + timedelta(seconds=idle))
    report_stalled(ctx, lost, is_running)
    # A condition never set is not set to False.
    assert condition(ctx, "Stalled") == (("True", naming.REASON_STALLED) if stalled else None)
    assert reasons(ctx) == ([naming.REASON_STALLED] if stalled else [])
    assert ctx.requeue == requeue


def test_report_stalled_clears_once_the_step_moves() -> None:
    job = planner_job(2, stallTimeoutSeconds=60)
    status = {"lastProgressTime": "2026-01-01T00:00:00Z", "conditions": [cond("Stalled")]}
    ctx = context(job, pods_of(job), status, T0 + timedelta(seconds=10))
    report_stalled(ctx, [], True)
    assert condition(ctx, "Stalled") == ("False", naming.REASON_PROGRESSING)
    assert reasons(ctx) == []
