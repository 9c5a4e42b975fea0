"""Benchmark: what losing a node costs a job on the real multi-node cluster, with the
operator's node handling and under Kubernetes' defaults alone.

    make cluster && .venv/bin/python bench/recovery.py --cluster --node-faults
    .venv/bin/python bench/nodefaults.py --repeats 3 --only crash-ps --only crash-worker

One job per cell (1 PS, a chief and 2 workers, R = 2: one backup replica; snapshots every
10 steps, checkpoints to a directory every node mounts), its replicas first placed by node
labels (the PS alone on node A, a worker on node B, the chief and the other worker beside
the operator; the workers' template keeps them on two nodes), then every node
labelled for every role so that replacements go anywhere. The faults are hack/cluster's
(`cluster.py node NAME FAULT`):

    crash-ps          node A crashes (PS 0 on it)
    crash-worker      node B crashes (worker-1 on it; the backup absorbs it)
    crash-chief       the chief's node crashes (the chief alone on node B, a worker beside
                      the PS on A)
    partition-worker  node B is cut off; healed once every replica trains again
    drain-ps          node A is drained (Eviction API; the job's PodDisruptionBudget)
    preempt-worker    node B is preempted (SIGTERM with 15 s grace, then gone)

Two systems, each repeat running every fault under one, then under the other (the order
alternating between repeats; --k8s-repeats runs fewer of the slow k8s cells):

    ours  the chart as installed (node handling on: a node whose Lease is silent 20 s is
          lost, its replicas force-deleted and re-created; 30 s unreachable tolerations)
    k8s   Kubernetes' defaults alone: the operator's node handling off
          (operator.nodeLossHandling=false) and the pods tolerating an unreachable node
          for Kubernetes' default 300 s (the template sets it)

Per cell: time from the fault until the global step moves again after it stopped (0 when
it did not stop), global steps/s in the 30 s after over the 30 s before, steps lost (how far
below where it stopped the global step resumed: a restored snapshot), and time until every
replica trains again (every pod Ready, none on the faulted node). A cell that has not
recovered within --timeout (600 s) says so (">600"). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import kube
from tests.cluster.jobwatch import (
    RESTORE,
    ROLES,
    StepWatch,
    all_ready,
    label_nodes,
    operator_nodes,
    place_selector,
    placement,
)

JOB = "nf"
NAMESPACE = "bench-nodefaults"
FAULTS = ("crash-ps", "crash-worker", "crash-chief", "partition-worker", "drain-ps",
          "preempt-worker")  # fmt: skip
SYSTEMS = ("ours", "k8s")
WINDOW = 30.0
K8S_TOLERATION = 300


@dataclass
class Cell:
    system: str
    fault: str
    repeat: int
    moving_again: float | None = None
    all_back: float | None = None
    rate_ratio: float | None = None
    steps_lost: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def set_node_handling(on: bool) -> None:
    """helm upgrade with operator.nodeLossHandling, waiting for the operator to roll."""
    kube.rollout("upgrade", kube.RELEASE, str(kube.CHART), "-n", kube.RELEASE_NAMESPACE,
                 "--reuse-values", "--set", f"operator.nodeLossHandling={str(on).lower()}")


def job(system: str, host_dir: Path) -> dict[str, Any]:
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = JOB
    manifest["spec"].update({"workers": 2, "replicasToAggregate": 2, "parameterServers": 1})
    manifest["spec"]["training"].update(
        {"maxSteps": 10**7, "checkpointEverySteps": 200, "snapshotEverySteps": 10,
         "logEverySteps": 1000, "evalEverySteps": 0,
         "checkpointDir": "/var/lib/syncreplicas/checkpoints"}
    )
    manifest["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 1000}
    delay = {"name": "SYNCREPLICAS_DEBUG_STEP_DELAY_MS", "value": "25"}
    container: dict[str, Any] = {"name": "syncreplicas", "env": [delay]}
    spec: dict[str, Any] = {"containers": [container]}
    if system == "k8s":
        spec["tolerations"] = [
            {"key": key, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": K8S_TOLERATION}
            for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")]
    manifest["spec"]["template"] = {"spec": spec}
    volume = {"name": "checkpoints", "hostPath": {"path": str(host_dir), "type": "Directory"}}
    for role in ROLES:
        role_spec = {**spec, "nodeSelector": place_selector(role)}
        if role == "worker":
            # The two workers on two nodes, so that a worker's node takes one of them.
            role_spec["affinity"] = {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"syncreplicas.io/job-name": JOB,
                                                      "syncreplicas.io/replica-type": "worker"}},
                    "topologyKey": "kubernetes.io/hostname"}]}}  # fmt: skip
        if role == "chief":
            role_spec["containers"] = [{**container, "volumeMounts": [
                {"name": "checkpoints", "mountPath": "/var/lib/syncreplicas/checkpoints"}]}]
            role_spec["volumes"] = [volume]
        manifest["spec"][role] = {"template": {"spec": role_spec}}
    return dict(manifest)


def layout(fault: str, nodes: list[str], home: str) -> tuple[dict[str, list[str]], str]:
    """Which node starts with which roles, and the node the fault hits."""
    node_a, node_b = [n for n in nodes if n != home][:2]
    if fault == "crash-chief":
        return {node_a: ["ps", "worker"], node_b: ["chief"], home: ["worker"]}, node_b
    assignments = {node_a: ["ps"], node_b: ["worker"], home: ["chief", "worker"]}
    return assignments, node_a if fault.endswith("-ps") else node_b


def run_cell(system: str, fault: str, repeat: int, opts: argparse.Namespace) -> Cell:
    cell = Cell(system, fault, repeat)
    nodes = sorted(n["metadata"]["name"] for n in kube.kubectl_json("get", "nodes")["items"])
    home, _ = operator_nodes()  # the acting replica's (a follower's node may be hit)
    assignments, victim = layout(fault, nodes, home)
    host_dir = Path(tempfile.mkdtemp(prefix="bench-nodefaults-"))
    host_dir.chmod(0o777)
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=180s",
                 timeout=200)  # fmt: skip
    kube.kubectl("create", "namespace", NAMESPACE)
    label_nodes({n: assignments.get(n, []) for n in nodes})
    restore = ""
    try:
        kube.kubectl("apply", "-n", NAMESPACE, "-f", "-",
                     input=yaml.safe_dump(job(system, host_dir)))  # fmt: skip
        kube.eventually("every replica Ready", lambda: all_ready(NAMESPACE, JOB, 4), 300)
        label_nodes({n: list(ROLES) for n in nodes})
        cell.extra["placement"] = placement(NAMESPACE, JOB)
        # The global step as a replica off the faulted node sees it.
        watched = f"{JOB}-worker-0" if fault == "crash-chief" else f"{JOB}-chief-0"
        with StepWatch(NAMESPACE, watched) as steps:
            kube.eventually("training passes step 100", lambda: steps.last() >= 100, 240)
            time.sleep(WINDOW)
            at = time.monotonic()
            kind = fault.split("-")[0]
            extra = ("--grace", "15") if kind == "preempt" else ()
            kube.node_fault(victim, kind, *extra)
            restore = RESTORE[kind]
            deadline = at + opts.timeout
            while time.monotonic() < deadline:
                if cell.moving_again is None and (resumed := steps.resumed(at)):
                    cell.moving_again, cell.steps_lost = resumed
                if cell.all_back is None and all_ready(NAMESPACE, JOB, 4, victim):
                    cell.all_back = time.monotonic() - at
                if cell.moving_again is not None and cell.all_back is not None:
                    break
                time.sleep(1)
            if cell.moving_again is not None:
                time.sleep(max(0.0, at + WINDOW - time.monotonic()))
            before = steps.rate(at - WINDOW, at)
            after = steps.rate(at, at + WINDOW)
            if before and after is not None:
                cell.rate_ratio = after / before
        if cell.moving_again is None or cell.all_back is None:
            cell.note = f"not recovered within {opts.timeout:.0f} s"
    except AssertionError as error:
        cell.note = f"failed: {str(error).splitlines()[0][:120]}"
    finally:
        if restore:
            kube.node_fault(victim, restore, check=False)
        kube.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        label_nodes({n: [] for n in nodes})
        kube.eventually("every node Ready", lambda: all(
            kube.condition(n, "Ready")["status"] == "True"  # type: ignore[index]
            for n in kube.kubectl_json("get", "nodes")["items"]) and len(
            kube.kubectl_json("get", "nodes")["items"]) == len(nodes), 180)  # fmt: skip
    print(f"  {system:4} {fault:16} #{repeat}: moving again {fmt(cell.moving_again)} s, "
          f"all back {fmt(cell.all_back)} s, rate after/before {fmt(cell.rate_ratio, '.2f')}, "
          f"steps lost {cell.steps_lost} {cell.note}", flush=True)
    return cell


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def column(cells: list[Cell], name: str, spec: str, timeout: float) -> str:
    values = [getattr(c, name) for c in cells]
    if any(v is None for v in values) and name in ("moving_again", "all_back"):
        done = [v for v in values if v is not None]
        return f">{timeout:.0f} ({len(done)}/{len(values)} within)"
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{format(statistics.median(values), spec)} (max {format(max(values), spec)})"


def table(cells: list[Cell], timeout: float) -> str:
    lines = [
        "| fault | system | repeats | global step moving again, s | every replica back, s "
        "| rate 30 s after / before | steps lost |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for fault in FAULTS:
        for system in SYSTEMS:
            mine = [c for c in cells if c.fault == fault and c.system == system]
            if not mine:
                continue
            lines.append(
                f"| {fault} | {system} | {len(mine)} | "
                f"{column(mine, 'moving_again', '.1f', timeout)} | "
                f"{column(mine, 'all_back', '.1f', timeout)} | "
                f"{column(mine, 'rate_ratio', '.2f', timeout)} | "
                f"{column(mine, 'steps_lost', 'd', timeout)} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", choices=FAULTS, action="append", help="faults (repeatable)")
    p.add_argument("--systems", default="ours,k8s", help="comma-separated: ours, k8s")
    p.add_argument("--k8s-repeats", type=int, default=None,
                   help="repeats of the k8s cells (default: --repeats); each crash or "
                        "partition waits out Kubernetes' 300 s toleration")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="s after a fault before a cell counts as not recovered")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.k8s_repeats is None:
        opts.k8s_repeats = opts.repeats
    faults = opts.only or list(FAULTS)
    systems = [s for s in opts.systems.split(",") if s]
    if not kube.is_up():
        print("bench/nodefaults.py: the cluster is not up: run `make cluster`", file=sys.stderr)
        return 1
    started = datetime.datetime.now(datetime.UTC)
    print(f"# bench/nodefaults.py {' '.join(argv or sys.argv[1:])}  ({started:%Y-%m-%d %H:%M} "
          f"UTC): {opts.repeats} repeats of {', '.join(faults)} x {', '.join(systems)}",
          flush=True)  # fmt: skip
    cells: list[Cell] = []
    handling = True
    try:
        for repeat in range(1, opts.repeats + 1):
            # Every fault under one system, then under the other (one helm upgrade per
            # switch), the order of the systems alternating from one repeat to the next.
            order = systems if repeat % 2 else systems[::-1]
            for system in order:
                if system == "k8s" and repeat > opts.k8s_repeats:
                    continue
                if handling != (system == "ours"):
                    handling = system == "ours"
                    set_node_handling(handling)
                for fault in faults:
                    cells.append(run_cell(system, fault, repeat, opts))
    finally:
        if not handling:
            set_node_handling(True)
    print()
    print(table(cells, opts.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
