"""Benchmark: what MultiKueue's dispatch adds to a job's start.

On `make cluster KUEUE=1 MULTIKUEUE=1` (the manager and its worker cluster), one job of 1
PS, a chief and 2 workers (examples/linear.yaml, paced as the cluster tests' jobs are),
started two ways, interleaved, ``--repeats`` rounds:

    dispatched  applied on the manager with spec.managedBy kueue.x-k8s.io/multikueue in the
                ClusterQueue multikueue (behind the MultiKueue admission check);
    direct      the same job applied on the worker itself, in the worker's ClusterQueue
                multikueue.

Each is timed from the apply to every one of its four pods Running on the worker, read
every 0.2 s from the worker's API server; for a dispatched job also to its Workload
admitted on the manager and to its copy on the worker. The job is deleted, and its pods
gone, before the next start.

    .venv/bin/python bench/multikueue.py [--repeats 3]

Prints each start, then per way the median and max, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import kube, reads
from tests.cluster.test_multikueue import KUEUE, QUEUE, WORKER, dispatched, on_worker

POLL = 0.2


def get(config: Path, path: str) -> Any:
    try:
        return reads.get_json(config, path)
    except AssertionError:
        return None


def until(what: str, done: Callable[[], bool], timeout: float = 300) -> float:
    """Seconds on the monotonic clock when ``done`` first held."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(POLL)
    return time.monotonic()


def running(namespace: str, name: str) -> bool:
    pods = get(WORKER, f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                       f"syncreplicas.io/job-name%3D{name}") or {"items": []}  # fmt: skip
    return len(pods["items"]) == 4 and all(
        p["status"].get("phase") == "Running" for p in pods["items"])


def admitted_on_manager(namespace: str) -> bool:
    found = get(kube.KUBECONFIG, f"/apis/{KUEUE}/namespaces/{namespace}/workloads") or {}
    return any(any(c["type"] == "Admitted" and c["status"] == "True"
                   for c in (w.get("status") or {}).get("conditions", []))
               for w in found.get("items", []))  # fmt: skip


def copied(namespace: str, name: str) -> bool:
    return get(WORKER, f"/apis/syncreplicas.io/v1alpha1/namespaces/{namespace}/"
                       f"syncreplicasjobs/{name}") is not None  # fmt: skip


def start(way: str, namespace: str, name: str) -> dict[str, float]:
    manifest = dispatched(name, 100000)
    manifest["spec"]["training"]["checkpointEverySteps"] = 100000
    if way == "direct":
        del manifest["spec"]["managedBy"]
    apply: Callable[..., Any] = kube.kubectl if way == "dispatched" else on_worker
    began = time.monotonic()
    apply("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    took: dict[str, float] = {}
    if way == "dispatched":
        took["admitted on the manager"] = until(
            "admitted", lambda: admitted_on_manager(namespace)) - began  # fmt: skip
        took["copy on the worker"] = until("copied", lambda: copied(namespace, name)) - began
    took["pods Running"] = until("Running", lambda: running(namespace, name)) - began
    apply("delete", "srj", name, "-n", namespace, "--wait=false")
    until("pods gone", lambda: not (get(WORKER, f"/api/v1/namespaces/{namespace}/pods")
                                    or {"items": [1]})["items"])  # fmt: skip
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not (kube.is_up() and WORKER.exists()):
        print("no MultiKueue clusters: make cluster KUEUE=1 MULTIKUEUE=1", file=sys.stderr)
        return 1
    namespace = f"bench-multikueue-{uuid.uuid4().hex[:5]}"
    queue = {"apiVersion": KUEUE, "kind": "LocalQueue",
             "metadata": {"name": QUEUE, "namespace": namespace},
             "spec": {"clusterQueue": "multikueue"}}  # fmt: skip
    for apply in (kube.kubectl, on_worker):
        apply("create", "namespace", namespace)
        apply("apply", "-f", "-", input=yaml.safe_dump(queue))
    results: dict[str, list[dict[str, float]]] = {"dispatched": [], "direct": []}
    try:
        for round_ in range(args.repeats):
            order = ("dispatched", "direct") if round_ % 2 == 0 else ("direct", "dispatched")
            for way in order:
                took = start(way, namespace, f"{way}-{round_}")
                results[way].append(took)
                print(f"round {round_ + 1} {way:10s} "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()), flush=True)
    finally:
        for delete in (kube.kubectl, on_worker):
            try:
                delete("delete", "namespace", namespace, "--wait=false")
            except (AssertionError, subprocess.SubprocessError) as error:
                print(f"cleanup: {error}", file=sys.stderr)
    print(f"\n{'way':12s} {'to':26s} {'median':>8s} {'max':>8s}   (s, {args.repeats} rounds)")
    medians = {}
    for way, runs in results.items():
        for key in runs[0]:
            values = [r[key] for r in runs]
            print(f"{way:12s} {key:26s} {statistics.median(values):8.1f} {max(values):8.1f}")
        medians[way] = statistics.median(r["pods Running"] for r in runs)
    print(f"\ndispatched / direct, to every pod Running: "
          f"{medians['dispatched'] / medians['direct']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
