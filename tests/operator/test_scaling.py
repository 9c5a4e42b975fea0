"""The operator against kmock: elastic workers. A scale up creates the new workers' pods
(under the job's one Service), a scale down deletes the highest workers, and
neither restarts nor fails anything; an update the CRD's rules would refuse (workers out
of elasticPolicy's bounds, workers of a job without one) is not applied, naming the field.

One operator serves all these tests (see ``shared_cluster``); each has its own namespace.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

ELASTIC: dict[str, Any] = {
    "minReplicasToAggregate": 1,
    "elasticPolicy": {"minWorkers": 1, "maxWorkers": 6},
    "runPolicy": {"schedulingPolicy": {"gangScheduler": "Coscheduling"}},
}
POD_GROUPS = f"{naming.COSCHEDULING_API_VERSION}/{naming.POD_GROUP_PLURAL}"


def created(cluster: Cluster, namespace: str, kind: str) -> collections.Counter[str]:
    """Successful creations per name."""
    return collections.Counter(
        str((req.data or {}).get("metadata", {}).get("name"))
        for req in cluster.writes(f"/namespaces/{namespace}/{kind}", "POST")
        if req.status and 200 <= req.status[0] < 300
    )


def names(cluster: Cluster, resource: str, namespace: str, job: str) -> set[str]:
    return {o["metadata"]["name"] for o in cluster.objects(resource, namespace, job)}


def events(cluster: Cluster, namespace: str, reason: str) -> list[str]:
    return [
        str(e.get("message"))
        for e in cluster.objects("v1/events", namespace)
        if e.get("reason") == reason
    ]


def resizing(cluster: Cluster, namespace: str, job: str) -> tuple[str, str] | None:
    cond = cluster.condition(namespace, job, naming.CONDITION_RESIZING)
    return None if cond is None else (cond["status"], cond["reason"])


async def running(cluster: Cluster, namespace: str, job: str, pods: int, **spec: Any) -> None:
    await cluster.create_job(job_manifest(job, namespace, **spec))
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, job)) == pods, what="pods")
    await cluster.run_pods(namespace, job)
    await cluster.wait_for(
        lambda: cluster.status(namespace, job).get("ready") == f"{pods}/{pods}", what="ready"
    )


async def test_scale_up_then_down(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "scale"
    await running(c, ns, "el", 4, **ELASTIC)
    (group,) = c.objects(POD_GROUPS, ns, "el")
    assert group["spec"]["minMember"] == 1 + 2  # every PS + min(R, 1 + minWorkers)
    assert c.status(ns, "el")["workers"] == 2
    assert c.status(ns, "el")["workerSelector"] == (
        f"{naming.LABEL_JOB_NAME}=el,{naming.LABEL_REPLICA_TYPE}=worker"
    )

    # 2 -> 4: the new workers' pods (normal env for the new spec), under the job's Service.
    await c.patch_job(ns, "el", {"spec": {"workers": 4}})
    wanted = {"el-ps-0", "el-chief-0", *(f"el-worker-{i}" for i in range(4))}
    await c.wait_for(lambda: c.pod_names(ns, "el") == wanted, what="4 workers")
    assert names(c, "v1/services", ns, "el") == {"el"}
    await c.run_pods(ns, "el")
    await c.wait_for(lambda: c.status(ns, "el").get("ready") == "6/6", what="6 ready")
    await c.wait_for(lambda: resizing(c, ns, "el") == ("False", naming.REASON_RESIZED))
    assert c.status(ns, "el")["workers"] == 4
    assert events(c, ns, naming.REASON_RESIZING) == ["workers 2 -> 4 (elasticPolicy 1..6)"]
    assert naming.REASON_REPLICA_RESTARTED not in c.event_reasons(ns)
    # The gang's minMember does not move (minWorkers); the new pods are in the group.
    (group,) = c.objects(POD_GROUPS, ns, "el")
    assert group["spec"]["minMember"] == 1 + 2
    for pod in c.objects("v1/pods", ns, "el"):
        assert pod["metadata"]["labels"][naming.COSCHEDULING_POD_GROUP_LABEL] == "el"

    # 4 -> 1: the highest workers go; nothing comes back.
    await c.patch_job(ns, "el", {"spec": {"workers": 1}})
    wanted = {"el-ps-0", "el-chief-0", "el-worker-0"}
    await c.wait_for(lambda: c.pod_names(ns, "el") == wanted, what="1 worker")
    assert names(c, "v1/services", ns, "el") == {"el"}
    assert not list(c.writes(f"/namespaces/{ns}/services/", "DELETE"))
    deleted = [
        req.path.rsplit("/", 1)[-1] for req in c.writes(f"/namespaces/{ns}/pods/", "DELETE")
    ]
    # Planned highest first (tests/unit/test_plan_resize.py), sent together.
    assert sorted(deleted) == ["el-worker-1", "el-worker-2", "el-worker-3"]
    await c.wait_for(lambda: c.status(ns, "el").get("workers") == 1, what="status.workers 1")
    await c.wait_for(lambda: c.status(ns, "el").get("ready") == "3/3", what="3 ready")
    await asyncio.sleep(1.0)  # ample time for a wrong re-create
    assert c.pod_names(ns, "el") == wanted
    assert max(created(c, ns, "pods").values()) == 1
    status = c.status(ns, "el")
    assert status["phase"] == naming.PHASE_RUNNING
    assert status["replicaStatuses"]["worker"]["restarts"] == 0
    assert "lastRecovery" not in status
    # The pass that sees the last pod go ends the resize (a loaded CI run saw it later).
    await c.wait_for(lambda: resizing(c, ns, "el") == ("False", naming.REASON_RESIZED),
                     what="Resized")
    assert events(c, ns, naming.REASON_RESIZING) == [
        "workers 2 -> 4 (elasticPolicy 1..6)",
        "workers 4 -> 1 (elasticPolicy 1..6)",
    ]
    assert naming.REASON_REPLICA_RESTARTED not in c.event_reasons(ns)


async def test_a_removed_worker_that_exited_0_is_not_recreated(shared_cluster: Cluster) -> None:
    """The runtime's worker leaves at SIGTERM and exits 0: seen exited before it is seen
    deleted, it is neither restarted nor the job's end."""
    c, ns = shared_cluster, "scale-exit"
    await running(c, ns, "ex", 5, **{**ELASTIC, "workers": 3, "runPolicy": {}})
    await c.set_pod(ns, "ex-worker-2", "Succeeded", exit_code=0)
    await c.patch_job(ns, "ex", {"spec": {"workers": 2}})
    wanted = {"ex-ps-0", "ex-chief-0", "ex-worker-0", "ex-worker-1"}
    await c.wait_for(lambda: c.pod_names(ns, "ex") == wanted, what="worker-2 deleted")
    await c.wait_for(lambda: c.status(ns, "ex").get("workers") == 2, what="status.workers 2")
    await asyncio.sleep(1.0)
    assert c.pod_names(ns, "ex") == wanted
    assert created(c, ns, "pods")["ex-worker-2"] == 1
    status = c.status(ns, "ex")
    assert status["phase"] == naming.PHASE_RUNNING
    assert status["replicaStatuses"]["worker"]["restarts"] == 0


async def test_workers_out_of_bounds_are_refused_naming_the_field(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "scale-bounds"
    await running(c, ns, "ob", 4, **{**ELASTIC, "runPolicy": {}})
    await c.patch_job(ns, "ob", {"spec": {"workers": 9}})
    await c.wait_for(lambda: events(c, ns, naming.REASON_SPEC_CHANGE_REFUSED), what="refused")
    (message,) = events(c, ns, naming.REASON_SPEC_CHANGE_REFUSED)
    assert "spec.workers: must be <= elasticPolicy.maxWorkers (6), got 9" in message
    await asyncio.sleep(1.0)
    assert len(c.pod_names(ns, "ob")) == 4
    status = c.status(ns, "ob")
    assert status["phase"] == naming.PHASE_RUNNING and status["workers"] == 2
    # A valid update after it applies.
    await c.patch_job(ns, "ob", {"spec": {"workers": 3}})
    await c.wait_for(lambda: len(c.pod_names(ns, "ob")) == 5, what="3 workers")


async def test_workers_of_a_job_without_elastic_policy_are_refused(
    shared_cluster: Cluster,
) -> None:
    c, ns = shared_cluster, "scale-fixed"
    await running(c, ns, "fx", 4)
    await c.patch_job(ns, "fx", {"spec": {"workers": 3}})
    await c.wait_for(lambda: events(c, ns, naming.REASON_SPEC_CHANGE_REFUSED), what="refused")
    (message,) = events(c, ns, naming.REASON_SPEC_CHANGE_REFUSED)
    assert "spec.workers: can change only with spec.elasticPolicy" in message
    await asyncio.sleep(1.0)
    assert "fx-worker-2" not in c.pod_names(ns, "fx")
    assert c.status(ns, "fx")["phase"] == naming.PHASE_RUNNING
    assert c.condition(ns, "fx", naming.CONDITION_RESIZING) is None
