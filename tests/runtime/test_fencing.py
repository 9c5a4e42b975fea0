"""A replica replaced while its old process still runs (a partitioned node) never counts
again: the old process exits FENCED (77) once it can reach PS 0, the job trains to the
end, and the weights and checkpoints are those of a job that lost nothing.

Real processes on 127.0.0.1 (PS, chief, two workers; R = 3, no backup: every update needs
every replica slot). tests/support/partition.py stands in for the partition: the old
process is SIGSTOPped (it keeps its sockets), its name moves to a replacement with a higher
``SYNCREPLICAS_INCARNATION``, then the old process is SIGCONTed. One batch per step for
every replica (tests/runtime/samebatch.py), so the final weights equal plain SGD over
maxSteps batches exactly when no update was lost or repeated and no stale gradient got in.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest

from tests.runtime.rtutil import StepDelay, linear_job, runtime_env
from tests.runtime.test_training import assert_plain_sgd
from tests.support.partition import Partition
from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

pytestmark = pytest.mark.slow
HANG_GUARD = 240.0
OLD, NEW = 1_000, 2_000  # incarnations: the replacement's is higher


class CheckpointWatch:
    """Every checkpoint the chief writes, in the order they appear (the directory keeps
    only the last 3): the step in its name and the global step it holds."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.seen: list[tuple[int, int | None]] = []
        self._names: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import tensorflow as tf

        while not self._stop.wait(0.02):
            try:
                found = [(name, m) for name in os.listdir(self.directory)
                         if (m := re.fullmatch(r"model\.ckpt-(\d+)\.index", name))
                         and name not in self._names]  # fmt: skip
                # Several may appear between two scans (a slow start, a loaded machine):
                # in the order they were written, not the order of their names
                # ("model.ckpt-10" sorts before "model.ckpt-5").
                found.sort(key=lambda nm: (os.stat(self.directory / nm[0]).st_mtime_ns,
                                           int(nm[1][1])))  # fmt: skip
            except FileNotFoundError:  # not there yet, or rotated away while looked at
                continue
            for name, m in found:
                self._names.add(name)
                held = None
                try:
                    reader = tf.train.load_checkpoint(str(self.directory / name[:-6]))
                    held = int(reader.get_tensor("global_step"))
                except Exception:  # written half-way or already rotated away
                    pass
                self.seen.append((int(m[1]), held))

    def stop(self) -> list[tuple[int, int | None]]:
        self._stop.set()
        self._thread.join(5)
        return self.seen


def chief_step(cluster: LocalCluster) -> float:
    text = cluster.try_metrics_text("chief", 0)
    return (metric_value(text, "syncreplicas_global_step") if text else None) or 0.0


def local_steps(cluster: LocalCluster, role: str, index: int) -> float:
    text = cluster.try_metrics_text(role, index)
    return (metric_value(text, "syncreplicas_local_step") if text else None) or 0.0


def wait_until(cluster: LocalCluster, what: str, check: object) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waiting for {what}\n{cluster.logs()}"
        for key, code in cluster.poll().items():
            assert code is None, f"{key} exited {code}\n{cluster.logs()}"
        time.sleep(0.1)


def replaced_while_running(tmp_path: Path, role: str) -> None:
    """Replace ``role`` 0 while its old process is stopped, heal, and check the run."""
    steps, lr = 120, 0.02
    ckpt = tmp_path / "ckpt"
    job = linear_job(replicasToAggregate=3, model__entrypoint="tests.runtime.samebatch:build",
                     training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=5,
                     training__logEverySteps=20)
    delay = StepDelay(tmp_path / "delay", 100)  # steps slow enough to land mid-run
    env = {**runtime_env(), **delay.env}
    watch = CheckpointWatch(ckpt)
    with start_cluster(job, workers=2, ps=1, workdir=tmp_path, env=env, start=False) \
            as cluster, Partition(cluster, role, 0, incarnation=OLD) as part:
        cluster.start_all()
        wait_until(cluster, "training", lambda: chief_step(cluster) >= 15)
        part.replace(incarnation=NEW)
        wait_until(cluster, "the replacement training",
                   lambda: local_steps(cluster, role, 0) >= 5)
        part.heal()
        old_code = part.wait_old(timeout=60)
        old_log = part.old_log_text()
        delay.set(0)
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    written = watch.stop()
    slot = "the chief (replica slot 0)" if role == "chief" else "worker 0 (replica slot 1)"
    assert old_code == 77, (f"old process: {old_code}, the others: {codes}\n"
                            f"{old_log[-3000:]}\n{logs}")
    assert (f"syncreplicas: FENCED (77): superseded: {slot} is held by incarnation {NEW}, "
            f"newer than this process's incarnation {OLD}") in old_log, old_log[-3000:]
    assert set(codes.values()) == {0}, logs  # the replacement and every other replica
    assert f"finished at global step {steps}" in cluster.log("chief", 0), logs
    # Every checkpoint written: its step (and the global step it holds) only grows.
    named = [n for n, _ in written]
    held = [h for _, h in written if h is not None]
    assert named and named == sorted(named) and held == sorted(held), written
    assert named[-1] == steps, written

    assert_plain_sgd(ckpt, steps, lr)


@pytest.mark.timeout(600)
def test_a_replaced_worker_whose_old_process_wakes_up_exits_fenced(tmp_path: Path) -> None:
    replaced_while_running(tmp_path, "worker")


@pytest.mark.timeout(600)
def test_a_replaced_chief_whose_old_process_wakes_up_exits_fenced(tmp_path: Path) -> None:
    replaced_while_running(tmp_path, "chief")
