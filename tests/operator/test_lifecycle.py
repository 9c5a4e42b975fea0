"""The operator against kmock: a job's life from creation to success, TTL, suspend, delete."""

from __future__ import annotations

import asyncio
import collections

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

# Tests that kill the operator start their own; the others share one (``shared_cluster``).
pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]


def pod_posts(cluster: Cluster, namespace: str) -> collections.Counter[str]:
    """How many times each pod name was POSTed and answered (created, or 409 Conflict).

    A request cut off by a killed client and never answered does not count: the server
    did not act on it either way."""
    return collections.Counter(
        str((req.data or {}).get("metadata", {}).get("name"))
        for req in cluster.writes(f"/namespaces/{namespace}/pods", "POST")
        if req.status
    )


async def test_create_makes_every_child_once(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "create"
    job = await cluster.create_job(job_manifest("alpha", namespace, workers=3, parameterServers=2))
    expected = {"alpha-ps-0", "alpha-ps-1", "alpha-chief-0"}
    expected |= {f"alpha-worker-{i}" for i in range(3)}
    await cluster.wait_for(lambda: cluster.pod_names(namespace, "alpha") == expected, what="pods")
    await cluster.wait_for(
        lambda: (
            [s["metadata"]["name"] for s in cluster.objects("v1/services", namespace, "alpha")]
            == ["alpha"]
        ),
        what="the job's service",
    )
    await cluster.wait_for(
        lambda: cluster.objects("networking.k8s.io/v1/networkpolicies", namespace, "alpha"),
        what="network policy",
    )
    await cluster.wait_for(
        lambda: cluster.status(namespace, "alpha").get("phase") == naming.PHASE_CREATED,
        what="phase Created",
    )
    for pod in cluster.objects("v1/pods", namespace, "alpha"):
        owner = pod["metadata"]["ownerReferences"][0]
        assert owner["uid"] == job["metadata"]["uid"] and owner["controller"] is True
    await cluster.run_pods(namespace, "alpha")
    await cluster.wait_for(
        lambda: cluster.status(namespace, "alpha").get("phase") == naming.PHASE_RUNNING,
        what="phase Running",
    )
    await cluster.wait_for(lambda: cluster.status(namespace, "alpha").get("ready") == "6/6")
    status = cluster.status(namespace, "alpha")
    assert status["replicaStatuses"]["worker"]["active"] == 3
    assert set(pod_posts(cluster, namespace).values()) == {1}
    assert naming.REASON_CREATED in cluster.event_reasons(namespace)


async def test_chief_success_stops_ps_and_workers(shared_cluster: Cluster) -> None:
    """kubeflow/training-operator#774, #1059: the chief's exit 0 ends the job, and its
    parameter servers (which would serve forever) are deleted."""
    cluster, namespace = shared_cluster, "success"
    await cluster.create_job(job_manifest("beta", namespace))
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, "beta")) == 4, what="pods")
    await cluster.run_pods(namespace, "beta")
    await cluster.wait_for(lambda: cluster.status(namespace, "beta").get("phase") == "Running")
    await cluster.set_pod(namespace, "beta-chief-0", "Succeeded", exit_code=0)
    await cluster.wait_for(
        lambda: cluster.status(namespace, "beta").get("phase") == naming.PHASE_SUCCEEDED,
        what="Succeeded",
    )
    # cleanPodPolicy Running (the default): PS and workers go, the finished chief stays.
    await cluster.wait_for(
        lambda: cluster.pod_names(namespace, "beta") == {"beta-chief-0"}, what="PS deleted"
    )
    status = cluster.status(namespace, "beta")
    assert status["completionTime"]
    assert naming.REASON_SUCCEEDED in cluster.event_reasons(namespace)


async def test_ttl_deletes_the_finished_job(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "ttl"
    await cluster.create_job(
        job_manifest("gamma", namespace, workers=0, replicasToAggregate=1,
                     runPolicy={"ttlSecondsAfterFinished": 1})
    )  # fmt: skip
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, "gamma")) == 2, what="pods")
    await cluster.run_pods(namespace, "gamma")
    await cluster.set_pod(namespace, "gamma-chief-0", "Succeeded", exit_code=0)
    await cluster.wait_for(lambda: cluster.status(namespace, "gamma").get("phase") == "Succeeded")
    await cluster.wait_for(lambda: cluster.job(namespace, "gamma") is None, what="TTL deletion")
    assert naming.REASON_TTL_EXPIRED in cluster.event_reasons(namespace)


async def test_suspend_deletes_pods_and_resume_recreates(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "suspend"
    await cluster.create_job(job_manifest("eps", namespace))
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, "eps")) == 4, what="pods")
    await cluster.patch_job(namespace, "eps", {"spec": {"runPolicy": {"suspend": True}}})
    await cluster.wait_for(lambda: not cluster.pod_names(namespace, "eps"), what="pods deleted")
    await cluster.wait_for(lambda: cluster.status(namespace, "eps").get("phase") == "Suspended")
    assert cluster.job(namespace, "eps") is not None
    await cluster.patch_job(namespace, "eps", {"spec": {"runPolicy": {"suspend": False}}})
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, "eps")) == 4, what="resumed")
    await cluster.wait_for(
        lambda: (
            (cluster.condition(namespace, "eps", naming.CONDITION_SUSPENDED) or {}).get("status")
            == "False"
        ),
        what="Suspended False",
    )
    reasons = cluster.event_reasons(namespace)
    assert naming.REASON_SUSPENDED in reasons and naming.REASON_RESUMED in reasons


async def test_deleted_job_is_not_recreated(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "delete"
    await cluster.create_job(job_manifest("zeta", namespace))
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, "zeta")) == 4, what="pods")
    base = f"/apis/{naming.API_VERSION}/namespaces/{namespace}/{naming.PLURAL}"
    await cluster.delete(f"{base}/zeta")
    # The finalizer is released once the job's daemon has stopped.
    await cluster.wait_for(lambda: cluster.job(namespace, "zeta") is None, what="job gone")
    # The garbage collector deletes the owned children (kmock has none: play its part).
    for pod in cluster.pod_names(namespace, "zeta"):
        await cluster.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    posts = sum(pod_posts(cluster, namespace).values())
    await asyncio.sleep(1.5)  # ample time for a wrong re-create
    assert not cluster.pod_names(namespace, "zeta")
    assert sum(pod_posts(cluster, namespace).values()) == posts


async def test_operator_killed_mid_reconcile_duplicates_nothing_and_keeps_ttl(
    cluster: Cluster, namespace: str
) -> None:
    """kill -9 mid-burst, restart (watching one namespace): no duplicate (pods, Services,
    budgets, PodGroups), TTL re-armed."""
    op = await cluster.start_operator()
    # A finished job waiting for its TTL: the deadline lives in status.completionTime only.
    await cluster.create_job(
        job_manifest("delta", namespace, workers=0, replicasToAggregate=1,
                     runPolicy={"ttlSecondsAfterFinished": 4})
    )  # fmt: skip
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, "delta")) == 2, what="pods")
    await cluster.set_pod(namespace, "delta-chief-0", "Succeeded", exit_code=0)
    await cluster.wait_for(lambda: cluster.status(namespace, "delta").get("phase") == "Succeeded")
    # A large gang-scheduled job: kill -9 as soon as its first pods exist, mid-burst.
    gang = {"schedulingPolicy": {"gangScheduler": "Coscheduling"}}
    await cluster.create_job(
        job_manifest("eta", namespace, workers=100, replicasToAggregate=50, runPolicy=gang)
    )
    await cluster.wait_for(lambda: cluster.pod_names(namespace, "eta"), what="first pods")
    op.kill()
    # The new operator watches only this namespace: a job elsewhere is not its business.
    await cluster.create_job(job_manifest("elsewhere", "other-team"))
    await cluster.start_operator("--namespace", namespace)
    await cluster.wait_for(
        lambda: len(cluster.pod_names(namespace, "eta")) == 102, timeout=60, what="all pods"
    )
    posts = pod_posts(cluster, namespace)
    assert max(posts.values()) == 1, [n for n, c in posts.items() if c > 1][:5]
    services = collections.Counter(
        str((req.data or {}).get("metadata", {}).get("name"))
        for req in cluster.writes(f"/namespaces/{namespace}/services", "POST")
        if req.status
    )
    assert sorted(services) == ["delta", "eta"] and max(services.values()) == 1
    # Nothing watches budgets and PodGroups: the new operator lists them, and creates none
    # again.
    def created(plural: str) -> collections.Counter[str]:
        return collections.Counter(
            str((req.data or {}).get("metadata", {}).get("name"))
            for req in cluster.writes(f"/namespaces/{namespace}/{plural}", "POST")
        )

    assert created("poddisruptionbudgets") == {"delta": 1, "eta": 1}
    assert created(naming.POD_GROUP_PLURAL) == {"eta": 1}
    await cluster.wait_for(lambda: cluster.job(namespace, "delta") is None, what="TTL deletion")
    assert cluster.job(namespace, "eta") is not None
    assert not cluster.pod_names("other-team", "elsewhere")
    assert "status" not in (cluster.job("other-team", "elsewhere") or {})


async def test_invalid_spec_fails_naming_the_field(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "invalid"
    bad = job_manifest("theta", namespace, replicasToAggregate=0)
    bad["spec"]["runPolicy"] = {"restartPolicy": "Sometimes"}
    await cluster.create_job(bad)
    await cluster.wait_for(lambda: cluster.status(namespace, "theta").get("phase") == "Failed")
    failed = cluster.condition(namespace, "theta", naming.CONDITION_FAILED)
    assert failed is not None and failed["reason"] == naming.REASON_INVALID_SPEC
    assert "spec.replicasToAggregate" in failed["message"]
    assert "spec.runPolicy.restartPolicy" in failed["message"]
    assert not cluster.pod_names(namespace, "theta")
