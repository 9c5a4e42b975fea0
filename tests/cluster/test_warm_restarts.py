"""Warm restarts on a real cluster (runPolicy.warmRestarts, the default): a replica killed
inside its container comes back in the same container, forked from a process that keeps
TensorFlow imported, with no container restart (the kubelet's restartCount stays 0, so no
crash-loop back-off) and the restart counted by the operator.

One job (1 PS, a chief, 2 workers, R = 2, snapshots every 10 steps), three kills of the
replica process as the OOM killer would (SIGKILL of the container's largest process, not
its first): a worker, the PS and the chief, one after another. Each comes back in its pod
(same uid, restartCount 0), training goes on (the PS loses at most a snapshot's steps),
the job counts each in ``replicaStatuses`` and ``status.warmRestarts`` and records the
recovery, and the job finishes. (A container's first process killed, which the kubelet
restarts: test_failures.py; a non-retryable exit under ExitCode: test_failures.py too.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.slowjob import lift_delay, shared_dir
from tests.cluster.test_failures import (
    JOB,
    SNAPSHOT_EVERY,
    job,
    now_rfc3339,
    pod,
    ready,
    recovered,
    status,
    step_of,
)

# The operator reads every replica's warm restarts once per replica scrape interval (30 s; on
# the cluster of `make cluster MONITORING=1`, 5 s: hack/cluster/monitoring/chart-values.yaml).
COUNTED_WITHIN = 120


def restart_count(namespace: str, replica: str) -> int:
    return int(pod(namespace, replica)["status"]["containerStatuses"][0]["restartCount"])


def counted(namespace: str, replica_type: str, count: int) -> bool:
    counts = status(namespace).get("replicaStatuses", {}).get(replica_type, {})
    return counts.get("restarts") == count


def new_process(namespace: str, replica: str, old: int) -> int | None:
    pid = kube.replica_process(namespace, f"{JOB}-{replica}")
    return pid if pid != old else None


def warm_entry(namespace: str, replica: str) -> dict[str, Any] | None:
    entries = status(namespace).get("warmRestarts") or []
    return next((e for e in entries if e["pod"] == f"{JOB}-{replica}"), None)


@pytest.mark.timeout(900)
def test_replicas_killed_in_their_containers_come_back_warm(namespace: str,
                                                           tmp_path: Path) -> None:  # fmt: skip
    # test_failures' job at slowjob's fault pace (750 steps, 200 s at least).
    shared = shared_dir(tmp_path)
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job(shared)))
    figures: dict[str, str] = {}
    try:
        kube.eventually("training passes step 25",
                        lambda: step_of(namespace, f"{JOB}-worker-0") >= 25, 180)
        for replica, replica_type in (("worker-1", "worker"), ("ps-0", "ps"),
                                      ("chief-0", "chief")):  # fmt: skip
            uid = pod(namespace, replica)["metadata"]["uid"]
            since = now_rfc3339()
            before = step_of(namespace, f"{JOB}-worker-0")
            killed_at = time.monotonic()
            old = kube.kill_replica(namespace, f"{JOB}-{replica}")
            new = kube.eventually(f"a new {replica} process in its container",
                                  lambda r=replica, o=old: new_process(namespace, r, o), 30,
                                  interval=0.1)  # fmt: skip
            figures[f"{replica}: new process after, s"] = f"{time.monotonic() - killed_at:.1f}"
            kube.eventually(f"training goes on after {replica}'s kill", lambda b=before: (
                step_of(namespace, f"{JOB}-worker-0") > b + SNAPSHOT_EVERY), 60,
                interval=0.2)  # fmt: skip
            figures[f"{replica}: steps move again after, s"] = (
                f"{time.monotonic() - killed_at:.1f}")
            assert kube.replica_process(namespace, f"{JOB}-{replica}") == new
            assert pod(namespace, replica)["metadata"]["uid"] == uid
            assert restart_count(namespace, replica) == 0
            kube.eventually(f"{replica} ready again", lambda r=replica: ready(namespace, r), 30)
            kube.eventually(f"{replica}'s warm restart counted", lambda t=replica_type: counted(
                namespace, t, 1), COUNTED_WITHIN)  # fmt: skip
            assert warm_entry(namespace, replica) == {"pod": f"{JOB}-{replica}", "uid": uid,
                                                      "count": 1}  # fmt: skip
            last = kube.eventually(f"{replica}'s recovery recorded",
                                   lambda r=replica, s=since: recovered(namespace, r, s), 120)
            assert last["cause"] == "ContainerRestarted", last
            assert last.get("stepsLost", 0) <= SNAPSHOT_EVERY, last
            figures[f"{replica}: steps lost"] = str(last.get("stepsLost", 0))
        assert status(namespace).get("chiefRestarts") == 1
        lift_delay(shared)
        final = kube.finished(namespace, JOB, 600)
        assert final["phase"] == "Succeeded", final
        assert final["replicaStatuses"]["ps"]["restarts"] == 1
        print("figures:", figures)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{figures}\n{described}") from error
