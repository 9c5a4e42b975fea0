"""Real training runs: PS, chief and workers as separate processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from syncreplicas_runtime.models import linear

from tests.runtime.rtutil import StepDelay, linear_job, logged_steps, runtime_env
from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

pytestmark = pytest.mark.slow
ALL_OK = {("ps", 0): 0, ("chief", 0): 0, ("worker", 0): 0}


def reference_sgd(seed: int, replicas: int, steps: int, batch: int, dim: int, lr: float,
                  noise: float = 0.01) -> tuple[np.ndarray, float, list[float]]:
    """Single-process SGD on the concatenated batches of every replica, step by step."""
    w = np.zeros((dim, 1), np.float64)
    b = 0.0
    losses = []
    for step in range(steps):
        xs, ys = zip(*(linear.batch(seed, r, step, batch, dim, noise) for r in range(replicas)),
                     strict=True)
        x, y = np.concatenate(xs).astype(np.float64), np.concatenate(ys).astype(np.float64)
        err = x @ w + b - y
        losses.append(float(np.mean(err**2)))
        w -= lr * 2 * x.T @ err / len(x)
        b -= lr * 2 * float(np.mean(err))
    return w, b, losses


def assert_plain_sgd(ckpt: Path, steps: int, lr: float) -> None:
    """The checkpoint in ``ckpt`` is at global step ``steps`` with plain SGD's weights: with
    tests/runtime/samebatch.py (one batch per step for every replica), every step was
    applied exactly once, whatever restores and restarts happened on the way."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w_ref, b_ref, _ = reference_sgd(0, 1, steps, 8, 4, lr)
    np.testing.assert_allclose(reader.get_tensor("linear/w"), w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)


def test_linear_reaches_max_steps_matches_single_process_and_everyone_exits_zero(
        tmp_path: Path) -> None:
    steps, lr = 30, 0.05
    ckpt = tmp_path / "ckpt"
    job = linear_job(training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=10)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env()) as cluster:
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
    assert codes == ALL_OK, logs
    chief = cluster.log("chief", 0)
    assert f"finished at global step {steps}" in chief, logs
    assert "the chief reported training finished" in cluster.log("ps", 0)
    # Packing is on (the default): w and b are one PS variable.
    assert "packing: 2 trainable variables in 1 packed PS variable (model on 1 of 1 PS)" in chief
    # Loss falls (periodic log lines carry the loss of the chief's batch).
    losses = [loss for _, loss in logged_steps(chief)]
    w_ref, b_ref, ref_losses = reference_sgd(0, 2, steps, 8, 4, lr)
    assert len(losses) == 3 and losses[-1] < ref_losses[0] / 10, chief

    # Equivalence: R = replicas, plain SGD, no extra tokens -> same weights as one process.
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w = reader.get_tensor("linear/w")
    b = float(reader.get_tensor("linear/b"))
    np.testing.assert_allclose(w, w_ref, rtol=1e-4, atol=1e-5)
    assert b == pytest.approx(b_ref, rel=1e-4, abs=1e-5)


def test_sparse_tf_config_trains_exactly_like_the_full_one(tmp_path: Path) -> None:
    """Chief and workers told only the PS, the chief and themselves: same weights."""
    steps, lr = 12, 0.05
    ckpt = tmp_path / "ckpt"
    # packMinBytesPerPS 0: the model spread over both PS, so every replica needs both.
    job = linear_job(replicasToAggregate=3, training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__logEverySteps=100,
                     training__packMinBytesPerPS=0)
    with start_cluster(job, workers=2, ps=2, workdir=tmp_path, env=runtime_env(),
                       sparse=True) as cluster:
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
    assert set(codes.values()) == {0} and len(codes) == 5, logs
    told = {(r.role, r.index): json.loads(r.env["TF_CONFIG"])["cluster"] for r in cluster.replicas}
    assert told["chief", 0]["worker"] == {} and len(told["worker", 1]["worker"]) == 1
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    w_ref, b_ref, _ = reference_sgd(0, 3, steps, 8, 4, lr)
    np.testing.assert_allclose(reader.get_tensor("linear/w"), w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)


def test_straggler_with_backup_does_not_slow_training(tmp_path: Path) -> None:
    steps = 120
    job = linear_job(replicasToAggregate=2, training__maxSteps=steps, training__logEverySteps=40)
    slow = {("worker", 1): {"SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "150"}}
    last: dict[tuple[str, int], str] = {}
    with start_cluster(job, workers=2, ps=1, workdir=tmp_path, env=runtime_env(),
                       extra_env_per_replica=slow) as cluster:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and any(
                c is None for k, c in cluster.poll().items() if k[0] != "ps"):
            for key in (("chief", 0), ("worker", 1), ("ps", 0)):
                text = cluster.try_metrics_text(*key)
                if text:
                    last[key] = text
            time.sleep(0.3)
        codes = cluster.wait(timeout=60)
        logs = cluster.logs()
    assert codes == {**ALL_OK, ("worker", 1): 0}, logs
    chief, straggler, ps0 = last[("chief", 0)], last[("worker", 1)], last[("ps", 0)]
    # PS 0 (its sync loop) samples the token queues: never more than one step's tokens (3).
    depth = metric_value(ps0, "syncreplicas_token_queue_depth")
    assert depth is not None and 0 <= depth <= 3
    assert metric_value(ps0, "syncreplicas_accumulator_pending_gradients") is not None
    # The fast replicas set the pace; the straggler ran far fewer steps ...
    chief_steps = metric_value(chief, "syncreplicas_local_step") or 0
    slow_steps = metric_value(straggler, "syncreplicas_local_step") or 0
    assert chief_steps >= 0.6 * steps, logs
    assert slow_steps < 0.5 * chief_steps, (slow_steps, chief_steps)
    # ... and its gradients arrived late: dropped as stale, visible in the histogram.
    dropped = metric_value(straggler, "syncreplicas_stale_gradients_dropped_total") or 0
    pushed = metric_value(straggler, "syncreplicas_gradients_pushed_total") or 0
    fresh = metric_value(straggler, "syncreplicas_gradient_staleness_steps_bucket", 'le="0.0"')
    count = metric_value(straggler, "syncreplicas_gradient_staleness_steps_count")
    assert dropped >= 1 and pushed >= dropped
    assert fresh is not None and count is not None and count - fresh == dropped


def test_no_backup_no_straggler_counts_no_stale_gradient(tmp_path: Path) -> None:
    # R = replicas: every update waits for every replica, so no gradient can be stale and
    # the dropped counter must stay at 0, also for the replica whose push completes a step.
    steps = 150
    job = linear_job(replicasToAggregate=2, training__maxSteps=steps, training__logEverySteps=50)
    last: dict[tuple[str, int], str] = {}
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env()) as cluster:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and any(
                c is None for k, c in cluster.poll().items() if k[0] != "ps"):
            for key in (("chief", 0), ("worker", 0)):
                text = cluster.try_metrics_text(*key)
                if text:
                    last[key] = text
            time.sleep(0.2)
        codes = cluster.wait(timeout=60)
        logs = cluster.logs()
    assert codes == ALL_OK, logs
    for key, text in last.items():
        pushed = metric_value(text, "syncreplicas_gradients_pushed_total") or 0
        assert pushed >= 10, (key, pushed)
        assert metric_value(text, "syncreplicas_stale_gradients_dropped_total") == 0, key
        fresh = metric_value(text, "syncreplicas_gradient_staleness_steps_bucket", 'le="0.0"')
        assert fresh == metric_value(text, "syncreplicas_gradient_staleness_steps_count"), key


def test_many_variables_packed_over_two_ps_match_single_process(tmp_path: Path) -> None:
    """Packing on (the default), 24 variables spread over 2 PS (packMinBytesPerPS 0: this
    model is far below the default share): still large-batch SGD."""
    steps, lr, dim, variables = 12, 0.05, 32, 24
    ckpt = tmp_path / "ckpt"
    job = linear_job(replicasToAggregate=3, training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__logEverySteps=100,
                     training__packMinBytesPerPS=0,
                     model__args={"dim": dim, "variables": variables})
    with start_cluster(job, workers=2, ps=2, workdir=tmp_path, env=runtime_env()) as cluster:
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
    assert set(codes.values()) == {0} and len(codes) == 5, logs
    chief = cluster.log("chief", 0)
    assert (f"packing: {variables} trainable variables in 2 packed PS variables (model on 2 of 2 "
            "PS)\n") in chief, chief
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    names = reader.get_variable_to_shape_map()
    rows = linear.split_rows(dim, variables - 1)
    assert [names[f"linear/w_{i}"] for i in range(variables - 1)] == [[n, 1] for n in rows]
    w = np.concatenate([reader.get_tensor(f"linear/w_{i}") for i in range(variables - 1)])
    w_ref, b_ref, _ = reference_sgd(0, 3, steps, 8, dim, lr)
    np.testing.assert_allclose(w, w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)


def wait_for_chief_step(cluster: LocalCluster, step: int) -> None:
    """Until the chief's metrics say the global step reached ``step`` (240 s at most)."""
    deadline = time.monotonic() + 240
    while (metric_value(cluster.try_metrics_text("chief", 0) or "",
                        "syncreplicas_global_step") or 0) < step:
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.1)


def test_a_restarted_replica_does_not_push_the_step_it_pushed_before_dying(
        tmp_path: Path) -> None:
    """Worker 0 pushes its gradient and is SIGKILLed while it waits for the token; the
    update still needs the chief's gradient (its step is held back). The restarted worker
    joins the running epoch: its earlier gradient counts, so it takes the token instead of
    pushing that step again (which would count it twice in one update)."""
    steps, lr = 40, 0.05
    ckpt = tmp_path / "ckpt"
    job = linear_job(training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__logEverySteps=100)
    chief_delay = StepDelay(tmp_path / "chief-delay", 200)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env(),
                       extra_env_per_replica={("chief", 0): chief_delay.env}) as cluster:
        wait_for_chief_step(cluster, 10)
        chief_delay.set(600_000)  # the chief's next step waits (until set back below)
        time.sleep(2.0)  # worker 0 pushed its next step and waits for the chief's gradient
        cluster.restart("worker", 0)
        deadline = time.monotonic() + 240
        while cluster.log("worker", 0).count("training in sync epoch") < 2:
            assert time.monotonic() < deadline, cluster.logs()
            time.sleep(0.2)
        time.sleep(2.0)  # its first step (a push, or only the token) is under way
        chief_delay.set(0)
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
    assert codes == ALL_OK, logs
    assert "was pushed before its restart; waiting for that update" in cluster.log("worker", 0)
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w_ref, b_ref, _ = reference_sgd(0, 2, steps, 8, 4, lr)
    np.testing.assert_allclose(reader.get_tensor("linear/w"), w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)


def test_a_replica_killed_half_way_through_its_push_is_counted_once(tmp_path: Path) -> None:
    """The chief's push reaches the accumulator on PS 0 and not the one on PS 1 (PS 1 is
    SIGSTOPped for half a second), and the chief is SIGKILLed in that moment. The restarted
    chief pushes that step again: PS 1's accumulator takes it and PS 0's drops it (it holds
    the dead process's), so every update averages one gradient per replica and the weights
    equal large-batch SGD. Without the drop, PS 0's update averages three gradients."""
    steps, lr = 40, 0.05
    ckpt = tmp_path / "ckpt"
    # linear's 5 parameters as 5 variables, packed into one PS variable on each PS.
    job = linear_job(parameterServers=2, training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__logEverySteps=100,
                     training__packMinBytesPerPS=0,
                     model__args={"dim": 4, "variables": 5})
    chief_delay = StepDelay(tmp_path / "chief-delay", 100)
    with start_cluster(job, workers=1, ps=2, workdir=tmp_path, env=runtime_env(),
                       extra_env_per_replica={("chief", 0): chief_delay.env}) as cluster:
        wait_for_chief_step(cluster, 10)
        chief_delay.set(600_000)  # the chief's next step waits before it runs
        time.sleep(1.0)  # worker 0 pushed that step (to both PS) and waits for its token
        ps1 = cluster.replica("ps", 1).pid
        assert ps1 is not None
        os.kill(ps1, signal.SIGSTOP)
        try:
            chief_delay.set(0)  # the chief's push: PS 0's accumulator takes it, PS 1 is stopped
            time.sleep(0.4)
            cluster.kill("chief", 0)
            cluster.wait_one("chief", 0, timeout=10.0)
        finally:
            os.kill(ps1, signal.SIGCONT)
        cluster.restart("chief", 0)
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
    assert codes == {("ps", 0): 0, ("ps", 1): 0, ("chief", 0): 0, ("worker", 0): 0}, logs
    chief_log = cluster.log("chief", 0)
    assert "in 2 packed PS variables (model on 2 of 2 PS)" in chief_log, chief_log
    # One sync epoch throughout: the update with the half push was not undone by a restore.
    assert cluster.log("ps", 0).count("gate open: sync epoch") == 1, logs
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w_ref, b_ref, _ = reference_sgd(0, 2, steps, 8, 4, lr)
    w = np.concatenate([reader.get_tensor(f"linear/w_{i}") for i in range(4)])
    np.testing.assert_allclose(w, w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)
