"""Series and totals of the run report, and the relabelling of the aggregated endpoint."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from syncreplicas_operator.core.metricstext import flatten, parse
from syncreplicas_operator.local.metrics_server import ReplicaCollector
from syncreplicas_operator.local.scrape import Sample
from syncreplicas_operator.local.series import (
    counter_total,
    eval_label,
    eval_series,
    mean_staleness,
    steps_per_second,
)
from syncreplicas_operator.local.summary import summarize

CHIEF_TEXT = """\
# HELP syncreplicas_global_step g
# TYPE syncreplicas_global_step gauge
syncreplicas_global_step 40.0
# HELP syncreplicas_stale_gradients_dropped_total d
# TYPE syncreplicas_stale_gradients_dropped_total counter
syncreplicas_stale_gradients_dropped_total 3.0
# HELP syncreplicas_gradient_staleness_steps s
# TYPE syncreplicas_gradient_staleness_steps histogram
syncreplicas_gradient_staleness_steps_bucket{le="0.0"} 1.0
syncreplicas_gradient_staleness_steps_bucket{le="+Inf"} 4.0
syncreplicas_gradient_staleness_steps_count 4.0
syncreplicas_gradient_staleness_steps_sum 6.0
# HELP syncreplicas_eval_metric e
# TYPE syncreplicas_eval_metric gauge
syncreplicas_eval_metric{name="accuracy"} 0.75
syncreplicas_eval_metric{name="loss"} 0.5
"""


def sample(replica: str, at: float, **values: float) -> Sample:
    return Sample(replica=replica, at=at, values=values)


def test_flatten_keeps_labelled_series_and_drops_buckets():
    values = flatten(parse(CHIEF_TEXT))
    assert values["syncreplicas_global_step"] == 40.0
    assert values["syncreplicas_gradient_staleness_steps_sum"] == 6.0
    assert values["syncreplicas_eval_metric{name=accuracy}"] == 0.75
    assert not any("bucket" in k for k in values)


@pytest.mark.parametrize(
    ("points", "total"),
    [
        ([], 0.0),
        ([(0, 1.0), (1, 3.0)], 3.0),
        ([(0, 2.0), (1, 5.0), (2, 1.0), (3, 4.0)], 9.0),  # restart after 5: 5 + 4
        ([(0, 0.0), (1, 0.0)], 0.0),
    ],
)
def test_counter_total_survives_restarts(points, total):
    assert counter_total(points) == total


def test_mean_staleness_per_interval_and_after_a_restart():
    samples = [
        Sample("w", 0, {"syncreplicas_gradient_staleness_steps_sum": 0.0,
                        "syncreplicas_gradient_staleness_steps_count": 0.0}),
        Sample("w", 1, {"syncreplicas_gradient_staleness_steps_sum": 4.0,
                        "syncreplicas_gradient_staleness_steps_count": 2.0}),
        Sample("w", 2, {"syncreplicas_gradient_staleness_steps_sum": 1.0,  # restarted
                        "syncreplicas_gradient_staleness_steps_count": 1.0}),
        Sample("w", 3, {"syncreplicas_gradient_staleness_steps_sum": 1.0,
                        "syncreplicas_gradient_staleness_steps_count": 3.0}),
    ]
    assert mean_staleness(samples) == [(1, 2.0), (3, 0.0)]


def test_steps_per_second_over_windows():
    points = [(0.0, 0.0), (1.0, 10.0), (2.0, 20.0), (3.0, 25.0), (4.0, 30.0)]
    assert steps_per_second(points, window=2.0) == [(2.0, 10.0), (4.0, 5.0)]


def test_eval_series_prefers_accuracy():
    history = [sample("chief-0", 1, **{"syncreplicas_eval_metric{name=loss}": 1.0,
                                       "syncreplicas_eval_metric{name=accuracy}": 0.9})]
    assert eval_label(eval_series(history)) == "accuracy"
    assert eval_series([sample("chief-0", 1, syncreplicas_loss=1.0)]) is None


def test_summary_totals_and_final_step():
    history = [
        sample("chief-0", 1.0, syncreplicas_global_step=0.0, syncreplicas_loss=2.0),
        sample("chief-0", 2.0, syncreplicas_global_step=10.0, syncreplicas_loss=1.0,
               syncreplicas_stale_gradients_dropped_total=2.0),
        sample("worker-0", 2.5, syncreplicas_global_step=12.0,
               syncreplicas_stale_gradients_dropped_total=5.0),
        sample("worker-0", 3.0, syncreplicas_global_step=30.0,
               syncreplicas_stale_gradients_dropped_total=1.0),  # restarted
        sample("chief-0", 4.0, syncreplicas_global_step=40.0, syncreplicas_loss=0.5,
               **{"syncreplicas_eval_metric{name=accuracy}": 0.96}),
    ]
    summary = summarize(history, job_name="j", max_steps=50, wall_time=9.0, outcome="succeeded",
                        exit_code=0, restarts={"chief-0": 1, "worker-0": 2},
                        checkpoint_step=50)
    assert summary.final_global_step == 50  # the final checkpoint beats the last scrape
    assert summary.loss == 0.5
    assert (summary.eval_metric, summary.accuracy) == ("accuracy", 0.96)
    assert summary.stale_gradients_dropped == 2 + 5 + 1
    assert (summary.restarts_total, summary.chief_restarts) == (3, 1)
    assert summary.steps_per_second == pytest.approx((40 - 10) / (4.0 - 2.0))


def test_aggregated_endpoint_labels_every_series_by_replica():
    families = parse(CHIEF_TEXT)
    latest = {
        "chief-0": Sample("chief-0", 1.0, flatten(families), families),
        "worker-1": Sample("worker-1", 1.0, flatten(families), families),
    }
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReplicaCollector(lambda: latest, job_labels={"syncreplicas_job": "j"}))
    text = generate_latest(registry).decode()
    assert ('syncreplicas_global_step{replica_index="0",replica_type="chief",'
            'syncreplicas_job="j"} 40.0') in text
    assert ('syncreplicas_global_step{replica_index="1",replica_type="worker",'
            'syncreplicas_job="j"} 40.0') in text
    assert ('syncreplicas_eval_metric{name="accuracy",replica_index="0",replica_type="chief",'
            'syncreplicas_job="j"}') in text
    assert text.count("# TYPE syncreplicas_global_step gauge") == 1
    assert ('syncreplicas_gradient_staleness_steps_bucket{le="+Inf",replica_index="1",'
            'replica_type="worker",syncreplicas_job="j"} 4.0') in text
    # It parses back: a Prometheus scraping it sees well-formed text.
    assert {f.name for f in parse(text)} >= {"syncreplicas_global_step",
                                             "syncreplicas_stale_gradients_dropped"}


def test_the_chiefs_logged_final_eval_wins_over_an_earlier_scrape():
    history = [sample("chief-0", 1.0, syncreplicas_global_step=5.0,
                      **{"syncreplicas_eval_metric{name=accuracy}": 0.5})]
    summary = summarize(history, job_name="j", max_steps=9, wall_time=1.0, outcome="succeeded",
                        exit_code=0, restarts={}, checkpoint_step=9,
                        final_eval={"accuracy": 0.97, "loss": 0.1})
    assert (summary.eval_metric, summary.eval_value, summary.accuracy) == (
        "accuracy", 0.97, 0.97)
    summary = summarize([], job_name="j", max_steps=9, wall_time=1.0, outcome="succeeded",
                        exit_code=0, restarts={}, checkpoint_step=None, final_eval={"mse": 0.2})
    assert (summary.eval_metric, summary.eval_value, summary.accuracy) == (
        "mse", 0.2, None)
