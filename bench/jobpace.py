"""Benchmark: what a cluster test's job costs the machine at each step delay.

The cluster tests slow the steps of a job that only has to be training while they act on
it (``SYNCREPLICAS_DEBUG_STEP_DELAY_MS``, tests/cluster/slowjob.py). One job of 1 PS, a
chief and 2 workers (R = 2, tests/cluster/test_failures.py's) on the cluster of `make
cluster`, its delay read from a file on the machine and changed in turn (interleaved,
``--repeats`` rounds); at each, after 5 s to settle, 30 s of: the chief's global steps/s,
and the CPU its processes used (utime + stime from /proc, every process of the job's
namespace that runs the runtime: the pods' share of the machine).

Before those rounds, what the job's start costs: ``--starts`` jobs, one after another,
each in a namespace of its own, from `kubectl apply` until its first update (global step
1: every replica's container has imported TensorFlow, built its graph and joined): the CPU
of the job's runtime processes by then, in all and per container.

    .venv/bin/python bench/jobpace.py [--delays 0,25,100,200] [--repeats 3] [--starts 3]

Prints what a start costs (median and max), then one row per delay: steps/s and cores
(median and max over the rounds), and CPU milliseconds per step. A delay far above a
step's own time (3000) gives what the job costs while it waits.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import kube
from tests.cluster.slowjob import DELAY_FILE, shared_dir
from tests.cluster.test_failures import JOB, job, step_of

TICKS = os.sysconf("SC_CLK_TCK")
SETTLE, WINDOW = 5.0, 30.0


def job_cpu_seconds(namespace: str) -> float:
    """CPU seconds so far of every runtime process of ``namespace``'s pods."""
    total = 0.0
    for pid in kube.all_runtime_processes(namespace):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def start_cost(shared: Path) -> tuple[float, int]:
    """CPU seconds of a new job's runtime processes from its apply until its first update
    (global step 1), and how many containers it runs."""
    namespace = f"bench-start-{uuid.uuid4().hex[:5]}"
    kube.kubectl("create", "namespace", namespace)
    try:
        kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job(shared)))
        kube.eventually("the first update", lambda: step_of(namespace, f"{JOB}-chief-0") >= 1,
                        300, interval=0.5)  # fmt: skip
        return job_cpu_seconds(namespace), len(kube.runtime_processes(namespace))
    finally:
        kube.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="0,25,100,200")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    delays = [int(d) for d in args.delays.split(",")]
    if not kube.is_up():
        print("no cluster: make cluster", file=sys.stderr)
        return 1
    starts = [start_cost(shared_dir(Path(tempfile.mkdtemp()), delay_ms=delays[0]))
              for _ in range(args.starts)]  # fmt: skip
    if starts:
        cpu = [c for c, _ in starts]
        per = [c / n for c, n in starts if n]
        print(f"a start (apply to the first update), {len(starts)} jobs of "
              f"{starts[0][1]} containers: {statistics.median(cpu):.1f} core-s "
              f"({max(cpu):.1f}), {statistics.median(per):.1f} ({max(per):.1f}) a container")
    namespace = f"bench-pace-{uuid.uuid4().hex[:5]}"
    kube.kubectl("create", "namespace", namespace)
    shared = shared_dir(Path(tempfile.mkdtemp()), delay_ms=delays[0])
    manifest = job(shared)
    manifest["spec"]["training"]["maxSteps"] = 10**7
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    rows: dict[int, list[tuple[float, float]]] = {d: [] for d in delays}
    try:
        kube.eventually("training passes step 20",
                        lambda: step_of(namespace, f"{JOB}-worker-0") >= 20, 300)  # fmt: skip
        for _ in range(args.repeats):
            for delay in delays:
                (shared / DELAY_FILE).write_text(str(delay))
                time.sleep(SETTLE)
                cpu0, step0, t0 = (job_cpu_seconds(namespace),
                                   step_of(namespace, f"{JOB}-chief-0"), time.monotonic())
                time.sleep(WINDOW)
                cpu1, step1, t1 = (job_cpu_seconds(namespace),
                                   step_of(namespace, f"{JOB}-chief-0"), time.monotonic())
                rows[delay].append(((step1 - step0) / (t1 - t0), (cpu1 - cpu0) / (t1 - t0)))
    finally:
        kube.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    print(f"{'delay ms':>8}  {'steps/s median (max)':>21}  {'cores median (max)':>19}  "
          f"{'CPU ms/step':>11}")
    for delay in delays:
        rates = [r for r, _ in rows[delay]]
        cores = [c for _, c in rows[delay]]
        rate, core = statistics.median(rates), statistics.median(cores)
        print(f"{delay:>8}  {rate:>12.1f} ({max(rates):5.1f})  {core:>10.2f} ({max(cores):5.2f})  "
              f"{1000 * core / rate if rate else float('nan'):>11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
