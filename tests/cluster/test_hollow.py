"""Hollow nodes on the real cluster: `cluster.py hollow N` registers N kubemark kubelets
(the kubelet's own code with a fake container runtime) beside the real nodes.

They turn Ready with the hollow label and taint; a pod that selects and tolerates them runs
on one (in no container) and is deleted like any other; pods that do not never land there
(the taint keeps them off, or a selector without the toleration leaves them Pending); and
`cluster.py hollow 0` removes them all again, so the other tests see the cluster as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import kube

HOLLOW = 3
LABEL = kube.node.hollow.LABEL
# The pod sandbox's image, loaded into every real node (IfNotPresent: never pulled there);
# a hollow node's fake image service "pulls" any image.
PAUSE = f"registry.k8s.io/pause:{kube.node.VERSIONS['PAUSE_VERSION']}"
TOLERATION = {"key": LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def hollow_nodes() -> list[dict[str, Any]]:
    return list(kube.kubectl_json("get", "nodes", "-l", f"{LABEL}=true")["items"])


@pytest.fixture(scope="module")
def hollow(cluster_up: None) -> Iterator[list[dict[str, Any]]]:
    kube.cluster("hollow", str(HOLLOW), timeout=180)
    try:
        yield hollow_nodes()
    finally:
        kube.cluster("hollow", "0", timeout=180)


def pod(name: str, selector: bool, toleration: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": PAUSE, "imagePullPolicy": "IfNotPresent"}],
    }
    if selector:
        spec["nodeSelector"] = {LABEL: "true"}
    if toleration:
        spec["tolerations"] = [TOLERATION]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def apply(namespace: str, *objects: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", namespace, "-f", "-",
                 input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def get_pod(namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "pod", name, "-n", namespace))


def test_hollow_nodes_are_ready_labelled_and_tainted(hollow: list[dict[str, Any]]) -> None:
    names = sorted(n["metadata"]["name"] for n in hollow)
    assert names == [f"syncreplicas-hollow-{i}" for i in range(1, HOLLOW + 1)]
    for node in hollow:
        assert (kube.condition(node, "Ready") or {}).get("status") == "True", node["status"]
        taints = [(t["key"], t.get("value"), t["effect"]) for t in node["spec"]["taints"]]
        assert (LABEL, "true", "NoSchedule") in taints, taints
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("fakeRuntime")
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"].startswith("10.243.0.1")
    listed = kube.cluster("nodes").stdout
    assert all(f"syncreplicas-hollow-{i} " in listed for i in range(1, HOLLOW + 1))


def test_a_pod_that_selects_and_tolerates_them_runs_there(
    hollow: list[dict[str, Any]], namespace: str
) -> None:
    apply(namespace, pod("on-hollow", selector=True, toleration=True))
    running = kube.eventually(
        "the pod Running on a hollow node",
        lambda: (p := get_pod(namespace, "on-hollow"))["status"].get("phase") == "Running" and p,
        90,  # seconds at most, 30 not always enough while other tests load both cores
    )
    assert running["spec"]["nodeName"].startswith("syncreplicas-hollow-")
    kube.kubectl("delete", "pod", "on-hollow", "-n", namespace, "--timeout=90s", timeout=100)
    gone = kube.kubectl("get", "pod", "on-hollow", "-n", namespace, check=False)
    assert "NotFound" in gone.stderr


def test_other_pods_never_land_there(hollow: list[dict[str, Any]], namespace: str) -> None:
    plain = [pod(f"plain-{i}", selector=False, toleration=False) for i in range(6)]
    apply(namespace, *plain, pod("selects-only", selector=True, toleration=False))

    def scheduled() -> list[str] | None:
        nodes = [get_pod(namespace, p["metadata"]["name"])["spec"].get("nodeName")
                 for p in plain]  # fmt: skip
        return nodes if all(nodes) else None

    placed = kube.eventually("the plain pods scheduled", scheduled, 30)
    assert not [n for n in placed if n.startswith("syncreplicas-hollow-")], placed
    refused = kube.eventually(
        "the pod without the toleration refused",
        lambda: kube.condition(get_pod(namespace, "selects-only"), "PodScheduled"),
        30,
    )
    assert refused["status"] == "False" and refused["reason"] == "Unschedulable", refused
    assert "untolerated taint" in refused["message"], refused
    kube.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=1", "--wait=false")


def test_hollow_zero_removes_them(hollow: list[dict[str, Any]]) -> None:
    """The last test here (the module's fixture ends with `hollow 0` again, a no-op then)."""
    kube.cluster("hollow", "0", timeout=180)
    assert hollow_nodes() == []
    status = json.loads(kube.cluster("status").stdout)
    assert status["hollowNodes"] == {}
    run_dir = Path(status["runDir"])
    assert not list((run_dir / "nodes").glob("syncreplicas-hollow-*"))
    assert not list((run_dir / "pids").glob("syncreplicas-hollow-*"))
    assert not list(Path("/run/netns").glob("srj-hollow-*"))
