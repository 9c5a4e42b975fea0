"""Runtime metrics (names are a public interface) and the /metrics, /healthz, /readyz server
(which answers a spare's assignment with 409: the process is a replica already).

A gauge of a value the process has not read yet (the global step before the first step, the
loss, the queue depth before the first sample, ...) has no sample at all rather than a 0: a
restarted replica must not report ``syncreplicas_global_step 0`` while it joins.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..foundation.endpoints import ASSIGN_PATH, HEALTH_PATH, METRICS_PATH, READY_PATH
from ..foundation.phases import ReplicaPhase

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STALENESS_BUCKETS = (0, 1, 2, 3, 5, 10, 20, 50)


class KnownGauge:
    """A gauge without a sample until its value is first set (prometheus_client has no unset).

    The family is always described (HELP and TYPE lines), so the name is known to every
    reader; only the sample is missing while the value is unknown.
    """

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self._name, self._documentation = name, documentation
        self._value: float | None = None
        self._lock = threading.Lock()
        registry.register(self)

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def get(self) -> float | None:
        with self._lock:
            return self._value

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(self._name, self._documentation)]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self._name, self._documentation)
        value = self.get()
        if value is not None:
            family.add_metric([], value)
        yield family


class RuntimeMetrics:
    """Every runtime metric, registered in ``registry`` (a fresh one in tests)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.global_step = KnownGauge("syncreplicas_global_step",
                                      "Global step seen by this replica after its last step", r)
        self.local_step = KnownGauge("syncreplicas_local_step",
                                     "Training steps run by this process", r)
        self.staleness = Histogram(
            "syncreplicas_gradient_staleness_steps",
            "Global steps between reading the variables and pushing the gradient",
            buckets=STALENESS_BUCKETS, registry=r)
        self.gradients_pushed = Counter("syncreplicas_gradients_pushed_total",
                                        "Gradients pushed to the accumulators", registry=r)
        self.stale_dropped = Counter(
            "syncreplicas_stale_gradients_dropped_total",
            "Pushed gradients the accumulators dropped as stale (derived: staleness > 0)",
            registry=r)
        self.tokens_consumed = Counter("syncreplicas_tokens_consumed_total",
                                       "Tokens taken from the token queue", registry=r)
        self.token_wait = Histogram("syncreplicas_token_wait_seconds",
                                    "Time blocked at the barrier waiting for a token",
                                    buckets=STEP_BUCKETS, registry=r)
        self.step_duration = Histogram("syncreplicas_step_duration_seconds",
                                       "Wall time of one training step", buckets=STEP_BUCKETS,
                                       registry=r)
        self.examples = Counter("syncreplicas_examples_total", "Examples trained on", registry=r)
        self.loss = KnownGauge("syncreplicas_loss", "Training loss of the last step", r)
        self.learning_rate = KnownGauge(
            "syncreplicas_learning_rate",
            "Learning rate of the update at the global step the last step ended at", r)
        self.sync_resets = Counter("syncreplicas_sync_resets_total",
                                   "Times this replica rejoined after the sync state was reset",
                                   registry=r)
        self.ready = Gauge("syncreplicas_ready", "1 while the replica is training", registry=r)
        # Set before the endpoint serves: a process that answers is at least importing.
        self.replica_phase = Gauge(
            "syncreplicas_replica_phase",
            "Start-up phase of this process (phases.ReplicaPhase: 1 importing, 2 waiting for "
            "PS, 3 gathering, 4 training, 5 coordinating, 6 serving)", registry=r)
        self.replica_phase.set(int(ReplicaPhase.IMPORTING))
        # Where the operator counts restarts no container restart shows (launch/supervisor.py).
        self.process_restarts = Gauge(
            "syncreplicas_process_restarts",
            "Warm restarts of this replica's process in its pod before this process",
            registry=r)

    def add_chief(self) -> None:
        """The chief's own: restarts, restores, checkpoints, evaluations."""
        r = self.registry
        self.chief_restarts = Counter(
            "syncreplicas_chief_restarts_total",
            "Chief starts after the first one (kept in the PS state and checkpoints)", registry=r)
        self.restored_step = KnownGauge(
            "syncreplicas_restored_step",
            "Global step the chief resumed from when it last joined a sync epoch", r)
        self.checkpoint_step = KnownGauge("syncreplicas_checkpoint_step",
                                          "Global step of the last checkpoint written", r)
        self.snapshot_step = KnownGauge(
            "syncreplicas_snapshot_step",
            "Global step of the chief's freshest in-memory snapshot of the variables", r)
        self.eval_metric = Gauge("syncreplicas_eval_metric", "Held-out metric of the model",
                                 ["name"], registry=r)

    def add_coordinator(self) -> None:
        """The sync loop's, exported by PS 0 where it runs."""
        r = self.registry
        self.token_queue_depth = KnownGauge("syncreplicas_token_queue_depth",
                                            "Tokens waiting in the token queues", r)
        self.accumulator_pending = KnownGauge(
            "syncreplicas_accumulator_pending_gradients",
            "Gradients accumulated for the next update", r)
        self.replicas_to_aggregate = KnownGauge(
            "syncreplicas_replicas_to_aggregate",
            "Gradients the next update aggregates (R, lowered while replicas are lost)", r)
        self.live_replicas = KnownGauge(
            "syncreplicas_live_replicas",
            "Replicas (chief and workers) that pushed gradients recently", r)
        # What R is lowered from: alerts compare the two without a copy of the spec.
        self.spec_replicas_to_aggregate = KnownGauge(
            "syncreplicas_spec_replicas_to_aggregate",
            "R the job asks for (replicasToAggregate)", r)


class _State:
    ready = False


def serve(metrics: RuntimeMetrics, port: int, host: str = "") -> tuple[ThreadingHTTPServer, _State]:
    """Serve /metrics, /healthz (always 200) and /readyz (200 once ``state.ready``)."""
    state = _State()
    registry = metrics.registry

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == METRICS_PATH:
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif path == HEALTH_PATH:
                body, ctype, code = b"ok\n", "text/plain", 200
            elif path == READY_PATH:
                code = 200 if state.ready else 503
                body, ctype = (b"ready\n" if state.ready else b"not ready\n"), "text/plain"
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # a scraper that timed out is not an error here

        def do_POST(self) -> None:
            # A spare that became this replica took its port over (launch/spare.py): any
            # later assignment is one too many.
            if self.path.split("?", 1)[0] == ASSIGN_PATH:
                code, body = HTTPStatus.CONFLICT, b"already assigned: this process is a replica\n"
            else:
                code, body = 404, b"not found\n"
            self.close_connection = True
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # scrapes are not log lines
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server, state
