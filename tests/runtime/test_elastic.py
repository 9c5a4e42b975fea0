"""Elastic R: a lost replica lowers R to the live replicas (never below
minReplicasToAggregate) instead of stalling the job; R comes back when it returns.

Real processes: PS, chief and two workers with R = replicas = 3 and
minReplicasToAggregate = 2. Worker 1 is killed (SIGKILL) and left dead: the global step
keeps advancing and PS 0's gauges (the sync loop runs there) say R = 2, 2 live replicas.
Worker 1 is then started again: R and the live count go back to 3, and the job finishes
with every process exiting 0.
The rules themselves are checked as tables.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from syncreplicas_runtime.ps.coordinator import (
    SILENCE_FLOOR_SECONDS,
    SILENCE_UPDATES,
    effective_r,
    live_replicas,
    silence_limit,
)

from tests.runtime.rtutil import StepDelay, linear_job, runtime_env
from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

HANG_GUARD = 240.0


@pytest.mark.parametrize(
    ("beats", "now", "last_update", "silence", "live"),
    [
        ([9.0, 9.5, 1.0], 10.0, 5.0, 2.0, [True, True, False]),  # worker 2 silent 9 s
        ([4.0, 9.5, 1.0], 10.0, 5.0, 2.0, [False, True, False]),
        ([4.0, 4.5, 4.9], 10.0, 4.0, 2.0, [True, True, True]),  # all wait on the update
        ([9.0, 9.0, 8.5], 10.0, 9.5, 2.0, [True, True, True]),  # all within the limit
    ],
)
def test_live_replicas(beats: list[float], now: float, last_update: float, silence: float,
                       live: list[bool]) -> None:
    assert live_replicas(beats, now, last_update, silence) == live


@pytest.mark.parametrize(
    ("live", "shares", "minimum", "r", "expected"),
    [
        ([True, True, True], [1, 1, 1], 3, 3, 3),  # default min = R: today's behaviour
        ([True, True, False], [1, 1, 1], 3, 3, 3),
        ([True, True, False], [1, 1, 1], 2, 3, 2),
        ([True, False, False], [1, 1, 1], 2, 3, 2),  # never below min
        ([True, True, False], [1, 1, 1], 1, 2, 2),  # a lost backup changes nothing
        ([True, True], [2, 2], 1, 4, 4),  # R above the replicas: shares count
        ([True, False], [2, 2], 1, 4, 2),
    ],
)
def test_effective_r(live: list[bool], shares: list[int], minimum: int, r: int,
                     expected: int) -> None:
    assert effective_r(live, shares, minimum, r) == expected


def test_silence_limit_follows_slow_updates() -> None:
    assert silence_limit([]) == SILENCE_FLOOR_SECONDS
    assert silence_limit([0.01] * 10) == SILENCE_FLOOR_SECONDS
    # 1 s updates: many of them, and one long stall does not move the median.
    assert silence_limit([1.0] * 10 + [100.0]) == pytest.approx(SILENCE_UPDATES * 1.0)


def scrape(cluster: LocalCluster) -> tuple[float | None, float | None, float | None]:
    """(global step from the chief, R and live replicas from PS 0), Nones when unreadable."""
    chief, ps0 = cluster.try_metrics_text("chief", 0), cluster.try_metrics_text("ps", 0)
    if not chief or not ps0:
        return None, None, None
    return (metric_value(chief, "syncreplicas_global_step"),
            metric_value(ps0, "syncreplicas_replicas_to_aggregate"),
            metric_value(ps0, "syncreplicas_live_replicas"))


def wait_for(cluster: LocalCluster, what: str, check: object) -> tuple[float, float, float]:
    deadline = time.monotonic() + HANG_GUARD
    while True:
        step, r, live = scrape(cluster)
        if step is not None and r is not None and live is not None and \
                check(step, r, live):  # type: ignore[operator]
            return step, r, live
        assert time.monotonic() < deadline, f"waiting for {what}\n{cluster.logs()}"
        assert cluster.poll()[("chief", 0)] is None, cluster.logs()
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_worker_lowers_r_and_training_goes_on(tmp_path: Path) -> None:
    # 100 ms steps until R is lowered, 1 s steps while the restarted worker imports
    # TensorFlow (5-60 s), then full speed to maxSteps.
    max_steps = 400
    job = linear_job(replicasToAggregate=3, minReplicasToAggregate=2,
                     training__maxSteps=max_steps, training__logEverySteps=100)
    delay = StepDelay(tmp_path / "delay", 100)
    env = {**runtime_env(), **delay.env}
    with start_cluster(job, workers=2, ps=1, workdir=tmp_path, env=env) as cluster:
        wait_for(cluster, "training with R = 3", lambda s, r, n: s >= 20 and r == 3 and n == 3)
        cluster.kill("worker", 1)
        killed_at = time.monotonic()
        assert cluster.wait_one("worker", 1, timeout=30) is not None
        step, _, _ = wait_for(cluster, "R lowered to 2", lambda s, r, n: r == 2 and n == 2)
        lowered_after = time.monotonic() - killed_at
        # Training goes on without worker 1.
        wait_for(cluster, "steps without worker 1", lambda s, r, n: s >= step + 30 and r == 2)
        progressed_at = time.monotonic() - killed_at
        delay.set(1000)
        cluster.restart("worker", 1)
        wait_for(cluster, "R back to 3", lambda s, r, n: r == 3 and n == 3)
        delay.set(0)
        codes = cluster.wait(timeout=HANG_GUARD * 2)
        logs = cluster.logs()
    assert set(codes.values()) == {0}, logs
    assert f"finished at global step {max_steps}" in cluster.log("chief", 0), logs
    ps0 = cluster.log("ps", 0)
    assert "each update now aggregates 2 gradients" in ps0, ps0
    assert "each update now aggregates 3 gradients" in ps0, ps0
    print(f"R lowered {lowered_after:.1f}s after the kill; 30 more steps "
          f"{progressed_at:.1f}s after it")
