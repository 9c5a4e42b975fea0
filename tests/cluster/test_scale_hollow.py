"""A 200-worker job on the real control plane, its pods on kubemark hollow nodes (a real
kubelet with a fake container runtime): what the operator writes, counted from the API
server's audit log, not how fast (bench/operator.py --cluster has the times).

Every child is created once (no re-create, no conflict), no request of the operator fails
(no 409, 429 or 5xx), and the 202 pods turning Running cost a handful of status writes,
not one per pod event; once all run, the job's status says so. Deleting the job deletes
them all.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster import kube

WORKERS = 200
HOLLOW_NODES = 2
HOLLOW = "node.syncreplicas.io/hollow"
OPERATOR_USER = "system:serviceaccount:syncreplicas-system:syncreplicas-operator"
AUDIT_LOG = kube.node.RUN / "logs" / "audit.log"
# Status writes for the whole life below: created, every pod running, the status settling.
STATUS_WRITES_AT_MOST = 12


def hollow(count: int) -> None:
    subprocess.run([sys.executable, str(kube.REPO / "hack" / "cluster" / "cluster.py"),
                    "hollow", str(count)], check=True, timeout=300)  # fmt: skip


@pytest.fixture
def hollow_nodes(cluster_up: None) -> Iterator[None]:
    hollow(HOLLOW_NODES)
    try:
        yield
    finally:
        hollow(0)


def big_job(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "syncreplicas.io/v1alpha1", "kind": "SyncReplicasJob",
            "metadata": {"name": "big", "namespace": namespace},
            "spec": {"workers": WORKERS, "replicasToAggregate": 1, "parameterServers": 1,
                     "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
                     "template": {"spec": {
                         "nodeSelector": {HOLLOW: "true"},
                         "tolerations": [{"key": HOLLOW, "operator": "Exists",
                                          "effect": "NoSchedule"}],
                         "containers": [{"name": "syncreplicas"}]}}}}  # fmt: skip


def operator_requests(offset: int, namespace: str) -> list[dict[str, Any]]:
    out = []
    with AUDIT_LOG.open("rb") as log:
        log.seek(offset)
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (event.get("stage") == "ResponseComplete" and ref.get("namespace") == namespace
                    and event["user"].get("username") == OPERATOR_USER):  # fmt: skip
                out.append(event)
    return out


def running(namespace: str) -> int:
    out = kube.kubectl("get", "pods", "-n", namespace, "--no-headers",
                       "--field-selector=status.phase=Running").stdout  # fmt: skip
    return sum(1 for line in out.splitlines() if line.strip())


@pytest.mark.timeout(900)
def test_a_200_worker_job_costs_its_children_and_a_few_status_writes(
        namespace: str, hollow_nodes: None) -> None:  # fmt: skip
    offset = AUDIT_LOG.stat().st_size
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(big_job(namespace)))
    pods = WORKERS + 2
    kube.eventually("every pod Running on the hollow nodes",
                    lambda: running(namespace) == pods, 600, interval=2)  # fmt: skip

    def says_all_run() -> bool:
        said = kube.condition(kube.kubectl_json("get", "srj", "big", "-n", namespace),
                              "Running")  # fmt: skip
        return bool(said) and f"{WORKERS + 1} of {WORKERS + 1} replicas" in said["message"]

    kube.eventually("the status says every replica runs", says_all_run, 120)
    placed = kube.kubectl_json("get", "pods", "-n", namespace)["items"]
    assert all(p["spec"]["nodeName"].startswith("syncreplicas-hollow-") for p in placed)
    time.sleep(3)  # the status write that follows the last pod event
    requests = operator_requests(offset, namespace)
    by: collections.Counter[str] = collections.Counter()
    errors = []
    for event in requests:
        ref = event["objectRef"]
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        by[f"{event['verb']} {resource}"] += 1
        code = int(event.get("responseStatus", {}).get("code", 0))
        if code in (409, 429) or code >= 500:
            errors.append((event["verb"], resource, ref.get("name"), code))
    print("operator requests:", dict(sorted(by.items())))
    assert not errors, errors
    assert by["create pods"] == pods, by
    assert by["create services"] == pods, by
    assert by["create networkpolicies"] == 1, by
    assert not by["delete pods"] and not by["delete services"], by
    assert by["patch syncreplicasjobs/status"] <= STATUS_WRITES_AT_MOST, by

    kube.kubectl("delete", "srj", "big", "-n", namespace, "--timeout=300s", timeout=320)
    kube.eventually("its children gone", lambda: not kube.kubectl(
        "get", "pods,services", "-n", namespace, "--no-headers").stdout.strip(), 300)
