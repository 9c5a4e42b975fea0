"""Monitoring as users see it: the cluster's Prometheus, run by the Prometheus Operator
(`make cluster MONITORING=1`), scrapes the job's pods and the operator through the chart's
own PodMonitor and ServiceMonitor and evaluates the chart's own PrometheusRule; every query
of the chart's dashboard returns data from a real job in real pods, and the chart's alerts
fire when their cause is injected and resolve after.

The cause: a worker of a job with `minReplicasToAggregate` < R is kept away (its pod
deleted, its replacement unschedulable: the workers select a node label of the test's own,
taken off every node meanwhile, which leaves other tests' pods alone). The job goes on at R-1 and
is `Degraded` (condition and Event in `kubectl describe srj`), `SyncReplicasDegraded`
fires; the worker comes back, R returns, the condition clears and the alert resolves.
A second job, under `restartPolicy: ExitCode`, loses its chief three times (pod deleted;
the backup keeps the global step moving): `SyncReplicasChiefRestartingRepeatedly` fires,
and resolves once the restarts stop. On the way, a worker killed by a signal (a retryable
exit under ExitCode) gets a new pod from the operator, counted once against
`backoffLimit`. The chart's PrometheusRule is loaded as installed (every rule healthy);
the alerts that must fire within the test are a copy of it in the test's namespace (a
PrometheusRule the same Prometheus selects) with their `for:` cut to seconds and the
chief-restart alert's windows scaled from 15 min / 1 h to 30 s / 2 min, each alert
labelled `timing: quick`. One PNG per dashboard row, drawn from the same queries over the
run, goes to reports/cluster-dashboard/ for a person to look at.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.slowjob import WATCHED_DELAY_MS
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
from chartlib import Prometheus, PrometheusAPI
from test_chart_dashboard import load_dashboard, result_fault, substitute

from tests.support.tfcluster import free_port

SCRAPE_CONFIGS = kube.CHART / "files" / "scrape-configs.yaml"
PKI = kube.node.RUN / "pki"
# Built by hack/cluster/build-binaries.sh: Debian's Prometheus has no kubernetes_sd_configs.
PROMETHEUS_BIN = kube.node.CACHE / f"prometheus-{kube.node.VERSIONS['PROMETHEUS_VERSION']}" / "bin"
# The Prometheus of hack/cluster/monitoring/prometheus.yaml (its StatefulSet's pod).
PROMETHEUS_NAMESPACE, PROMETHEUS_POD = "monitoring", "prometheus-syncreplicas-0"
QUICK = {"timing": "quick"}  # the label of the test's copies of the chart's alerts
REPORT = kube.REPO / "reports" / "cluster-dashboard"
# Its panels have data only for jobs in a Kueue queue: their queries run against a real
# Prometheus in tests/chart/test_chart_dashboard.py, their metrics on the cluster in
# test_queues.py.
QUEUES_ROW = "Queues (Kueue)"


class ClusterPrometheus(PrometheusAPI):
    """The cluster's Prometheus, reached at its pod's IP from the host."""

    def log(self) -> str:
        return kube.kubectl("logs", "-n", PROMETHEUS_NAMESPACE, PROMETHEUS_POD, "-c",
                            "prometheus", "--tail=40", check=False).stdout


@pytest.fixture(scope="module")
def prometheus(cluster_up: None) -> ClusterPrometheus:
    ip = kube.kubectl("get", "pod", PROMETHEUS_POD, "-n", PROMETHEUS_NAMESPACE, "-o",
                      "jsonpath={.status.podIP}").stdout.strip()
    server = ClusterPrometheus(f"http://{ip}:9090")
    # On a cluster just made (test_lifecycle makes one) the chart's monitors reach
    # Prometheus about 90 s after the chart: the operator's Secret, the kubelet's sync.
    monitors = [f"{kind}/{kube.RELEASE_NAMESPACE}/{name}/0" for kind, name in (
        ("podMonitor", "syncreplicas-jobs"), ("serviceMonitor", "syncreplicas-operator"))]

    def loaded() -> bool:
        config = str(server.api("status/config", {})["yaml"])
        return all(f"job_name: {monitor}\n" in config for monitor in monitors)

    kube.eventually("the cluster's Prometheus has the chart's monitors", loaded, 240)
    return server


def chart_rule() -> dict[str, Any]:
    """The chart's PrometheusRule as helm installed it."""
    rules = kube.kubectl_json("get", "prometheusrules", "-n", kube.RELEASE_NAMESPACE)["items"]
    assert len(rules) == 1, [r["metadata"]["name"] for r in rules]
    return dict(rules[0])


def quick_rule(namespace: str) -> dict[str, Any]:
    """The chart's PrometheusRule's alerts, copied into ``namespace`` with every `for:` cut
    to 5 s, the chief-restart windows (15 min, offset 1 h: the only ones that long) to 30 s
    and 2 min (the test's three restarts take about 75 s), and each labelled QUICK. Its
    recording rules stay the chart's alone (two groups recording one series would clash)."""
    groups = []
    for group in chart_rule()["spec"]["groups"]:
        alerts = [rule for rule in group["rules"] if "alert" in rule]
        for rule in alerts:
            rule["for"] = "5s"
            rule["expr"] = rule["expr"].replace("[15m]", "[30s]").replace("offset 1h",
                                                                          "offset 2m")
            rule["labels"] = {**rule.get("labels", {}), **QUICK}
        if alerts:
            groups.append({**group, "name": f"quick-{group['name']}", "rules": alerts})
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "quick-alerts", "namespace": namespace},
            "spec": {"groups": groups}}


def rule_groups(prometheus: PrometheusAPI) -> dict[str, list[dict[str, Any]]]:
    return {g["name"]: g["rules"] for g in prometheus.api("rules", {})["groups"]}


@pytest.fixture
def quick_alerts(namespace: str, prometheus: ClusterPrometheus) -> list[str]:
    """The quick copy applied (gone with the namespace); the names of its groups. The
    operator's reloader loads it within a minute or two, while the job starts."""
    rule = quick_rule(namespace)
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(rule))
    return [g["name"] for g in rule["spec"]["groups"]]


def _check_rules(prometheus: PrometheusAPI, quick: list[str]) -> None:
    """Prometheus evaluates the chart's PrometheusRule, every rule healthy, and the test's
    quick copy."""
    chart = [g["name"] for g in chart_rule()["spec"]["groups"]]

    def evaluated() -> dict[str, list[dict[str, Any]]] | None:
        got = rule_groups(prometheus)
        if not set(chart + quick) <= set(got):
            return None
        return got if all(r.get("health") != "unknown" for name in chart + quick
                          for r in got[name]) else None  # fmt: skip

    groups = kube.eventually("Prometheus evaluates the chart's rules and the quick copy",
                             evaluated, 240)  # fmt: skip
    sick = [(name, r["name"], r.get("lastError")) for name in chart + quick
            for r in groups[name] if r.get("health") != "ok"]  # fmt: skip
    assert not sick, sick


def alert_state(prometheus: PrometheusAPI, name: str, namespace: str) -> str:
    """The state of the quick copy of alert ``name`` for ``namespace``."""
    for alert in prometheus.api("alerts", {})["alerts"]:
        labels = alert["labels"]
        if labels.get("alertname") == name and labels.get("namespace") == namespace \
                and labels.get("timing") == QUICK["timing"]:
            return str(alert["state"])
    return "inactive"


def degraded(namespace: str) -> str:
    srj = kube.kubectl_json("get", "srj", JOB, "-n", namespace)
    return str((kube.condition(srj, "Degraded") or {}).get("status", ""))


@pytest.mark.timeout(900)
def test_dashboard_and_alerts_on_a_degraded_job(namespace: str, prometheus: ClusterPrometheus,
                                                quick_alerts: list[str], tmp_path: Path) -> None:
    manifest = job(workers=1, replicasToAggregate=2, minReplicasToAggregate=1,
                   delay_ms=WATCHED_DELAY_MS)
    manifest["spec"]["training"].update({"maxSteps": 100000, "checkpointEverySteps": 100})
    # The worker's pods go only where this label is: on every node until it is kept away.
    hold = "syncreplicas.io/" + f"keep-{namespace}"[:63].rstrip("-")
    worker = {"containers": manifest["spec"]["template"]["spec"]["containers"],
              "nodeSelector": {hold: "yes"}}  # fmt: skip
    manifest["spec"]["worker"] = {"template": {"spec": worker}}
    nodes = [n["metadata"]["name"] for n in kube.real_nodes()]
    kube.kubectl("label", "node", *nodes, f"{hold}=yes", "--overwrite")
    started = time.time()
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    try:
        kube.eventually("training passes step 50",
                        lambda: step_of(namespace, f"{JOB}-chief-0") >= 50, 180)
        _check_targets(prometheus, namespace, tmp_path / "plain")
        _check_rules(prometheus, quick_alerts)

        # A worker kept away: its pod deleted, its replacement unschedulable on every node.
        kube.kubectl("label", "node", *nodes, f"{hold}-")
        kube.kubectl("delete", "pod", f"{JOB}-worker-0", "-n", namespace)
        kube.eventually("the job is Degraded", lambda: degraded(namespace) == "True", 120)
        assert status(namespace).get("replicasToAggregate") == 1
        assert advancing(namespace, f"{JOB}-chief-0"), "the chief trains on at R=1"
        describe = kube.kubectl("describe", "srj", JOB, "-n", namespace).stdout
        assert "Degraded" in describe and "aggregating 1 of 2" in describe, describe
        kube.eventually("SyncReplicasDegraded fires", lambda: alert_state(
            prometheus, "SyncReplicasDegraded", namespace) == "firing", 120)  # fmt: skip
        # The replacement is made once the old pod is gone, and the scheduler finds no node.
        kube.eventually("worker-0's replacement waits unscheduled", lambda: unscheduled(
            namespace, "worker-0"), 60)  # fmt: skip
    except AssertionError as error:
        raise AssertionError(f"{error}\n{kube.describe(namespace, 'srj', JOB)}") from error
    finally:
        kube.kubectl("label", "node", *nodes, f"{hold}=yes", "--overwrite", check=False)
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
    finally:
        kube.kubectl("label", "node", *nodes, f"{hold}-", check=False)


def unscheduled(namespace: str, replica: str) -> bool:
    """The replica's pod exists, Pending, with the scheduler's PodScheduled False."""
    found = pod(namespace, replica)
    scheduled = kube.condition(found, "PodScheduled") or {}
    return found["status"]["phase"] == "Pending" and scheduled.get("status") == "False"


def uid(namespace: str, replica: str) -> str:
    return str(pod(namespace, replica)["metadata"]["uid"])


def replaced_and_ready(namespace: str, replica: str, old_uid: str) -> bool:
    return uid(namespace, replica) != old_uid and ready(namespace, replica)


def chief_restarts(namespace: str) -> float | None:
    return sample(metrics(namespace, f"{JOB}-chief-0"), "syncreplicas_chief_restarts_total")


@pytest.mark.timeout(900)
def test_chief_restarting_repeatedly_alert_and_exit_code_restarts(
    namespace: str, prometheus: ClusterPrometheus, quick_alerts: list[str]
) -> None:
    manifest = job(workers=2, replicasToAggregate=2, delay_ms=WATCHED_DELAY_MS)  # a backup
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

        _check_rules(prometheus, quick_alerts)
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
        # Within a minute: PS 0's loop, were it stuck, ends its epoch after 15 s (the job
        # goes on in a new one, ps/coordinator.py).
        kube.eventually("training goes on", lambda: advancing(namespace, f"{JOB}-chief-0"), 60)
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


def plain_config() -> dict[str, Any]:
    """The chart's files/scrape-configs.yaml, pointed at this cluster from outside it."""
    configs = yaml.safe_load(SCRAPE_CONFIGS.read_text())
    for config in configs:
        config.update({"scrape_interval": "1s", "scrape_timeout": "1s"})
        for sd in config["kubernetes_sd_configs"]:
            sd["api_server"] = kube.node.APISERVER
            sd["tls_config"] = {"ca_file": str(PKI / "ca.crt"),
                                "cert_file": str(PKI / "admin.crt"),
                                "key_file": str(PKI / "admin.key")}  # fmt: skip
    return {"global": {"scrape_interval": "1s"}, "scrape_configs": configs}


def scraped(prometheus: PrometheusAPI, namespace: str) -> list[dict[str, Any]]:
    """The up targets of the job's 3 pods and the operator, once all are there."""
    targets = [t for t in prometheus.targets() if t["health"] == "up"]
    jobs = [t for t in targets if t["labels"].get("namespace") == namespace]
    operator = [t for t in targets if t["labels"].get("syncreplicas_component") == "operator"]
    return jobs + operator if len(jobs) == 3 and operator else []


def label_sets(targets: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each target's labels but a job pod's `job` (the operator's names the PodMonitor)."""
    return sorted(({k: v for k, v in t["labels"].items()
                    if k != "job" or "syncreplicas_component" in t["labels"]}
                   for t in targets), key=lambda labels: sorted(labels.items()))  # fmt: skip


def _check_targets(prometheus: PrometheusAPI, namespace: str, workdir: Path) -> None:
    """Every replica pod and the operator are scraped, with the labels the chart's
    PodMonitor and ServiceMonitor give them; a plain Prometheus given the chart's
    files/scrape-configs.yaml instead finds the same targets with the same labels (a job
    pod's `job` aside)."""
    targets = kube.eventually("Prometheus scrapes the job's 3 pods and the operator",
                              lambda: scraped(prometheus, namespace), 60)  # fmt: skip
    with Prometheus(plain_config(), workdir, free_port(), PROMETHEUS_BIN) as plain:
        plain.wait_ready()
        # Each read again until they agree: an operator replica may turn ready meanwhile.
        seen: list[Any] = []

        def same() -> bool:
            seen[:] = [label_sets(scraped(plain, namespace)),
                       label_sets(scraped(prometheus, namespace))]
            return bool(seen[0]) and seen[0] == seen[1]

        try:
            kube.eventually("the plain Prometheus scrapes the same targets", same, 60)
        except AssertionError as error:
            raise AssertionError(f"{error}\nplain, operator's: {seen}") from error
    labels = sorted((t["labels"]["replica_type"], t["labels"]["replica_index"],
                     t["labels"]["pod"], t["labels"]["syncreplicas_job"])
                    for t in targets if "replica_type" in t["labels"])  # fmt: skip
    assert labels == [("chief", "0", f"{JOB}-chief-0", JOB), ("ps", "0", f"{JOB}-ps-0", JOB),
                      ("worker", "0", f"{JOB}-worker-0", JOB)], labels  # fmt: skip


def _check_dashboard(prometheus: PrometheusAPI, namespace: str, start: float,
                     end: float) -> list[dict[str, Any]]:  # fmt: skip
    """Every panel query, with the dashboard's variables as Grafana fills them in, returns
    data over the run, none of it NaN (result_fault, as the chart's test judges them)."""
    jobs = prometheus.api("label/syncreplicas_job/values",
                          {"match[]": f'syncreplicas_global_step{{namespace="{namespace}"}}'})
    assert jobs == [JOB], jobs
    # As Grafana fills them in for the chart's 2 s scrapes on this cluster.
    variables = {"namespace": namespace, "job": JOB, "__rate_interval": "8s",
                 "__interval": "2s", "__range": f"{int(end - start)}s",
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
            fault = result_fault(target["expr"], result)
            if fault:
                empty.append(f"{panel['title']}: {expr} -> {fault}")
    assert not empty, "panels without data or with NaN:\n" + "\n".join(empty)
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
