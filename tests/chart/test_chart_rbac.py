"""The chart's RBAC against what the real operator does to the API.

The real operator (`syncreplicas operator`, a subprocess) runs a job's whole life against
kmock as the API server: create, pods running, chief succeeded (PS and workers cleaned up),
TTL deletion, and a user deleting a job (finalizer released). Every request it made is
turned into the (API group, resource, verb) that RBAC would check. Each must be granted by
the rendered ClusterRole; each grant must have been used, or be listed below with the code
path that needs it.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kmock
import pytest
import pytest_asyncio
from chartlib import REPO, by_kind, one, operator_objects, render
from syncreplicas_operator.core import naming

from tests.support.tfcluster import metric_value

# The operator tests' kmock harness: the operator process and a kubelet's part.
sys.path.insert(0, str(REPO / "tests" / "operator"))
from kmockharness import RESOURCES, VERBS, Cluster, job_manifest

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

NAMESPACE = "team-rbac"
Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

# Granted but not reached by the scenario below, with the path that needs each.
NOT_EXERCISED: dict[Permission, str] = {
    # The same code path as scheduler-plugins' PodGroups (the job's gangScheduler picks the
    # API group); the kmock server here serves only scheduler-plugins' PodGroup API.
    ("scheduling.volcano.sh", "podgroups", "list"): "controller.listing.pod_group_exists (Volcano)",
    ("scheduling.volcano.sh", "podgroups", "create"): "plan.children.reconcile_children (Volcano)",
    ("scheduling.volcano.sh", "podgroups", "delete"): "plan.lifecycle.release_pod_group (Volcano)",
    # A spare taking a replica over is relabelled (runPolicy.spares): the life here keeps no
    # spare (exercised against kmock in tests/operator/test_spare_takeover.py, on the
    # cluster under the chart's RBAC in tests/cluster/test_spares.py).
    ("", "pods", "patch"): "controller.apply._assign_spare (runPolicy.spares)",
}


def rbac_verb(req: kmock.Request) -> str:
    method = str(req.method).upper().rsplit(".", 1)[-1]
    if method == "GET":
        if req.action == kmock.action.WATCH or req.params.get("watch") in ("true", "1"):
            return "watch"
        return "get" if req.name else "list"
    return {
        "POST": "create",
        "PATCH": "patch",
        "PUT": "update",
        "DELETE": "delete" if req.name else "deletecollection",
    }[method]


# Who sent a request: kopf and the kubernetes client (k8s.py) are the operator; the
# harness's own aiohttp session plays the user and the kubelet.
OPERATOR_AGENTS = ("kopf/", "OpenAPI-Generator/")


def used_permissions(cluster: Cluster) -> set[Permission]:
    used: set[Permission] = set()
    for req in list(cluster.server):
        if not str(req.headers.get("User-Agent", "")).startswith(OPERATOR_AGENTS):
            continue
        if req.resource is None or not req.resource.plural:
            continue  # discovery (/api, /apis/...): no RBAC resource
        resource = req.resource.plural + (f"/{req.subresource}" if req.subresource else "")
        used.add((req.resource.group or "", resource, rbac_verb(req)))
    return used


def granted_permissions(sets: list[str]) -> set[Permission]:
    """Every grant of the operator's roles (its own, and node-loss handling's)."""
    objects = operator_objects(render(sets=sets))
    return {
        (group, resource, verb)
        for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


async def cluster_get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text()


@pytest_asyncio.fixture()
async def cluster(kmock: kmock.KubernetesEmulator, tmp_path: Path) -> AsyncIterator[Cluster]:
    for resource, info in RESOURCES.items():
        kmock.resources[resource] = {**info, "verbs": VERBS}
    c = Cluster(kmock, tmp_path)
    try:
        yield c
    finally:
        await c.close()


def election_args() -> list[str]:
    """The chart's leader-election arguments of the operator, as rendered."""
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return [a for a in container["args"] if a.startswith("--leader-elect")]


async def test_rbac_covers_exactly_what_the_operator_does(cluster: Cluster) -> None:
    # As the chart runs it: one of several replicas, leading through the Lease.
    operator = await cluster.start_operator(*election_args())
    # A job through its whole life (gang-scheduled: its PodGroup comes and goes), deleted
    # by its TTL.
    run_policy = {
        "ttlSecondsAfterFinished": 1,
        "schedulingPolicy": {"gangScheduler": "Coscheduling"},
    }
    await cluster.create_job(job_manifest("life", NAMESPACE, workers=1, runPolicy=run_policy))
    await cluster.wait_for(lambda: len(cluster.pod_names(NAMESPACE, "life")) == 3, what="pods")
    await cluster.run_pods(NAMESPACE, "life")
    await cluster.wait_for(lambda: cluster.status(NAMESPACE, "life").get("phase") == "Running")
    await cluster.set_pod(NAMESPACE, "life-chief-0", "Succeeded", exit_code=0)
    await cluster.wait_for(
        lambda: cluster.pod_names(NAMESPACE, "life") == {"life-chief-0"}, what="cleanup"
    )
    await cluster.wait_for(lambda: cluster.job(NAMESPACE, "life") is None, what="TTL deletion")
    # A Service left over from an earlier job of the same name with more workers (the
    # garbage collector had not caught up): out of range, the operator deletes it.
    leftover = naming.replica_name("gone", naming.WORKER, 7)
    status, body = await cluster.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": leftover,
                "namespace": NAMESPACE,
                "uid": str(uuid.uuid4()),
                "resourceVersion": "1",
                "labels": naming.replica_labels("gone", naming.WORKER, 7),
            },
            "spec": {"clusterIP": "None", "ports": [{"name": "tf", "port": naming.TF_PORT}]},
        },
    )
    assert status in (200, 201), body
    # A job a user deletes while it runs: the operator releases its finalizer.
    await cluster.create_job(job_manifest("gone", NAMESPACE, workers=1))
    await cluster.wait_for(lambda: len(cluster.pod_names(NAMESPACE, "gone")) == 3, what="pods")
    await cluster.wait_for(
        lambda: (
            leftover
            not in {s["metadata"]["name"] for s in cluster.objects("v1/services", NAMESPACE)}
        ),
        what="leftover Service deleted",
    )
    base = f"/apis/{naming.API_VERSION}/namespaces/{NAMESPACE}/{naming.PLURAL}"
    await cluster.delete(f"{base}/gone")
    await cluster.wait_for(lambda: cluster.job(NAMESPACE, "gone") is None, what="finalizer")

    # The endpoints the chart's probes and ServiceMonitor use answer on this operator.
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    probe_path = container["livenessProbe"]["httpGet"]["path"]
    status, _ = await cluster_get(f"http://127.0.0.1:{operator.liveness_port}{probe_path}")
    assert status == 200
    metrics = await operator.metrics_text()
    assert (metric_value(metrics, "syncreplicas_operator_pods_created_total") or 0) >= 6
    assert (metric_value(metrics, "syncreplicas_operator_reconcile_seconds_count") or 0) > 0

    # Stopped (SIGTERM), the leader releases the Lease.
    os.killpg(operator.proc.pid, signal.SIGTERM)
    await cluster.wait_for(lambda: operator.proc.poll() is not None, what="the operator's exit")
    used = used_permissions(cluster)
    for sets in ([], [f"watchNamespaces={{{NAMESPACE}}}"]):
        granted = granted_permissions(sets)
        missing = used - granted
        assert not missing, f"the operator needs permissions the chart does not grant: {missing}"
        unused = granted - used - set(NOT_EXERCISED)
        assert not unused, f"the chart grants permissions the operator never used: {unused}"
