"""MultiKueue across two real clusters: this cluster is the manager; a second one beside
it, with its own control plane, node, Kueue and operator, is the worker
(install-multikueue.sh). Kueue on the manager lists SyncReplicasJob under
multiKueue.externalFrameworks; its ClusterQueue multikueue admits through the MultiKueue
admission check. The worker is the one `make cluster KUEUE=1 MULTIKUEUE=1` brought up, or
the one make test brings up while its paired tests run (this file is the first of the
shared ones, and takes it down after its test), or, on a manager made ready for one
(`MULTIKUEUE=manager`), one this file brings up for its test and takes down after it.

Two jobs with spec.managedBy kueue.x-k8s.io/multikueue, applied on the manager in queue
lq-multikueue (a LocalQueue in the job's namespace on both clusters, as MultiKueue
expects):
1. `trained` trains to its maxSteps. Its copy appears on the worker (without managedBy,
   labelled with the Workload MultiKueue made there) and its pods run there only; on the
   manager the operator made nothing but the job's Workload and one ManagedElsewhere
   Event, and the job's status follows the worker's: Running, then Succeeded with the
   worker's global step.
2. `deleted` is deleted on the manager once its pods exist on the worker: its copy and its
   pods are gone from the worker.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster import kube, reads
from tests.cluster.slowjob import paced_template

KUEUE = "kueue.x-k8s.io/v1beta2"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
QUEUE = "lq-multikueue"
WORKER = kube.REPO / ".cluster" / "worker" / "kubeconfig"
CHILDREN = ("pods", "services", "networkpolicies.networking.k8s.io",
            "poddisruptionbudgets.policy")  # fmt: skip


INSTALL = kube.REPO / "hack" / "cluster" / "install-multikueue.sh"


def on_worker_cluster(*command: str, check: bool = True) -> Any:
    """hack/cluster/cluster.py COMMAND on the worker cluster."""
    return kube.run("env", "SYNCREPLICAS_CLUSTER=worker", "python3", str(kube.CLUSTER_PY),
                    *command, check=check, timeout=300)  # fmt: skip


def unready(why: str) -> None:
    if os.environ.get("SYNCREPLICAS_REQUIRE_CLUSTER") == "1":
        pytest.fail(why)
    pytest.skip(why)


# Set by make test when it brought the worker cluster up for this test (while the paired
# tests ran): the test takes it down after it.
BROUGHT_ENV = "SYNCREPLICAS_WORKER_FOR_TESTS"


@pytest.fixture(scope="module", autouse=True)
def worker_cluster(cluster_up: None) -> Iterator[None]:
    """The worker cluster, up and connected while this file's test runs. One that make
    test brought up for it is connected here and taken down after it; another that runs
    (`make cluster KUEUE=1 MULTIKUEUE=1`) is used (connected again: idempotent) and left
    up. Else, on a manager made ready for one (Kueue with MultiKueue, the chart's
    kueue.multiKueue: `MULTIKUEUE=manager`), the worker is brought up and connected here
    (install-multikueue.sh, both halves: a control plane, a node, the images, the chart
    and Kueue, about 40 s on a quiet machine) and taken down after the test, with the
    manager's MultiKueueCluster that dials it."""
    up = WORKER.exists() and on_worker_cluster("is-up", check=False).returncode == 0
    if not up:
        ready = kube.kubectl("auth", "can-i", "patch", "syncreplicasjobs.syncreplicas.io",
                             "--subresource=status", "-A", "-q",
                             "--as=system:serviceaccount:kueue-system:kueue-controller-manager",
                             check=False)  # fmt: skip
        if ready.returncode != 0:
            unready("no MultiKueue worker cluster, and the manager is not ready for one "
                    "(Kueue may not write SyncReplicasJobs' status): make cluster KUEUE=1 "
                    "MULTIKUEUE=1 (or MULTIKUEUE=manager)")  # fmt: skip
    try:
        # Both halves when no worker runs; else the manager's half only (idempotent): make
        # test brings up the worker's half alone while the paired tests crash a node of
        # this cluster, where Kueue's webhook may be (it answered "connection refused"
        # there, run u), and connects it here.
        halves = [] if not up else ["--connect"]
        for attempt in range(3):
            brought = kube.run("env", "SYNCREPLICAS_IMAGES_BUILT=1", str(INSTALL), *halves,
                               check=False, timeout=600)  # fmt: skip
            if brought.returncode == 0 or not up or attempt == 2:
                break
            time.sleep(10)  # Kueue's webhook coming back
        assert brought.returncode == 0, (
            f"install-multikueue.sh {' '.join(halves)} exited {brought.returncode}:\n"
            f"{brought.stdout[-4000:]}\n{brought.stderr[-4000:]}")
        print(brought.stdout.strip().splitlines()[-1])
        yield
    finally:
        if not up or os.environ.get(BROUGHT_ENV) == "1":
            kube.kubectl("delete", "multikueuecluster", "worker", "--ignore-not-found",
                         "--wait=false", check=False)  # fmt: skip
            on_worker_cluster("down", check=False)


def on_worker(*args: str, check: bool = True, input: str | None = None) -> Any:
    return kube.kubectl("--kubeconfig", str(WORKER), *args, check=check, input=input)


def worker_json(*args: str) -> Any:
    path = reads.object_path(*args)
    if path is not None:
        return reads.get_json(WORKER, path)
    return json.loads(on_worker(*args, "-o", "json").stdout)


def dispatched(name: str, max_steps: int) -> dict[str, Any]:
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"].update({"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}})
    manifest["spec"]["managedBy"] = MULTIKUEUE
    manifest["spec"]["training"].update({"maxSteps": max_steps, "checkpointEverySteps": 100,
                                         "logEverySteps": 50, "evalEverySteps": 0})  # fmt: skip
    template = paced_template(20)
    template["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "50m", "memory": "64Mi"}}  # fmt: skip
    manifest["spec"]["template"] = template
    return dict(manifest)


def selector(name: str) -> str:
    return f"syncreplicas.io/job-name={name}"


def worker_pods(namespace: str, name: str) -> list[dict[str, Any]]:
    return list(worker_json("get", "pods", "-n", namespace, "-l", selector(name))["items"])


def status(namespace: str, name: str, where: Any = kube.kubectl_json) -> dict[str, Any]:
    return dict(where("get", "srj", name, "-n", namespace).get("status") or {})


@pytest.mark.timeout(900)  # the worker cluster brought up first, when none runs
def test_a_job_applied_on_the_manager_runs_on_the_worker_cluster(namespace: str) -> None:
    queue = {"apiVersion": KUEUE, "kind": "LocalQueue",
             "metadata": {"name": QUEUE, "namespace": namespace},
             "spec": {"clusterQueue": "multikueue"}}  # fmt: skip
    on_worker("create", "namespace", namespace)
    try:
        for apply in (kube.kubectl, on_worker):
            apply("apply", "-f", "-", input=yaml.safe_dump(queue))
        jobs = [dispatched("trained", 400), dispatched("deleted", 100000)]
        kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(jobs))

        # The copies on the worker: managedBy removed, labelled with their Workload.
        def copies() -> list[dict[str, Any]] | None:
            found = worker_json("get", "srj", "-n", namespace)["items"]
            return found if len(found) == 2 else None

        for copy in kube.eventually("both jobs copied to the worker", copies, 180):
            assert "managedBy" not in copy["spec"], copy["spec"]
            assert copy["metadata"]["labels"].get(PREBUILT), copy["metadata"]["labels"]

        # 1. trained: Running on the manager as on the worker (looked for first: on a quiet
        # machine its 400 steps take under 30 s, less than part 2 below waits).
        kube.eventually("trained Running on the manager",
                        lambda: status(namespace, "trained").get("phase") == "Running", 240)

        # 2. Deleted on the manager once its pods exist on the worker: gone there too.
        kube.eventually("the pods of deleted on the worker",
                        lambda: len(worker_pods(namespace, "deleted")) == 4, 240)  # fmt: skip
        kube.kubectl("delete", "srj", "deleted", "-n", namespace, "--wait=false")

        def gone() -> bool:
            left = worker_json("get", "srj", "-n", namespace)["items"]
            names = [j["metadata"]["name"] for j in left]
            return "deleted" not in names and not worker_pods(namespace, "deleted")

        kube.eventually("deleted's copy and pods gone from the worker", gone, 180)

        # 1. trained, then Succeeded on the manager as on the worker.
        mirrored = kube.finished(namespace, "trained", 360)
        assert mirrored["phase"] == "Succeeded", mirrored
        assert mirrored.get("globalStep", 0) >= 400, mirrored

        # Pods on the worker only; the manager's operator made the Workload and one Event.
        for kind in CHILDREN:
            made = kube.kubectl_json("get", kind, "-n", namespace, "-l", selector("trained"))
            assert made["items"] == [], (kind, [o["metadata"]["name"] for o in made["items"]])
        workloads = kube.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)
        owners = [w["metadata"]["ownerReferences"][0]["name"] for w in workloads["items"]]
        assert owners == ["trained"], owners
        events = kube.kubectl_json("get", "events", "-n", namespace,
                                   "--field-selector", "reason=ManagedElsewhere")  # fmt: skip
        said = [e for e in events["items"] if e["involvedObject"]["name"] == "trained"]
        assert len(said) == 1 and "worker cluster" in said[0]["message"], said
        print("figures:", {"globalStep": mirrored.get("globalStep"),
                           "phase": mirrored["phase"]})  # fmt: skip
    except AssertionError as error:
        described = kube.describe(namespace, "srj,workloads.kueue.x-k8s.io")
        remote = on_worker("get", "srj,workloads.kueue.x-k8s.io,pods", "-n", namespace,
                           "-o", "wide", check=False)  # fmt: skip
        worker = f"worker:\n{remote.stdout}{remote.stderr}"
        raise AssertionError(f"{error}\n{described}\n{worker}") from error
    finally:
        kube.kubectl("delete", "srj", "--all", "-n", namespace, "--wait=false", check=False)
        on_worker("delete", "namespace", namespace, "--wait=false", check=False)
