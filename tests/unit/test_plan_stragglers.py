"""StragglerDetected and the straggler's eviction through the straggler step (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import STRAGGLER_EVICTIONS, CountMetric, DeletePod
from syncreplicas_operator.core.plan.stragglers import report_straggler

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, pods_of, reasons

EVICT = {"runPolicy": {"stragglerPolicy": {"evictAfterSeconds": 30, "minDropFraction": 0.4}}}
FLAGGED = {"replica": "worker-1", "dropFraction": 0.9, "since": "2026-01-01T00:00:00Z"}
SLOW = {"worker-1": 0.9, "worker-0": 0.0}


@pytest.mark.parametrize(
    ("spec", "status", "fractions", "after", "state", "detected", "events", "requeue"),
    [
        # Not measured: nothing changes.
        ({}, {}, None, 0, None, None, [], []),
        # Flagged (reported only, no policy).
        ({}, {}, SLOW, 0, FLAGGED, ("True", naming.REASON_STRAGGLER_DETECTED),
         [naming.REASON_STRAGGLER_DETECTED], []),
        # Under a policy: due in 30 s.
        (EVICT, {}, SLOW, 0, FLAGGED, ("True", naming.REASON_STRAGGLER_DETECTED),
         [naming.REASON_STRAGGLER_DETECTED], [30.0]),
        (EVICT, {"straggler": FLAGGED}, SLOW, 10, FLAGGED,
         ("True", naming.REASON_STRAGGLER_DETECTED), [], [20.0]),
        # Due: evicted.
        (EVICT, {"straggler": FLAGGED}, SLOW, 30, None,
         ("False", naming.REASON_STRAGGLER_EVICTED), [naming.REASON_STRAGGLER_EVICTED], []),
        # Fast again: cleared.
        ({}, {"straggler": FLAGGED}, {"worker-1": 0.01}, 10, None,
         ("False", naming.REASON_STRAGGLER_CLEARED), [naming.REASON_STRAGGLER_CLEARED], []),
        # Due, but another recovery is under way: one eviction at a time.
        (EVICT, {"straggler": FLAGGED, "lastRecovery": {"replica": "ps-0", "startedAt": "t"}},
         SLOW, 60, FLAGGED, ("True", naming.REASON_STRAGGLER_DETECTED), [], []),
    ],
)  # fmt: skip
def test_report_straggler(
    spec: dict[str, Any],
    status: dict[str, Any],
    fractions: dict[str, float] | None,
    after: int,
    state: dict[str, Any] | None,
    detected: tuple[str, str] | None,
    events: list[str],
    requeue: list[float],
) -> None:
    job = planner_job(2, workers=3, minReplicasToAggregate=1, **spec)
    if "straggler" in status:
        status = {**status, "conditions": [
            {"type": "StragglerDetected", "status": "True",
             "reason": naming.REASON_STRAGGLER_DETECTED, "message": "m",
             "lastTransitionTime": "t"}]}  # fmt: skip
    now = T0 + timedelta(seconds=after)
    ctx = context(job, pods_of(job), status, now, drop_fractions=fractions)
    assert report_straggler(ctx) is False
    got = ctx.status.get("straggler")
    assert (None if got is None else {**got, "since": FLAGGED["since"]}) == state
    assert condition(ctx, "StragglerDetected") == detected
    assert reasons(ctx) == events
    assert ctx.requeue == requeue
    evicted = detected == ("False", naming.REASON_STRAGGLER_EVICTED)
    assert (DeletePod("j-worker-1") in ctx.actions) is evicted
    assert (CountMetric(STRAGGLER_EVICTIONS) in ctx.actions) is evicted
    if evicted:
        assert ctx.status["lastRecovery"]["cause"] == "StragglerEvicted"


def test_a_straggler_not_ready_is_not_evicted() -> None:
    job = planner_job(2, workers=3, **EVICT)
    pods = [replace(p, ready=False) if p.name == "j-worker-1" else p for p in pods_of(job)]
    now = T0 + timedelta(seconds=60)
    ctx = context(job, pods, {"straggler": FLAGGED}, now, drop_fractions=SLOW)
    report_straggler(ctx)
    assert not [a for a in ctx.actions if isinstance(a, DeletePod)]
    assert ctx.status["straggler"]["replica"] == "worker-1"
