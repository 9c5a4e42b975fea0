"""Benchmark: resizing a running job's workers (elastic) vs stopping it and restarting it from
its checkpoint at the new size (what users do without elastic workers).

One job shape, local processes on 127.0.0.1: 1 PS, the chief and 2 workers, R = 2,
minReplicasToAggregate 1, the built-in linear model with a 30 ms step (a sleep, so that the
workers added do not just fight over 2 cores), checkpoints every 100 steps. Per repeat, and
in turn (elastic, then restart, then elastic...):

- **elastic** (``elasticPolicy`` 1..4, every PS told 4 worker slots): train, start workers 2
  and 3 (scale-up to 4), train until both have made a step and 10 s more, SIGTERM workers
  3, 2 and 1 (scale-down to 1), train 10 s more, stop.
- **restart**: the same job without elasticPolicy; train, stop it (SIGTERM to the chief,
  which writes a checkpoint, then the rest) and start it again with 4 workers from the
  checkpoint; train 10 s; the same again down to 1 worker.

Every PS 0 appends one line per update (global step, its unix time, R) to a file
(``SYNCREPLICAS_DEBUG_UPDATES_FILE``, a benchmark hook of the runtime), so:

- **rate before / after**: global steps/s over the 10 s before the resize and the 10 s after
  it took effect (scale-up: after every new worker's first step; scale-down: after the
  request; restart: after the restarted job's first update);
- **pause**: the longest gap between two updates from 1 s before the request until it took
  effect (plus 2 s), next to the longest gap in the 10 s before (the steady state);
- **steps lost**: updates made before the resize and not in the job after it: 0 when the
  global step goes on from where it was; for a restart, the last global step before the stop
  minus the step the restarted job began from;
- **first counted gradient** (scale-up): request -> the new worker's first step done (its
  gradient pushed and its token taken, in the runtime's "first step done at unix time"
  line); the restart's is request -> its first update.

Medians of ``--repeats`` (3). Not a test.

With ``--cluster`` the same two systems also run on the real single-node cluster of
`make cluster`, each right after its local twin: **elastic** is `kubectl scale srj/...
--replicas=4` then `=1` (the operator creates the new worker pods and Services, or deletes
the pods: SIGTERM); **restart** is `kubectl delete srj` (the chief's SIGTERM checkpoint),
then `kubectl apply` of the job with the new worker count, which restores the checkpoint.
Every pod mounts one hostPath directory of this node for the per-update log and the
checkpoints, so both are read here, after the pods are gone too. The first counted
gradient of a scale-up is timed from `kubectl scale` (pod creation, TensorFlow's import).

    .venv/bin/python bench/elastic.py              # 3 repeats, about 6-10 minutes
    .venv/bin/python bench/elastic.py --repeats 1  # one of each
    make cluster && .venv/bin/python bench/elastic.py --cluster   # local and cluster
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

from tests.support.tfcluster import LocalCluster, start_cluster

R = 2
STEP_MS = 30
WINDOW = 10.0
HANG_GUARD = 300.0
FIRST_STEP_RE = re.compile(r"first step done at unix time ([\d.]+)")
RESTORED_RE = re.compile(r"sync epoch [0-9a-f]+: variables \w+[^,]*, global step (\d+)")


def job(elastic: bool, ckpt: Path) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicasToAggregate": R, "minReplicasToAggregate": 1, "workers": 2,
        "parameterServers": 1, "initialTokens": 0,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build",
                  "args": {"dim": 16}},
        "training": {"optimizer": "sgd", "learningRate": 0.01, "batchSize": 32,
                     "maxSteps": 1_000_000, "logEverySteps": 1000,
                     "checkpointDir": str(ckpt), "checkpointEverySteps": 100,
                     "startupTimeoutSeconds": 300, "chiefLostTimeoutSeconds": 300},
    }
    if elastic:
        spec["elasticPolicy"] = {"minWorkers": 1, "maxWorkers": 4}
    return spec


def environment(updates: Path) -> dict[str, str]:
    repo = Path(__file__).resolve().parent.parent
    return {"PYTHONPATH": str(repo), "TF_CPP_MIN_LOG_LEVEL": "2",
            "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": str(STEP_MS),
            "SYNCREPLICAS_DEBUG_UPDATES_FILE": str(updates), "SYNCREPLICAS_METRICS_PORT": "0"}


def updates_of(path: Path) -> list[tuple[int, float]]:
    """(global step, unix time) of every update PS 0 made, in order."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((int(parts[0]), float(parts[1])))
    return out


def wait_for(what: str, check: Callable[[], bool], cluster: LocalCluster | None = None) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}"
                               + (f"\n{cluster.logs()}" if cluster else ""))
        time.sleep(0.05)


def rate(updates: list[tuple[int, float]], start: float, end: float) -> float | None:
    inside = [s for s, t in updates if start <= t <= end]
    return (max(inside) - min(inside)) / (end - start) if len(inside) > 1 else None


def longest_gap(updates: list[tuple[int, float]], start: float, end: float) -> float | None:
    times = [t for _, t in updates if start <= t <= end]
    return max((b - a for a, b in itertools.pairwise(times)), default=None)


@dataclass
class Cell:
    """One resize of one system in one repeat."""

    system: str  # elastic | restart
    change: str  # "2 -> 4" | "4 -> 1"
    rate_before: float | None
    rate_after: float | None
    steady_gap: float | None
    pause: float | None
    lost: int
    first_counted: float | None  # scale-up: request -> the first new gradient counted


def trained_for(updates: Path, seconds: float, cluster: LocalCluster | None) -> None:
    wait_for("training", lambda: len(updates_of(updates)) > 5, cluster)
    time.sleep(seconds)


def elastic_run(root: Path) -> list[Cell]:
    ckpt, updates = root / "ckpt", root / "updates"
    cells = []
    with start_cluster(job(True, ckpt), workers=2, ps=1, workdir=root / "elastic",
                       env=environment(updates)) as cluster:
        trained_for(updates, WINDOW + 2, cluster)
        # Scale-up 2 -> 4.
        t0 = time.time()
        cluster.start("worker", 2)
        cluster.start("worker", 3)
        cells.append(scale_up_cell("elastic", t0, lambda i: cluster.log("worker", i), updates))
        # Scale-down 4 -> 1.
        t1 = time.time()
        for index in (3, 2, 1):
            cluster.kill("worker", index, signal.SIGTERM)
        for index in (3, 2, 1):
            if cluster.wait_one("worker", index, timeout=60) != 0:
                raise RuntimeError(f"worker {index} did not leave with exit 0\n{cluster.logs()}")
        cells.append(scale_down_cell("elastic", t1, updates))
    return cells


def scale_up_cell(system: str, t0: float, log: Callable[[int], str], updates: Path) -> Cell:
    """Workers 2 and 3 asked for at ``t0``: wait for both first steps (in ``log(index)``),
    then the window after."""

    def first_step(index: int) -> float | None:
        found = FIRST_STEP_RE.search(log(index))
        return float(found[1]) if found else None

    wait_for("the new workers' first steps",
             lambda: first_step(2) is not None and first_step(3) is not None)
    joined = max(first_step(2) or 0.0, first_step(3) or 0.0)
    time.sleep(WINDOW + 1)
    ups = updates_of(updates)
    return Cell(
        system, "2 -> 4", rate(ups, t0 - WINDOW, t0), rate(ups, joined, joined + WINDOW),
        longest_gap(ups, t0 - WINDOW, t0), longest_gap(ups, t0 - 1, joined + 2),
        lost=0 if contiguous(ups) else -1,
        first_counted=min(first_step(2) or 0.0, first_step(3) or 0.0) - t0)


def scale_down_cell(system: str, t1: float, updates: Path) -> Cell:
    """Workers 3, 2 and 1 asked to leave at ``t1`` (and gone): the window after."""
    time.sleep(WINDOW + 1)
    downs = updates_of(updates)
    return Cell(
        system, "4 -> 1", rate(downs, t1 - WINDOW, t1), rate(downs, t1, t1 + WINDOW),
        longest_gap(downs, t1 - WINDOW, t1), longest_gap(downs, t1 - 1, t1 + 2),
        lost=0 if contiguous(downs) else -1, first_counted=None)


def contiguous(updates: list[tuple[int, float]]) -> bool:
    """Every update one step after the last: no step rolled back or skipped."""
    steps = [s for s, _ in updates]
    return all(b == a + 1 for a, b in itertools.pairwise(steps))


def stop_job(cluster: LocalCluster) -> float:
    """SIGTERM the chief (it checkpoints and exits), then stop the rest; returns when the
    stop was requested."""
    t = time.time()
    cluster.kill("chief", 0, signal.SIGTERM)
    cluster.wait_one("chief", 0, timeout=60)
    cluster.stop()
    return t


def restart_run(root: Path) -> list[Cell]:
    ckpt = root / "ckpt"
    cells = []
    updates = root / "updates-2"
    cluster = start_cluster(job(False, ckpt), workers=2, ps=1, workdir=root / "restart-2",
                            env=environment(updates))
    try:
        trained_for(updates, WINDOW + 2, cluster)
        for change, workers in (("2 -> 4", 4), ("4 -> 1", 1)):
            t0 = stop_job(cluster)
            before = updates_of(updates)
            updates = root / f"updates-{workers}"
            cluster = start_cluster(job(False, ckpt), workers=workers, ps=1,
                                    workdir=root / f"restart-{workers}",
                                    env=environment(updates))
            wait_for("the restarted job's first update",
                     lambda path=updates: bool(updates_of(path)), cluster)
            time.sleep(WINDOW + 1)
            cells.append(restart_cell("restart", change, t0, before, updates_of(updates)))
    finally:
        cluster.stop()
    return cells


def restart_cell(system: str, change: str, t0: float, before: list[tuple[int, float]],
                 after: list[tuple[int, float]]) -> Cell:
    """A stop at ``t0`` and a restart at the new size, from both jobs' update logs."""
    first_step, first_at = after[0]
    return Cell(
        system, change, rate(before, t0 - WINDOW, t0), rate(after, first_at, first_at + WINDOW),
        longest_gap(before, t0 - WINDOW, t0), first_at - max(at for _, at in before),
        # Updates made before the stop (the workers go on while the chief writes its
        # checkpoint) that the restarted job does not start from.
        lost=max(0, max(s for s, _ in before) - (first_step - 1)),
        first_counted=first_at - t0)


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def med(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def table(cells: list[Cell]) -> str:
    rows = ["| system | workers | steps/s before | steps/s after | after/before | "
            "steady longest gap s | pause s | steps lost | first counted gradient s | runs |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for system in ("elastic", "kube elastic", "restart", "kube restart"):
        for change in ("2 -> 4", "4 -> 1"):
            mine = [c for c in cells if c.system == system and c.change == change]
            if not mine:
                continue
            ratios = [c.rate_after / c.rate_before if c.rate_after and c.rate_before else None
                      for c in mine]
            lost = [c.lost for c in mine]
            rows.append(
                f"| {system} | {change} | {fmt(med([c.rate_before for c in mine]), '.1f')} | "
                f"{fmt(med([c.rate_after for c in mine]), '.1f')} | "
                f"{fmt(med(list(ratios)))}x | "
                f"{fmt(med([c.steady_gap for c in mine]), '.3f')} | "
                f"{fmt(med([c.pause for c in mine]), '.3f')} "
                f"(max {fmt(max((c.pause or 0.0) for c in mine), '.3f')}) | "
                f"{statistics.median(lost):g} (max {max(lost)}) | "
                f"{fmt(med([c.first_counted for c in mine]), '.1f')} | {len(mine)} |")
    return "\n".join(rows)


# -- the same on the cluster of `make cluster` -----------------------------------------------
KUBE_NAMESPACE = "bench-elastic"
KUBE_DIR = "/bench"  # where every pod mounts the run's hostPath directory


def kube_job(name: str, elastic: bool, workers: int, host_dir: Path, log: str) -> dict[str, Any]:
    """``job`` as a SyncReplicasJob: the 30 ms step and PS 0's per-update log in every pod's
    environment, the log and the checkpoints on the node's ``host_dir``."""
    spec = job(elastic, Path(KUBE_DIR) / "ckpt")
    spec["workers"] = workers
    spec["template"] = {"spec": {
        "containers": [{"name": "syncreplicas", "env": [
            {"name": "SYNCREPLICAS_DEBUG_STEP_DELAY_MS", "value": str(STEP_MS)},
            {"name": "SYNCREPLICAS_DEBUG_UPDATES_FILE", "value": f"{KUBE_DIR}/{log}"}],
            "volumeMounts": [{"name": "bench", "mountPath": KUBE_DIR}]}],
        "volumes": [{"name": "bench", "hostPath": {"path": str(host_dir),
                                                   "type": "Directory"}}]}}  # fmt: skip
    spec["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 100}
    return {"apiVersion": "syncreplicas.io/v1alpha1", "kind": "SyncReplicasJob",
            "metadata": {"name": name}, "spec": spec}


class Kube:
    """One run's namespace and hostPath directory on the cluster."""

    def __init__(self, root: Path) -> None:
        from tests.cluster import kube

        self.kube = kube
        self.dir = root / "kube"
        self.dir.mkdir(parents=True)
        root.chmod(0o755)  # mkdtemp's 0700 would keep the pods' user out
        os.chown(self.dir, 10001, 10001)  # the runtime image's user
        kube.kubectl("delete", "namespace", KUBE_NAMESPACE, "--ignore-not-found",
                     "--timeout=180s", timeout=200)  # fmt: skip
        kube.kubectl("create", "namespace", KUBE_NAMESPACE)

    def apply(self, manifest: dict[str, Any]) -> None:
        import yaml

        self.kube.kubectl("apply", "-n", KUBE_NAMESPACE, "-f", "-",
                          input=yaml.safe_dump(manifest))

    def logs(self, pod: str) -> str:
        return str(self.kube.kubectl("logs", "-n", KUBE_NAMESPACE, pod, check=False).stdout)

    def pods(self, name: str) -> set[str]:
        found = self.kube.kubectl("get", "pods", "-n", KUBE_NAMESPACE, "-l",
                                  f"syncreplicas.io/job-name={name}", "-o", "name").stdout
        return {p.removeprefix("pod/") for p in found.split()}

    def stop(self) -> None:
        self.kube.kubectl("delete", "namespace", KUBE_NAMESPACE, "--timeout=180s",
                          check=False, timeout=200)  # fmt: skip


def kube_elastic_run(root: Path) -> list[Cell]:
    k = Kube(root)
    name, updates = "elastic", k.dir / "updates"
    cells = []
    try:
        k.apply(kube_job(name, True, 2, k.dir, "updates"))
        trained_for(updates, WINDOW + 2, None)
        t0 = time.time()
        k.kube.kubectl("scale", f"srj/{name}", "--replicas=4", "-n", KUBE_NAMESPACE)
        cells.append(scale_up_cell("kube elastic", t0,
                                   lambda i: k.logs(f"{name}-worker-{i}"), updates))
        t1 = time.time()
        k.kube.kubectl("scale", f"srj/{name}", "--replicas=1", "-n", KUBE_NAMESPACE)
        wait_for("the removed workers' pods gone", lambda: not {
            f"{name}-worker-{i}" for i in (1, 2, 3)} & k.pods(name))
        cells.append(scale_down_cell("kube elastic", t1, updates))
    finally:
        k.stop()
    return cells


def kube_restart_run(root: Path) -> list[Cell]:
    k = Kube(root)
    cells = []
    name, log = "restart-2", "updates-2"
    try:
        k.apply(kube_job(name, False, 2, k.dir, log))
        trained_for(k.dir / log, WINDOW + 2, None)
        for change, workers in (("2 -> 4", 4), ("4 -> 1", 1)):
            t0 = time.time()
            k.kube.kubectl("delete", "srj", name, "-n", KUBE_NAMESPACE, "--wait=true",
                           "--timeout=180s", timeout=200)  # fmt: skip
            wait_for("the stopped job's pods gone", lambda n=name: not k.pods(n))
            before = updates_of(k.dir / log)
            name, log = f"restart-{workers}", f"updates-{workers}"
            k.apply(kube_job(name, False, workers, k.dir, log))
            wait_for("the restarted job's first update",
                     lambda path=k.dir / log: bool(updates_of(path)))
            time.sleep(WINDOW + 1)
            cells.append(restart_cell("kube restart", change, t0, before,
                                      updates_of(k.dir / log)))
    finally:
        k.stop()
    return cells


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the work directories")
    p.add_argument("--cluster", action="store_true",
                   help="also on the cluster of `make cluster`, each after its local twin")
    opts = p.parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    print(f"bench/elastic.py at {started:%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}",
          flush=True)
    cells: list[Cell] = []
    for repeat in range(opts.repeats):
        runs: list[tuple[str, Callable[[Path], list[Cell]]]] = [
            ("elastic", elastic_run), ("restart", restart_run)]
        if opts.cluster:
            runs = [("elastic", elastic_run), ("kube-elastic", kube_elastic_run),
                    ("restart", restart_run), ("kube-restart", kube_restart_run)]
        for system, run in runs:
            root = Path(tempfile.mkdtemp(prefix=f"elastic-{system}-{repeat}-"))
            try:
                got = run(root)
            finally:
                if not opts.keep:
                    shutil.rmtree(root, ignore_errors=True)
            for c in got:
                print(f"repeat {repeat + 1} {c.system} {c.change}: rate {fmt(c.rate_before)} -> "
                      f"{fmt(c.rate_after)}, pause {fmt(c.pause, '.3f')} s (steady "
                      f"{fmt(c.steady_gap, '.3f')}), lost {c.lost}, first counted "
                      f"{fmt(c.first_counted, '.1f')} s", flush=True)
            cells.extend(got)
    ended = datetime.datetime.now(datetime.UTC)
    print(f"\n{started:%H:%M}-{ended:%H:%M} UTC, load {os.getloadavg()[0]:.1f}\n")
    print(table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
