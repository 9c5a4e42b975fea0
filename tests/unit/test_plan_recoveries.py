"""status.restoredStep and status.lastRecovery through the recovery step (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import RECOVERIES, CountMetric
from syncreplicas_operator.core.plan.recoveries import report_recovery
from syncreplicas_operator.core.recovery import SeenPod

from tests.support.jobs import planner_job
from tests.support.plans import T0, context, pods_of, reasons

JOB = planner_job(2)
SEEN = {p.name: SeenPod(f"{p.replica_type}-{p.index}", p.uid, 0) for p in pods_of(JOB)}
OPEN = {"replica": "worker-0", "cause": "Deleted", "message": "pod j-worker-0 was deleted",
        "startedAt": "2026-01-01T00:00:00Z", "globalStepBefore": 10}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "observed", "pods", "record", "counted", "events"),
    [
        # No last pass to compare with: no failure.
        ({}, {}, {}, None, [], []),
        # A pod gone since the last pass starts a recovery (counted by cause).
        ({"globalStep": 10}, {"seen_pods": SEEN}, {"j-worker-0": None},
         {**OPEN}, ["Deleted"], []),
        # The replica back and the step moved: the recovery ends, with an Event.
        ({"globalStep": 12, "lastRecovery": OPEN}, {"seen_pods": SEEN}, {},
         {**OPEN, "recoveredAt": "2026-01-01T00:00:30Z", "stepsLost": 0}, [],
         [naming.REASON_REPLICA_RECOVERED]),
        # Not ready yet: still recovering.
        ({"globalStep": 12, "lastRecovery": OPEN}, {"seen_pods": SEEN},
         {"j-worker-0": {"ready": False}}, OPEN, [], []),
    ],
)  # fmt: skip
def test_report_recovery(
    status: dict[str, Any],
    observed: dict[str, Any],
    pods: dict[str, dict[str, Any] | None],
    record: dict[str, Any] | None,
    counted: list[str],
    events: list[str],
) -> None:
    current = [
        replace(p, **(pods.get(p.name) or {}))
        for p in pods_of(JOB)
        if not (p.name in pods and pods[p.name] is None)
    ]
    now = T0 + timedelta(seconds=30) if "lastRecovery" in status else T0
    ctx = context(JOB, current, status, now, **observed)
    assert report_recovery(ctx) is False
    assert ctx.status.get("lastRecovery") == record
    assert [dict(a.labels)["cause"] for a in ctx.actions if isinstance(a, CountMetric)] == counted
    assert all(a.name == RECOVERIES for a in ctx.actions if isinstance(a, CountMetric))
    assert reasons(ctx) == events


@pytest.mark.parametrize(
    ("known", "read", "restored", "resumed_from"),
    [
        (None, None, None, None),
        (None, 0, 0, None),  # the first read: nothing to compare with
        (0, 0, 0, None),
        (0, 200, 200, 200),  # the chief rejoined from its checkpoint at 200
    ],
)
def test_report_recovery_reads_the_restored_step(
    known: int | None, read: int | None, restored: int | None, resumed_from: int | None
) -> None:
    recovering = {**OPEN, "replica": "ps-0", "globalStepBefore": 250}
    status: dict[str, Any] = {"globalStep": 250, "lastRecovery": recovering}
    if known is not None:
        status["restoredStep"] = known
    ctx = context(JOB, pods_of(JOB), status, restored_step=read)
    report_recovery(ctx)
    assert ctx.status.get("restoredStep") == restored
    assert ctx.status["lastRecovery"].get("resumedFrom") == resumed_from
