"""Pod Security Standards: a job's pods, and the operator's own, are admitted under the
`restricted` profile; a template that asks for more is refused by the API server, and the
job says which pod and why instead of waiting in silence.

The namespaces are labelled `pod-security.kubernetes.io/enforce: restricted`, which the API
server's PodSecurity admission enforces at pod creation (the operator's namespace by
hack/cluster/install-chart.sh before the chart is installed).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster import kube
from tests.cluster.test_job import apply, linear_job, srj

RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"


@pytest.fixture
def restricted(namespace: str) -> str:
    kube.kubectl("label", "namespace", namespace, RESTRICTED,
                 "pod-security.kubernetes.io/warn=restricted")  # fmt: skip
    return namespace


def as_root(name: str) -> dict[str, Any]:
    """The same job, its template asking for root and an added capability."""
    job = linear_job(max_steps=50)
    job["metadata"]["name"] = name
    job["spec"]["template"] = {"spec": {
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
        "containers": [{"name": "syncreplicas",
                        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
    }}  # fmt: skip
    return job


@pytest.mark.timeout(600)
def test_a_jobs_pods_train_in_a_restricted_namespace_and_a_root_template_is_refused_aloud(
    restricted: str,
) -> None:
    namespace = restricted
    apply(namespace, linear_job(max_steps=200))
    apply(namespace, as_root("rooted"))

    # The root template: no pod, and the job's status and Events say which and why, in the
    # API server's own words.
    def refused() -> dict[str, Any] | None:
        conditions = (srj(namespace, "rooted").get("status") or {}).get("conditions") or []
        found = [c for c in conditions if c["type"] == "ReplicaFailure"]
        return found[0] if found and found[0]["status"] == "True" else None

    condition = kube.eventually("the refusal in the job's status", refused, 120)
    assert condition["reason"] == "FailedCreate", condition
    message = condition["message"]
    assert 'violates PodSecurity "restricted:latest"' in message, message
    assert "runAsNonRoot != true" in message and "NET_ADMIN" in message, message
    assert "create Pod rooted-" in message, message  # which pod
    events = kube.kubectl_json("get", "events", "-n", namespace, "--field-selector",
                               "involvedObject.name=rooted")["items"]  # fmt: skip
    failed = [e for e in events if e["reason"] == "FailedCreate"]
    assert failed and failed[0]["type"] == "Warning", events
    assert 'violates PodSecurity "restricted:latest"' in failed[0]["message"]
    assert kube.pods(namespace, "syncreplicas.io/job-name=rooted") == []
    assert srj(namespace, "rooted")["status"]["phase"] == "Pending"  # kubectl get srj

    # The job that asks for nothing more: admitted, trained to the end.
    status = kube.finished(namespace, "linear", 420)
    assert status["phase"] == "Succeeded", status
    assert not [c for c in status.get("conditions", []) if c["type"] == "ReplicaFailure"]


def test_the_operators_namespace_enforces_restricted_and_its_pods_comply(
    cluster_up: None,
) -> None:
    namespace = kube.kubectl_json("get", "namespace", kube.RELEASE_NAMESPACE)
    assert namespace["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "restricted"
    # The API server's own check of the pods that run there now: it warns of every one
    # that the level would refuse.
    check = kube.kubectl("label", "--dry-run=server", "--overwrite", "namespace",
                         kube.RELEASE_NAMESPACE, RESTRICTED)  # fmt: skip
    assert "violate" not in check.stderr, check.stderr
    pods = kube.pods(kube.RELEASE_NAMESPACE, "app.kubernetes.io/component=operator")
    assert pods and all(p["status"]["phase"] == "Running" for p in pods), pods
