"""SyncReplicasJobs in Kueue's queues on the real cluster (Kueue v0.17.0 as `make cluster
KUEUE=1` installs it, the chart's kueue.enabled on): quota, waiting, preemption, resume.

A ClusterQueue of this test's own admits 500m CPU; each job (1 PS, a chief, 1 worker)
requests 100m a pod, so one fits and two do not:
1. a low-priority job L is admitted and trains (slowed by a step delay read from a shared
   directory that also holds its checkpoints); a job without the queue label runs beside
   it, untouched by Kueue (no Workload);
2. a second low-priority job W waits: Suspended, with Kueue's reason (insufficient quota)
   in its condition, and no pod;
3. a high-priority job H preempts L: L's pods go (its chief checkpoints at SIGTERM), L
   says why (EvictedByKueue) and gives its quota back; H runs and succeeds;
4. L and W are admitted again in turn and succeed; L resumes from the checkpoint it wrote
   when evicted: its checkpoints' steps only grow and it repeats no step before it;
5. deleting H deletes its Workload;
6. the operator's metrics count the four admissions after a wait, and no job waiting.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.jobwatch import CheckpointWatch
from tests.cluster.slowjob import SHARED, delayed, lift_delay, shared_dir
from tests.cluster.test_failures import sample

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE = "kueue.x-k8s.io/v1beta2"


def queued_job(name: str, shared: Path | None, priority: str | None, steps: int,
               queue: str | None = "lq") -> dict[str, Any]:  # fmt: skip
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = name
    labels = {QUEUE_LABEL: queue} if queue else {}
    if priority:
        labels[PRIORITY_LABEL] = priority
    manifest["metadata"]["labels"] = labels
    manifest["spec"].update({"workers": 1, "replicasToAggregate": 2, "parameterServers": 1})
    manifest["spec"]["training"].update({"maxSteps": steps, "checkpointEverySteps": 500,
                                         "logEverySteps": 500, "evalEverySteps": 0})  # fmt: skip
    manifest["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 0}
    container: dict[str, Any] = {"name": "syncreplicas", "resources": {
        "requests": {"cpu": "100m", "memory": "64Mi"}}}  # fmt: skip
    template: dict[str, Any] = {"containers": [container]}
    if shared is not None:
        container, volume = delayed(container, shared)
        template = {"containers": [container], "volumes": [volume]}
        manifest["spec"]["training"]["checkpointDir"] = f"{SHARED}/checkpoints"
    manifest["spec"]["template"] = {"spec": template}
    return dict(manifest)


def namespace_queue(namespace: str, cpu: str, memory: str, **spec: Any) -> list[dict[str, Any]]:
    """The ResourceFlavor ``default-flavor``, a ClusterQueue ``cq-<namespace>`` that admits
    only ``namespace``'s jobs within that quota (``spec`` added to its spec), and its
    LocalQueue ``lq`` in ``namespace``."""
    cq = f"cq-{namespace}"[:63]
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"},
         "spec": {}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            **spec,
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": "default-flavor", "resources": [
                    {"name": "cpu", "nominalQuota": cpu},
                    {"name": "memory", "nominalQuota": memory}]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": namespace}, "spec": {"clusterQueue": cq}},
    ]  # fmt: skip


def queues(namespace: str) -> str:
    return yaml.safe_dump_all([
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "low"},
         "value": 100, "description": "low"},
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
         "value": 1000, "description": "high"},
        *namespace_queue(namespace, "500m", "2Gi",
                         preemption={"withinClusterQueue": "LowerPriority"}),
    ])  # fmt: skip


def srj(namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", name, "-n", namespace))


def suspended(namespace: str, name: str) -> dict[str, Any] | None:
    return kube.condition(srj(namespace, name), "Suspended")


def pods_of(namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.pods(namespace, f"syncreplicas.io/job-name={name}")


def queue_metric(namespace: str, name: str) -> float:
    """``name`` for queue lq of ``namespace``, summed over the operator replicas (the one
    that acted says it; a follower has no sample)."""
    total = 0.0
    labels = f'job_namespace="{namespace}",local_queue="lq"'
    for pod in kube.pods(kube.RELEASE_NAMESPACE, kube.OPERATOR_PODS):
        text = kube.raw(f"/api/v1/namespaces/{kube.RELEASE_NAMESPACE}/pods/"
                        f"{pod['metadata']['name']}:9090/proxy/metrics")  # fmt: skip
        total += sum(float(v) for v in re.findall(
            rf"^{name}{{{labels}}} (\S+)$", text, re.MULTILINE))  # fmt: skip
    return total


def workloads(namespace: str) -> list[dict[str, Any]]:
    return list(kube.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"])


def chief_step(namespace: str, name: str) -> int | None:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}-chief-0:9090/proxy/metrics"
    text = kube.raw(path, check=False)
    value = sample(text, "syncreplicas_global_step") if text else None
    return int(value) if value is not None else None


@pytest.mark.timeout(1200)
def test_quota_waits_priority_preempts_and_the_preempted_job_resumes_from_its_checkpoint(
        namespace: str, tmp_path: Path) -> None:  # fmt: skip
    cq = f"cq-{namespace}"[:63]
    # L at slowjob's fault pace: 750 steps take 10 minutes at least (1 worker and the chief),
    # and once the delay is lifted few are left to run at full speed.
    shared = shared_dir(tmp_path)
    operators = kube.operator_restarts()
    kube.kubectl("apply", "-f", "-", input=queues(namespace))
    apply = lambda body: kube.kubectl("apply", "-n", namespace, "-f", "-",  # noqa: E731
                                      input=yaml.safe_dump(body))  # fmt: skip
    try:
        with CheckpointWatch(shared / "checkpoints") as checkpoints:
            # 1. L admitted and training; a job without the label runs beside it.
            apply(queued_job("low", shared, "low", steps=750))
            apply(queued_job("plain", None, None, steps=200, queue=None))
            kube.eventually("L training", lambda: (chief_step(namespace, "low") or 0) >= 10, 240)
            assert [w["metadata"]["labels"]["syncreplicas.io/job-name"]
                    for w in workloads(namespace)] == ["low"]  # fmt: skip
            assert kube.finished(namespace, "plain", 240)["phase"] == "Succeeded"

            # 2. W waits with Kueue's reason.
            apply(queued_job("waits", None, "low", steps=300))
            said = kube.eventually("W held with Kueue's reason", lambda: (
                c := suspended(namespace, "waits")) and "insufficient" in c["message"]
                and c, 120)  # fmt: skip
            assert said["status"] == "True" and said["reason"] == "Queued", said
            assert srj(namespace, "waits")["status"]["phase"] == "Suspended"
            assert not pods_of(namespace, "waits")

            # 3. H preempts L.
            before = chief_step(namespace, "low") or 0
            apply(queued_job("high", None, "high", steps=300))
            evicted = kube.eventually("L evicted", lambda: (
                c := suspended(namespace, "low")) and c["reason"] == "EvictedByKueue" and c, 120)
            assert "Preempted" in evicted["message"], evicted
            kube.eventually("L's pods gone", lambda: not pods_of(namespace, "low"), 120)
            at_eviction = checkpoints.steps[-1] if checkpoints.steps else 0
            assert at_eviction >= before, (at_eviction, before, checkpoints.steps)
            assert kube.finished(namespace, "high", 300)["phase"] == "Succeeded"

            # 4. L and W admitted again in turn; L resumes where it checkpointed.
            lift_delay(shared)
            low = kube.finished(namespace, "low", 600)
            assert low["phase"] == "Succeeded", low
            assert kube.finished(namespace, "waits", 600)["phase"] == "Succeeded"
            logs = kube.kubectl("logs", "-n", namespace, "low-chief-0", check=False).stdout
            restored = [int(s) for s in re.findall(r"variables restored \S+, global step (\d+)",
                                                   logs)]  # fmt: skip
            # Deleting a job deletes its Workload (the garbage collector: it owns it).
            kube.kubectl("delete", "srj", "high", "-n", namespace, "--wait=false")
            kube.eventually("H's Workload deleted with it", lambda: "high" not in [
                w["metadata"]["labels"]["syncreplicas.io/job-name"]
                for w in workloads(namespace)], 60)  # fmt: skip
        assert checkpoints.steps == sorted(checkpoints.steps), checkpoints.steps
        assert at_eviction in checkpoints.steps
        # The operator's metrics: four admissions after a wait (L twice, W, H); none waiting.
        # A replica that restarted meanwhile (under load a leader may miss its renew deadline
        # and exit; the other takes over) counts from zero again: at most four then.
        waits = queue_metric(namespace, "syncreplicas_operator_queue_wait_seconds_count")
        restarted = kube.operator_restarts() != operators
        assert waits <= 4 if restarted else waits == 4, (waits, operators, kube.operator_restarts())
        assert queue_metric(namespace, "syncreplicas_operator_queued_jobs") == 0
        assert restored and restored[0] == at_eviction, (restored, at_eviction, logs[-3000:])
        print("figures:", {"L's step when H came": before, "L's checkpoint at eviction":
                           at_eviction, "checkpoints": checkpoints.steps,
                           "an operator replica restarted": restarted})  # fmt: skip
    except AssertionError as error:
        described = kube.describe(namespace, "srj")
        raise AssertionError(f"{error}\n{described}\n{workloads(namespace)}") from error
    finally:
        kube.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
