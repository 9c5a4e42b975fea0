"""Benchmark: what a training job costs the machine between its steps, by how often its
chief looks for a parameter server's handover request.

The chief's snapshot thread reads PS 0's handover state every
``sync.handover.CHIEF_POLL_SECONDS`` for the whole run (a leaving PS asks there for a
snapshot of the step it holds): a remote read each time, whether or not the job trains.
This runs the linear example as local processes (`syncreplicas run`: 1 PS, a chief and 2
workers, R = 2) with its steps slowed (``SYNCREPLICAS_DEBUG_STEP_DELAY_MS``: the cluster
tests' 100 ms pace, and 1000 ms, a job that mostly waits), once with each poll interval
in turn (interleaved, ``--repeats`` rounds; the interval is set in the replicas by a
``sitecustomize`` the benchmark writes, the code otherwise as it is). At each, after
``--settle`` seconds, ``--window`` seconds of the CPU its processes used (utime + stime
from /proc, every process under the run).

    .venv/bin/python bench/idlecost.py [--polls 0.05,0.25] [--delays 100,1000] [--repeats 3]

Prints one row per delay and interval: cores, median and max over the rounds, and each
interval's median against the first's.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")

SITECUSTOMIZE = '''
import importlib.abc, os, sys

class _Poll(importlib.abc.MetaPathFinder):
    """Sets the chief's handover poll before the snapshot module reads it."""
    def find_spec(self, name, path, target=None):
        if name == "syncreplicas_runtime.state.snapshots":
            sys.meta_path.remove(self)
            from syncreplicas_runtime.sync import handover
            handover.CHIEF_POLL_SECONDS = float(os.environ["BENCH_CHIEF_POLL_SECONDS"])
        return None

sys.meta_path.insert(0, _Poll())
'''


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    seconds = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def one(workdir: Path, site: Path, poll: float, delay: int, settle: float,
        window: float) -> float:  # fmt: skip
    """The cores the job's processes used over ``window`` s, ``settle`` s after its start."""
    run = workdir / f"run-{poll}-{delay}-{time.monotonic_ns()}"
    run.mkdir()
    job = yaml.safe_load((REPO / "examples" / "linear.yaml").read_text())
    job["spec"]["training"].update({"maxSteps": 10**7, "checkpointEverySteps": 10**6,
                                    "evalEverySteps": 0, "checkpointDir": str(run / "ckpt")})
    (run / "job.yaml").write_text(yaml.safe_dump(job))
    env = {**os.environ, "PYTHONPATH": str(site), "BENCH_CHIEF_POLL_SECONDS": str(poll),
           "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": str(delay)}
    proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "syncreplicas"), "run", "job.yaml"],
                            cwd=run, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        time.sleep(settle)
        before = cpu_seconds(descendants(proc.pid))
        time.sleep(window)
        after = cpu_seconds(descendants(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    used = sum(after[p] - before.get(p, 0.0) for p in after)
    return used / window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", default="0.05,0.25")
    parser.add_argument("--delays", default="100,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    polls = [float(p) for p in args.polls.split(",")]
    delays = [int(d) for d in args.delays.split(",")]
    cores: dict[tuple[int, float], list[float]] = {(d, p): [] for d in delays for p in polls}
    with tempfile.TemporaryDirectory(prefix="idlecost-") as tmp:
        work = Path(tmp)
        site = work / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        for round_ in range(1, args.repeats + 1):
            for delay in delays:
                for poll in polls:
                    used = one(work, site, poll, delay, args.settle, args.window)
                    cores[(delay, poll)].append(used)
                    print(f"round {round_}: delay {delay} ms, poll {poll} s: {used:.3f} cores",
                          flush=True)  # fmt: skip
    print()
    print("| step delay | chief's poll | cores, median (max) | against the first poll |")
    print("|---|---|---|---|")
    for delay in delays:
        base = statistics.median(cores[(delay, polls[0])])
        for poll in polls:
            got = cores[(delay, poll)]
            median = statistics.median(got)
            print(f"| {delay} ms | {poll:g} s | {median:.3f} ({max(got):.3f}) | "
                  f"{median / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
