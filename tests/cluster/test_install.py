"""`helm install` of the chart on a real cluster (done by `make cluster`): the release is
deployed, the operator's two replicas are Ready in-cluster under the chart's ServiceAccount
(one leading, through its Lease), with the chart's RBAC and nothing more, and the NOTES tell
the user what to do next."""

from __future__ import annotations

import json
import re

import pytest

from tests.cluster import kube

SERVICE_ACCOUNT = f"system:serviceaccount:{kube.RELEASE_NAMESPACE}:syncreplicas-operator"


def test_the_release_is_deployed_and_its_notes_say_what_to_do(cluster_up: None) -> None:
    status = json.loads(kube.helm("status", kube.RELEASE, "-n", kube.RELEASE_NAMESPACE,
                                  "-o", "json").stdout)  # fmt: skip
    assert status["info"]["status"] == "deployed"
    notes = kube.helm("get", "notes", kube.RELEASE, "-n", kube.RELEASE_NAMESPACE).stdout
    for command in ("rollout status deployment/syncreplicas-operator", "get syncreplicasjobs -w",
                    "describe srj"):  # fmt: skip
        assert command in notes, notes


def test_the_operator_runs_in_cluster_under_the_charts_service_account(cluster_up: None) -> None:
    # The chart's two replicas, both Ready (a follower answers its probes), one leading;
    # waited for: a test that ran before may have just restarted a node with a replica on it.
    kube.operator_replicas_ready()
    replicas = {p["metadata"]["name"]: p for p in kube.pods(kube.RELEASE_NAMESPACE,
                                                            kube.OPERATOR_PODS)}  # fmt: skip
    assert len(replicas) == 2 and kube.leader_pod() in replicas, (list(replicas), kube.leader_pod())
    pod = replicas[kube.leader_pod()]
    assert pod["spec"]["serviceAccountName"] == "syncreplicas-operator"
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] and container["image"].endswith("syncreplicas-operator:0.1.0")
    uid = kube.kubectl("exec", "-n", kube.RELEASE_NAMESPACE, pod["metadata"]["name"], "--",
                       "id", "-u").stdout.strip()  # fmt: skip
    assert uid == "10001"
    # The operator's image has no TensorFlow (the operator never imports it).
    probe = "import importlib.util as u; print(u.find_spec('tensorflow') is None)"
    assert kube.kubectl("exec", "-n", kube.RELEASE_NAMESPACE, pod["metadata"]["name"], "--",
                        "python", "-c", probe).stdout.strip() == "True"  # fmt: skip
    # Its liveness endpoint and metrics answer (the chart's probes use the first).
    metrics = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{kube.RELEASE_NAMESPACE}"
                           "/services/syncreplicas-operator:metrics/proxy/metrics").stdout
    assert "syncreplicas_operator_jobs" in metrics


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        # What the operator does to jobs and their children.
        ("watch", "syncreplicasjobs.syncreplicas.io", True),
        ("patch", "syncreplicasjobs.syncreplicas.io/status", True),
        ("create", "pods", True),
        ("delete", "pods", True),
        ("create", "services", True),
        ("create", "networkpolicies.networking.k8s.io", True),
        ("create", "events", True),
        # Nothing it has no use for.
        ("get", "secrets", False),
        ("create", "deployments.apps", False),
        ("create", "syncreplicasjobs.syncreplicas.io", False),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", False),
    ],
)
def test_rbac_grants_the_operator_what_it_uses_and_no_more(
    cluster_up: None, verb: str, resource: str, allowed: bool
) -> None:
    result = kube.kubectl("auth", "can-i", verb, resource, "--as", SERVICE_ACCOUNT,
                          "-n", "default", check=False)  # fmt: skip
    assert result.stdout.strip() == ("yes" if allowed else "no"), (verb, resource, result)


def test_one_replica_leads_through_a_lease_it_may_renew_and_nothing_else(cluster_up: None) -> None:
    # `kubectl get lease -n syncreplicas-system` names the leader; its gauge says 1, the
    # follower's 0.
    lease = kube.kubectl("get", "lease", "-n", kube.RELEASE_NAMESPACE).stdout
    leader = kube.leader_pod()
    assert leader and leader in lease, lease
    gauges = {}
    for item in kube.pods(kube.RELEASE_NAMESPACE, kube.OPERATOR_PODS):
        name = item["metadata"]["name"]
        text = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{kube.RELEASE_NAMESPACE}"
                            f"/pods/{name}:9090/proxy/metrics").stdout  # fmt: skip
        (value,) = re.findall(r"^syncreplicas_operator_leader (\S+)$", text, re.MULTILINE)
        gauges[name] = float(value)
    assert gauges == {n: float(n == leader) for n in gauges} and len(gauges) == 2, gauges
    # Its Lease, by name, in its own namespace; no other Lease anywhere.
    for verb, lease_name, namespace, allowed in [
        ("patch", kube.LEADER_LEASE, kube.RELEASE_NAMESPACE, "yes"),
        ("get", kube.LEADER_LEASE, kube.RELEASE_NAMESPACE, "yes"),
        ("patch", "kube-scheduler", kube.RELEASE_NAMESPACE, "no"),
        ("patch", kube.LEADER_LEASE, "default", "no"),
        ("delete", kube.LEADER_LEASE, kube.RELEASE_NAMESPACE, "no"),
    ]:
        said = kube.kubectl("auth", "can-i", verb, f"leases.coordination.k8s.io/{lease_name}",
                            "--as", SERVICE_ACCOUNT, "-n", namespace, check=False)  # fmt: skip
        assert said.stdout.strip() == allowed, (verb, lease_name, namespace, said)
