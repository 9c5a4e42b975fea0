"""Elastic workers on the real cluster: `kubectl scale` a running job up and down.

A job with `elasticPolicy` 1..4 (R = 2, minReplicasToAggregate 1) starts with 2 workers
and is scaled through the CRD's scale subresource, as a user or an HPA would: to 4 (the
operator creates worker-2 and worker-3 with their Services; they join the running job and
train; the PS and the chief are untouched), then to 1 (the operator deletes worker-1..3:
SIGTERM, they leave the job and exit 0, and are not replaced). The global step moves all
along, no pod restarts, the `Resizing` condition and Events tell each change, and the job
finishes Succeeded. A scale beyond maxWorkers is refused by the API server, naming the
field. The scale-up is made by a namespace user who holds only Kubernetes' `edit` role (the
chart aggregates the scale subresource into it); a `view` user may read the scale, not
change it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.slowjob import lift_delay, shared_dir
from tests.cluster.test_failures import JOB, advancing, job, metrics, sample, status, step_of

# At slowjob's fault pace: at least 400 s at 3 replicas' pace, 240 s at 5 (scaled up), so
# that it trains through both resizes; the fewer steps, the fewer left at full speed.
MAX_STEPS = 1500


def elastic_job(shared: Path) -> dict[str, Any]:
    manifest = job(shared, workers=2, replicasToAggregate=2, minReplicasToAggregate=1,
                   elasticPolicy={"minWorkers": 1, "maxWorkers": 4})
    manifest["spec"]["training"].update({"maxSteps": MAX_STEPS, "snapshotEverySteps": 10})
    return manifest


def worker_pods(namespace: str) -> dict[str, dict[str, Any]]:
    """The job's worker pods that are not being deleted, by name."""
    items = kube.pods(namespace, f"syncreplicas.io/job-name={JOB},"
                                 "syncreplicas.io/replica-type=worker")
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def all_worker_pods(namespace: str) -> set[str]:
    items = kube.pods(namespace, f"syncreplicas.io/job-name={JOB},"
                                 "syncreplicas.io/replica-type=worker")
    return {p["metadata"]["name"] for p in items}


def restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))


def local_step(namespace: str, pod: str) -> float:
    try:
        return sample(metrics(namespace, pod), "syncreplicas_local_step") or 0.0
    except Exception:  # not serving yet
        return 0.0


def resizing(namespace: str) -> dict[str, Any] | None:
    found = [c for c in status(namespace).get("conditions", []) if c["type"] == "Resizing"]
    return found[0] if found else None


def scale(namespace: str, replicas: int, check: bool = True, user: str | None = None) -> Any:
    who = [f"--as=system:serviceaccount:{namespace}:{user}"] if user else []
    return kube.kubectl("scale", f"srj/{JOB}", f"--replicas={replicas}", "-n", namespace,
                        *who, check=check)


def namespace_user(namespace: str, name: str, role: str) -> None:
    """A ServiceAccount bound to one of Kubernetes' default roles in ``namespace``."""
    kube.kubectl("create", "serviceaccount", name, "-n", namespace)
    kube.kubectl("create", "rolebinding", name, f"--clusterrole={role}",
                 f"--serviceaccount={namespace}:{name}", "-n", namespace)


@pytest.mark.timeout(1200)
def test_kubectl_scale_up_and_down_while_training(namespace: str, tmp_path: Path) -> None:
    # Slowed (slowjob's fault pace) while it is resized; the delay lifted afterwards.
    shared = shared_dir(tmp_path)
    kube.kubectl("apply", "-n", namespace, "-f", "-",
                 input=yaml.safe_dump(elastic_job(shared)))  # fmt: skip
    try:
        chief = f"{JOB}-chief-0"
        kube.eventually("training passes step 25", lambda: step_of(namespace, chief) >= 25,
                        240)
        assert status(namespace).get("workers") == 2, status(namespace)
        # The scale subresource an HPA reads: replicas and the workers' selector.
        scale_obj = json.loads(kube.kubectl(
            "get", "--raw",
            f"/apis/syncreplicas.io/v1alpha1/namespaces/{namespace}/syncreplicasjobs/{JOB}/scale"
        ).stdout)
        assert scale_obj["spec"]["replicas"] == 2, scale_obj
        assert scale_obj["status"]["replicas"] == 2, scale_obj
        selector = scale_obj["status"]["selector"]
        assert set(kube.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o",
                                "name").stdout.split()) == \
            {f"pod/{JOB}-worker-0", f"pod/{JOB}-worker-1"}

        # Beyond maxWorkers: refused by the API server, the field named.
        refused = scale(namespace, 9, check=False)
        assert refused.returncode != 0
        assert "workers" in refused.stderr and "maxWorkers" in refused.stderr, refused.stderr

        # A viewer may not scale; an editor may (the chart's aggregated roles).
        namespace_user(namespace, "viewer", "view")
        namespace_user(namespace, "editor", "edit")
        denied = scale(namespace, 3, check=False, user="viewer")
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr

        # Scale up to 4: two new workers join the running job.
        before_up = step_of(namespace, chief)
        up_at = time.monotonic()
        scale(namespace, 4, user="editor")
        kube.eventually("worker-2 and worker-3 training", lambda: all(
            local_step(namespace, f"{JOB}-worker-{i}") >= 5 for i in (2, 3)), 300)
        joined_after = time.monotonic() - up_at
        assert step_of(namespace, chief) > before_up
        kube.eventually("status.workers 4", lambda: status(namespace).get("workers") == 4, 60)
        kube.eventually("Resized (the new workers train)", lambda: (
            resizing(namespace) or {}).get("reason") == "Resized", 60)
        events = kube.kubectl("get", "events", "-n", namespace, "--field-selector",
                              "reason=Resizing", "-o", "jsonpath={.items[*].message}").stdout
        assert "workers 2 -> 4" in events, events
        assert advancing(namespace, chief)

        # Scale down to 1: worker-3, -2, -1 leave at SIGTERM and are not replaced.
        down_from = step_of(namespace, chief)
        down_at = time.monotonic()
        scale(namespace, 1)
        kube.eventually("worker-1..3 gone", lambda: all_worker_pods(namespace) ==
                        {f"{JOB}-worker-0"}, 120)
        gone_after = time.monotonic() - down_at
        kube.eventually("status.workers 1", lambda: status(namespace).get("workers") == 1, 60)
        assert advancing(namespace, chief)
        assert step_of(namespace, chief) > down_from
        events = kube.kubectl("get", "events", "-n", namespace, "--field-selector",
                              "reason=Resizing", "-o", "jsonpath={.items[*].message}").stdout
        assert "workers 4 -> 1" in events, events
        kube.eventually("Resized (the removed pods gone)", lambda: (
            resizing(namespace) or {}).get("status") == "False", 60)

        # The job finishes; nobody restarted, nothing failed.
        lift_delay(shared)
        kube.eventually("Succeeded", lambda: status(namespace).get("phase") == "Succeeded", 600)
        final = status(namespace)
        assert final.get("globalStep", MAX_STEPS) >= MAX_STEPS, final
        for replica, counts in final.get("replicaStatuses", {}).items():
            assert counts.get("restarts", 0) == 0, (replica, final)
        print(f"scale 2 -> 4: both new workers training {joined_after:.1f}s after kubectl "
              f"scale; 4 -> 1: the three pods gone {gone_after:.1f}s after it")
    except BaseException:
        print(kube.describe(namespace, f"srj/{JOB}", "pods"))
        raise
