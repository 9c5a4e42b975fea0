"""Several nodes on the real cluster.

`make cluster` starts N nodes (3 by default; `make test` 4), each a network namespace with its own
kubelet, containerd, kube-proxy, CNI bridge and pod range. Pods on different nodes reach
each other by address, by Service (kube-proxy on every node) and by cluster DNS; kubectl
exec and logs reach every node's kubelet. The node faults (`cluster.py node NAME FAULT`)
are tested where a job meets them, in test_node_faults.py: a crashed node's processes all
gone and the node NotReady, a partitioned node's processes still running, heal and start
bringing it back Ready, a drain cordoning and evicting, a preemption sending SIGTERM and
removing the Node.
"""

from __future__ import annotations

import json
from typing import Any

from tests.cluster import kube
from tests.cluster.jobwatch import node_names

IMAGE = "ghcr.io/syncreplicas/syncreplicas-runtime:0.1.0"


def nodes() -> list[dict[str, Any]]:
    return kube.real_nodes()


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
