"""The operator's own Prometheus metrics (names from the design; add, never rename).

Every metric is created against a registry passed in, so tests and benchmarks use a fresh
one; the operator process uses the default registry and serves it on ``--metrics-port``.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ..core import actions, naming, recovery


class OperatorMetrics:
    """Counters, the jobs-by-phase gauge and the reconcile-time histogram."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.jobs = Gauge(
            "syncreplicas_operator_jobs",
            "SyncReplicasJobs this operator watches, by phase.",
            ["phase"],
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "syncreplicas_operator_reconcile_seconds",
            "Time to plan and apply one reconciliation of one job.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.pods_created = Counter(
            "syncreplicas_operator_pods_created_total",
            "Replica pods the operator created.",
            registry=registry,
        )
        self.chief_cleanups = Counter(
            "syncreplicas_operator_chief_cleanups_total",
            "Chief restarts the operator handled (per chiefRestartPolicy).",
            registry=registry,
        )
        self.job_restarts = Counter(
            "syncreplicas_operator_job_restarts_total",
            "Whole-job restarts (chiefRestartPolicy RestartJob).",
            registry=registry,
        )
        self.recoveries = Counter(
            "syncreplicas_operator_recoveries_total",
            "Replica failures that started a recovery (status.lastRecovery), by cause.",
            ["cause"],
            registry=registry,
        )
        self.straggler_evictions = Counter(
            "syncreplicas_operator_straggler_evictions_total",
            "Straggler pods deleted under runPolicy.stragglerPolicy.",
            registry=registry,
        )
        self.leader = Gauge(
            "syncreplicas_operator_leader",
            "1 while this operator replica acts (it holds the leader Lease, or election is "
            "off, and its controllers run), else 0.",
            registry=registry,
        )
        self.queue_wait_seconds = Histogram(
            "syncreplicas_operator_queue_wait_seconds",
            "Time a job in a Kueue queue waited for admission (from its creation or eviction "
            "to its admission), by the job's namespace and LocalQueue.",
            ["job_namespace", "local_queue"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600),
            registry=registry,
        )
        self.queued_jobs = Gauge(
            "syncreplicas_operator_queued_jobs",
            "Jobs waiting for Kueue's admission (created or evicted, not admitted yet), by "
            "the job's namespace and LocalQueue.",
            ["job_namespace", "local_queue"],
            registry=registry,
        )
        self.watch_events = Counter(
            "syncreplicas_operator_watch_events_total",
            "Watch events the operator received, by resource (its jobs and their children: "
            "syncreplicasjobs, pods, services, networkpolicies, workloads).",
            ["resource"],
            registry=registry,
        )
        for cause in recovery.CAUSES:
            self.recoveries.labels(cause=cause)  # every cause exported, even at zero
        self._counters: dict[str, Counter] = {
            actions.PODS_CREATED: self.pods_created,
            actions.CHIEF_CLEANUPS: self.chief_cleanups,
            actions.JOB_RESTARTS: self.job_restarts,
            actions.RECOVERIES: self.recoveries,
            actions.STRAGGLER_EVICTIONS: self.straggler_evictions,
        }
        self._histograms: dict[str, Histogram] = {actions.QUEUE_WAIT: self.queue_wait_seconds}
        self._phases: dict[tuple[str, str], str] = {}
        self._queued: dict[tuple[str, str], str] = {}  # job -> the LocalQueue it waits in
        for phase in naming.PHASES:
            self.jobs.labels(phase=phase).set(0)

    def count(self, name: str, amount: int = 1, labels: Mapping[str, str] | None = None) -> None:
        """Apply a planner's CountMetric."""
        counter = self._counters[name]
        (counter.labels(**labels) if labels else counter).inc(amount)

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Apply a planner's ObserveMetric."""
        self._histograms[name].labels(**labels).observe(value)

    def set_phase(
        self, namespace: str, name: str, phase: str | None, queued_in: str | None = None
    ) -> None:
        """Record a job's phase (None: the job is gone) and the LocalQueue it waits in (None:
        not waiting for admission), and refresh the gauges."""
        key = (namespace, name)
        if phase is None:
            self._phases.pop(key, None)
        else:
            self._phases[key] = phase
        self._refresh(self._phases)
        before = self._queued.get(key)
        if queued_in is None or phase is None:
            self._queued.pop(key, None)
        else:
            self._queued[key] = queued_in
        if queued_in is not None and phase is not None:
            # The wait's series exists (at zero) from the start of a wait: the observation at
            # admission is then an increase Prometheus sees, not a new series' first sample.
            self.queue_wait_seconds.labels(job_namespace=namespace, local_queue=queued_in)
        for queue in {before, self._queued.get(key)} - {None}:
            assert queue is not None
            waiting = sum(ns == namespace and q == queue for (ns, _), q in self._queued.items())
            self.queued_jobs.labels(job_namespace=namespace, local_queue=queue).set(waiting)

    def _refresh(self, phases: Mapping[tuple[str, str], str]) -> None:
        counts = dict.fromkeys(naming.PHASES, 0)
        for phase in phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, n in counts.items():
            self.jobs.labels(phase=phase).set(n)
