"""A job that loses nodes: crashed, partitioned, drained, on the real multi-node cluster.

One job (1 PS, a chief and 2 workers, R = 2 with minReplicasToAggregate 1; backoffLimit 0,
so any loss counted as a failure would fail it), its replicas placed by the template's
preferences: the PS on node A, the workers on node B, the chief beside the operator on O
(the operator's own loss is another matter). The faults, one after another:

1. node B crashes (its workers gone without a word): the global step does not stop for
   longer than the runtime's silence limit (the backup replica, or elastic R lowered to 1,
   absorbs it); the operator replaces the workers off the dead node once the node's Lease
   has been silent for 20 s;
2. node A crashes with PS 0: the global step moves again within 60 s of the crash (the
   operator force-deletes the PS pod, the new PS comes up elsewhere, the chief restores
   its last snapshot: at most snapshotEverySteps lost);
3. a worker's node is partitioned and healed: the worker is replaced while the old
   process still runs; after the heal the old process is gone (its kubelet ends it, the
   runtime's fencing refuses anything it sends meanwhile) and nothing of it counts;
4. the PS's node is drained (Eviction API, the job's PodDisruptionBudget allows one): the
   PS moves, the job goes on.

Throughout, the checkpoint's global step only grows (the chief checkpoints to a directory
every node mounts), no restart counts against backoffLimit, and the job ends Succeeded.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube

JOB = "nodes"
SELECTOR = f"syncreplicas.io/job-name={JOB}"
SNAPSHOT_EVERY = 10
LEASE_GRACE = 20  # the chart's operator.nodeLeaseGraceSeconds
PS_BACK_WITHIN = 60
CHECKPOINTS = "/var/lib/syncreplicas/checkpoints"


def prefer(node: str) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]},
    }]}}  # fmt: skip


def job(host_dir: Path, ps_node: str, worker_node: str, chief_node: str) -> dict[str, Any]:
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = JOB
    manifest["spec"].update({"workers": 2, "replicasToAggregate": 2, "parameterServers": 1,
                             "minReplicasToAggregate": 1})  # fmt: skip
    manifest["spec"]["training"].update(
        {"maxSteps": 12000, "checkpointEverySteps": 200, "snapshotEverySteps": SNAPSHOT_EVERY,
         "logEverySteps": 500, "evalEverySteps": 0, "checkpointDir": CHECKPOINTS}
    )
    manifest["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 0}
    container = {"name": "syncreplicas",
                 "env": [{"name": "SYNCREPLICAS_DEBUG_STEP_DELAY_MS", "value": "25"}]}
    manifest["spec"]["template"] = {"spec": {"containers": [container]}}
    for role, node in (("ps", ps_node), ("worker", worker_node)):
        manifest["spec"][role] = {"template": {"spec": {"affinity": prefer(node),
                                                         "containers": [container]}}}
    # The chief checkpoints to a directory of the machine that every node mounts (as a
    # shared volume would be), so that a chief replaced elsewhere finds the checkpoint.
    manifest["spec"]["chief"] = {"template": {"spec": {
        "affinity": prefer(chief_node),
        "containers": [{**container,
                        "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINTS}]}],
        "volumes": [{"name": "checkpoints",
                     "hostPath": {"path": str(host_dir), "type": "Directory"}}],
    }}}  # fmt: skip
    return dict(manifest)


def metrics(namespace: str, pod: str) -> str:
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}:9090/proxy/metrics"
    return kube.kubectl("get", "--raw", path, timeout=5, check=False).stdout


def global_step(namespace: str) -> int | None:
    """The chief's global step now (None when it cannot be read: a slow proxy, no chief)."""
    try:
        text = metrics(namespace, f"{JOB}-chief-0")
    except subprocess.SubprocessError:
        return None
    match = re.search(r"^syncreplicas_global_step(?:{[^}]*})? ([0-9.e+-]+)$", text, re.MULTILINE)
    return int(float(match.group(1))) if match else None


def status(namespace: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", JOB, "-n", namespace).get("status", {}))


def placement(namespace: str) -> dict[str, str]:
    """Replica (``ps-0``) -> node, of the job's pods not being deleted."""
    found = {}
    for item in kube.pods(namespace, SELECTOR):
        if "deletionTimestamp" in item["metadata"] or not item["spec"].get("nodeName"):
            continue
        found[item["metadata"]["name"].removeprefix(f"{JOB}-")] = item["spec"]["nodeName"]
    return found


def all_ready(namespace: str, away_from: str) -> bool:
    items = kube.pods(namespace, SELECTOR)
    return len(items) == 4 and all(
        "deletionTimestamp" not in p["metadata"] and p["spec"].get("nodeName") != away_from
        and any(c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", []))
        for p in items
    )  # fmt: skip


class StepWatch:
    """The chief's global step, sampled every 0.5 s in a thread: gaps and progress."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            step = global_step(self.namespace)
            if step is not None:
                self.samples.append((time.monotonic(), step))
            self._stop.wait(0.5)

    def __enter__(self) -> StepWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def last(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def moved_past(self, step: int, since: float) -> float | None:
        """Seconds after ``since`` when the step was first seen above ``step``."""
        for at, value in self.samples:
            if at > since and value > step:
                return at - since
        return None

    def longest_gap(self, since: float, until: float) -> float:
        """The longest time without a new global step between ``since`` and ``until``."""
        longest, last_change, last_value = 0.0, since, None
        for at, value in self.samples:
            if at < since or at > until:
                continue
            if value != last_value:
                longest = max(longest, at - last_change)
                last_change, last_value = at, value
        return max(longest, until - last_change)


class CheckpointWatch:
    """The global step of every checkpoint the chief writes (the `checkpoint` file's
    newest entry), read every 0.5 s: it must never go down."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.steps: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = (self.directory / "checkpoint").read_text()
            except OSError:
                text = ""
            match = re.search(r'^model_checkpoint_path: ".*-(\d+)"', text, re.MULTILINE)
            if match and (not self.steps or int(match.group(1)) != self.steps[-1]):
                self.steps.append(int(match.group(1)))
            self._stop.wait(0.5)

    def __enter__(self) -> CheckpointWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def events(namespace: str, reason: str) -> list[str]:
    items = kube.kubectl_json("get", "events", "-n", namespace,
                              "--field-selector", f"reason={reason}")["items"]  # fmt: skip
    return [str(e.get("message", "")) for e in items]


def operator_node() -> str:
    (item,) = kube.pods(kube.RELEASE_NAMESPACE, "app.kubernetes.io/component=operator")
    return str(item["spec"]["nodeName"])


@pytest.mark.timeout(1500)
def test_a_job_survives_crashed_partitioned_and_drained_nodes(namespace: str,
                                                              tmp_path: Path) -> None:  # fmt: skip
    nodes = sorted(n["metadata"]["name"] for n in kube.kubectl_json("get", "nodes")["items"])
    home = operator_node()
    node_a, node_b = [n for n in nodes if n != home][:2]
    host_dir = tmp_path / "checkpoints"
    host_dir.mkdir()
    host_dir.chmod(0o777)
    kube.kubectl("apply", "-n", namespace, "-f", "-",
                 input=yaml.safe_dump(job(host_dir, node_a, node_b, home)))
    figures: dict[str, object] = {}
    down: dict[str, str] = {}  # node -> the command that brings it back
    try:
        with StepWatch(namespace) as steps, CheckpointWatch(host_dir) as checkpoints:
            kube.eventually("training passes step 200", lambda: steps.last() >= 200, 240)
            where = placement(namespace)
            assert where["ps-0"] == node_a and where["worker-0"] == node_b, where
            # Spreading may put worker-1 beside it or elsewhere: one or both workers lost.
            assert where["chief-0"] != node_b, where
            figures["workers lost with their node"] = sum(n == node_b for n in where.values())

            # 1. The workers' node crashes.
            crashed = time.monotonic()
            kube.node_fault(node_b, "crash")
            down[node_b] = "start"
            kube.eventually("both workers replaced off the crashed node",
                            lambda: all_ready(namespace, node_b), 180)
            figures["workers' node crash: all replicas training again, s"] = round(
                time.monotonic() - crashed, 1)
            gap = steps.longest_gap(crashed, time.monotonic())
            figures["workers' node crash: longest step gap, s"] = round(gap, 1)
            assert gap < 10, f"the global step stopped for {gap:.1f} s"
            kube.node_fault(node_b, down.pop(node_b))
            assert any(node_b in m for m in events(namespace, "NodeLost"))

            # 2. The PS's node crashes.
            ps_node = placement(namespace)["ps-0"]
            before = steps.last()
            crashed = time.monotonic()
            kube.node_fault(ps_node, "crash")
            down[ps_node] = "start"
            back = kube.eventually("the global step moving again after the PS's node crash",
                                   lambda: steps.moved_past(before, crashed), 180)
            figures["PS node crash: global step moving again, s"] = round(back, 1)
            assert back <= PS_BACK_WITHIN, figures
            kube.eventually("every replica Ready again", lambda: all_ready(namespace, ps_node),
                            180)  # fmt: skip
            last = status(namespace).get("lastRecovery") or {}
            figures["PS node crash: lastRecovery"] = last
            assert last.get("stepsLost", 0) <= SNAPSHOT_EVERY, last
            kube.node_fault(ps_node, down.pop(ps_node))

            # 3. A worker's node partitioned, then healed.
            where = placement(namespace)
            victim = next(n for n in (where["worker-0"], where["worker-1"]) if n != home)
            old = {p["metadata"]["uid"] for p in kube.pods(namespace, SELECTOR)
                   if p["spec"].get("nodeName") == victim}  # fmt: skip
            kube.node_fault(victim, "partition")
            down[victim] = "heal"
            kube.eventually("the partitioned node's replicas replaced",
                            lambda: all_ready(namespace, victim), 180)
            kube.node_fault(victim, down.pop(victim))
            kube.eventually("the old processes gone from the healed node", lambda: not (
                {p["metadata"]["uid"] for p in kube.pods(namespace, SELECTOR)} & old)
                and len(kube.runtime_processes(namespace)) == 4, 120)  # fmt: skip

            # 4. The PS's node drained.
            ps_node = placement(namespace)["ps-0"]
            kube.node_fault(ps_node, "drain")
            try:
                kube.eventually("the PS moved off the drained node",
                                lambda: all_ready(namespace, ps_node), 180)
            finally:
                kube.node_fault(ps_node, "uncordon")

            kube.kubectl("wait", "-n", namespace, f"srj/{JOB}", "--for=condition=Succeeded",
                         "--timeout=600s", timeout=620)  # fmt: skip
        final = status(namespace)
        figures["checkpoints"] = checkpoints.steps
        assert checkpoints.steps == sorted(checkpoints.steps), checkpoints.steps
        assert final["globalStep"] >= 12000
        counts = final.get("replicaStatuses", {})
        assert all(c.get("failed", 0) == 0 for c in counts.values()), counts
        print("figures:", figures)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{figures}\n{described}") from error
    finally:
        for name, command in down.items():
            kube.node_fault(name, command, check=False)
