"""A job that loses nodes: crashed, partitioned, drained, preempted, on the real cluster.

One job (1 PS, a chief and 2 workers, R = 2 with minReplicasToAggregate 1; backoffLimit 0,
so any loss counted as a failure would fail it) on four nodes. The operator's two replicas
run on A (the one acting) and O (following); the PS starts on A, the chief on B, both
workers on C. Node labels that the roles' templates select steer each
replacement to a node the next fault does not hit. The faults, one after another:

1. C crashes (both workers gone without a word): the global step does not wait for the
   replacements (elastic R lowers to 1; the gap is reported and bounded); the operator
   replaces them once the node's Lease has been silent for 20 s; the node has no process
   left and turns NotReady; `start` brings it back;
2. A crashes with PS 0 and the acting operator: the follower on O leads within 20 s, and
   the global step moves again within 60 s of the crash all the same, at most
   snapshotEverySteps below where it stopped (the chief restores its last snapshot);
3. B crashes with the chief: the workers train on, and the replacement chief checkpoints
   again, never below the last checkpoint;
4. the chief's node is partitioned, then healed: the chief is replaced while the node and
   its daemons still run, cut off; after the heal the old chief's process is gone and
   nothing of it counts (its kubelet ends it, the runtime's fencing refuses anything it
   sends meanwhile);
5. the PS's node is drained (Eviction API; the job's PodDisruptionBudget allows one): the
   PS hands its state over at SIGTERM, so the global step resumes where it stopped (0
   steps lost); the node stays cordoned until uncordoned;
6. the chief's node is preempted (SIGTERM, 15 s grace, the machine gone, its Node object
   deleted): the chief checkpoints before it exits and is replaced; `start` registers the
   node again.

Throughout, the checkpoint's global step only grows (the chief checkpoints to a directory
every node mounts, as a shared volume), no restart counts against backoffLimit, and the job
ends Succeeded (the steps are slowed by a delay that every replica reads from a file on
that shared directory; after the last fault it is lifted so the job finishes at once).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.jobwatch import (
    RESTORE,
    CheckpointWatch,
    StepWatch,
    all_ready,
    container_log,
    events,
    label_nodes,
    longest_without_update,
    node_daemons,
    node_names,
    node_pids,
    node_ready,
    operator_nodes,
    placement,
)
from tests.cluster.slowjob import (
    CHECKPOINT_EVERY,
    SNAPSHOT_EVERY,
    UPDATES_FILE,
    lift_delay,
    manifest,
    shared_dir,
)

pytestmark = pytest.mark.exclusive  # it crashes nodes, the acting operator among them

# At most about 3.75 steps/s while slowed (slowjob's fault pace): 480 s or more, for the
# faults' 200-300 s (their Leases, the node's grace, the replacements' starts), and about
# a thousand steps left at full speed once the delay is lifted.
MAX_STEPS = 1800

JOB = "nodes"
SELECTOR = f"syncreplicas.io/job-name={JOB}"
PS_BACK_WITHIN = 60
WORKERS_GAP_BOUND = 45  # s: the replacements take longer (Lease 20 s, scheduling, start)
NODES_NEEDED = 4  # the operator's follower's, and one per role
LEADS_WITHIN = 20  # s: a follower takes over from a crashed leader


def status(namespace: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", JOB, "-n", namespace).get("status", {}))


class Faults:
    """The job's namespace, its step and checkpoint watches, the nodes and what brings each
    faulted one back (run whatever happens)."""

    def __init__(self, namespace: str, steps: StepWatch, checkpoints: CheckpointWatch,
                 nodes: dict[str, str]) -> None:  # fmt: skip
        self.namespace, self.steps, self.checkpoints, self.nodes = (
            namespace, steps, checkpoints, nodes)
        self.down: dict[str, str] = {}  # node -> the command that brings it back
        self.figures: dict[str, object] = {}

    def steer(self, **roles: str) -> None:
        """Replacements of each role go to this node (by letter: O, A, B, C)."""
        label_nodes({name: [r for r, letter in roles.items() if self.nodes[letter] == name]
                     for name in self.nodes.values()})  # fmt: skip

    def hit(self, letter: str, fault: str, *extra: str) -> tuple[str, float, str]:
        name = self.nodes[letter]
        at = time.monotonic()
        out = kube.node_fault(name, fault, *extra).stdout
        self.down[name] = RESTORE[fault]
        return name, at, out

    def restore(self, name: str) -> None:
        kube.node_fault(name, self.down.pop(name))

    def replaced(self, away_from: str, what: str) -> float:
        at = time.monotonic()
        kube.eventually(what, lambda: all_ready(self.namespace, JOB, 4, away_from), 180)
        return time.monotonic() - at

    def where(self, replica: str) -> str:
        return placement(self.namespace, JOB)[replica]


@contextmanager
def watched(namespace: str, shared: Path, nodes: dict[str, str]) -> Iterator[Faults]:
    chief = f"{JOB}-chief-0"
    with StepWatch(namespace, chief) as steps, \
            CheckpointWatch(shared / "checkpoints") as checkpoints:  # fmt: skip
        faults = Faults(namespace, steps, checkpoints, nodes)
        try:
            yield faults
        finally:
            for name, command in faults.down.items():
                kube.node_fault(name, command, check=False)


@pytest.mark.timeout(1800)
def test_a_job_survives_crashed_partitioned_drained_and_preempted_nodes(
        namespace: str, tmp_path: Path) -> None:  # fmt: skip
    names = node_names()
    assert len(names) >= NODES_NEEDED, f"{names}: run `make cluster NODES={NODES_NEEDED}`"
    leading, following = operator_nodes()
    assert len(following) == 1 and following[0] != leading, (leading, following)
    others = [n for n in names if n not in (leading, following[0])]
    nodes = {"O": following[0], "A": leading, "B": others[0], "C": others[1]}
    shared = shared_dir(tmp_path)
    label_nodes({nodes["A"]: ["ps"], nodes["B"]: ["chief"], nodes["C"]: ["worker"]})
    kube.kubectl("apply", "-n", namespace, "-f", "-",
                 input=yaml.safe_dump(manifest(JOB, shared, MAX_STEPS)))  # fmt: skip
    figures: dict[str, object] = {}
    try:
        with watched(namespace, shared, nodes) as f:
            figures = f.figures
            steps, checkpoints = f.steps, f.checkpoints
            kube.eventually("the first checkpoint's step passed",
                            lambda: steps.last() >= CHECKPOINT_EVERY, 240)  # fmt: skip
            where = placement(namespace, JOB)
            assert where == {"ps-0": nodes["A"], "chief-0": nodes["B"], "worker-0": nodes["C"],
                             "worker-1": nodes["C"]}, where  # fmt: skip

            # 1. The workers' node crashes.
            f.steer(ps="A", chief="B", worker="O")
            crashed_at = time.time()
            name, at, _ = f.hit("C", "crash")
            assert node_pids(name) == set(), "a crashed node's processes all stopped"
            f.replaced(name, "the workers replaced off the crashed node")
            figures["workers' node crash: all back, s"] = round(time.monotonic() - at, 1)
            # As PS 0 saw it (its updates), and as the chief's gauge read through the API
            # server's proxy showed it.
            gap = longest_without_update(shared / UPDATES_FILE, crashed_at, time.time())
            figures["workers' node crash: longest time without an update, s"] = round(gap, 1)
            figures["workers' node crash: longest gap in the chief's gauge, s"] = round(
                steps.longest_gap(at, time.monotonic()), 1)
            figures["workers' node crash: PS 0 said"] = re.findall(
                r"elastic R: .*", container_log(nodes["A"], namespace, f"{JOB}-ps-0"))[-2:]
            assert gap < WORKERS_GAP_BOUND, f"no update for {gap:.1f} s"
            assert any(name in m for m in events(namespace, "NodeLost"))
            kube.eventually(f"{name} NotReady", lambda: node_ready(name) != "True", 120)
            f.restore(name)

            # 2. PS 0's node crashes, and the acting operator with it.
            f.steer(ps="C", chief="B", worker="O")
            leader = kube.leader_pod()
            name, at, _ = f.hit("A", "crash")
            kube.eventually("a follower leading", lambda: kube.leader_pod() not in ("", leader),
                            60, interval=0.5)  # fmt: skip
            figures["PS and leader node crash: a follower leads, s"] = round(
                time.monotonic() - at, 1)
            assert time.monotonic() - at <= LEADS_WITHIN, figures
            back, lost = kube.eventually("the global step moving again after the PS's node "
                                         "crash", lambda: steps.resumed(at), 180)
            figures["PS and leader node crash: global step moving again, s"] = round(back, 1)
            figures["PS and leader node crash: steps lost"] = lost
            assert 0 < back <= PS_BACK_WITHIN, figures
            assert lost <= SNAPSHOT_EVERY, figures
            f.replaced(name, "every replica Ready again after the PS's node crash")
            f.restore(name)

            # 3. The chief's node crashes.
            f.steer(ps="C", chief="A", worker="O")
            written = len(checkpoints.steps)
            with StepWatch(namespace, f"{JOB}-worker-0") as seen_by_worker:
                name, at, _ = f.hit("B", "crash")
                f.replaced(name, "the chief replaced off the crashed node")
            # The global step as a worker sees it (the chief's own gauge went with it).
            figures["chief node crash: longest step gap, s"] = round(
                seen_by_worker.longest_gap(at, time.monotonic()), 1)
            kube.eventually("the new chief checkpointing",
                            lambda: len(checkpoints.steps) > written + 1, 120)
            f.restore(name)

            # 4. The chief's node partitioned, then healed.
            f.steer(ps="C", chief="B", worker="O")
            old = {p["metadata"]["uid"] for p in kube.pods(namespace, SELECTOR)
                   if p["spec"].get("nodeName") == nodes["A"]}  # fmt: skip
            daemons = node_daemons(nodes["A"])
            name, at, _ = f.hit("A", "partition")
            f.replaced(name, "the partitioned node's chief replaced")
            assert node_daemons(name) == daemons, "a partitioned node's daemons keep running"
            f.restore(name)
            kube.eventually("the healed node Ready", lambda: node_ready(name) == "True", 120)
            kube.eventually("the old chief gone from the healed node", lambda: not (
                {p["metadata"]["uid"] for p in kube.pods(namespace, SELECTOR)} & old)
                and len(kube.runtime_processes(namespace)) == 4, 120)  # fmt: skip

            # 5. PS 0's node drained: the PS hands its state over.
            f.steer(ps="A", chief="B", worker="O")
            assert status(namespace).get("phase") == "Running", "the job ended before the drain"
            name, at, _ = f.hit("C", "drain")
            assert kube.kubectl_json("get", "node", name)["spec"].get("unschedulable") is True
            back, lost = kube.eventually("the global step moving again after the drain",
                                         lambda: steps.resumed(at), 180)
            figures["PS node drain: global step moving again, s"] = round(back, 1)
            figures["PS node drain: steps lost"] = lost
            assert lost == 0, figures
            f.replaced(name, "the PS moved off the drained node")
            f.restore(name)

            # 6. The chief's node preempted.
            f.steer(ps="A", chief="C", worker="O")
            chief_pod = kube.kubectl_json("get", "pod", f"{JOB}-chief-0", "-n", namespace)
            name, at, out = f.hit("B", "preempt", "--grace", "15")
            sent = re.search(r"SIGTERM to (\d+) container processes", out)
            assert sent and int(sent.group(1)) >= 1, out
            assert name not in node_names(), "a preempted node's Node object is deleted"
            said = re.findall(r"SIGTERM: checkpoint at global step (\d+)",
                              container_log(name, namespace, f"{JOB}-chief-0"))
            assert said, f"the preempted chief ({chief_pod['metadata']['uid']}) checkpointed"
            figures["chief node preemption: checkpoint at SIGTERM, step"] = int(said[-1])
            f.replaced(name, "the chief replaced off the preempted node")
            f.restore(name)
            assert name in node_names() and node_ready(name) == "True"

            lift_delay(shared)
            kube.kubectl("wait", "-n", namespace, f"srj/{JOB}", "--for=condition=Succeeded",
                         "--timeout=600s", timeout=620)  # fmt: skip
        final = status(namespace)
        figures["checkpoints"] = checkpoints.steps
        assert checkpoints.steps == sorted(checkpoints.steps), checkpoints.steps
        assert final["globalStep"] >= MAX_STEPS
        counts = final.get("replicaStatuses", {})
        assert all(c.get("failed", 0) == 0 for c in counts.values()), counts
        print("figures:", figures)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{figures}\n{described}") from error
    finally:
        label_nodes({n: [] for n in node_names()})
        for name in node_names():
            kube.kubectl("uncordon", name, check=False)
