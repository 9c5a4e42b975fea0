"""Failures on a real cluster, arriving as Kubernetes delivers them.

A job survives, one after another: a worker's process killed in its container (the
kubelet restarts it in place), the chief's pod deleted (the operator replaces it; the
backup replica keeps the global step moving meanwhile, and the chief's TensorBoard comes
back with the new pod), the PS pod deleted (a new pod with
a new address, found again by its name; the chief restores its snapshot). (The
operator's own pod deleted, its node partitioned, an upgrade: test_operator_failover.py.) A job
whose model does not import fails with the runtime's reason, without crash-looping. (A
worker kept away for a while, the job Degraded: test_monitoring.py, with its alert.)
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import boardlib, kube
from tests.cluster.slowjob import (
    DELAY_MS,
    delayed,
    lift_delay,
    shared_dir,
    step_delay,
)

JOB = "faults"
SELECTOR = f"syncreplicas.io/job-name={JOB}"
SNAPSHOT_EVERY = 10
# At slowjob's fault pace (at most about 3.75 steps/s), 200 s at least of training for the
# faults to land in; after the delay is lifted the rest runs at full speed (30 ms of CPU a
# step), the fewer the better.
MAX_STEPS = 750


def job(shared: Path | None = None, delay_ms: int = DELAY_MS, **spec: Any) -> dict[str, Any]:
    """The linear example, slowed by a step delay of ``delay_ms`` in every replica so that
    faults land while it trains; with ``shared``, the delay is read from a file there
    (slowjob's fault pace, set by the test), and lifting it ends the job soon."""
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = JOB
    manifest["spec"].update({"workers": 2, "replicasToAggregate": 2, "parameterServers": 1})
    manifest["spec"]["training"].update(
        {"maxSteps": MAX_STEPS, "checkpointEverySteps": 250, "snapshotEverySteps": SNAPSHOT_EVERY,
         "logEverySteps": 500, "evalEverySteps": 0}
    )
    manifest["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 6}
    container: dict[str, Any] = {"name": "syncreplicas", "env": [step_delay(delay_ms)]}
    template: dict[str, Any] = {"containers": [container]}
    if shared is not None:
        container, volume = delayed(container, shared)
        template = {"containers": [container], "volumes": [volume]}
    manifest["spec"]["template"] = {"spec": template}
    manifest["spec"].update(spec)
    return dict(manifest)


def metrics(namespace: str, pod: str) -> str:
    """A replica's /metrics, through the API server's proxy (as a user without a
    port-forward would read it)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}:9090/proxy/metrics"
    return kube.raw(path)


def sample(text: str, name: str) -> float | None:
    match = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def step_of(namespace: str, pod: str) -> int:
    value = sample(metrics(namespace, pod), "syncreplicas_global_step")
    if value is None:
        raise AssertionError(f"{pod} exports no global step yet")
    return int(value)


def status(namespace: str, job: str = JOB) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", job, "-n", namespace).get("status", {}))


def pod(namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "pod", f"{JOB}-{name}", "-n", namespace))


def ready(namespace: str, name: str) -> bool:
    item = pod(namespace, name)
    return not item["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in item["status"].get("conditions", [])
    )


def recovered(namespace: str, replica: str, since: str, job: str = JOB) -> dict[str, Any] | None:
    """``status.lastRecovery`` of ``replica`` started at or after ``since``, once it ended."""
    last = status(namespace, job).get("lastRecovery") or {}
    if last.get("replica") == replica and last.get("startedAt", "") >= since and last.get(
        "recoveredAt"
    ):
        return dict(last)
    return None


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))


def advancing(namespace: str, pod_name: str, seconds: float = 3.0) -> bool:
    before = step_of(namespace, pod_name)
    time.sleep(seconds)
    return step_of(namespace, pod_name) > before


@pytest.mark.timeout(1200)
def test_a_job_survives_a_killed_worker_a_deleted_chief_and_ps(
        namespace: str, tmp_path: Path) -> None:  # fmt: skip
    shared = shared_dir(tmp_path)
    manifest = job(shared, tensorboard={})
    manifest["spec"]["training"]["summaryEverySteps"] = 10
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    figures: dict[str, str] = {}
    try:
        kube.eventually("training passes step 25", lambda: step_of(namespace, f"{JOB}-worker-0")
                        >= 25, 180)  # fmt: skip

        # 1. A worker's process killed in its container: the kubelet restarts it in place.
        since = now_rfc3339()
        kube.kill_in_place(namespace, f"{JOB}-worker-1")
        kube.eventually("the kubelet restarts worker-1 in place", lambda: pod(
            namespace, "worker-1")["status"]["containerStatuses"][0]["restartCount"] == 1
            and ready(namespace, "worker-1"), 120)  # fmt: skip
        last = kube.eventually("the worker's recovery is recorded",
                               lambda: recovered(namespace, "worker-1", since), 120)
        assert last["cause"] == "ContainerRestarted", last
        assert status(namespace)["replicaStatuses"]["worker"]["restarts"] == 1
        figures["worker killed: steps lost"] = str(last.get("stepsLost"))

        # 2. The chief's pod deleted: replaced by the operator; meanwhile the backup keeps
        # the global step moving; the new chief rejoins without resetting anyone.
        since = now_rfc3339()
        before = step_of(namespace, f"{JOB}-worker-0")
        old_uid = pod(namespace, "chief-0")["metadata"]["uid"]
        kube.kubectl("delete", "pod", f"{JOB}-chief-0", "-n", namespace, "--wait=false")
        kube.eventually("the step moves while the chief is away",
                        lambda: advancing(namespace, f"{JOB}-worker-0"), 60)
        kube.eventually("a new chief pod runs", lambda: pod(namespace, "chief-0")["metadata"][
            "uid"] != old_uid and ready(namespace, "chief-0"), 120)  # fmt: skip
        last = kube.eventually("the chief's recovery is recorded",
                               lambda: recovered(namespace, "chief-0", since), 120)
        assert last["cause"] == "Deleted" and last.get("stepsLost", 0) == 0, last
        assert step_of(namespace, f"{JOB}-chief-0") >= before
        # TensorBoard came back with the new chief, behind the same Service, and shows
        # what it writes (its summaries start at the step it rejoined at).
        steps = boardlib.forwarded_loss_steps(namespace, f"{JOB}-tensorboard", timeout=120,
                                              at_least=1)  # fmt: skip
        assert min(steps) >= before, (before, steps)

        # 3. The PS pod deleted: a new pod, a new address, the same name; the chief restores
        # its snapshot (at most snapshotEverySteps steps lost).
        since = now_rfc3339()
        old_ip = pod(namespace, "ps-0")["status"]["podIP"]
        deleted_at = time.monotonic()
        kube.kubectl("delete", "pod", f"{JOB}-ps-0", "-n", namespace, "--wait=false")
        last = kube.eventually("the PS's recovery is recorded",
                               lambda: recovered(namespace, "ps-0", since), 240)
        figures["PS deleted: back and training after, s"] = f"{time.monotonic() - deleted_at:.0f}"
        assert pod(namespace, "ps-0")["status"]["podIP"] != old_ip
        assert last.get("stepsLost", 0) <= SNAPSHOT_EVERY, last
        figures["PS deleted: steps lost"] = str(last.get("stepsLost"))

        lift_delay(shared)
        kube.kubectl("wait", "-n", namespace, f"srj/{JOB}", "--for=condition=Succeeded",
                     "--timeout=600s", timeout=620)  # fmt: skip
        final = status(namespace)
        assert final["globalStep"] >= MAX_STEPS
        # cleanPodPolicy Running: a PS still serving is deleted; one that already ended on
        # the chief's "done" (phase Succeeded) may stay, as Kubernetes Jobs leave theirs.
        kube.eventually("no PS pod runs after success", lambda: not [
            p for p in kube.pods(namespace, f"{SELECTOR},syncreplicas.io/replica-type=ps")
            if p["status"].get("phase") in ("Pending", "Running")
            and not p["metadata"].get("deletionTimestamp")], 60)  # fmt: skip
        print("figures:", figures)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{figures}\n{described}") from error


@pytest.mark.timeout(600)
def test_a_model_that_does_not_import_fails_the_job_with_the_runtimes_reason(
    namespace: str,
) -> None:
    manifest = job(model={"entrypoint": "no_such_module:build"})
    manifest["spec"]["runPolicy"] = {"restartPolicy": "ExitCode", "backoffLimit": 3}
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    kube.kubectl("wait", "-n", namespace, f"srj/{JOB}", "--for=condition=Failed",
                 "--timeout=240s", timeout=260)  # fmt: skip
    describe = kube.kubectl("describe", "srj", JOB, "-n", namespace).stdout
    assert "no_such_module" in describe, describe
    # Not retried: a bad model is not transient. Nothing crash-loops afterwards.
    time.sleep(10)
    for item in kube.pods(namespace, SELECTOR):
        for container in item["status"].get("containerStatuses", []):
            assert container["restartCount"] == 0, (item["metadata"]["name"], container)
    # The failed job's pods are stopped (a loaded node may take a while to end one).
    kube.eventually("no pod of the failed job runs", lambda: not [
        p for p in kube.pods(namespace, SELECTOR)
        if p["status"].get("phase") in ("Pending", "Running")
        and not p["metadata"].get("deletionTimestamp")], 60)  # fmt: skip
