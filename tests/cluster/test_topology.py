"""Kueue's topology-aware scheduling on the real cluster (`make cluster KUEUE=1`: the
kubelets register with syncreplicas.io/rack, two nodes a rack; Kueue's Topology racks, the
flavor tas-flavor and the ClusterQueue tas over them, install-kueue.sh).

A job of 1 PS, a chief and 3 workers whose worker template asks for one rack
(kueue.x-k8s.io/podset-required-topology) goes through the queue tas:
1. its Workload's worker pod set carries the topology request, and Kueue admits it with a
   topology assignment;
2. the operator creates the workers' pods gated (kueue.x-k8s.io/topology), labelled with
   their pod set and annotated with the Workload; Kueue's ungater lifts the gate and pins
   each to a node of its assignment: all three workers run in one rack. Three workers
   spread over hosts (the operator's default spreading) span two racks: without the
   request they would not share one;
3. a worker whose pod is deleted comes back in the same rack, gated and ungated again.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.slowjob import paced_template

KUEUE = "kueue.x-k8s.io/v1beta2"
RACK = "syncreplicas.io/rack"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GATE = "kueue.x-k8s.io/topology"
WORKERS = 3


def racked_job(name: str) -> dict[str, Any]:
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq-tas"}
    manifest["spec"].update({"workers": WORKERS, "replicasToAggregate": 2,
                             "parameterServers": 1})  # fmt: skip
    # Trains while the test looks (100 ms a step); deleted with the namespace.
    manifest["spec"]["training"].update({"maxSteps": 100000, "checkpointEverySteps": 100000,
                                         "logEverySteps": 1000, "evalEverySteps": 0})  # fmt: skip
    template = paced_template(100)
    template["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "50m", "memory": "64Mi"}}  # fmt: skip
    manifest["spec"]["template"] = template
    manifest["spec"]["worker"] = {"template": {"metadata": {"annotations": {REQUIRED: RACK}}}}
    return dict(manifest)


def racks() -> dict[str, str]:
    """Node name -> its rack, for the nodes that have one."""
    return {n["metadata"]["name"]: n["metadata"]["labels"][RACK]
            for n in kube.real_nodes() if RACK in n["metadata"].get("labels", {})}  # fmt: skip


def running_workers(namespace: str, name: str) -> list[dict[str, Any]] | None:
    found = kube.pods(namespace, f"syncreplicas.io/job-name={name},"
                                 "syncreplicas.io/replica-type=worker")  # fmt: skip
    running = [p for p in found if p["status"].get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    return running if len(running) == WORKERS else None


def local_queue(namespace: str) -> None:
    """The namespace's LocalQueue lq-tas, of the ClusterQueue tas."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": "lq-tas", "namespace": namespace},
         "spec": {"clusterQueue": "tas"}}))  # fmt: skip


def admitted(namespace: str) -> dict[str, Any] | None:
    """The namespace's Workload once Kueue admitted it."""
    found = kube.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)
    for wl in found["items"]:
        if (kube.condition(wl, "Admitted") or {}).get("status") == "True":
            return dict(wl)
    return None


@pytest.mark.timeout(420)
def test_a_job_asking_for_one_rack_gets_all_its_workers_in_one_rack(namespace: str) -> None:
    by_node = racks()
    assert len(set(by_node.values())) >= 2, f"the cluster's nodes have no two racks: {by_node}"
    local_queue(namespace)
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(racked_job("racked")))
    try:
        # 1. The request on the Workload; admitted with a topology assignment.
        wl = kube.eventually("the Workload admitted", lambda: admitted(namespace), 180)
        sets = {s["name"]: s for s in wl["spec"]["podSets"]}
        assert sets["worker"]["topologyRequest"] == {"required": RACK}, sets["worker"]
        assignment = {a["name"]: a for a in wl["status"]["admission"]["podSetAssignments"]}
        assert assignment["worker"].get("topologyAssignment"), assignment

        # 2. Gated, then pinned by Kueue: every worker in one rack.
        workers = kube.eventually("3 workers running", lambda: running_workers(
            namespace, "racked"), 240)  # fmt: skip
        placed = {p["metadata"]["name"]: by_node[p["spec"]["nodeName"]] for p in workers}
        assert len(set(placed.values())) == 1, placed
        for pod in workers:
            assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
            assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl[
                "metadata"]["name"]  # fmt: skip
            assert GATE not in [g["name"] for g in pod["spec"].get("schedulingGates", [])]
            # The ungater's pin: a node of the assignment.
            assert "kubernetes.io/hostname" in pod["spec"].get("nodeSelector", {}), pod["spec"]
        (rack,) = set(placed.values())

        # 3. A lost worker's pod comes back in the same rack.
        old = kube.kubectl_json("get", "pod", "racked-worker-1", "-n", namespace)
        kube.kubectl("delete", "pod", "racked-worker-1", "-n", namespace, "--wait=false")

        def replaced() -> dict[str, Any] | None:
            pods = running_workers(namespace, "racked") or []
            new = [p for p in pods if p["metadata"]["name"] == "racked-worker-1"
                   and p["metadata"]["uid"] != old["metadata"]["uid"]]  # fmt: skip
            return new[0] if new else None

        new = kube.eventually("worker 1 replaced", replaced, 180)
        assert by_node[new["spec"]["nodeName"]] == rack, (new["spec"]["nodeName"], rack)
        assert new["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
        print("figures:", {"rack": rack, "workers": placed,
                           "replaced on": new["spec"]["nodeName"]})  # fmt: skip
    except AssertionError as error:
        described = kube.describe(namespace, "srj")
        raise AssertionError(f"{error}\n{described}") from error
    finally:
        kube.kubectl("delete", "srj", "racked", "-n", namespace, "--wait=false", check=False)
