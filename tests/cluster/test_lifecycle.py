"""`make cluster-down` leaves nothing behind, and `make cluster` brings everything back.

It stops the cluster, checks that no process, mount, iptables rule, route or network
interface of it is left, then brings it up again with as many nodes (binaries, images and
chart as `make cluster` does), so the tests after it find the cluster as it was.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.cluster import kube


@pytest.mark.timeout(1800)
def test_down_leaves_nothing_behind_and_make_cluster_restores_it(cluster_up: None) -> None:
    count = len(kube.kubectl_json("get", "nodes")["items"])
    # The cluster as it was: with Kueue and monitoring if it had them (make test's has).
    had_kueue = kube.kubectl("get", "namespace", "kueue-system", check=False).returncode == 0
    had_monitoring = kube.kubectl("get", "namespace", "monitoring",
                                  check=False).returncode == 0  # fmt: skip
    down = kube.cluster("down")
    assert "down in" in down.stdout, down.stdout
    left = kube.cluster("leftovers", check=False)
    assert left.returncode == 0 and not left.stdout.strip(), left.stdout
    assert not kube.KUBECONFIG.exists()

    up = subprocess.run(["make", "--no-print-directory", "cluster", f"NODES={count}",
                         *(["KUEUE=1"] if had_kueue else []),
                         *(["MONITORING=1"] if had_monitoring else [])],
                        cwd=kube.REPO, capture_output=True, text=True, timeout=900,
                        check=False)  # fmt: skip
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    assert kube.is_up()
    assert len(kube.kubectl_json("get", "nodes")["items"]) == count
    # Again is a no-op that says so.
    again = kube.cluster("up")
    assert "already up" in again.stdout
    deployment = kube.kubectl_json("get", "deployment", "syncreplicas-operator",
                                   "-n", kube.RELEASE_NAMESPACE)  # fmt: skip
    assert deployment["status"].get("readyReplicas") == 2
    if had_kueue:
        kueue = kube.kubectl_json("get", "deployment", "kueue-controller-manager",
                                  "-n", "kueue-system")  # fmt: skip
        assert kueue["status"].get("availableReplicas") == 1, kueue["status"]
    if had_monitoring:
        prometheus = kube.kubectl_json("get", "prometheus", "syncreplicas", "-n", "monitoring")
        available = (kube.condition(prometheus, "Available") or {}).get("status")
        assert available == "True", prometheus["status"]
        assert kube.kubectl("get", "podmonitor", "-n", kube.RELEASE_NAMESPACE,
                            "-o", "name").stdout.strip(), "the chart's PodMonitor is back"
    assert kube.leader_pod(), "an operator replica leads"
