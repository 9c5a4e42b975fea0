"""The runtime metric names the operator reads exist in the runtime, and are read right."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from syncreplicas_operator.core import metricnames, metricstext
from syncreplicas_runtime.foundation.phases import ReplicaPhase
from syncreplicas_runtime.process.metrics import RuntimeMetrics

READ_BY_THE_OPERATOR = sorted(
    value
    for name, value in vars(metricnames).items()
    if name.isupper() and isinstance(value, str) and value.startswith("syncreplicas_")
)


def exported_names() -> set[str]:
    """Every family and sample name a chief's or PS 0's (the sync loop's) /metrics can show."""
    registry = CollectorRegistry()
    runtime = RuntimeMetrics(registry)
    runtime.add_chief()
    runtime.add_coordinator()
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_sum", "_count", "_bucket"))
    return names


@pytest.mark.parametrize("name", READ_BY_THE_OPERATOR)
def test_the_runtime_exports_every_name_the_operator_reads(name: str) -> None:
    assert name in exported_names()


def test_every_family_is_listed() -> None:
    assert set(metricnames.FAMILIES) <= exported_names()
    assert len(READ_BY_THE_OPERATOR) == 16


def test_replica_phases_are_the_runtime_enum() -> None:
    assert {
        int(p): p.name.lower().replace("_", " ").replace("ps", "PS") for p in ReplicaPhase
    } == metricnames.REPLICA_PHASES


def test_the_eval_metric_is_read_by_its_name_label() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    metrics.add_chief()
    metrics.eval_metric.labels(**{metricnames.EVAL_METRIC_NAME_LABEL: "accuracy"}).set(0.5)
    values = metricstext.flatten(metricstext.parse(generate_latest(registry).decode()))
    key = metricstext.series_key(metricnames.EVAL_METRIC, {"name": "accuracy"})
    assert values[key] == 0.5


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("# TYPE syncreplicas_global_step gauge\nsyncreplicas_global_step 42.0\n", 42.0),
        ("# TYPE syncreplicas_global_step gauge\n", None),  # known family, no value yet
        ("# TYPE syncreplicas_loss gauge\nsyncreplicas_loss 1.5\n", None),
        ("", None),
    ],
)
def test_first_value(text: str, value: float | None) -> None:
    families = metricstext.parse(text)
    assert metricstext.first_value(families, metricnames.GLOBAL_STEP) == value
