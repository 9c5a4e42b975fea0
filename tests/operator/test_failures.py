"""The operator against kmock: gang scheduling, and the failures users hit with TFJob.

Each failure test names the kubeflow/training-operator issue it guards against. One
operator serves all these tests (``shared_cluster``); each has its own namespace.
"""

from __future__ import annotations

import asyncio
import collections
from datetime import UTC, datetime, timedelta

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]


def posts(cluster: Cluster, namespace: str, kind: str = "pods") -> collections.Counter[str]:
    """Answered creations per name."""
    return collections.Counter(
        str((req.data or {}).get("metadata", {}).get("name"))
        for req in cluster.writes(f"/namespaces/{namespace}/{kind}", "POST")
        if req.status and 200 <= req.status[0] < 300
    )


def event(cluster: Cluster, namespace: str, reason: str) -> dict[str, object] | None:
    return next((e for e in cluster.objects("v1/events", namespace) if e["reason"] == reason), None)


async def running(c: Cluster, ns: str, name: str, pods: int, **spec: object) -> None:
    await c.create_job(job_manifest(name, ns, **spec))
    await c.wait_for(lambda: len(c.pod_names(ns, name)) == pods, what="pods")
    await c.run_pods(ns, name)
    await c.wait_for(lambda: c.status(ns, name).get("phase") == naming.PHASE_RUNNING)


# --- gang scheduling -----------------------------------------------------------------------

PODGROUPS = f"{naming.COSCHEDULING_API_VERSION}/{naming.POD_GROUP_PLURAL}"


async def test_coscheduling_pod_group_first_and_deleted_when_the_job_ends(
    shared_cluster: Cluster,
) -> None:
    c, ns = shared_cluster, "gang"
    policy = {"gangScheduler": "Coscheduling", "scheduleTimeoutSeconds": 120}
    run_policy = {"schedulingPolicy": policy}
    job = await c.create_job(
        job_manifest("gg", ns, workers=3, replicasToAggregate=2, runPolicy=run_policy)
    )
    await c.wait_for(lambda: len(c.pod_names(ns, "gg")) == 5, what="pods")
    (group,) = c.objects(PODGROUPS, ns)
    assert group["spec"] == {"minMember": 1 + 2, "scheduleTimeoutSeconds": 120}
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    creations = [
        r.path.rsplit("/", 1)[-1]
        for r in c.writes(f"/namespaces/{ns}/", "POST")
        if not r.path.endswith(("/events", naming.PLURAL))
    ]
    assert creations[0] == naming.POD_GROUP_PLURAL  # first: the scheduler waits for it
    for pod in c.objects("v1/pods", ns, "gg"):
        assert pod["spec"]["schedulerName"] == naming.COSCHEDULING_SCHEDULER_NAME
        assert pod["metadata"]["labels"][naming.COSCHEDULING_POD_GROUP_LABEL] == "gg"
    await c.run_pods(ns, "gg")
    await c.set_pod(ns, "gg-chief-0", "Succeeded", exit_code=0)
    await c.wait_for(lambda: c.status(ns, "gg").get("phase") == naming.PHASE_SUCCEEDED)
    await c.wait_for(lambda: not c.objects(PODGROUPS, ns), what="PodGroup deleted")


async def test_a_missing_gang_scheduler_fails_the_job_naming_its_api(
    shared_cluster: Cluster,
) -> None:
    c, ns = shared_cluster, "gang-missing"
    await c.create_job(
        job_manifest("gm", ns, runPolicy={"schedulingPolicy": {"gangScheduler": "Volcano"}})
    )
    await c.wait_for(lambda: c.status(ns, "gm").get("phase") == naming.PHASE_FAILED)
    failed = c.condition(ns, "gm", naming.CONDITION_FAILED)
    assert failed is not None and failed["reason"] == naming.REASON_GANG_SCHEDULER_MISSING
    assert naming.VOLCANO_API_VERSION in failed["message"]
    assert event(c, ns, naming.REASON_GANG_SCHEDULER_MISSING) is not None
    assert not c.pod_names(ns, "gm")  # no pod left Pending forever


# --- failures users hit with TFJob ----------------------------------------------------------


async def test_pods_deleted_after_the_job_finished_are_not_run_again(
    shared_cluster: Cluster,
) -> None:
    """kubeflow/training-operator#1186."""
    c, ns = shared_cluster, "finished-deleted"
    await running(c, ns, "fd", 4)
    await c.set_pod(ns, "fd-chief-0", "Succeeded", exit_code=0)
    await c.wait_for(lambda: c.pod_names(ns, "fd") == {"fd-chief-0"}, what="clean-up")
    before = sum(posts(c, ns).values())
    await c.delete(f"/api/v1/namespaces/{ns}/pods/fd-chief-0")  # the pod GC, or a user
    await asyncio.sleep(1.5)  # ample time for a wrong re-create
    assert not c.pod_names(ns, "fd")
    assert sum(posts(c, ns).values()) == before
    assert c.status(ns, "fd")["phase"] == naming.PHASE_SUCCEEDED


async def test_an_evicted_ps_is_restarted_and_its_cause_named(shared_cluster: Cluster) -> None:
    """kubeflow/training-operator#1560, #999: eviction is not a job failure."""
    c, ns = shared_cluster, "evicted"
    await running(c, ns, "ev", 4, runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 0})
    await c.set_pod(
        ns, "ev-ps-0", "Failed", exit_code=137, reason="Evicted",
        message="The node was low on resource: memory.",
    )  # fmt: skip
    await c.wait_for(lambda: posts(c, ns)["ev-ps-0"] == 2, what="PS re-created")
    restarting = c.condition(ns, "ev", naming.CONDITION_RESTARTING)
    assert restarting is not None and "Evicted: The node was low" in restarting["message"]
    news = event(c, ns, naming.REASON_REPLICA_RESTARTED)
    assert news is not None and "Evicted" in str(news["message"])
    status = c.status(ns, "ev")
    assert status["phase"] != naming.PHASE_FAILED
    assert status["replicaStatuses"]["ps"]["restarts"] == 0  # backoffLimit 0 not spent


async def test_a_deleted_worker_is_replaced_and_named(shared_cluster: Cluster) -> None:
    """kubeflow/training-operator#1570: a deleted pod is not a job failure."""
    c, ns = shared_cluster, "deleted"
    await running(c, ns, "dl", 4, runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 0})
    await c.delete(f"/api/v1/namespaces/{ns}/pods/dl-worker-0")
    await c.wait_for(lambda: posts(c, ns)["dl-worker-0"] == 2, what="worker re-created")
    news = await c.wait_for(lambda: event(c, ns, naming.REASON_REPLICA_RESTARTED))
    assert "dl-worker-0: deleted while the job ran" in str(news["message"])
    await c.wait_for(lambda: c.status(ns, "dl").get("phase") == naming.PHASE_RESTARTING)
    await c.run_pods(ns, "dl")
    await c.wait_for(lambda: c.status(ns, "dl").get("phase") == naming.PHASE_RUNNING)


async def test_a_preempted_pod_stuck_terminating_is_force_deleted_and_replaced(
    shared_cluster: Cluster,
) -> None:
    """kubeflow/training-operator#1570, #2072: a pod on a lost node never goes by itself."""
    c, ns = shared_cluster, "stuck"
    await running(c, ns, "st", 4)
    long_ago = (datetime.now(UTC) - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # The taint manager evicted it; its kubelet is gone, so it stays Terminating. The
    # finalizer keeps kmock from removing it (it stands for the kubelet's confirmation).
    status, body = await c.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/st-worker-1",
        {
            "metadata": {"deletionTimestamp": long_ago, "finalizers": ["test/kubelet"]},
            "status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True",
                "reason": "DeletionByTaintManager", "message": "Taint manager: NoExecute taint",
            }]},
        },
    )  # fmt: skip
    assert status == 200, body

    def forced() -> bool:
        return any(
            (r.data or {}).get("gracePeriodSeconds") == 0
            for r in c.writes(f"/namespaces/{ns}/pods/st-worker-1", "DELETE")
        )

    await c.wait_for(forced, what="DELETE with gracePeriodSeconds 0")
    await c.wait_for(lambda: event(c, ns, naming.REASON_FORCE_DELETED), what="ForceDeleted")
    news = await c.wait_for(lambda: event(c, ns, naming.REASON_REPLICA_RESTARTED))
    assert "DeletionByTaintManager" in str(news["message"])
    # The API server removes a pod deleted with grace 0 at once (kmock: drop the finalizer).
    status, body = await c.request(
        "PATCH", f"/api/v1/namespaces/{ns}/pods/st-worker-1", {"metadata": {"finalizers": []}}
    )
    assert status == 200, body
    await c.wait_for(lambda: posts(c, ns)["st-worker-1"] == 2, what="replacement")


async def test_a_failed_ps_under_never_fails_the_job_at_once(shared_cluster: Cluster) -> None:
    """kubeflow/training-operator#881: never Running for hours with a dead PS."""
    c, ns = shared_cluster, "ps-never"
    await running(c, ns, "pn", 4, runPolicy={"restartPolicy": "Never"})
    await c.set_pod(ns, "pn-ps-0", "Failed", exit_code=1)
    await c.wait_for(lambda: c.status(ns, "pn").get("phase") == naming.PHASE_FAILED)
    failed = c.condition(ns, "pn", naming.CONDITION_FAILED)
    assert failed is not None and "pn-ps-0" in failed["message"]
    running_condition = c.condition(ns, "pn", naming.CONDITION_RUNNING)
    assert running_condition is not None and running_condition["status"] == "False"
    await c.wait_for(lambda: c.pod_names(ns, "pn") == {"pn-ps-0"}, what="others stopped")
    assert posts(c, ns)["pn-ps-0"] == 1
