"""The metrics port of a job admits only the namespaces the chart names
(`networkPolicy.metricsFromNamespaces`), on the cluster whose kube-router enforces it.

A helm upgrade sets the value (the operator's replicas roll: a hand-over) and every job
created meanwhile gets a policy that admits only that namespace's pods (and the
operator's) to its metrics port: the cluster's Prometheus, in its own namespace, would
no longer scrape them. So this test has the cluster alone (`exclusive`); the rest of the
door's tests (test_network_policy.py) share it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.slowjob import paced_template
from tests.cluster.test_network_policy import ENFORCED_WITHIN, METRICS, probe_pod, tcp

pytestmark = pytest.mark.exclusive


@pytest.fixture(scope="module")
def probes(cluster_up: None) -> Iterator[dict[str, Any]]:
    """Two namespaces, each with a pod that is no job's: the intruder in the namespace the
    chart will name, the bystander in the job's own."""
    stamp = f"{int(time.time()) % 100000}"
    namespace, other = f"npm-job-{stamp}", f"npm-other-{stamp}"
    for name in (namespace, other):
        kube.kubectl("create", "namespace", name)
    try:
        kube.kubectl("apply", "-n", other, "-f", "-", input=json.dumps(probe_pod("intruder")))
        kube.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(probe_pod("bystander")))
        for ns, pod in ((other, "intruder"), (namespace, "bystander")):
            kube.kubectl("wait", "--for=condition=Ready", f"pod/{pod}", "-n", ns, "--timeout=120s")
        yield {"namespace": namespace, "other": other,
               "probes": [(other, "intruder"), (namespace, "bystander")]}  # fmt: skip
    finally:
        for name in (namespace, other):
            kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def operator_rollout(*args: str) -> None:
    """A helm upgrade (or rollback) of the chart, waited for until the replicas of the
    release before it are gone (stopping ones included: they must not act on the old
    settings afterwards) and a replica leads."""
    kube.rollout(*args)

    def one_generation() -> bool:
        pods = kube.pods(kube.RELEASE_NAMESPACE, kube.OPERATOR_PODS)
        return len({p["metadata"]["labels"].get("pod-template-hash") for p in pods}) == 1

    kube.eventually("only the new operator replicas", one_generation, 90)
    kube.eventually("an operator replica leading", kube.leader_pod, 60)


@pytest.mark.timeout(600)
def test_the_metrics_port_admits_only_the_namespaces_the_chart_names(
    probes: dict[str, Any],
) -> None:
    """`networkPolicy.metricsFromNamespaces`: a job created under it admits the metrics
    port from those namespaces' pods (and the operator's), from no one else."""
    namespace, other = probes["namespace"], probes["other"]
    operator_rollout("upgrade", kube.RELEASE, str(kube.CHART), "-n", kube.RELEASE_NAMESPACE,
                     "--reuse-values", "--set", f"networkPolicy.metricsFromNamespaces={{{other}}}")
    try:
        job = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
        job["metadata"]["name"] = "watched"
        job["spec"].update({"workers": 1, "replicasToAggregate": 2, "parameterServers": 1})
        job["spec"]["training"]["maxSteps"] = 1_000_000
        # It only has to run (its metrics ports are what is probed): slow steps, little CPU.
        job["spec"]["template"] = paced_template(200)
        kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))
        policy = kube.eventually("the new job's policy", lambda: kube.kubectl_json(
            "get", "networkpolicy", "watched-grpc", "-n", namespace), 60)  # fmt: skip
        (selector,) = policy["spec"]["ingress"][1]["from"]
        named = selector["namespaceSelector"]["matchExpressions"][0]["values"]
        assert named == sorted([other, kube.RELEASE_NAMESPACE]), policy

        def watched() -> list[str] | None:
            pods = kube.pods(namespace, "syncreplicas.io/job-name=watched")
            ips = [p["status"].get("podIP") for p in pods if p["status"].get("phase") == "Running"]
            return [f"{ip}:{METRICS}" for ip in ips] if len(ips) == 3 and all(ips) else None

        metrics = kube.eventually("the new job's pods running", watched, 120)
        intruder, bystander = probes["probes"]
        # From the namespace named: every metrics port (once each server listens).
        kube.eventually("metrics open to the namespace named", lambda: set(
            tcp(intruder, metrics).values()) == {"open"}, ENFORCED_WITHIN)  # fmt: skip
        # From the job's own namespace, not named: none.
        assert "open" not in tcp(bystander, metrics).values()
        # The operator, in its own namespace, still reads them: the job's global step moves.
        kube.eventually("the operator reading the chief's step", lambda: int((kube.kubectl_json(
            "get", "srj", "watched", "-n", namespace).get("status") or {}).get(
            "globalStep") or 0) > 0, 120)  # fmt: skip
    finally:
        kube.kubectl("delete", "srj", "watched", "-n", namespace, "--wait=false", check=False)
        operator_rollout("rollback", kube.RELEASE, "-n", kube.RELEASE_NAMESPACE)
