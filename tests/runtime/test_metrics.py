"""The runtime's metric names, its HTTP endpoints, and gauges that never report a value
the process has not read yet."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from syncreplicas_runtime.process.metrics import RuntimeMetrics, serve

from tests.runtime.rtutil import linear_job, runtime_env
from tests.support.tfcluster import metric_value, start_cluster

REPLICA_NAMES = [
    "syncreplicas_global_step", "syncreplicas_local_step",
    "syncreplicas_gradient_staleness_steps_bucket", "syncreplicas_gradients_pushed_total",
    "syncreplicas_stale_gradients_dropped_total", "syncreplicas_tokens_consumed_total",
    "syncreplicas_token_wait_seconds_bucket", "syncreplicas_step_duration_seconds_bucket",
    "syncreplicas_examples_total", "syncreplicas_loss", "syncreplicas_learning_rate",
    "syncreplicas_replica_phase",
]
CHIEF_NAMES = ["syncreplicas_chief_restarts_total", "syncreplicas_restored_step",
               "syncreplicas_checkpoint_step"]
# Exported by PS 0, where the sync loop runs.
COORDINATOR_NAMES = ["syncreplicas_token_queue_depth",
                     "syncreplicas_accumulator_pending_gradients",
                     "syncreplicas_replicas_to_aggregate", "syncreplicas_live_replicas",
                     "syncreplicas_spec_replicas_to_aggregate"]
# Values a process only knows once it has read them from the PS (or run a step).
UNKNOWN_AT_START = ["syncreplicas_global_step", "syncreplicas_local_step", "syncreplicas_loss",
                    "syncreplicas_learning_rate"]
CHIEF_UNKNOWN_AT_START = ["syncreplicas_restored_step", "syncreplicas_checkpoint_step"]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_endpoints_and_names() -> None:
    m = RuntimeMetrics()
    server, state = serve(m, 0, host="127.0.0.1")
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status, text = get(base + "/metrics")
        assert status == 200
        for name in REPLICA_NAMES:
            assert name in text
        for name in CHIEF_NAMES + COORDINATOR_NAMES:
            assert name not in text
        m.add_chief()
        text = get(base + "/metrics")[1]
        for name in CHIEF_NAMES:
            assert name in text
        assert "syncreplicas_token_queue_depth" not in text  # PS 0 only
        m.add_coordinator()
        text = get(base + "/metrics")[1]
        for name in COORDINATOR_NAMES:
            assert name in text
        assert get(base + "/healthz")[0] == 200
        assert get(base + "/readyz")[0] == 503
        state.ready = True
        assert get(base + "/readyz")[0] == 200
        assert get(base + "/nope")[0] == 404
    finally:
        server.shutdown()


def test_fresh_registry_per_instance() -> None:
    a, b = RuntimeMetrics(), RuntimeMetrics()
    a.gradients_pushed.inc(3)
    assert b.registry.get_sample_value("syncreplicas_gradients_pushed_total") == 0
    assert a.registry.get_sample_value("syncreplicas_gradients_pushed_total") == pytest.approx(3)


def test_unknown_gauges_have_no_sample_until_set() -> None:
    m = RuntimeMetrics()
    m.add_chief()
    m.add_coordinator()
    for name in UNKNOWN_AT_START + CHIEF_UNKNOWN_AT_START + COORDINATOR_NAMES:
        assert m.registry.get_sample_value(name) is None, name
    # A process that answers at all is at least importing (phases.ReplicaPhase.IMPORTING).
    assert m.registry.get_sample_value("syncreplicas_replica_phase") == 1
    assert m.registry.get_sample_value("syncreplicas_ready") == 0  # known: not ready
    m.global_step.set(0)  # a real 0, read from the PS, is exported
    assert m.registry.get_sample_value("syncreplicas_global_step") == 0
    m.loss.set(1.5)
    assert m.registry.get_sample_value("syncreplicas_loss") == pytest.approx(1.5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_starting_replica_exports_no_value_it_has_not_read(tmp_path: Path) -> None:
    """Chief and worker whose PS never comes up: a long start-up to scrape them in."""
    job = linear_job(training__startupTimeoutSeconds=600)
    cluster = start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env(),
                            start=False)
    with cluster:
        cluster.start("chief", 0)
        cluster.start("worker", 0)
        texts: dict[str, str] = {}
        deadline = time.monotonic() + 240
        while len(texts) < 2:
            for role in ("chief", "worker"):
                # Scrape only once TensorFlow is imported and the server is up: the process
                # is past its start-up line and waiting for the PS.
                if "started: tensorflow" in cluster.log(role, 0):
                    text = cluster.try_metrics_text(role, 0)
                    if text:
                        texts[role] = text
            assert time.monotonic() < deadline, cluster.logs()
            assert all(c is None for k, c in cluster.poll().items() if k[0] != "ps"), \
                cluster.logs()
            time.sleep(0.5)
        time.sleep(2)  # well into the wait for the PS
        texts = {role: cluster.metrics_text(role, 0) for role in texts}
    for role, text in texts.items():
        unknown = UNKNOWN_AT_START + (CHIEF_UNKNOWN_AT_START if role == "chief" else [])
        for name in unknown:
            assert f"# TYPE {name} gauge" in text, (role, name)  # described ...
            assert metric_value(text, name) is None, (role, name, text)  # ... but no sample
        assert metric_value(text, "syncreplicas_ready") == 0, (role, text)
        assert metric_value(text, "syncreplicas_gradients_pushed_total") == 0, (role, text)
        # phases.ReplicaPhase.WAITING_FOR_PS: what the live view shows for it
        assert metric_value(text, "syncreplicas_replica_phase") == 2, (role, text)
