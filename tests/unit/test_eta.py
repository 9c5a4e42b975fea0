"""Progress, step rate and estimated completion in the job's status (core/eta.py, pure, and
the planner's track_step that writes them)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from syncreplicas_operator.core import eta
from syncreplicas_operator.core.plan.progress import track_step
from syncreplicas_operator.core.timefmt import format_time

from tests.support.jobs import planner_job
from tests.support.plans import T0, context, pods_of

JOB = planner_job(2)  # maxSteps: the spec's default, 1000


@pytest.mark.parametrize(("previous", "steps", "seconds", "rate"), [
    (None, 50, 10.0, 5.0),       # the first sample is the rate
    (5.0, 30, 10.0, 4.0),        # then half the newest, half the average
    (5.0, 0, 10.0, 5.0),         # not moved: unchanged
    (5.0, -40, 10.0, 5.0),       # rolled back: no rate
    (None, 10, 0.0, None),       # no time passed
])  # fmt: skip
def test_step_rate(previous: float | None, steps: int, seconds: float,
                   rate: float | None) -> None:
    assert eta.step_rate(previous, steps, seconds) == rate


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (44.6, "45s"), (200, "3m20s"), (7500, "2h5m"), (3 * 86400 + 4 * 3600, "3d4h"),
])  # fmt: skip
def test_duration_reads_like_kubectl_ages(seconds: float, text: str) -> None:
    assert eta.duration(seconds) == text


def test_percent_and_remaining() -> None:
    assert [eta.percent(s, 1000) for s in (0, 9, 420, 1000, 1200)] == [
        "0%", "0%", "42%", "100%", "100%"]
    assert eta.remaining_seconds(400, 1000, 6.0) == 100.0
    assert eta.remaining_seconds(400, 1000, None) is None
    assert eta.remaining_seconds(1000, 1000, None) == 0.0


def test_the_status_says_progress_rate_and_completion_as_the_step_moves() -> None:
    # First read of a moving step: progress, but no rate yet (one point).
    ctx = context(JOB, pods_of(JOB), {}, global_step=100)
    track_step(ctx, True)
    assert ctx.status["progress"] == "10%" and "eta" not in ctx.status
    # 10 s later, 100 steps more: 10 steps/s, 800 steps left, 80 s.
    later = T0 + timedelta(seconds=10)
    ctx = context(JOB, pods_of(JOB), ctx.status, now=later, global_step=200)
    track_step(ctx, True)
    assert ctx.status["stepsPerSecond"] == 10.0
    assert (ctx.status["progress"], ctx.status["eta"]) == ("20%", "1m20s")
    assert ctx.status["estimatedCompletionTime"] == format_time(later + timedelta(seconds=80))
    # Slower now (20 steps in 10 s): the average halves the difference, 6 steps/s.
    last = later + timedelta(seconds=10)
    ctx = context(JOB, pods_of(JOB), ctx.status, now=last, global_step=220)
    track_step(ctx, True)
    assert ctx.status["stepsPerSecond"] == 6.0 and ctx.status["eta"] == "2m10s"
    # maxSteps reached: 100%, nothing left to estimate.
    ctx = context(JOB, pods_of(JOB), ctx.status, now=last + timedelta(seconds=60),
                  global_step=1000)
    track_step(ctx, True)
    assert ctx.status["progress"] == "100%"
    assert "eta" not in ctx.status and "estimatedCompletionTime" not in ctx.status


def test_the_live_views_summary() -> None:
    assert eta.summary(None, 1000, 5.0) == ""
    assert eta.summary(250, 1000, None) == "25%"
    assert eta.summary(250.0, 1000, 5.0) == "25%, ETA 2m30s"
    assert eta.summary(1000, 1000, 5.0) == "100%"
