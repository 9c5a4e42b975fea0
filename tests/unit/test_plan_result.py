"""The pass's result: status counts and phase, the patch last, requeue (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import DeleteJob, DeletePod, EmitEvent, PatchStatus
from syncreplicas_operator.core.plan.result import build_plan, status_patch

from tests.support.jobs import planner_job
from tests.support.plans import context, pods_of

JOB = planner_job(2)


@pytest.mark.parametrize(
    ("actions", "requeue", "kinds", "requeue_after"),
    [
        ([], [], ["PatchStatus"], None),
        ([DeletePod("j-worker-0")], [30.0, 5.0], ["DeletePod", "PatchStatus"], 5.0),
        # The job is going: its status is not written.
        ([EmitEvent("Normal", "r", "m"), DeleteJob("r")], [], ["EmitEvent", "DeleteJob"], None),
    ],
)
def test_the_status_patch_comes_last_and_requeue_is_the_soonest(
    actions: list[Any], requeue: list[float], kinds: list[str], requeue_after: float | None
) -> None:
    ctx = context(JOB, pods_of(JOB))
    ctx.actions.extend(actions)
    ctx.requeue.extend(requeue)
    plan = build_plan(ctx)
    assert [type(a).__name__ for a in plan.actions] == kinds
    assert plan.requeue_after == requeue_after


def test_the_status_counts_the_live_pods_and_carried_restarts() -> None:
    pods = pods_of(JOB)
    pods[-1] = replace(pods[-1], deleting=True)
    ctx = context(JOB, pods, status={"recreations": {"worker": 2}})
    plan = build_plan(ctx)
    assert plan.status["ready"] == "3/4"
    assert plan.status["replicaStatuses"]["worker"]["restarts"] == 2
    assert plan.status["recreations"] == {"worker": 2}
    assert plan.status["phase"] == naming.PHASE_PENDING  # no condition yet
    assert plan.status["observedGeneration"] == 1
    assert set(plan.seen_pods) == {"j-ps-0", "j-chief-0", "j-worker-0"}  # not the one going


def test_an_unchanged_status_is_not_written() -> None:
    first = build_plan(context(JOB, pods_of(JOB)))
    again = build_plan(context(JOB, pods_of(JOB), status=first.status))
    assert isinstance(first.actions[-1], PatchStatus)
    assert again.actions == ()


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it to a custom resource."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1}, {"a": 2, "b": [1]}, {"a": 2, "b": [1]}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        # A new recovery record drops the old one's end: the keys go to null, not merged on.
        (
            {
                "lastRecovery": {
                    "replica": "chief-0",
                    "startedAt": "t1",
                    "recoveredAt": "t2",
                    "stepsLost": 0,
                }
            },
            {"lastRecovery": {"replica": "ps-0", "startedAt": "t3"}},
            {
                "lastRecovery": {
                    "replica": "ps-0",
                    "startedAt": "t3",
                    "recoveredAt": None,
                    "stepsLost": None,
                }
            },
        ),
        ({"x": {"y": {"z": 1, "w": 2}}}, {"x": {"y": {"z": 1}}}, {"x": {"y": {"w": None}}}),
        ({"x": [1, 2]}, {"x": [1]}, {"x": [1]}),
        ({"x": 1}, {"x": {"y": 1}}, {"x": {"y": 1}}),
        ({"x": {"y": 1}}, {"x": 3}, {"x": 3}),
    ],
)
def test_status_patch_is_a_merge_patch_that_the_api_server_applies_to_the_new_status(
    old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]
) -> None:
    assert status_patch(old, new) == patch
    assert merge(old, status_patch(old, new)) == new
