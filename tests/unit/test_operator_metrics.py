"""Operator metrics: design names, counters fed by the planner, jobs gauge by phase."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from syncreplicas_operator.core import actions, naming, recovery
from syncreplicas_operator.resources.metrics import OperatorMetrics


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    sample = registry.get_sample_value(name, labels or None)
    assert sample is not None, name
    return sample


def test_planner_counters_and_phase_gauge() -> None:
    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    m.count(actions.PODS_CREATED, 12)
    m.count(actions.CHIEF_CLEANUPS)
    m.count(actions.JOB_RESTARTS)
    m.reconcile_seconds.observe(0.2)
    m.set_phase("a", "j1", naming.PHASE_RUNNING)
    m.set_phase("a", "j2", naming.PHASE_RUNNING)
    m.set_phase("b", "j1", naming.PHASE_FAILED)
    m.set_phase("a", "j2", naming.PHASE_SUCCEEDED)  # a job moves on
    m.set_phase("b", "j1", None)  # a job is deleted
    assert value(registry, "syncreplicas_operator_pods_created_total") == 12
    assert value(registry, "syncreplicas_operator_chief_cleanups_total") == 1
    assert value(registry, "syncreplicas_operator_job_restarts_total") == 1
    assert value(registry, "syncreplicas_operator_reconcile_seconds_count") == 1
    assert value(registry, "syncreplicas_operator_jobs", phase="Running") == 1
    assert value(registry, "syncreplicas_operator_jobs", phase="Succeeded") == 1
    assert value(registry, "syncreplicas_operator_jobs", phase="Failed") == 0
    text = generate_latest(registry).decode()
    for phase in naming.PHASES:  # every phase exported, even at zero
        assert f'syncreplicas_operator_jobs{{phase="{phase}"}}' in text


def test_queue_wait_histogram_and_queued_jobs_gauge_by_queue() -> None:
    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    q = {"job_namespace": "a", "local_queue": "lq"}
    m.observe(actions.QUEUE_WAIT, 42.0, q)
    assert value(registry, "syncreplicas_operator_queue_wait_seconds_count", **q) == 1
    assert value(registry, "syncreplicas_operator_queue_wait_seconds_bucket", le="60.0", **q) == 1
    assert value(registry, "syncreplicas_operator_queue_wait_seconds_bucket", le="30.0", **q) == 0
    m.set_phase("a", "j1", naming.PHASE_SUSPENDED, "lq")
    m.set_phase("a", "j2", naming.PHASE_SUSPENDED, "lq")
    m.set_phase("b", "j1", naming.PHASE_SUSPENDED, "lq")  # another namespace's queue
    assert value(registry, "syncreplicas_operator_queued_jobs", **q) == 2
    m.set_phase("a", "j1", naming.PHASE_RUNNING, None)  # admitted
    m.set_phase("a", "j2", None)  # deleted
    assert value(registry, "syncreplicas_operator_queued_jobs", **q) == 0
    assert value(registry, "syncreplicas_operator_queued_jobs", job_namespace="b",
                 local_queue="lq") == 1  # fmt: skip
    # A wait's series is there, at zero, from the wait's start: the observation at
    # admission is an increase to Prometheus.
    assert value(registry, "syncreplicas_operator_queue_wait_seconds_count",
                 job_namespace="b", local_queue="lq") == 0  # fmt: skip


def test_fresh_registries_do_not_share_state() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    OperatorMetrics(first).count(actions.PODS_CREATED, 3)
    OperatorMetrics(second)
    assert value(second, "syncreplicas_operator_pods_created_total") == 0


def test_recoveries_by_cause_and_straggler_evictions() -> None:
    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    m.count(actions.RECOVERIES, labels={"cause": recovery.CAUSE_EXITED})
    m.count(actions.RECOVERIES, labels={"cause": recovery.CAUSE_EXITED})
    m.count(actions.STRAGGLER_EVICTIONS)
    name = "syncreplicas_operator_recoveries_total"
    assert value(registry, name, cause=recovery.CAUSE_EXITED) == 2
    assert value(registry, name, cause=recovery.CAUSE_DELETED) == 0  # exported at zero
    assert value(registry, "syncreplicas_operator_straggler_evictions_total") == 1
