"""A job that loses nodes: crashed, partitioned, drained, on the real multi-node cluster.

One job (1 PS, a chief and 2 workers, R = 2 with minReplicasToAggregate 1; backoffLimit 0,
so any loss counted as a failure would fail it), its replicas placed by the template's
preferences: the PS on node A, the workers on node B, the chief beside the operator on O
(the operator's own loss is another matter). The faults, one after another:

1. node B crashes (both workers gone without a word): the global step does not wait for
   the replacements (elastic R lowers to 1: the chief trains on; the gap is reported);
   the operator replaces the workers off the dead node once the node's Lease has been
   silent for 20 s;
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

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.jobwatch import (
    CheckpointWatch,
    StepWatch,
    all_ready,
    events,
    label_nodes,
    operator_node,
    place_selector,
    placement,
)

JOB = "nodes"
SELECTOR = f"syncreplicas.io/job-name={JOB}"
SNAPSHOT_EVERY = 10
LEASE_GRACE = 20  # the chart's operator.nodeLeaseGraceSeconds
PS_BACK_WITHIN = 60
CHECKPOINTS = "/var/lib/syncreplicas/checkpoints"


def job(host_dir: Path) -> dict[str, Any]:
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = JOB
    manifest["spec"].update({"workers": 2, "replicasToAggregate": 2, "parameterServers": 1,
                             "minReplicasToAggregate": 1})  # fmt: skip
    manifest["spec"]["training"].update(
        {"maxSteps": 9000, "checkpointEverySteps": 200, "snapshotEverySteps": SNAPSHOT_EVERY,
         "logEverySteps": 500, "evalEverySteps": 0, "checkpointDir": CHECKPOINTS}
    )
    manifest["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 0}
    container = {"name": "syncreplicas",
                 "env": [{"name": "SYNCREPLICAS_DEBUG_STEP_DELAY_MS", "value": "25"}]}
    manifest["spec"]["template"] = {"spec": {"containers": [container]}}
    for role in ("ps", "worker"):
        manifest["spec"][role] = {"template": {"spec": {"nodeSelector": place_selector(role),
                                                         "containers": [container]}}}
    # The chief checkpoints to a directory of the machine that every node mounts (as a
    # shared volume would be), so that a chief replaced elsewhere finds the checkpoint.
    manifest["spec"]["chief"] = {"template": {"spec": {
        "nodeSelector": place_selector("chief"),
        "containers": [{**container,
                        "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINTS}]}],
        "volumes": [{"name": "checkpoints",
                     "hostPath": {"path": str(host_dir), "type": "Directory"}}],
    }}}  # fmt: skip
    return dict(manifest)


def status(namespace: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", JOB, "-n", namespace).get("status", {}))


@pytest.mark.timeout(1500)
def test_a_job_survives_crashed_partitioned_and_drained_nodes(namespace: str,
                                                              tmp_path: Path) -> None:  # fmt: skip
    nodes = sorted(n["metadata"]["name"] for n in kube.kubectl_json("get", "nodes")["items"])
    home = operator_node()
    node_a, node_b = [n for n in nodes if n != home][:2]
    host_dir = tmp_path / "checkpoints"
    host_dir.mkdir()
    host_dir.chmod(0o777)
    label_nodes({node_a: ["ps"], node_b: ["worker"], home: ["chief"]})
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job(host_dir)))
    figures: dict[str, object] = {}
    down: dict[str, str] = {}  # node -> the command that brings it back
    try:
        chief = f"{JOB}-chief-0"
        with StepWatch(namespace, chief) as steps, CheckpointWatch(host_dir) as checkpoints:
            kube.eventually("training passes step 200", lambda: steps.last() >= 200, 240)
            where = placement(namespace, JOB)
            assert where == {"ps-0": node_a, "worker-0": node_b, "worker-1": node_b,
                             "chief-0": home}, where  # fmt: skip
            # Replacements go anywhere but the operator's node (its own loss is another
            # matter), so that every fault below hits a node without the operator.
            label_nodes({n: ["ps", "chief", "worker"] if n != home else ["chief"] for n in nodes})

            # 1. The workers' node crashes.
            crashed = time.monotonic()
            kube.node_fault(node_b, "crash")
            down[node_b] = "start"
            kube.eventually("the workers replaced off the crashed node",
                            lambda: all_ready(namespace, JOB, 4, node_b), 180)
            figures["workers' node crash: all replicas training again, s"] = round(
                time.monotonic() - crashed, 1)
            gap = steps.longest_gap(crashed, time.monotonic())
            figures["workers' node crash: longest step gap, s"] = round(gap, 1)
            # Measured 2.3 s (elastic R lowered to 1) in one run and 27.4 s in another: the
            # bound is that the step does not wait for the replacements to be scheduled,
            # started and trained (about 35 s); the gap itself is reported.
            assert gap < 45, f"the global step stopped for {gap:.1f} s"
            kube.node_fault(node_b, down.pop(node_b))
            assert any(node_b in m for m in events(namespace, "NodeLost"))

            # 2. The PS's node crashes.
            ps_node = placement(namespace, JOB)["ps-0"]
            crashed = time.monotonic()
            kube.node_fault(ps_node, "crash")
            down[ps_node] = "start"
            back, lost = kube.eventually("the global step moving again after the PS's node "
                                         "crash", lambda: steps.resumed(crashed), 180)
            figures["PS node crash: global step moving again, s"] = round(back, 1)
            figures["PS node crash: steps lost"] = lost
            assert 0 < back <= PS_BACK_WITHIN, figures
            assert lost <= SNAPSHOT_EVERY, figures
            kube.eventually("every replica Ready again",
                            lambda: all_ready(namespace, JOB, 4, ps_node), 180)
            kube.node_fault(ps_node, down.pop(ps_node))

            # 3. A worker's node partitioned, then healed.
            where = placement(namespace, JOB)
            victim = where["worker-1"]
            figures["partition: replicas on the node"] = sorted(
                r for r, n in where.items() if n == victim)
            old = {p["metadata"]["uid"] for p in kube.pods(namespace, SELECTOR)
                   if p["spec"].get("nodeName") == victim}  # fmt: skip
            kube.node_fault(victim, "partition")
            down[victim] = "heal"
            kube.eventually("the partitioned node's replicas replaced",
                            lambda: all_ready(namespace, JOB, 4, victim), 180)
            kube.node_fault(victim, down.pop(victim))
            kube.eventually("the old processes gone from the healed node", lambda: not (
                {p["metadata"]["uid"] for p in kube.pods(namespace, SELECTOR)} & old)
                and len(kube.runtime_processes(namespace)) == 4, 120)  # fmt: skip

            # 4. The PS's node drained.
            assert status(namespace).get("phase") == "Running", "the job ended before the drain"
            ps_node = placement(namespace, JOB)["ps-0"]
            kube.node_fault(ps_node, "drain")
            try:
                kube.eventually("the PS moved off the drained node",
                                lambda: all_ready(namespace, JOB, 4, ps_node), 180)
            finally:
                kube.node_fault(ps_node, "uncordon")

            kube.kubectl("wait", "-n", namespace, f"srj/{JOB}", "--for=condition=Succeeded",
                         "--timeout=600s", timeout=620)  # fmt: skip
        final = status(namespace)
        figures["checkpoints"] = checkpoints.steps
        assert checkpoints.steps == sorted(checkpoints.steps), checkpoints.steps
        assert final["globalStep"] >= 9000
        counts = final.get("replicaStatuses", {})
        assert all(c.get("failed", 0) == 0 for c in counts.values()), counts
        print("figures:", figures)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{figures}\n{described}") from error
    finally:
        for name, command in down.items():
            kube.node_fault(name, command, check=False)
        label_nodes({n: [] for n in nodes})
        for name in nodes:
            kube.kubectl("uncordon", name, check=False)
