"""Benchmark the operator at scale: object sizes, planning time, and time until a job's
children exist on kmock (API requests per job, operator memory).

1. Sizes (pure, exact): bytes of each rendered child (compact JSON, as sent to the API) and
   of all a job's children, at W = 10, 100 and 1000 workers.
2. Plan time (pure, in this process): ``plan_job`` for a new job (every child built) at the
   same sizes; median of the repeats, sizes interleaved.
3. Children in (kmock): 1 job x 1000 workers and 100 jobs x 10 workers. The real operator
   runs as ``syncreplicas operator`` in a subprocess; kmock (the emulator the operator tests
   use) plays the API server and logs every request. Pods stay Pending (no kubelet), so what
   is measured is the operator's own work: planning, creating, status. The target is API
   writes per job = children + status changes (no polling, no re-creates). Median of the
   repeats, scenarios interleaved.

    .venv/bin/python bench/operator.py [--quick] [--repeats N]

With ``--cluster``: the same scenarios on the real control plane, with kubemark hollow
nodes, side by side with these (bench/scale.py, which this runs).

With ``--cluster --failover``: the operator's own losses on the multi-node cluster (its pod
deleted, its node crashed, a rolling upgrade), two replicas with leader election against
one: bench/failover.py, which this runs (its options: --repeats, --one-crash-repeats,
--only, --systems, --timeout).

Prints tables; timings depend on the machine's load (kmock shares the operator's cores).
``--quick`` (under a minute): one repeat, plan times up to W = 100, kmock scenarios 10x
smaller.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kmock
from syncreplicas_operator.core import manifests, naming
from syncreplicas_operator.core.plan.context import Observed
from syncreplicas_operator.core.plan.pipeline import plan_job
from syncreplicas_operator.core.spec import Job, parse_job

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator"))
# The harness lives with the operator tests.
from kmockharness import (
    RESOURCES,
    VERBS,
    Cluster,
    RecordingEmulator,
    job_manifest,
)

SIZES = (10, 100, 1000)


def sized_job(workers: int) -> Job:
    manifest = job_manifest("bench", "bench", workers=workers, replicasToAggregate=workers)
    manifest["metadata"].update(uid="00000000-0000-0000-0000-000000000000", generation=1)
    return parse_job(manifest)


def json_bytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


@dataclass
class Sizes:
    workers: int
    pod_bytes: dict[str, int]  # replica type -> bytes of its (first) pod
    service_bytes: int
    children: int
    total_bytes: int


def measure_sizes(workers: int) -> Sizes:
    children = manifests.build_children(sized_job(workers))
    pods: dict[str, int] = {}
    for child in children:
        if child["kind"] == "Pod":
            replica_type = child["metadata"]["labels"][naming.LABEL_REPLICA_TYPE]
            pods.setdefault(replica_type, json_bytes(child))
    service = next(c for c in children if c["kind"] == "Service")
    return Sizes(
        workers=workers,
        pod_bytes=pods,
        service_bytes=json_bytes(service),
        children=len(children),
        total_bytes=sum(json_bytes(c) for c in children),
    )


def plan_seconds(workers: int) -> float:
    job = sized_job(workers)
    started = time.perf_counter()
    plan_job(job, Observed(), {}, datetime.now(UTC))
    return time.perf_counter() - started


def sizes_table(sizes: list[Sizes], plan_times: dict[int, list[float]]) -> str:
    header = ["workers", "PS pod B", "chief pod B", "worker pod B", "Service B", "children",
              "all children kB", "kB / replica", "plan ms / job", "repeats"]  # fmt: skip
    rows = []
    for size in sizes:
        times = plan_times.get(size.workers, [])
        replicas = size.workers + 2
        rows.append(
            [
                str(size.workers),
                str(size.pod_bytes.get(naming.PS, 0)),
                str(size.pod_bytes.get(naming.CHIEF, 0)),
                str(size.pod_bytes.get(naming.WORKER, 0)),
                str(size.service_bytes),
                str(size.children),
                f"{size.total_bytes / 1000:.0f}",
                f"{size.total_bytes / 1000 / replicas:.1f}",
                f"{statistics.median(times) * 1000:.0f}" if times else "-",
                str(len(times)),
            ]
        )
    return markdown(header, rows)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Result:
    scenario: str
    jobs: int
    workers: int
    children_per_job: int
    seconds_to_children: float
    writes_per_job: dict[str, float]
    reads_per_job: float
    rss_mb: float


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def classify(method: str, path: str) -> str:
    if method == "POST":
        return "create " + path.rsplit("/", 1)[-1]
    if method == "PATCH" and path.endswith("/status"):
        return "status patch"
    if method == "PATCH":
        return "job patch (kopf finalizer)"
    if method == "DELETE":
        return "delete"
    return method.lower()


async def run(jobs: int, workers: int, timeout: float) -> Result:
    namespace = "bench"
    async with RecordingEmulator() as server, kmock.Server(server):
        for resource, info in RESOURCES.items():
            server.resources[resource] = {**info, "verbs": VERBS}
        cluster = Cluster(server, Path(tempfile.mkdtemp(prefix="bench-operator-")))
        try:
            op = await cluster.start_operator()
            baseline = len(server.log)
            names = [f"job-{i}" for i in range(jobs)]
            pods_per_job = 1 + 1 + workers  # one PS, the chief, the workers
            started = time.monotonic()
            for name in names:
                await cluster.create_job(
                    job_manifest(name, namespace, workers=workers, replicasToAggregate=workers)
                )

            def all_children() -> bool:
                pods = len(cluster.objects("v1/pods", namespace))
                services = len(cluster.objects("v1/services", namespace))
                return pods == jobs * pods_per_job and services == jobs  # the jobs' Services

            await cluster.wait_for(all_children, timeout=timeout, what="all children")
            elapsed = time.monotonic() - started
            # Let the status writes and events that follow the burst land, then count.
            quiet_since, seen = time.monotonic(), len(server.log)
            while time.monotonic() - quiet_since < 3.0:
                await asyncio.sleep(0.2)
                if len(server.log) != seen:
                    quiet_since, seen = time.monotonic(), len(server.log)
            memory = rss_mb(op.proc.pid)
            kinds: collections.Counter[str] = collections.Counter()
            reads = 0
            for req in server.log[baseline:]:
                if req.method in ("GET",):
                    reads += 1
                elif "/syncreplicasjobs" in req.path and req.method == "POST":
                    continue  # the benchmark's own job creations
                else:
                    kinds[classify(req.method, req.path)] += 1
            return Result(
                scenario=f"{jobs} job(s) x {workers} workers",
                jobs=jobs,
                workers=workers,
                children_per_job=2 * pods_per_job + 1,
                seconds_to_children=elapsed,
                writes_per_job={k: v / jobs for k, v in sorted(kinds.items())},
                reads_per_job=reads / jobs,
                rss_mb=memory,
            )
        finally:
            await cluster.close()


def table(runs: list[list[Result]]) -> str:
    """One row per scenario: the median time of its repeats; counts of the last repeat
    (they are the same in every repeat unless something went wrong)."""
    kinds = sorted({k for repeats in runs for r in repeats for k in r.writes_per_job})
    header = ["scenario", "children/job", "s to all children (median)", "repeats", *kinds,
              "writes/job", "reads/job", "operator RSS MB"]  # fmt: skip
    rows = []
    for repeats in runs:
        r = repeats[-1]
        total = sum(r.writes_per_job.values())
        seconds = statistics.median(x.seconds_to_children for x in repeats)
        rows.append(
            [
                r.scenario,
                str(r.children_per_job),
                f"{seconds:.1f}",
                str(len(repeats)),
                *(f"{r.writes_per_job.get(k, 0):g}" for k in kinds),
                f"{total:g}",
                f"{r.reads_per_job:g}",
                f"{r.rss_mb:.0f}",
            ]
        )
    return markdown(header, rows)


BOUNDS = """\
What bounds each figure:
- Bytes: exact, not timed. A chief or worker pod is the same size at every W (its TF_CONFIG
  lists the PS, the chief and itself); a PS pod grows by one address per worker (a PS must
  call every replica). Per job: ~W pods + one Service, so linear in W; the kB per replica
  column stays flat except for the PS's share.
- Plan ms / job: one Python thread building every child's dict (deep copies of the
  template, the environment, the security defaults) for a new job: linear in W, bounded
  by the CPU it gets; the later passes of a settled job build nothing.
- s to all children: kmock, not the operator. kmock is one Python process that scans its
  stored objects on each request and streams every body to each watcher; the operator
  sends at most 16 writes at once (resources.k8s.Api's pool). On a real API server the
  same bound is its write throughput and the client's QPS."""


def main() -> int:
    if "--failover" in sys.argv:
        if "--cluster" not in sys.argv:
            print("bench/operator.py: --failover needs --cluster", file=sys.stderr)
            return 2
        import failover

        return failover.main([a for a in sys.argv[1:] if a not in ("--failover", "--cluster")])
    if "--cluster" in sys.argv:
        import scale

        return scale.main([a for a in sys.argv[1:] if a != "--cluster"],
                          lambda jobs, workers: asyncio.run(run(jobs, workers, timeout=900)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (under a minute)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats (default 3, quick 1)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    scale = 10 if args.quick else 1
    sizes = [measure_sizes(w) for w in SIZES]
    plan_sizes = [w for w in SIZES if not args.quick or w <= 100]
    plan_times: dict[int, list[float]] = collections.defaultdict(list)
    for _ in range(repeats):
        for workers in plan_sizes:  # interleaved: load drifts hit every size alike
            plan_times[workers].append(plan_seconds(workers))
    print(sizes_table(sizes, plan_times), flush=True)
    scenarios = [(1, 1000 // scale), (100 // scale, 10)]
    runs: list[list[Result]] = [[] for _ in scenarios]
    for _ in range(repeats):
        for i, (jobs, workers) in enumerate(scenarios):
            runs[i].append(asyncio.run(run(jobs, workers, timeout=900)))
            print(f"  {runs[i][-1].scenario}: {runs[i][-1].seconds_to_children:.1f}s", flush=True)
    print()
    print(table(runs))
    print()
    print(BOUNDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
