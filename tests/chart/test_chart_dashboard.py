"""The Grafana dashboard against reality: every panel's PromQL returns data from a real run.

A tiny real job (1 PS, chief, 1 worker, linear model) runs as local processes
(tests/support/tfcluster.py); a real Prometheus scrapes every replica each second with the
labels the chart's PodMonitor gives job pods, and the operator's metrics with the labels
its ServiceMonitor gives. Each panel query, with the dashboard variables substituted the
way Grafana does, must return data over the run. `promtool check metrics` must find no
error in any replica's /metrics. Static checks of the dashboard JSON come first.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chartlib import (
    ALERTS_FILE,
    DASHBOARDS,
    MONITORING_API,
    NAMESPACE,
    Prometheus,
    one,
    render,
    tool,
)
from prometheus_client import CollectorRegistry, start_http_server
from syncreplicas_operator.core import actions, naming
from syncreplicas_operator.resources.metrics import OperatorMetrics
from syncreplicas_runtime.process.metrics import RuntimeMetrics

from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

DASHBOARD = next(p for p in DASHBOARDS if p.name == "syncreplicas.json")
JOB_NAME = "demo"
JOB_NAMESPACE = "ml"
# Grafana's $__rate_interval is max(4 x scrape interval, $__interval + scrape interval);
# 5 s leaves room for a late scrape on a loaded machine (scrapes every second here).
RATE_INTERVAL = "5s"
# Panel titles the dashboard promises, each matched by a word in it.
REQUIRED_PANELS = [
    "global step rate",
    "loss",
    "token queue depth",
    "tokens consumed per replica",
    "staleness",
    "stale gradients dropped",
    "barrier wait",
    "step time",
    "restarts",
    "operator health",
    "live replicas",
    "recoveries",
    "waiting for admission",
    "queued before admission",
]
# The operator does not reconcile in this test (no API server), so its reconcile-time
# histogram has no observations: its quantile has no point (a quantile of nothing is NaN,
# which the panel's query drops). Every other query must return data, all of it finite.
MAY_BE_EMPTY = {"syncreplicas_operator_reconcile_seconds_bucket"}


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return [p for p in out if p["type"] != "row"]


def targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Replace Grafana variables ($name, ${name}) as Grafana would before querying."""
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(syncreplicas_[a-z_]+)", expr)) - {
        "syncreplicas_job",
        "syncreplicas_component",
    }


# --- static checks --------------------------------------------------------------------------


def test_dashboard_has_a_job_variable_and_the_promised_panels() -> None:
    dash = load_dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["job"]["type"] == "query"
    assert "syncreplicas_job" in variables["job"]["definition"]
    assert variables["datasource"]["type"] == "datasource"
    titles = [p["title"].lower() for p in panels(dash)]
    for required in REQUIRED_PANELS:
        assert [t for t in titles if required in t], f"no panel for {required!r}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert dash["uid"] and dash["title"]


def test_every_query_uses_known_metrics_and_the_job_filter() -> None:
    registry = CollectorRegistry()
    runtime = RuntimeMetrics(registry)
    runtime.add_chief()
    runtime.add_coordinator()
    OperatorMetrics(registry)
    known: set[str] = set()
    for family in registry.collect():
        known.add(family.name)
        known.update(s.name for s in family.samples)
        known.add(family.name + "_total")
        if family.type == "histogram":  # a labelled one has no sample before it is observed
            known.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
    for title, expr in targets(load_dashboard()):
        unknown = metric_names(expr) - known
        assert not unknown, f"{title}: {expr} uses metrics nobody exports: {unknown}"
        if not any(n.startswith("syncreplicas_operator_") for n in metric_names(expr)) and (
            "syncreplicas_component" not in expr
        ):
            assert 'syncreplicas_job=~"$job"' in expr, f"{title}: {expr} ignores $job"


def test_a_replaced_pod_adds_no_line_and_no_legend_says_nan() -> None:
    """A replaced pod comes back with a new `pod` and `instance` label: every query
    aggregates them away (one line per job or per replica, not per pod). A quantile of a
    histogram with no observations in the window is NaN, which a legend would show as
    "NaN": every quantile drops it (NaN >= 0 is false)."""
    aggregations = ("max by (", "sum by (", "count by (", "sum (", "histogram_quantile(")
    for title, expr in targets(load_dashboard()):
        assert expr.startswith(aggregations), f"{title}: {expr} draws one line per pod"
        if expr.startswith("histogram_quantile("):
            assert expr.endswith(") >= 0"), f"{title}: {expr} can draw NaN"


# --- against a real run ---------------------------------------------------------------------


def pod_monitor_labels(role: str, index: int) -> dict[str, str]:
    """The labels Prometheus gets for one job pod through the chart's PodMonitor.

    The pod's labels come from the operator (naming.replica_labels); the relabelings from
    the rendered PodMonitor; the Prometheus Operator adds namespace, pod and container.
    """
    pod_monitor = one(render(api_versions=[MONITORING_API]), "PodMonitor")
    meta = {
        "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
        for k, v in naming.replica_labels(JOB_NAME, role, index).items()
    }
    labels = {
        "namespace": JOB_NAMESPACE,
        "pod": naming.replica_name(JOB_NAME, role, index),
        "container": naming.CONTAINER_NAME,
    }
    for relabel in pod_monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]:
        value = ";".join(meta[s] for s in relabel["sourceLabels"])
        labels[relabel["targetLabel"]] = value
    return labels


def service_monitor_labels() -> dict[str, str]:
    service_monitor = one(render(api_versions=[MONITORING_API]), "ServiceMonitor")
    labels = {"namespace": NAMESPACE, "service": service_monitor["metadata"]["name"]}
    for relabel in service_monitor["spec"]["endpoints"][0]["relabelings"]:
        labels[relabel["targetLabel"]] = relabel["replacement"]
    return labels


def prometheus_config(cluster: LocalCluster, operator_port: int) -> dict[str, Any]:
    pods = [
        {
            "targets": [f"127.0.0.1:{r.metrics_port}"],
            "labels": pod_monitor_labels(r.role, r.index),
        }
        for r in cluster.replicas
    ]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        # The chart's rules too: their recording rules must match the real label sets.
        "rule_files": [str(ALERTS_FILE)],
        "scrape_configs": [
            {"job_name": "podMonitor/syncreplicas-jobs", "static_configs": pods},
            {
                "job_name": "serviceMonitor/syncreplicas-operator",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{operator_port}"], "labels": service_monitor_labels()}
                ],
            },
        ],
    }


@pytest.fixture
def operator_metrics_port() -> Iterator[int]:
    """The operator's metrics, served the way `syncreplicas operator --metrics-port` does.

    No API server here, so no Kueue: the registry records what the operator records for a
    job waiting in a queue, and an admission every 2 s (the queue panels see increases)."""
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    queue = {"job_namespace": JOB_NAMESPACE, "local_queue": "team-queue"}
    metrics.set_phase(JOB_NAMESPACE, "waiting", naming.PHASE_SUSPENDED, queue["local_queue"])
    stop = threading.Event()

    def admissions() -> None:
        waited = 30.0
        while not stop.wait(2.0):
            metrics.observe(actions.QUEUE_WAIT, waited, queue)
            waited += 15.0

    admitting = threading.Thread(target=admissions, daemon=True)
    admitting.start()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield int(server.server_port)
    finally:
        stop.set()
        admitting.join(timeout=5)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def check_metrics_with_promtool(text: str) -> None:
    proc = subprocess.run(
        [tool("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # promtool exits 1 for lint warnings too; errors are what it cannot parse.
    assert "error while linting" not in (proc.stdout + proc.stderr), proc.stdout + proc.stderr
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert not problems, "promtool check metrics:\n" + "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_panel_returns_data_from_a_real_run(
    tmp_path: Path, operator_metrics_port: int
) -> None:
    job = {
        "replicasToAggregate": 2,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
        # Long enough for a few scrapes of a training chief (rates need two samples);
        # checkpoints: the checkpoint panel has data only once one was written.
        "training": {"maxSteps": 600, "batchSize": 8, "logEverySteps": 50,
                     "checkpointDir": str(tmp_path / "ckpt"), "checkpointEverySteps": 50},
    }
    cluster = start_cluster(job, workers=1, ps=1, workdir=tmp_path / "job", start=False)
    prometheus = Prometheus(
        prometheus_config(cluster, operator_metrics_port), tmp_path / "prometheus",
        cluster.unique_port()
    )
    metrics_text: dict[tuple[str, int], str] = {}
    try:
        with prometheus, cluster:
            prometheus.wait_ready()
            start = time.time()
            cluster.start_all()
            # Sample every replica's /metrics while it trains (the last text of each).
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                codes = cluster.poll()
                for r in cluster.replicas:
                    text = cluster.try_metrics_text(r.role, r.index)
                    if text:
                        metrics_text[r.key] = text
                if all(c is not None for c in codes.values()):
                    break
                time.sleep(0.5)
            codes = cluster.poll()
            assert codes == {k: 0 for k in codes}, (
                f"job did not finish cleanly: {codes}\n{cluster.logs()}"
            )
            end = time.time()
            # The last scrape of the operator after the job: let one more scrape land.
            time.sleep(2)
            results = check_dashboard_queries(prometheus, start, end)
            check_rules_on_the_run(prometheus, start, end)
            # Kept with the test's temporary files, to plot or inspect after a run.
            (tmp_path / "dashboard-results.json").write_text(json.dumps(results))
    finally:
        prometheus.stop()
    assert set(metrics_text) == {r.key for r in cluster.replicas}
    chief = metrics_text[("chief", 0)]
    assert (metric_value(chief, "syncreplicas_global_step") or 0) > 0
    for _, text in sorted(metrics_text.items()):
        check_metrics_with_promtool(text)
    url = f"http://127.0.0.1:{operator_metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        check_metrics_with_promtool(resp.read().decode())


def check_dashboard_queries(
    prometheus: Prometheus, start: float, end: float
) -> list[dict[str, Any]]:
    """Run every panel query over the run; returns [{panel, expr, result}] for the record."""
    dash = load_dashboard()
    # The variables' own queries find the job.
    namespaces = prometheus.api("label/namespace/values", {"match[]": "syncreplicas_global_step"})
    assert JOB_NAMESPACE in namespaces
    jobs = prometheus.api(
        "label/syncreplicas_job/values",
        {"match[]": f'syncreplicas_global_step{{namespace=~"{JOB_NAMESPACE}"}}'},
    )
    assert jobs == [JOB_NAME]
    variables = {
        "namespace": JOB_NAMESPACE,
        "job": JOB_NAME,
        "__rate_interval": RATE_INTERVAL,
        "__interval": "1s",
        "__range": f"{max(1, int(end - start))}s",
        "datasource": "prometheus",
    }
    empty = []
    results: list[dict[str, Any]] = []
    for title, raw in targets(dash):
        expr = substitute(raw, variables)
        result = prometheus.query_range(expr, start, end + 1, 1)
        results.append({"panel": title, "expr": expr, "result": result})
        fault = result_fault(raw, result)
        if fault:
            empty.append(f"{title}: {expr} -> {fault}")
    assert not empty, "panels without data or with NaN:\n" + "\n".join(empty)
    return results


def result_fault(raw: str, result: list[dict[str, Any]]) -> str | None:
    """Why a panel query's range result (raw: the query before its variables are filled in)
    would draw wrongly, or None: no finite value (unless it reads MAY_BE_EMPTY), or any value
    NaN or infinite (a legend saying "NaN"). One judgement for every test of the panels."""
    values = [float(v) for series in result for _, v in series["values"]]
    finite = [v for v in values if math.isfinite(v)]
    if (finite or metric_names(raw) & MAY_BE_EMPTY) and len(finite) == len(values):
        return None
    return f"{len(result)} series, {len(finite)} of {len(values)} values finite"


def check_rules_on_the_run(prometheus: Prometheus, start: float, end: float) -> None:
    """The recording rules see the job's two training replicas; no alert fired."""
    groups = prometheus.api("rules", {})["groups"]
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups
    for record in ("syncreplicas_job:replicas_up:count", "syncreplicas_job:replicas_seen_1h:count"):
        series = prometheus.query_range(f'max_over_time({record}[1h])', start, end + 1, 1)
        assert [s["metric"] for s in series] == [
            {"namespace": JOB_NAMESPACE, "syncreplicas_job": JOB_NAME}
        ], (record, series)
        assert float(series[0]["values"][-1][1]) == 2, (record, series)
    # A healthy run fires nothing (a slow start may leave the stall alert pending, within
    # its `for:`).
    fired = prometheus.query_range('ALERTS{alertstate="firing"}', start, end + 1, 1)
    assert fired == [], fired
