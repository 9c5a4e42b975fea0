"""Several nodes, and the node faults of hack/cluster, on the real cluster.

`make cluster` starts N nodes (3 by default), each a network namespace with its own
kubelet, containerd, kube-proxy, CNI bridge and pod range. Pods on different nodes reach
each other by address, by Service (kube-proxy on every node) and by cluster DNS; kubectl
exec and logs reach every node's kubelet. The faults (`cluster.py node NAME FAULT`) do
what they say as Kubernetes sees it: a crashed or partitioned node turns NotReady
(Unknown: its kubelet stops posting status), a crashed node's processes are all gone while
a partitioned node's keep running, heal and start bring the node back Ready, a drain evicts
through the Eviction API, a preemption sends SIGTERM first and removes the Node.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import kube

IMAGE = "ghcr.io/syncreplicas/syncreplicas-runtime:0.1.0"
# Each test that takes nodes down waits out the node-monitor grace period (about 50 s).
NOT_READY_WITHIN = 120


def nodes() -> list[dict[str, Any]]:
    return list(kube.kubectl_json("get", "nodes")["items"])


def node_names() -> list[str]:
    return sorted(n["metadata"]["name"] for n in nodes())


def ready_status(name: str) -> str:
    item = kube.kubectl_json("get", "node", name)
    found = kube.condition(item, "Ready")
    return str(found["status"]) if found else "None"


def pod(name: str, node: str, command: list[str], labels: dict[str, str] | None = None,
        grace: int = 5) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": command}
            ],
        },
    }


SERVER = ["python", "-c", (
    "import http.server, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *_: (print('SIGTERM', flush=True), sys.exit(0)))\n"
    "http.server.HTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
)]
SLEEPER = ["python", "-c", "import time\nwhile True: time.sleep(1)"]


def apply(namespace: str, *objects: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", namespace, "-f", "-",
                 input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def running(namespace: str, name: str) -> dict[str, Any] | None:
    item = kube.kubectl_json("get", "pod", name, "-n", namespace)
    return item if item["status"].get("phase") == "Running" else None


def fetch(namespace: str, client: str, url: str) -> str:
    code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).status)"
    return kube.kubectl("exec", "-n", namespace, client, "--", "python", "-c", code,
                        check=False, timeout=30).stdout.strip()  # fmt: skip


def test_nodes_are_ready_with_their_own_pod_ranges(cluster_up: None) -> None:
    items = nodes()
    assert len(items) >= 3, [n["metadata"]["name"] for n in items]
    cidrs = [n["spec"].get("podCIDR") for n in items]
    assert all(cidrs) and len(set(cidrs)) == len(cidrs), cidrs
    addresses = {a["address"] for n in items for a in n["status"]["addresses"]
                 if a["type"] == "InternalIP"}  # fmt: skip
    assert len(addresses) == len(items)
    for item in items:
        assert kube.condition(item, "Ready")["status"] == "True", item["metadata"]["name"]  # type: ignore[index]
        assert item["status"]["nodeInfo"]["kubeletVersion"] == kube.node.VERSIONS[
            "KUBERNETES_VERSION"]


def test_pods_on_different_nodes_reach_each_other(namespace: str) -> None:
    first, last = node_names()[0], node_names()[-1]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    apply(namespace, pod("web", first, SERVER), pod("client", last, SLEEPER), service)
    web = kube.eventually("the server's pod Running", lambda: running(namespace, "web"), 120)
    kube.eventually("the client's pod Running", lambda: running(namespace, "client"), 120)
    assert web["spec"]["nodeName"] != kube.kubectl_json(
        "get", "pod", "client", "-n", namespace)["spec"]["nodeName"]
    ip = web["status"]["podIP"]
    # By address (routed between the nodes), by Service (kube-proxy of the client's node),
    # and by name (CoreDNS), from the other node.
    for url in (f"http://{ip}:8080/", "http://web/", f"http://web.{namespace}.svc.cluster.local/"):
        assert kube.eventually(f"{url} from the other node",
                               lambda u=url: fetch(namespace, "client", u) == "200", 30)  # type: ignore[misc]
    # kubectl logs reaches the server's kubelet: the requests are in its log.
    assert "GET / " in kube.kubectl("logs", "-n", namespace, "web").stdout


def node_processes(name: str) -> int:
    return len(node_cgroup_pids(name))


def node_cgroup_pids(name: str) -> set[int]:
    index = name.rsplit("-", 1)[1]
    found: set[int] = set()
    for procs in Path(f"/sys/fs/cgroup/pids/srj-node-{index}").rglob("cgroup.procs"):
        found |= {int(p) for p in procs.read_text().split()}
    return found


@pytest.mark.timeout(600)
def test_crash_and_partition_then_start_and_heal(namespace: str) -> None:
    """One node crashed and another partitioned at once: both turn NotReady; the crashed
    node has no process left, the partitioned one's pod keeps running; `start` and `heal`
    bring both back Ready, the partitioned pod unrestarted."""
    names = node_names()
    crashed, partitioned = names[-1], names[-2]
    apply(namespace, pod("on-crashed", crashed, SLEEPER), pod("on-partitioned", partitioned,
                                                               SLEEPER))  # fmt: skip
    for name in ("on-crashed", "on-partitioned"):
        kube.eventually(f"{name} Running", lambda n=name: running(namespace, n), 120)  # type: ignore[misc]
    before = node_cgroup_pids(partitioned)
    started = time.monotonic()
    kube.node_fault(crashed, "crash")
    kube.node_fault(partitioned, "partition")
    try:
        assert node_processes(crashed) == 0
        for name in (crashed, partitioned):
            kube.eventually(f"{name} NotReady", lambda n=name: ready_status(n) != "True",  # type: ignore[misc]
                            NOT_READY_WITHIN)
        not_ready_after = time.monotonic() - started
        # The partitioned node's processes all still run (nothing told them anything).
        assert before <= node_cgroup_pids(partitioned)
    finally:
        kube.node_fault(partitioned, "heal")
        kube.node_fault(crashed, "start")
    for name in (crashed, partitioned):
        kube.eventually(f"{name} Ready again", lambda n=name: ready_status(n) == "True", 120)  # type: ignore[misc]
    item = kube.eventually("the partitioned pod Running",
                           lambda: running(namespace, "on-partitioned"), 60)
    assert item["status"]["containerStatuses"][0]["restartCount"] == 0
    # The crashed node's pod comes back by its restart policy (Always), in a new sandbox.
    kube.eventually("the crashed node's pod Running again",
                    lambda: running(namespace, "on-crashed"), 120)
    print(f"NotReady {not_ready_after:.0f} s after the faults")


def deployment(name: str, command: list[str]) -> dict[str, Any]:
    template = pod(name, "", command)
    del template["spec"]["nodeName"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }


def only_pod(namespace: str, app: str) -> dict[str, Any] | None:
    found = [p for p in kube.pods(namespace, f"app={app}")
             if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]]
    return found[0] if len(found) == 1 else None


@pytest.mark.timeout(600)
def test_drain_and_preempt(namespace: str) -> None:
    """A drain evicts a Deployment's pod (it comes back on another node) and leaves the node
    cordoned until uncordon; a preemption sends the pod's process SIGTERM, ends the node and
    deletes its Node object; `start` registers it again."""
    apply(namespace, deployment("web", SERVER))
    first = kube.eventually("the pod Running", lambda: only_pod(namespace, "web"), 120)
    node = first["spec"]["nodeName"]
    try:
        kube.node_fault(node, "drain")
        assert kube.kubectl_json("get", "node", node)["spec"].get("unschedulable") is True
        second = kube.eventually("the pod evicted and Running on another node",
                                 lambda: only_pod(namespace, "web"), 120)
        assert second["spec"]["nodeName"] != node
    finally:
        kube.node_fault(node, "uncordon")
    assert not kube.kubectl_json("get", "node", node)["spec"].get("unschedulable")

    victim = second["spec"]["nodeName"]
    out = kube.node_fault(victim, "preempt", "--grace", "10").stdout
    try:
        # The web server's process at least (others that ran there too: the operator's, a
        # finished test's pods; one slower than the grace period is killed, as on a spot node).
        sent = re.search(r"SIGTERM to (\d+) container processes", out)
        assert sent and int(sent.group(1)) >= 1, out
        assert victim not in node_names()
        # The old pod stays, Running as last reported, until the pod garbage collector
        # deletes pods bound to a node that no longer exists; then its ReplicaSet replaces it.
        def replaced() -> bool:
            found = only_pod(namespace, "web")
            return found is not None and found["spec"]["nodeName"] != victim

        kube.eventually("the pod replaced on a remaining node", replaced, 180)
    finally:
        kube.node_fault(victim, "start")
        for name in node_names():
            kube.kubectl("uncordon", name, check=False)
    assert kube.eventually("the preempted node registered again",
                           lambda: ready_status(victim) == "True", 120)
