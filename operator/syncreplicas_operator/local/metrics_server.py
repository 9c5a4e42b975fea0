"""Serve the metrics of every local replica on one port (``syncreplicas run --metrics-port``).

Each series gets ``replica_type`` and ``replica_index`` labels, the same labels a Prometheus
PodMonitor keeps on a cluster, so dashboards and alerts work against a local run too. The
runner's own series (restarts, up) are served alongside.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample as PromSample

from .scrape import Sample

RESTARTS: Final = "syncreplicas_local_replica_restarts"
UP: Final = "syncreplicas_local_replica_up"
_RUNNER_LABELS: Final = ["namespace", "syncreplicas_job", "replica_type", "replica_index"]


class PortInUseError(RuntimeError):
    """The requested --metrics-port cannot be bound."""


@dataclass(frozen=True)
class ReplicaProcess:
    """What the runner knows of one replica's process, for its own series."""

    replica_type: str
    index: int
    restarts: int
    running: bool


def runner_families(
    namespace: str, job: str, replicas: Iterable[ReplicaProcess]
) -> Iterator[Metric]:
    """The runner's own series: restarts and up, one per replica."""
    restarts = CounterMetricFamily(
        RESTARTS, "Restarts of each local replica by syncreplicas run", labels=_RUNNER_LABELS
    )
    up = GaugeMetricFamily(UP, "1 while the replica's process runs", labels=_RUNNER_LABELS)
    for replica in replicas:
        values = [namespace, job, replica.replica_type, str(replica.index)]
        restarts.add_metric(values, replica.restarts)
        up.add_metric(values, 1.0 if replica.running else 0.0)
    yield restarts
    yield up


def relabel(
    samples: Mapping[str, Sample],
    extra: Iterable[Metric] = (),
    job_labels: Mapping[str, str] | None = None,
) -> list[Metric]:
    """Merge each replica's families into one family per name, labelled by replica.

    ``job_labels`` (``namespace``, ``syncreplicas_job``) go on every series too, as the
    chart's PodMonitor puts them, so the chart's dashboard and alerts query a local run.
    """
    merged: dict[str, Metric] = {}
    for replica in sorted(samples):
        replica_type, _, replica_index = replica.rpartition("-")
        labels = {**(job_labels or {}), "replica_type": replica_type,
                  "replica_index": replica_index}
        for family in samples[replica].families:
            target = merged.get(family.name)
            if target is None:
                target = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = target
            elif target.type != family.type:
                continue  # two replicas disagree on a type: keep the first, never emit both
            for s in family.samples:
                target.samples.append(
                    PromSample(s.name, {**s.labels, **labels}, s.value, s.timestamp, s.exemplar)
                )
    result = list(merged.values())
    result.extend(extra)
    return result


class ReplicaCollector(Collector):
    """Collects on every scrape of the aggregated endpoint from the scraper's latest view."""

    def __init__(
        self,
        latest: Callable[[], Mapping[str, Sample]],
        extra: Callable[[], Iterable[Metric]] = lambda: (),
        job_labels: Mapping[str, str] | None = None,
    ) -> None:
        self._latest = latest
        self._extra = extra
        self._job_labels = dict(job_labels or {})

    def collect(self) -> Iterator[Metric]:
        yield from relabel(self._latest(), self._extra(), self._job_labels)

    def describe(self) -> list[Any]:
        # Empty: the set of families is only known once replicas have been scraped.
        return []


def serve(collector: ReplicaCollector, port: int, addr: str = "127.0.0.1") -> Any:
    """Start the HTTP endpoint; raise PortInUseError with a clear message."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as err:
        if err.errno in (errno.EADDRINUSE, errno.EACCES):
            raise PortInUseError(
                f"--metrics-port {port}: cannot bind {addr}:{port} ({err.strerror}); "
                "choose another port, or 0 for a free one"
            ) from err
        raise
    return server
