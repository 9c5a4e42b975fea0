"""The operator with --kueue on, against kmock, the test playing Kueue's part: a queued job
gets a Workload and no pod; admitted, its pods come with the flavor's node labels; evicted,
its pods go and then the quota is given back; admitted again, it comes back. A job without
the label never gets a Workload."""

from __future__ import annotations

from typing import Any

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import kueue

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

KUEUE = f"/apis/{kueue.API_VERSION}"


def workloads(c: Cluster, ns: str) -> list[dict[str, Any]]:
    return c.objects(f"{kueue.API_VERSION}/workloads", ns)


def conditions(*pairs: tuple[str, bool, str]) -> list[dict[str, Any]]:
    return [{"type": t, "status": "True" if v else "False", "reason": r, "message": r,
             "lastTransitionTime": "2026-01-01T00:00:00Z"} for t, v, r in pairs]  # fmt: skip


async def admit(c: Cluster, ns: str, name: str, *pairs: tuple[str, bool, str]) -> None:
    """Kueue's scheduler: quota reserved on flavor pool-a, admitted."""
    assignments = [{"name": n, "count": k, "flavors": {"cpu": "pool-a"}}
                   for n, k in (("ps", 1), ("chief", 1), ("worker", 2))]  # fmt: skip
    status, body = await c.request("PATCH", f"{KUEUE}/namespaces/{ns}/workloads/{name}/status", {
        "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
                   "conditions": conditions(("QuotaReserved", True, "QuotaReserved"),
                                            ("Admitted", True, "Admitted"), *pairs)}})  # fmt: skip
    assert status == 200, body


async def test_a_queued_job_waits_for_admission_runs_on_its_flavor_and_yields_to_eviction(
    cluster: Cluster,
) -> None:
    c, ns = cluster, "queued"
    for plural, body in (
        ("resourceflavors",
         {"metadata": {"name": "pool-a"}, "spec": {"nodeLabels": {"pool": "a"}}}),
        ("workloadpriorityclasses", {"metadata": {"name": "high"}, "value": 1000}),
    ):  # fmt: skip
        status, answer = await c.request("POST", f"{KUEUE}/{plural}", {
            "apiVersion": kueue.API_VERSION, **body})  # fmt: skip
        assert status in (200, 201), answer
    await c.start_operator("--kueue", "on")
    manifest = job_manifest("q", ns)
    manifest["metadata"]["labels"] = {kueue.QUEUE_NAME_LABEL: "lq",
                                      kueue.PRIORITY_CLASS_LABEL: "high"}  # fmt: skip
    await c.create_job(manifest)
    plain = job_manifest("plain", ns)
    await c.create_job(plain)

    (wl,) = await c.wait_for(lambda: workloads(c, ns), what="the queued job's Workload")
    name = wl["metadata"]["name"]
    assert wl["spec"]["queueName"] == "lq" and wl["spec"]["priority"] == 1000
    assert [(s["name"], s["count"]) for s in wl["spec"]["podSets"]] == [
        ("ps", 1), ("chief", 1), ("worker", 2)]  # fmt: skip
    await c.wait_for(lambda: c.pod_names(ns, "plain"), what="the job without a queue runs")
    await c.wait_for(lambda: (c.condition(ns, "q", "Suspended") or {}).get("reason") == "Queued",
                     what="the queued job says Queued")  # fmt: skip
    assert not c.pod_names(ns, "q")
    assert len(workloads(c, ns)) == 1  # none for the job without a queue

    await admit(c, ns, name)
    await c.wait_for(lambda: len(c.pod_names(ns, "q")) == 4, what="pods once admitted")
    for pod in c.objects("v1/pods", ns, "q"):
        assert pod["spec"]["nodeSelector"]["pool"] == "a", pod["spec"]
    await c.wait_for(lambda: (c.condition(ns, "q", "Suspended") or {}).get("status") == "False",
                     what="the job no longer suspended")  # fmt: skip
    await c.run_pods(ns, "q")

    # Evicted (preempted): the pods go, then the quota is given back.
    await admit(c, ns, name, ("Evicted", True, "Preempted"), ("Preempted", True, "InClusterQueue"))
    await c.wait_for(lambda: not c.pod_names(ns, "q"), what="the evicted job's pods deleted")
    await c.wait_for(lambda: (workloads(c, ns)[0].get("status") or {}).get("admission") is None,
                     what="the quota given back")  # fmt: skip
    released = {x["type"]: (x["status"], x["reason"])
                for x in workloads(c, ns)[0]["status"]["conditions"]}  # fmt: skip
    assert released["QuotaReserved"] == ("False", "Pending"), released
    assert released["Requeued"] == ("True", "Preempted"), released
    assert (c.condition(ns, "q", "Suspended") or {}).get("status") == "True"
    assert "EvictedByKueue" in c.event_reasons(ns)

    # Admitted again: back.
    await admit(c, ns, name, ("Evicted", False, "Admitted"))
    await c.wait_for(lambda: len(c.pod_names(ns, "q")) == 4, what="pods after re-admission")
