"""Watch a job on the cluster while faults hit it: the chief's global step and the
checkpoints it writes, sampled in threads; where its replicas run; what is left of a node
(its processes, its kubelet's container logs). Shared by the node-fault tests and
bench/nodefaults.py. It observes; the callers judge."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Self

from tests.cluster import kube

STEP_RE = re.compile(r"^syncreplicas_global_step(?:{[^}]*})? ([0-9.e+-]+)$", re.MULTILINE)


def metrics(namespace: str, pod: str) -> str:
    """A replica's /metrics through the API server's proxy."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}:9090/proxy/metrics"
    return kube.raw(path, timeout=5, check=False)


def global_step(namespace: str, pod: str) -> int | None:
    """``pod``'s global step now (None when it cannot be read: a slow proxy, no pod)."""
    try:
        text = metrics(namespace, pod)
    except subprocess.SubprocessError:
        return None
    match = STEP_RE.search(text)
    return int(float(match.group(1))) if match else None


# Where each role of a job starts: a node label per role that the role's template selects
# (place_selector); label_nodes moves them between nodes.
PLACE = "syncreplicas.io/place-"
ROLES = ("ps", "chief", "worker")


def place_selector(role: str) -> dict[str, str]:
    """A role's template nodeSelector: the nodes labelled for that role."""
    return {f"{PLACE}{role}": "yes"}


def label_nodes(assignments: dict[str, list[str]]) -> None:
    """Node -> the roles whose label it carries (the others' removed)."""
    for node, roles in assignments.items():
        labels = [f"{PLACE}{r}=yes" for r in roles] + [f"{PLACE}{r}-" for r in ROLES
                                                          if r not in roles]  # fmt: skip
        kube.kubectl("label", "node", node, "--overwrite", *labels)


def placement(namespace: str, job: str) -> dict[str, str]:
    """Replica (``ps-0``) -> node, of the job's pods that are scheduled and not deleted."""
    found = {}
    for item in kube.pods(namespace, f"syncreplicas.io/job-name={job}"):
        if "deletionTimestamp" in item["metadata"] or not item["spec"].get("nodeName"):
            continue
        found[item["metadata"]["name"].removeprefix(f"{job}-")] = item["spec"]["nodeName"]
    return found


def all_ready(namespace: str, job: str, replicas: int, away_from: str = "") -> bool:
    """Every one of the job's ``replicas`` pods Ready, none being deleted, none on
    ``away_from``."""
    items = kube.pods(namespace, f"syncreplicas.io/job-name={job}")
    return len(items) == replicas and all(
        "deletionTimestamp" not in p["metadata"] and p["spec"].get("nodeName") != away_from
        and any(c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", []))
        for p in items
    )  # fmt: skip


class Sampler:
    """Calls :meth:`sample` every 0.5 s in a thread, between ``with`` and its end."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.5)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class StepWatch(Sampler):
    """A pod's global step, sampled every 0.5 s (monotonic time, step)."""

    def __init__(self, namespace: str, pod: str) -> None:
        super().__init__()
        self.namespace, self.pod = namespace, pod
        self.samples: list[tuple[float, int]] = []

    def sample(self) -> None:
        step = global_step(self.namespace, self.pod)
        if step is not None:
            self.samples.append((time.monotonic(), step))

    def last(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def resumed(self, since: float, stall: float = 1.0) -> tuple[float, int] | None:
        """After a fault at ``since``: (seconds until the global step moved again, steps
        lost). The step stopped at the first value held for ``stall`` seconds or more after
        ``since`` (steps in flight at the fault still land); it moved again at the first
        sample with another value (a restore shows a lower one: the steps lost are the
        difference). (0, 0) when it did not stop in the 10 s after ``since``; None while it
        has not moved again (or not 10 s have been seen)."""
        after = [(at, v) for at, v in self.samples if at >= since]
        for i, (at, value) in enumerate(after):
            later = [(t, v) for t, v in after[i + 1:] if v != value]
            held_until = later[0][0] if later else time.monotonic()
            if held_until - at < stall:
                continue
            if not later:
                return None
            return later[0][0] - since, max(0, value - min(v for _, v in after[i + 1:]))
        return (0.0, 0) if after and after[-1][0] - since >= 10 else None

    def rate(self, since: float, until: float) -> float | None:
        """Global steps per second between ``since`` and ``until`` (the samples nearest)."""
        inside = [(at, v) for at, v in self.samples if since <= at <= until]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

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


class CheckpointWatch(Sampler):
    """The global step of every checkpoint written to ``directory`` (the `checkpoint`
    file's newest entry), read every 0.5 s."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.steps: list[int] = []

    def sample(self) -> None:
        try:
            text = (self.directory / "checkpoint").read_text()
        except OSError:
            return
        match = re.search(r'^model_checkpoint_path: ".*-(\d+)"', text, re.MULTILINE)
        if match and (not self.steps or int(match.group(1)) != self.steps[-1]):
            self.steps.append(int(match.group(1)))


def events(namespace: str, reason: str) -> list[str]:
    items = kube.kubectl_json("get", "events", "-n", namespace,
                              "--field-selector", f"reason={reason}")["items"]  # fmt: skip
    return [str(e.get("message", "")) for e in items]


def operator_nodes() -> tuple[str, list[str]]:
    """(the acting operator replica's node, its followers' nodes)."""
    leader = kube.eventually("an operator replica leads", kube.leader_pod, 60)
    leading, following = "", []
    for item in kube.operator_replicas():
        if item["metadata"]["name"] == leader:
            leading = str(item["spec"]["nodeName"])
        else:
            following.append(str(item["spec"].get("nodeName", "")))
    return leading, following


# What undoes each node fault of `cluster.py node NAME FAULT`.
RESTORE = {"crash": "start", "partition": "heal", "drain": "uncordon", "preempt": "start"}


def node_pids(name: str) -> set[int]:
    """Every process in the node's cgroup (its daemons and its pods' containers)."""
    index = name.rsplit("-", 1)[1]
    found: set[int] = set()
    for procs in Path(f"/sys/fs/cgroup/pids/srj-node-{index}").rglob("cgroup.procs"):
        found |= {int(p) for p in procs.read_text().split()}
    return found


def container_log(node: str, namespace: str, pod: str) -> str:
    """Every log line a pod's containers wrote on ``node``, read from the node's disk (its
    kubelet's podLogsDir, which outlives a crash or a preemption)."""
    logs = kube.node.RUN / "nodes" / node / "pod-logs"
    return "".join(path.read_text(errors="replace")
                   for path in sorted(logs.glob(f"{namespace}_{pod}_*/*/*.log")))  # fmt: skip


def node_ready(name: str) -> str:
    """The node's Ready condition status ("True", "Unknown", ...; "None" without one)."""
    found = kube.condition(kube.kubectl_json("get", "node", name), "Ready")
    return str(found["status"]) if found else "None"


def node_daemons(name: str) -> dict[str, int | None]:
    """The pid of each of the node's daemons (containerd, kubelet, kube-proxy; None when not
    running), as `cluster.py nodes` reports them."""
    for line in kube.cluster("nodes").stdout.splitlines():
        node, _, facts = line.partition(" ")
        if node == name:
            return dict(json.loads(facts)["daemons"])
    raise AssertionError(f"{name} is not a node of the cluster")


def node_names() -> list[str]:
    """The names of the nodes a kubelet runs (never a hollow node or a test's Node object)."""
    return [n["metadata"]["name"] for n in kube.real_nodes()]


def updates(path: Path) -> list[tuple[float, int, int]]:
    """PS 0's record of its updates (``SYNCREPLICAS_DEBUG_UPDATES_FILE``): (unix time, global
    step after it, gradients aggregated), in the order written."""
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        fields = line.split()
        if len(fields) == 3:
            found.append((float(fields[1]), int(fields[0]), int(fields[2])))
    return found


def longest_without_update(path: Path, since: float, until: float) -> float:
    """The longest time (s) between ``since`` and ``until`` (unix time) without an update."""
    times = [at for at, _, _ in updates(path) if since <= at <= until]
    edges = [since, *times, until]
    return max(b - a for a, b in itertools.pairwise(edges))
