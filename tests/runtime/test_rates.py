"""Learning-rate schedules, the optimizers' settings and gradient clipping
(graph/rates.py): the graph's rate is the API's ``rate_at`` at every step, and a job with a
schedule and clipping still equals large-batch SGD with the same schedule, each replica's
gradient clipped before it is averaged."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from syncreplicas_api.schedules import LearningRateSchedule, rate_at
from syncreplicas_api.types import TrainingSpec
from syncreplicas_runtime.foundation.config import STEP_DELAY_ENV
from syncreplicas_runtime.models import linear

from tests.runtime.rtutil import linear_job, logged_rates, runtime_env
from tests.support.tfcluster import metric_value, start_cluster

SCHEDULES = [
    pytest.param(None, id="constant"),
    pytest.param({"warmupSteps": 7}, id="warm-up"),
    pytest.param({"decay": "Exponential", "decaySteps": 10, "decayRate": 0.5}, id="exponential"),
    pytest.param({"decay": "Exponential", "decaySteps": 10, "decayRate": 0.5, "staircase": True,
                  "warmupSteps": 3}, id="exponential-staircase-warm-up"),
    pytest.param({"decay": "Cosine", "decaySteps": 25, "alpha": 0.1, "warmupSteps": 5},
                 id="cosine"),
    pytest.param({"decay": "Piecewise", "steps": [{"step": 30, "rate": 0.001},
                                                  {"step": 10, "rate": 0.01}]}, id="piecewise"),
]  # fmt: skip


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_graphs_rate_is_the_apis_at_every_step(schedule: dict[str, Any] | None) -> None:
    import tensorflow as tf
    from syncreplicas_runtime.graph.rates import learning_rate

    parsed = LearningRateSchedule.model_validate(schedule) if schedule else None
    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.placeholder(tf.int64, [])
        rate = tf.convert_to_tensor(learning_rate(0.1, parsed, step), tf.float32)
        with tf.compat.v1.Session() as sess:
            got = [float(sess.run(rate, {step: s})) for s in range(60)]
    want = [rate_at(0.1, parsed, s) for s in range(60)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert max(got) <= 0.1 * (1 + 1e-6) and min(got) > 0


def test_the_rates_are_what_the_readme_says() -> None:
    cosine = LearningRateSchedule.model_validate({"decay": "Cosine", "decaySteps": 10,
                                                  "alpha": 0.2, "warmupSteps": 4})
    assert [rate_at(1.0, cosine, s) for s in (0, 3, 4, 9, 14, 99)] == pytest.approx(
        [0.25, 1.0, 1.0, 0.2 + 0.8 * 0.5 * (1 + np.cos(np.pi * 0.5)), 0.2, 0.2])
    stairs = LearningRateSchedule.model_validate({"decay": "Exponential", "decaySteps": 10,
                                                  "decayRate": 0.5, "staircase": True})
    assert [rate_at(1.0, stairs, s) for s in (0, 9, 10, 25)] == [1.0, 1.0, 0.5, 0.25]
    pieces = LearningRateSchedule.model_validate(
        {"decay": "Piecewise", "warmupSteps": 2,
         "steps": [{"step": 5, "rate": 0.5}, {"step": 3, "rate": 0.7}]})
    assert [rate_at(1.0, pieces, s) for s in (0, 1, 2, 3, 4, 5, 50)] == [
        0.5, 1.0, 1.0, 0.7, 0.7, 0.5, 0.5]


@pytest.mark.parametrize(("training", "attributes"), [
    ({}, {"GradientDescentOptimizer": {}}),
    ({"optimizer": "momentum"}, {"MomentumOptimizer": {"_momentum": 0.9,
                                                       "_use_nesterov": False}}),
    ({"optimizer": "momentum", "momentum": 0.5, "nesterov": True},
     {"MomentumOptimizer": {"_momentum": 0.5, "_use_nesterov": True}}),
    ({"optimizer": "adam"}, {"AdamOptimizer": {"_beta1": 0.9, "_beta2": 0.999, "_epsilon": 1e-8}}),
    ({"optimizer": "adam", "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-4},
     {"AdamOptimizer": {"_beta1": 0.8, "_beta2": 0.99, "_epsilon": 1e-4}}),
    ({"optimizer": "rmsprop"}, {"RMSPropOptimizer": {"_momentum": 0.0, "_epsilon": 1e-10}}),
    ({"optimizer": "rmsprop", "momentum": 0.3, "epsilon": 1e-3},
     {"RMSPropOptimizer": {"_momentum": 0.3, "_epsilon": 1e-3}}),
    ({"optimizer": "adagrad"}, {"AdagradOptimizer": {}}),
])  # fmt: skip
def test_the_optimizer_gets_the_jobs_settings_or_their_defaults(
        training: dict[str, Any], attributes: dict[str, dict[str, Any]]) -> None:
    from syncreplicas_runtime.graph.rates import make_optimizer

    opt = make_optimizer(TrainingSpec.model_validate(training), 0.1)
    ((kind, values),) = attributes.items()
    assert type(opt).__name__ == kind
    assert {name: getattr(opt, name) for name in values} == values


def reference(steps: int, replicas: int, batch: int, dim: int, lr: Any,
              clip: float | None) -> tuple[np.ndarray, float]:
    """Single-process SGD: each replica's mean-squared-error gradient on its own batch,
    clipped to global norm ``clip`` over (w, b), averaged, times ``lr(step)``."""
    w, b = np.zeros((dim, 1), np.float64), 0.0
    for step in range(steps):
        grads = []
        for r in range(replicas):
            x, y = (a.astype(np.float64) for a in linear.batch(0, r, step, batch, dim, 0.01))
            err = x @ w + b - y
            gw, gb = 2 * x.T @ err / len(x), 2 * float(np.mean(err))
            norm = float(np.sqrt(np.sum(gw**2) + gb**2))
            if clip is not None and norm > clip:
                gw, gb = gw * clip / norm, gb * clip / norm
            grads.append((gw, gb))
        w -= lr(step) * sum(g for g, _ in grads) / replicas
        b -= lr(step) * sum(g for _, g in grads) / replicas
    return w, b


@pytest.mark.slow
def test_a_job_with_a_schedule_and_clipping_equals_large_batch_sgd_with_them(
        tmp_path: Path) -> None:
    """R = replicas, plain SGD: the weights after 30 steps are those of one process whose
    every step uses the schedule's rate of that step and clips each replica's gradient.
    The clip (0.5) is below the first steps' norms, so clipping changes the result (checked
    against the reference without it), and the warm-up and the decay both fall in the run."""
    steps, lr, clip = 30, 0.2, 0.5
    schedule = {"decay": "Exponential", "decaySteps": 10, "decayRate": 0.5, "warmupSteps": 5}
    ckpt = tmp_path / "ckpt"
    job = linear_job(training__maxSteps=steps, training__learningRate=lr,
                     training__learningRateSchedule=schedule, training__clipGradientNorm=clip,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=10,
                     training__logEverySteps=4)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env()) as cluster:
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
        chief = cluster.log("chief", 0)
    assert codes == {("ps", 0): 0, ("chief", 0): 0, ("worker", 0): 0}, logs

    import tensorflow as tf

    parsed = LearningRateSchedule.model_validate(schedule)
    # The rate the job reports at every logged step is the closed form's at that step.
    logged = logged_rates(chief)
    assert len(logged) >= 5, chief
    for step, rate in logged:
        assert rate == pytest.approx(rate_at(lr, parsed, step), rel=1e-5), (step, chief)
    w_ref, b_ref = reference(steps, 2, 8, 4, lambda s: rate_at(lr, parsed, s), clip)
    unclipped, _ = reference(steps, 2, 8, 4, lambda s: rate_at(lr, parsed, s), None)
    constant, _ = reference(steps, 2, 8, 4, lambda s: lr, clip)
    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w, b = reader.get_tensor("linear/w"), float(reader.get_tensor("linear/b"))
    np.testing.assert_allclose(w, w_ref, rtol=1e-4, atol=1e-5)
    assert b == pytest.approx(b_ref, rel=1e-4, abs=1e-5)
    assert not np.allclose(w_ref, unclipped, rtol=1e-3) and not np.allclose(w_ref, constant,
                                                                             rtol=1e-3)


@pytest.mark.slow
def test_the_models_own_rate_is_used_and_reported(tmp_path: Path) -> None:
    """A model that returns ``learning_rate`` trains with it (the metric shows its value at
    the last step); with a learningRateSchedule as well, the job fails naming both."""
    steps = 12
    job = linear_job(model__entrypoint="tests.runtime.ratemodels:linear_with_own_rate",
                     training__maxSteps=steps, training__checkpointDir="")
    slow = {**runtime_env(), STEP_DELAY_ENV: "100"}  # long enough to be scraped
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path / "own", env=slow) as cluster:
        rates = []
        while cluster.poll()[("chief", 0)] is None:
            value = metric_value(cluster.try_metrics_text("chief") or "",
                                 "syncreplicas_learning_rate")
            if value is not None:
                rates.append(value)
            time.sleep(0.1)
        codes = cluster.wait(timeout=240)
        logs = cluster.logs()
    assert codes == {("ps", 0): 0, ("chief", 0): 0, ("worker", 0): 0}, logs
    assert rates and all(r in [pytest.approx(0.01 * (s + 1)) for s in range(steps + 1)]
                         for r in rates), rates

    both = linear_job(model__entrypoint="tests.runtime.ratemodels:linear_with_own_rate",
                      training__maxSteps=steps, training__checkpointDir="",
                      training__learningRateSchedule={"warmupSteps": 2})
    with start_cluster(both, workers=1, ps=1, workdir=tmp_path / "both",
                       env=runtime_env()) as cluster:
        cluster.wait_one("chief", 0, timeout=240)
        chief = cluster.log("chief", 0)
    assert "returns a learning_rate and the job sets training.learningRateSchedule" in chief
