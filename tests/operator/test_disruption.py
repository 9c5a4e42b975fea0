"""The operator against kmock: disruptions that are not failures, and where pods go.

A replica fenced by a newer incarnation of itself (exit 77) and a pod the cluster evicts
(DisruptionTarget, as ``kubectl drain`` leaves it) are replaced without spending
backoffLimit or counting as failed; every pod tolerates a failed node for 30 s only and is
spread over nodes, unless its template says otherwise; each job has one
PodDisruptionBudget. One operator serves these tests (``shared_cluster``).
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming, placement

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

NO_BUDGET = {"restartPolicy": "ExitCode", "backoffLimit": 0}


def posts(c: Cluster, ns: str) -> collections.Counter[str]:
    return collections.Counter(
        str((r.data or {}).get("metadata", {}).get("name"))
        for r in c.writes(f"/namespaces/{ns}/pods", "POST")
        if r.status and 200 <= r.status[0] < 300
    )


async def running(c: Cluster, ns: str, name: str, **spec: Any) -> None:
    await c.create_job(job_manifest(name, ns, **spec))
    await c.wait_for(lambda: len(c.pod_names(ns, name)) == 4, what="pods")
    await c.run_pods(ns, name)
    await c.wait_for(lambda: c.status(ns, name).get("ready") == "4/4", what="ready")


async def test_a_fenced_replica_is_replaced_and_not_counted(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "fenced"
    await running(c, ns, "fe", runPolicy=NO_BUDGET)
    await c.set_pod(
        ns, "fe-worker-0", "Failed", exit_code=77,
        termination_message="syncreplicas: FENCED (77): superseded by incarnation 2",
    )  # fmt: skip
    await c.wait_for(lambda: posts(c, ns)["fe-worker-0"] == 2, what="re-created")
    await c.run_pods(ns, "fe")
    await c.wait_for(lambda: c.status(ns, "fe").get("ready") == "4/4", what="back")
    status = c.status(ns, "fe")
    assert status["phase"] == naming.PHASE_RUNNING
    assert status["replicaStatuses"]["worker"]["restarts"] == 0
    assert status["replicaStatuses"]["worker"]["failed"] == 0


async def test_a_drained_ps_is_replaced_and_not_counted(shared_cluster: Cluster) -> None:
    """kubectl drain: the Eviction API adds DisruptionTarget; the kubelet stops the pod."""
    c, ns = shared_cluster, "drained"
    await running(c, ns, "dr", runPolicy=NO_BUDGET)
    target = {
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }  # fmt: skip
    await c.set_pod(ns, "dr-ps-0", "Failed", exit_code=143, conditions=[target])
    await c.wait_for(lambda: posts(c, ns)["dr-ps-0"] == 2, what="re-created")
    status = c.status(ns, "dr")
    assert status["phase"] != naming.PHASE_FAILED
    assert status["replicaStatuses"]["ps"]["restarts"] == 0
    assert status["replicaStatuses"]["ps"]["failed"] == 0


async def test_pods_tolerate_a_failed_node_briefly_and_spread(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "placement"
    await running(c, ns, "pl")
    pods = {p["metadata"]["name"]: p["spec"] for p in c.objects("v1/pods", ns, "pl")}
    for spec in pods.values():
        tolerated = {t["key"]: t["tolerationSeconds"] for t in spec["tolerations"]}
        assert tolerated == {
            naming.TAINT_UNREACHABLE: placement.TOLERATION_SECONDS,
            naming.TAINT_NOT_READY: placement.TOLERATION_SECONDS,
        }
    (apart,) = pods["pl-ps-0"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert apart["podAffinityTerm"]["labelSelector"]["matchLabels"] == {
        naming.LABEL_JOB_NAME: "pl", naming.LABEL_REPLICA_TYPE: "ps"}
    assert apart["podAffinityTerm"]["topologyKey"] == naming.LABEL_HOSTNAME
    for spec in pods.values():
        assert all(
            t["topologyKey"] == naming.LABEL_HOSTNAME and t["whenUnsatisfiable"] == "ScheduleAnyway"
            for t in spec["topologySpreadConstraints"]
        )
    (budget,) = c.objects("policy/v1/poddisruptionbudgets", ns, "pl")
    assert budget["spec"]["maxUnavailable"] == 1


async def test_a_templates_own_placement_wins(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "placement-own"
    own_toleration = {"key": naming.TAINT_UNREACHABLE, "operator": "Exists",
                      "effect": "NoExecute", "tolerationSeconds": 900}  # fmt: skip
    own_spread = [{"maxSkew": 3, "topologyKey": "topology.kubernetes.io/zone",
                   "whenUnsatisfiable": "DoNotSchedule"}]  # fmt: skip
    template = {
        "spec": {
            "containers": [{"name": "syncreplicas"}],
            "tolerations": [own_toleration],
            "topologySpreadConstraints": own_spread,
        }
    }
    await running(c, ns, "po", template=template)
    for pod in c.objects("v1/pods", ns, "po"):
        spec = pod["spec"]
        assert spec["topologySpreadConstraints"] == own_spread
        assert own_toleration in spec["tolerations"]
        keys = [t["key"] for t in spec["tolerations"]]
        assert keys.count(naming.TAINT_UNREACHABLE) == 1
        assert naming.TAINT_NOT_READY in keys
