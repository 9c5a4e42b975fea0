"""spec.managedBy against kmock, the operator with --kueue on: a job of another controller
gets nothing from the operator but one Event; a job MultiKueue dispatches gets its Workload
(so that Kueue can admit and dispatch it) and one Event, and never a pod, Service, policy
or status write, even once its Workload is admitted; a worker cluster's copy of such a job
(the label kueue.x-k8s.io/prebuilt-workload-name) runs under the Workload MultiKueue made,
none of its own; a job naming this operator runs as any other."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import kueue

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

KUEUE = f"/apis/{kueue.API_VERSION}"
CHILDREN = ("/pods", "/services", "/networkpolicies", "/poddisruptionbudgets", "/status")


def workloads(c: Cluster, ns: str) -> list[dict[str, Any]]:
    return c.objects(f"{kueue.API_VERSION}/workloads", ns)


def writes_for(c: Cluster, ns: str, job: str) -> list[str]:
    """The operator's writes of the job's children and status (not the test's own, as
    Kueue, of the Workload's status)."""
    return [f"{w.method} {w.path}" for w in c.writes(f"/namespaces/{ns}/")
            if any(part in w.path for part in CHILDREN) and job in w.path
            and "/workloads/" not in w.path]  # fmt: skip


def managed(name: str, ns: str, by: str, queue: str | None = "lq",
            prebuilt: str | None = None) -> dict[str, Any]:  # fmt: skip
    manifest = job_manifest(name, ns)
    manifest["spec"]["managedBy"] = by
    labels = {kueue.QUEUE_NAME_LABEL: queue} if queue else {}
    if prebuilt:
        labels[kueue.PREBUILT_WORKLOAD_LABEL] = prebuilt
    manifest["metadata"]["labels"] = labels
    return manifest


async def test_the_operator_runs_only_its_own_jobs_and_writes_a_dispatched_jobs_workload(
    cluster: Cluster,
) -> None:
    c, ns = cluster, "managed"
    await c.start_operator("--kueue", "on")
    await c.create_job(managed("other", ns, "example.com/controller", queue=None))
    await c.create_job(managed("dispatched", ns, "kueue.x-k8s.io/multikueue"))
    await c.create_job(managed("own", ns, "syncreplicas.io/operator", queue=None))

    await c.wait_for(lambda: len(c.pod_names(ns, "own")) == 4, what="its own job's pods")
    (wl,) = await c.wait_for(lambda: workloads(c, ns), what="the dispatched job's Workload")
    assert wl["metadata"]["labels"]["syncreplicas.io/job-name"] == "dispatched"
    assert wl["metadata"]["ownerReferences"][0]["name"] == "dispatched"
    assert wl["spec"]["queueName"] == "lq"
    await c.wait_for(lambda: c.event_reasons(ns).count("ManagedElsewhere") == 2,
                     what="one Event for each job of another")  # fmt: skip
    events = {e["involvedObject"]["name"]: e["message"] for e in c.objects("v1/events", ns)
              if e.get("reason") == "ManagedElsewhere"}  # fmt: skip
    assert "leaves it alone" in events["other"], events
    assert "worker cluster" in events["dispatched"] and "lq" in events["dispatched"], events

    # Admitted (MultiKueue's check Ready): still nothing here; a change of the job wakes
    # the loop, which says nothing again.
    assignments = [{"name": n, "count": k, "flavors": {"cpu": "f"}}
                   for n, k in (("ps", 1), ("chief", 1), ("worker", 2))]  # fmt: skip
    status, body = await c.request(
        "PATCH", f"{KUEUE}/namespaces/{ns}/workloads/{wl['metadata']['name']}/status",
        {"status": {"admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
                    "conditions": [{"type": t, "status": "True", "reason": t, "message": t,
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}
                                   for t in ("QuotaReserved", "Admitted")]}})  # fmt: skip
    assert status == 200, body
    await c.patch_job(ns, "dispatched", {"metadata": {"annotations": {"touched": "1"}}})
    await c.patch_job(ns, "other", {"metadata": {"annotations": {"touched": "1"}}})
    await asyncio.sleep(1.5)
    assert writes_for(c, ns, "dispatched") == [] and writes_for(c, ns, "other") == []
    assert not c.pod_names(ns, "dispatched") and not c.pod_names(ns, "other")
    assert c.status(ns, "dispatched") == {} and c.status(ns, "other") == {}
    assert len(workloads(c, ns)) == 1
    assert c.event_reasons(ns).count("ManagedElsewhere") == 2


async def test_a_worker_clusters_copy_runs_under_the_workload_multikueue_made(
    cluster: Cluster,
) -> None:
    c, ns = cluster, "worker-side"
    await c.start_operator("--kueue", "on")
    # MultiKueue's copy: managedBy removed, its Workload named by the label.
    await c.create_job(managed("copy", ns, "syncreplicas.io/operator", prebuilt="wl-copy"))
    await c.wait_for(lambda: (c.condition(ns, "copy", "Suspended") or {}).get("reason")
                     == "Queued", what="the copy held for its Workload")  # fmt: skip
    assert "wl-copy" in c.condition(ns, "copy", "Suspended")["message"]  # type: ignore[index]
    await asyncio.sleep(1.0)
    assert workloads(c, ns) == [] and not c.pod_names(ns, "copy")


async def test_a_dispatched_job_naming_no_priority_class_gets_a_warning_and_no_workload(
    cluster: Cluster,
) -> None:
    c, ns = cluster, "managed-refused"
    await c.start_operator("--kueue", "on")
    manifest = managed("unranked", ns, "kueue.x-k8s.io/multikueue")
    manifest["metadata"]["labels"][kueue.PRIORITY_CLASS_LABEL] = "no-such-class"
    await c.create_job(manifest)

    def warned() -> list[dict[str, Any]]:
        return [e for e in c.objects("v1/events", ns)
                if e.get("type") == "Warning" and e.get("reason") == "Queued"]  # fmt: skip

    (event,) = await c.wait_for(warned, what="a Warning naming the priority class")
    assert "no-such-class" in event["message"] and kueue.PRIORITY_CLASS_LABEL in event[
        "message"], event  # fmt: skip
    # Said once: another pass (a change of the job) is silent while the problem stays.
    await c.patch_job(ns, "unranked", {"metadata": {"annotations": {"touched": "1"}}})
    await asyncio.sleep(1.5)
    assert len(warned()) == 1 and workloads(c, ns) == []
    assert writes_for(c, ns, "unranked") == [] and c.status(ns, "unranked") == {}
