"""plan_job's pipeline: the steps in order, and the step that ends a pass (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from syncreplicas_operator.core.plan import pipeline
from syncreplicas_operator.core.plan.context import Observed, PlanContext
from syncreplicas_operator.core.plan.pipeline import Step

from tests.support.jobs import planner_job
from tests.support.plans import T0, pods_of

ALL_STEPS = [
    "replace_lost",
    "force_delete_stuck",
    "admit",
    "plan_finished",
    "plan_suspended",
    "start",
    "check_deadline",
    "check_gang_scheduler",
    "publish_addresses",
    "handle_exits",
    "check_chief",
    "plan_resize",
    "reconcile_children",
    "keep_spares",
    "report_progress",
    "report_recovery",
    "report_straggler",
    "report_gated",
]
FINISHED = {
    "conditions": [{"type": "Failed", "status": "True", "reason": "r", "message": "",
                    "lastTransitionTime": "t"}],
}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "status", "changes", "last"),
    [
        ({}, {}, {}, "report_gated"),
        ({}, FINISHED, {}, "plan_finished"),
        ({"runPolicy": {"suspend": True}}, {}, {}, "plan_suspended"),
        ({"runPolicy": {"activeDeadlineSeconds": 1}}, {"startTime": "2025-12-31T00:00:00Z"},
         {}, "check_deadline"),
        ({"runPolicy": {"schedulingPolicy": {"gangScheduler": "Volcano"}}}, {}, {},
         "check_gang_scheduler"),
        ({}, {}, {"phase": "Failed", "exit_code": 64}, "handle_exits"),  # a PS fails the job
        ({"chiefRestartPolicy": "Fail"}, {"chief": {"uid": "before"}}, {}, "check_chief"),
    ],
)  # fmt: skip
def test_plan_job_runs_the_steps_in_order_until_one_ends_the_pass(
    monkeypatch: pytest.MonkeyPatch,
    spec: dict[str, Any],
    status: dict[str, Any],
    changes: dict[str, Any],
    last: str,
) -> None:
    ran: list[str] = []

    def spy(step: Step) -> Step:
        def run(ctx: PlanContext) -> bool:
            ran.append(step.__name__)
            return step(ctx)

        return run

    monkeypatch.setattr(pipeline, "STEPS", tuple(spy(s) for s in pipeline.STEPS))
    job = planner_job(2, **{"runPolicy": {"restartPolicy": "Never"}, **spec})
    pods = pods_of(job)
    pods[0] = replace(pods[0], **changes)  # the PS
    # The PodGroup API is not served: only a job that asks for a gang scheduler minds.
    observed = Observed(tuple(pods), pod_group_api=False)
    pipeline.plan_job(job, observed, status, T0)
    assert ran == ALL_STEPS[: ALL_STEPS.index(last) + 1]
