"""Elastic workers on real processes: a job scaled 2 -> 4 -> 1 workers while it trains.

PS, chief and workers as separate processes on 127.0.0.1, R = 2, minReplicasToAggregate 1,
elasticPolicy 1..4 (every PS is told 4 worker slots). Workers 2 and 3 are started while the
job runs (the chief is killed at the same moment and comes back: a resize during a chief
restart), then workers 3, 2 and 1 get SIGTERM, leave and exit 0. Every process exits 0, the
global step moves across both resizes, and the final weights equal plain SGD over maxSteps
batches (one batch per step for every replica: tests/runtime/samebatch.py says why that
check holds whatever the mix of gradients in each update).
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from tests.runtime.rtutil import StepDelay, linear_job, runtime_env
from tests.runtime.test_training import assert_plain_sgd
from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

pytestmark = pytest.mark.slow
HANG_GUARD = 300.0


def global_step(cluster: LocalCluster) -> float:
    text = cluster.try_metrics_text("chief", 0)
    value = metric_value(text, "syncreplicas_global_step") if text else None
    return value or 0.0


def local_steps(cluster: LocalCluster, index: int) -> float:
    text = cluster.try_metrics_text("worker", index)
    value = metric_value(text, "syncreplicas_local_step") if text else None
    return value or 0.0


def wait_until(cluster: LocalCluster, what: str, check: object) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waiting for {what}\n{cluster.logs()}"
        for key, code in cluster.poll().items():
            assert code is None or key[0] == "worker", f"{key} exited {code}\n{cluster.logs()}"
        time.sleep(0.1)


@pytest.mark.timeout(1200)
def test_workers_scaled_2_4_1_while_training_lose_no_step(tmp_path: Path) -> None:
    steps, lr = 400, 0.02
    ckpt = tmp_path / "ckpt"
    job = linear_job(replicasToAggregate=2, minReplicasToAggregate=1,
                     elasticPolicy={"minWorkers": 1, "maxWorkers": 4},
                     model__entrypoint="tests.runtime.samebatch:build",
                     training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=100,
                     training__logEverySteps=50)
    # Slow steps while processes import TensorFlow, so that resizes land mid-run.
    delay = StepDelay(tmp_path / "delay", 100)
    env = {**runtime_env(), **delay.env}
    with start_cluster(job, workers=2, ps=1, workdir=tmp_path, env=env) as cluster:
        wait_until(cluster, "training", lambda: global_step(cluster) >= 20)
        # Scale up to 4 while the chief is lost: workers 2 and 3 join the running job.
        cluster.kill("chief", 0)
        cluster.start("worker", 2)
        cluster.start("worker", 3)
        before_up = global_step(cluster)
        cluster.restart("chief", 0)
        wait_until(cluster, "the new workers training",
                   lambda: local_steps(cluster, 2) >= 5 and local_steps(cluster, 3) >= 5)
        after_up = global_step(cluster)
        wait_until(cluster, "the chief back", lambda: global_step(cluster) >= after_up + 10)
        # Scale down to 1: the highest workers leave at SIGTERM.
        left_at = global_step(cluster)
        for index in (3, 2, 1):
            cluster.kill("worker", index, signal.SIGTERM)
        for index in (3, 2, 1):
            assert cluster.wait_one("worker", index, timeout=60) == 0, cluster.logs()
        wait_until(cluster, "steps after the scale-down",
                   lambda: global_step(cluster) >= left_at + 20)
        delay.set(0)
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    assert set(codes) == {("ps", 0), ("chief", 0), *(("worker", i) for i in range(4))}, codes
    assert set(codes.values()) == {0}, logs
    assert after_up > before_up, logs
    assert f"finished at global step {steps}" in cluster.log("chief", 0), logs
    for index in (1, 2, 3):
        assert "left the job (after its step; SIGTERM: scaled down)" in \
            cluster.log("worker", index), logs
    assert f"finished at global step {steps}" in cluster.log("worker", 0), logs
    ps0 = cluster.log("ps", 0)
    joined = re.findall(r"members: (\d+) replicas", ps0)
    assert "5" in joined and joined[-1] == "2", ps0  # 2 -> 4 workers, then 1 (+ the chief)
    # R of each update: never above replicasToAggregate, never below 1; with one worker
    # left (2 replicas = R) it stays 2.
    rs = [int(r) for r in re.findall(r"each update now aggregates (\d+) gradients", ps0)]
    assert all(1 <= r <= 2 for r in rs), ps0

    assert_plain_sgd(ckpt, steps, lr)
