"""`make cluster` on a cluster that is up changes nothing, and what it installed runs.

A whole `make cluster-down` and `make cluster` again is what `make test` itself does around
these tests: it brings the cluster up from nothing before them, and after them stops it
with `cluster.py down` and fails the run when `cluster.py leftovers` finds any process,
mount, iptables rule, route or network interface of it left (on a machine where the
cluster was not up before, as in CI). Here, the cheap half: `up` again is a no-op that says
so, with every node, the operator's two replicas and a leader, and (make test's cluster)
Kueue, the Prometheus Operator's Prometheus and the chart's PodMonitor in place.
"""

from __future__ import annotations

from tests.cluster import kube


def test_up_again_is_a_no_op_and_what_make_cluster_installed_runs(cluster_up: None) -> None:
    before = [n["metadata"]["uid"] for n in kube.real_nodes()]
    again = kube.cluster("up")
    assert "already up" in again.stdout, again.stdout
    assert [n["metadata"]["uid"] for n in kube.real_nodes()] == before
    kube.operator_replicas_ready()
    assert kube.leader_pod(), "an operator replica leads"
    if kube.kubectl("get", "namespace", "kueue-system", check=False).returncode == 0:
        kueue = kube.kubectl_json("get", "deployment", "kueue-controller-manager",
                                  "-n", "kueue-system")  # fmt: skip
        assert kueue["status"].get("availableReplicas") == 1, kueue["status"]
    if kube.kubectl("get", "namespace", "monitoring", check=False).returncode == 0:
        prometheus = kube.kubectl_json("get", "prometheus", "syncreplicas", "-n", "monitoring")
        available = (kube.condition(prometheus, "Available") or {}).get("status")
        assert available == "True", prometheus["status"]
        assert kube.kubectl("get", "podmonitor", "-n", kube.RELEASE_NAMESPACE,
                            "-o", "name").stdout.strip(), "the chart's PodMonitor"
