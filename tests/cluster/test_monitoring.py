"""Monitoring as users see it: a real Prometheus finds the job's pods and the operator
through the cluster's API server (kubernetes_sd_configs, with the chart's
files/scrape-configs.yaml, the equivalent of its PodMonitor and ServiceMonitor), every
query of the chart's dashboard returns data from a real job in real pods, and the chart's
alerts fire when their cause is injected and resolve after.

The cause: a worker of a job with `minReplicasToAggregate` < R is kept away (its pod
deleted, its replacement unschedulable: the node is tainted). The job goes on at R-1 and
is `Degraded` (condition and Event in `kubectl describe srj`), `SyncReplicasDegraded`
fires; the worker comes back, R returns, the condition clears and the alert resolves.
A second job, under `restartPolicy: ExitCode`, loses its chief three times (pod deleted;
the backup keeps the global step moving): `SyncReplicasChiefRestartingRepeatedly` fires,
and resolves once the restarts stop. On the way, a worker killed by a signal (a retryable
exit under ExitCode) gets a new pod from the operator, counted once against
`backoffLimit`. Alerts are evaluated with their `for:` cut to seconds and the chief-restart
alert's windows scaled from 15 min / 1 h to 30 s / 3 min (the rules are otherwise the
chart's file). One PNG per dashboard row, drawn from the same queries over the run, goes
to reports/cluster-dashboard/ for a person to look at.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.test_failures import (
    JOB,
    advancing,
    job,
    metrics,
    pod,
    ready,
    sample,
    status,
    step_of,
)

sys.path.insert(0, str(kube.REPO / "tests" / "chart"))
from chartlib import ALERTS_FILE, Prometheus
from test_chart_dashboard import (
    MAY_BE_NAN,
    load_dashboard,
    metric_names,
    substitute,
)

from tests.support.tfcluster import free_port

SCRAPE_CONFIGS = kube.CHART / "files" / "scrape-configs.yaml"
PKI = kube.node.RUN / "pki"
# Built by hack/cluster/build-binaries.sh: Debian's Prometheus has no kubernetes_sd_configs.
PROMETHEUS_BIN = kube.node.CACHE / f"prometheus-{kube.node.VERSIONS['PROMETHEUS_VERSION']}" / "bin"
REPORT = kube.REPO / "reports" / "cluster-dashboard"
TAINT = "syncreplicas.io/test=hold:NoSchedule"
# Its panels have data only for jobs in a Kueue queue: their queries run against a real
# Prometheus in tests/chart/test_chart_dashboard.py, their metrics on the cluster in
# test_queues.py.
QUEUES_ROW = "Queues (Kueue)"


def prometheus_config(rules: Path) -> dict[str, Any]:
    """The chart's scrape configs, pointed at this cluster from outside it, scraping every
    second."""
    configs = yaml.safe_load(SCRAPE_CONFIGS.read_text())
    for config in configs:
        config.update({"scrape_interval": "1s", "scrape_timeout": "1s"})
        for sd in config["kubernetes_sd_configs"]:
            sd["api_server"] = kube.node.APISERVER
            sd["tls_config"] = {"ca_file": str(PKI / "ca.crt"),
                                "cert_file": str(PKI / "admin.crt"),
                                "key_file": str(PKI / "admin.key")}  # fmt: skip
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": configs,
    }


def quick_rules(path: Path) -> Path:
    """The chart's alerts with every `for:` cut to 5 s and the chief-restart windows
    (15 min, offset 1 h: the only ones that long) to 30 s and 2 min (the test's three
    restarts take about 75 s)."""
    text = re.sub(r"^(\s+for:) .*$", r"\1 5s", ALERTS_FILE.read_text(), flags=re.MULTILINE)
    text = text.replace("[15m]", "[30s]").replace("offset 1h", "offset 2m")
    path.write_text(text)
    return path


@pytest.fixture
def prometheus(cluster_up: None, tmp_path: Path) -> Iterator[Prometheus]:
    server = Prometheus(prometheus_config(quick_rules(tmp_path / "alerts.yaml")),
                        tmp_path / "prometheus", free_port(), PROMETHEUS_BIN)  # fmt: skip
    with server:
        server.wait_ready()
        yield server


def alert_state(prometheus: Prometheus, name: str, namespace: str) -> str:
    for alert in prometheus.api("alerts", {})["alerts"]:
        labels = alert["labels"]
        if labels.get("alertname") == name and labels.get("namespace") == namespace:
            return str(alert["state"])
    return "inactive"


def degraded(namespace: str) -> str:
    srj = kube.kubectl_json("get", "srj", JOB, "-n", namespace)
    return str((kube.condition(srj, "Degraded") or {}).get("status", ""))


@pytest.mark.timeout(900)
def test_dashboard_and_alerts_on_a_degraded_job(namespace: str, prometheus: Prometheus) -> None:
    manifest = job(workers=1, replicasToAggregate=2, minReplicasToAggregate=1)
    manifest["spec"]["training"].update({"maxSteps": 100000, "checkpointEverySteps": 100})
    started = time.time()
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    try:
        kube.eventually("training passes step 50",
                        lambda: step_of(namespace, f"{JOB}-chief-0") >= 50, 180)
        _check_targets(prometheus, namespace)

        # A worker kept away: its pod deleted, its replacement unschedulable on every node.
        kube.kubectl("taint", "nodes", "--all", TAINT)
        kube.kubectl("delete", "pod", f"{JOB}-worker-0", "-n", namespace)
        kube.eventually("the job is Degraded", lambda: degraded(namespace) == "True", 120)
        assert status(namespace).get("replicasToAggregate") == 1
        assert advancing(namespace, f"{JOB}-chief-0"), "the chief trains on at R=1"
        describe = kube.kubectl("describe", "srj", JOB, "-n", namespace).stdout
        assert "Degraded" in describe and "aggregating 1 of 2" in describe, describe
        kube.eventually("SyncReplicasDegraded fires", lambda: alert_state(
            prometheus, "SyncReplicasDegraded", namespace) == "firing", 120)  # fmt: skip
        assert pod(namespace, "worker-0")["status"]["phase"] == "Pending"
    finally:
        kube.kubectl("taint", "nodes", "--all", "syncreplicas.io/test-", check=False)
    try:
        kube.eventually("R is back at 2 with the worker",
                        lambda: status(namespace).get("replicasToAggregate") == 2, 180)
        kube.eventually("the Degraded condition clears", lambda: degraded(namespace) == "False",
                        60)  # fmt: skip
        kube.eventually("SyncReplicasDegraded resolves", lambda: alert_state(
            prometheus, "SyncReplicasDegraded", namespace) == "inactive", 120)  # fmt: skip
        time.sleep(5)  # a few scrapes of the whole job again
        results = _check_dashboard(prometheus, namespace, started, time.time())
        _draw_rows(results, started)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{described}\n{prometheus.log()[-2000:]}") from error


def uid(namespace: str, replica: str) -> str:
    return str(pod(namespace, replica)["metadata"]["uid"])


def replaced_and_ready(namespace: str, replica: str, old_uid: str) -> bool:
    return uid(namespace, replica) != old_uid and ready(namespace, replica)


def chief_restarts(namespace: str) -> float | None:
    return sample(metrics(namespace, f"{JOB}-chief-0"), "syncreplicas_chief_restarts_total")


@pytest.mark.timeout(900)
def test_chief_restarting_repeatedly_alert_and_exit_code_restarts(
    namespace: str, prometheus: Prometheus
) -> None:
    manifest = job(workers=2, replicasToAggregate=2)  # one backup replica
    manifest["spec"]["runPolicy"] = {"restartPolicy": "ExitCode", "backoffLimit": 3}
    manifest["spec"]["training"].update({"maxSteps": 100000, "checkpointEverySteps": 100})
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    try:
        kube.eventually("training passes step 50",
                        lambda: step_of(namespace, f"{JOB}-worker-0") >= 50, 180)
        # ExitCode: pods are not restarted in place (restartPolicy Never); a signal's exit
        # (137) is retryable, so the operator replaces the pod and counts it once.
        old = uid(namespace, "worker-1")
        kube.kill_in_place(namespace, f"{JOB}-worker-1")
        kube.eventually("the operator replaces worker-1's pod",
                        lambda: replaced_and_ready(namespace, "worker-1", old), 120)
        assert pod(namespace, "worker-1")["status"]["containerStatuses"][0]["restartCount"] == 0
        kube.eventually("the replacement is counted", lambda: status(namespace).get(
            "replicaStatuses", {}).get("worker", {}).get("restarts") == 1, 60)  # fmt: skip

        # The chief's pod deleted three times in a row: the alert fires.
        times = []
        for n in (1, 2, 3):
            old = uid(namespace, "chief-0")
            started = time.monotonic()
            kube.kubectl("delete", "pod", f"{JOB}-chief-0", "-n", namespace, "--wait=false")
            kube.eventually(f"chief replacement {n} rejoins",
                            lambda n=n, old=old: replaced_and_ready(namespace, "chief-0", old)
                            and chief_restarts(namespace) == n, 180)  # fmt: skip
            times.append(time.monotonic() - started)
        assert advancing(namespace, f"{JOB}-chief-0"), "training goes on"
        kube.eventually("SyncReplicasChiefRestartingRepeatedly fires", lambda: alert_state(
            prometheus, "SyncReplicasChiefRestartingRepeatedly", namespace) == "firing",
            120)  # fmt: skip
        print(f"chief deleted -> replacement rejoined: {', '.join(f'{t:.0f}' for t in times)} s")
        # A deleted pod is not a failure of the replica: nothing counted against the budget.
        counts = status(namespace)["replicaStatuses"]
        assert counts["chief"]["restarts"] == 0 and counts["worker"]["restarts"] == 1, counts
        assert not kube.condition(kube.kubectl_json("get", "srj", JOB, "-n", namespace),
                                  "Failed")  # fmt: skip
        kube.eventually("the alert resolves once the restarts stop", lambda: alert_state(
            prometheus, "SyncReplicasChiefRestartingRepeatedly", namespace) == "inactive",
            360)  # fmt: skip
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{described}\n{prometheus.log()[-2000:]}") from error


def _check_targets(prometheus: Prometheus, namespace: str) -> None:
    """Every replica pod and the operator are scraped, with the labels the chart's
    PodMonitor and ServiceMonitor give them."""
    def found() -> list[dict[str, Any]]:
        targets = [t for t in prometheus.targets() if t["health"] == "up"]
        jobs = [t for t in targets if t["labels"].get("namespace") == namespace]
        operator = [t for t in targets if t["labels"].get("syncreplicas_component") == "operator"]
        return jobs + operator if len(jobs) == 3 and operator else []

    targets = kube.eventually("Prometheus scrapes the job's 3 pods and the operator", found, 60)
    labels = sorted((t["labels"]["replica_type"], t["labels"]["replica_index"],
                     t["labels"]["pod"], t["labels"]["syncreplicas_job"])
                    for t in targets if "replica_type" in t["labels"])  # fmt: skip
    assert labels == [("chief", "0", f"{JOB}-chief-0", JOB), ("ps", "0", f"{JOB}-ps-0", JOB),
                      ("worker", "0", f"{JOB}-worker-0", JOB)], labels  # fmt: skip


def _check_dashboard(prometheus: Prometheus, namespace: str, start: float,
                     end: float) -> list[dict[str, Any]]:  # fmt: skip
    """Every panel query, with the dashboard's variables as Grafana fills them in, returns
    data over the run."""
    jobs = prometheus.api("label/syncreplicas_job/values",
                          {"match[]": f'syncreplicas_global_step{{namespace="{namespace}"}}'})
    assert jobs == [JOB], jobs
    variables = {"namespace": namespace, "job": JOB, "__rate_interval": "5s",
                 "__interval": "1s", "__range": f"{int(end - start)}s",
                 "datasource": "prometheus"}  # fmt: skip
    empty, results = [], []
    row = ""
    for panel in load_dashboard()["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        if row == QUEUES_ROW:
            continue  # this job is in no queue (test_chart_dashboard.py, test_queues.py)
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], variables)
            result = prometheus.query_range(expr, start, end, 2)
            results.append({"row": row, "panel": panel["title"], "expr": expr,
                            "legend": target.get("legendFormat", ""), "result": result})
            finite = [float(v) for s in result for _, v in s["values"]
                      if math.isfinite(float(v))]  # fmt: skip
            if not result or (not finite and not metric_names(target["expr"]) & MAY_BE_NAN):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    return results


def _draw_rows(results: list[dict[str, Any]], start: float) -> None:
    """One PNG per dashboard row: each panel a small plot of its queries over the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    REPORT.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for item in results:
        rows.setdefault(item["row"], {}).setdefault(item["panel"], []).append(item)
    for row, panels in rows.items():
        columns = 3
        lines = math.ceil(len(panels) / columns)
        figure, axes = plt.subplots(lines, columns, figsize=(15, 3.2 * lines), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.axis("off")
        for ax, (title, items) in zip(axes.flat, panels.items(), strict=False):
            for item in items:
                for series in item["result"]:
                    xs = [float(t) - start for t, _ in series["values"]]
                    ys = [float(v) for _, v in series["values"]]
                    label = item["legend"] or ""
                    for key, value in series["metric"].items():
                        label = label.replace("{{" + key + "}}", value).replace(
                            "{{ " + key + " }}", value)
                    ax.plot(xs, ys, label=label[:30] or None)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("seconds since kubectl apply", fontsize=8)
            if any(line.get_label() and not line.get_label().startswith("_")
                   for line in ax.get_lines()):  # fmt: skip
                ax.legend(fontsize=7)
        figure.suptitle(f"SyncReplicas training: {row} (real queries, degraded job)")
        figure.tight_layout()
        figure.savefig(REPORT / f"{row.lower().replace(' ', '-')}.png", dpi=80)
        plt.close(figure)
