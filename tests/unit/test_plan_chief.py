"""Chief restarts: noticed from the chief's pod, then chiefRestartPolicy (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import (
    CHIEF_CLEANUPS,
    JOB_RESTARTS,
    CountMetric,
    DeletePod,
)
from syncreplicas_operator.core.plan.chief import check_chief, chief_restarted

from tests.support.jobs import planner_job
from tests.support.plans import condition, context, pods_of, reasons

JOB = planner_job(2)
KNOWN = {"chief": {"uid": "u-chief-0", "restartCount": 0}}


@pytest.mark.parametrize(
    ("status", "chief", "why", "remembered"),
    [
        ({}, {}, "", {"uid": "u-chief-0", "restartCount": 0}),  # running: remembered
        ({}, {"phase": "Pending"}, "", None),  # not yet
        (KNOWN, {}, "", {"uid": "u-chief-0", "restartCount": 0}),
        (KNOWN, {"uid": "u2"}, "the chief pod was replaced (uid u2)",
         {"uid": "u2", "restartCount": 0}),
        (KNOWN, {"restart_count": 1, "last_exit_code": 137},
         "the chief container restarted after exiting with EXIT (137) (restart 1)",
         {"uid": "u-chief-0", "restartCount": 1}),
        (KNOWN, None, "the chief pod disappeared and is being replaced", None),
        (KNOWN, {"deleting": True, "disruption": "Evicted: x"},
         "the chief pod is being deleted (Evicted: x) and will be replaced", None),
        ({}, None, "", None),  # never seen running: nothing to compare with
    ],
)  # fmt: skip
def test_check_chief(
    status: dict[str, Any],
    chief: dict[str, Any] | None,
    why: str,
    remembered: dict[str, Any] | None,
) -> None:
    pods = [p for p in pods_of(JOB) if p.replica_type != naming.CHIEF]
    if chief is not None:
        pods.append(replace(pods_of(JOB)[1], **chief))
    ctx = context(JOB, pods, status)
    assert check_chief(ctx) is False
    assert ctx.status.get("chief") == remembered
    assert ctx.status.get("lastCleanup", {}).get("reason", "") == why
    assert ctx.status.get("chiefRestarts", 0) == (1 if why else 0)


@pytest.mark.parametrize(
    ("policy", "ended", "deleted", "events"),
    [
        ("ResetSyncState", False, [],
         [naming.REASON_CHIEF_RESTARTED, naming.REASON_CHIEF_CLEANUP]),
        ("RestartJob", False, ["j-worker-0", "j-worker-1", "j-ps-0"],
         [naming.REASON_CHIEF_RESTARTED, naming.REASON_JOB_RESTART]),
        ("Fail", True, ["j-ps-0", "j-worker-0", "j-worker-1"],  # cleanPodPolicy Running
         [naming.REASON_CHIEF_RESTARTED, naming.REASON_CHIEF_RESTARTED,
          naming.REASON_CLEANED_UP]),
    ],
)  # fmt: skip
def test_chief_restarted(policy: str, ended: bool, deleted: list[str], events: list[str]) -> None:
    job = planner_job(2, chiefRestartPolicy=policy)
    pods = [p for p in pods_of(job) if p.replica_type != naming.CHIEF]
    ctx = context(job, pods, {"chiefRestarts": 2})
    chief_restarted(ctx, "why")
    assert ctx.finished() is ended
    assert ctx.status["chiefRestarts"] == 3
    assert ctx.status["lastCleanup"]["policy"] == policy
    assert [a.name for a in ctx.actions if isinstance(a, DeletePod)] == deleted
    assert reasons(ctx) == events
    assert CountMetric(CHIEF_CLEANUPS) in ctx.actions
    restart_job = policy == "RestartJob"
    assert (CountMetric(JOB_RESTARTS) in ctx.actions) is restart_job
    assert (ctx.status.get("restartJob") == {"round": 3, "since": ctx.timestamp}) is restart_job
    if restart_job:
        assert condition(ctx, "Restarting") == ("True", naming.REASON_JOB_RESTART)
