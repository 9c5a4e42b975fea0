"""A sync loop stuck in a run that does not return (ps/coordinator.py): PS 0's watch of the
epoch notices its silence, logs where it waits and opens a new epoch, and the job finishes
with every update applied once. A replica waiting for the update of a gradient it pushed
before its restart stops waiting when a new epoch is opened (replica/steploop.py): that
update is never made.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from syncreplicas_runtime.foundation.config import STALL_AT_ENV
from syncreplicas_runtime.ps.coordinator import LOOP_STALL_SECONDS
from syncreplicas_runtime.replica import steploop
from syncreplicas_runtime.replica.steploop import EpochEnded, StepLoop

from tests.runtime.rtutil import linear_job, runtime_env
from tests.runtime.test_training import assert_plain_sgd
from tests.support.tfcluster import start_cluster

STUCK_RE = re.compile(r"sync loop stuck: no sign of life for (\d+)s outside an update, at "
                      r"global step (\d+); it waits in:\n(.*?)\n\d\d:\d\d:\d\d", re.S)


@pytest.mark.timeout(300)
def test_a_stuck_sync_loop_ends_its_epoch_and_the_job_finishes(tmp_path: Path) -> None:
    steps, lr, stall_at = 60, 0.02, 20
    ckpt = tmp_path / "ckpt"
    job = linear_job(model__entrypoint="tests.runtime.samebatch:build",
                     training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=1000,
                     training__snapshotEverySteps=10)
    env = {**runtime_env(), STALL_AT_ENV: str(stall_at)}
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=env) as cluster:
        codes = cluster.wait(timeout=180)
        logs = cluster.logs()
    assert set(codes.values()) == {0}, logs
    ps = cluster.log("ps", 0)
    stuck = STUCK_RE.search(ps)
    assert stuck, ps
    silent, at, stack = int(stuck[1]), int(stuck[2]), stuck[3]
    assert LOOP_STALL_SECONDS <= silent < LOOP_STALL_SECONDS + 5, ps
    assert at >= stall_at, ps
    assert "in _run" in stack and "coordinator.py" in stack, stack  # the loop's own frames
    assert "sync epoch ended: the sync loop was stuck" in ps, ps
    assert ps.count("sync loop stuck") == 1, ps  # the hook stalls the first epoch only
    assert f"finished at global step {steps}" in cluster.log("chief", 0), logs

    # Every global step applied once across the two epochs: plain SGD's weights.
    assert_plain_sgd(ckpt, steps, lr)


class FakeSession:
    """``handed_out`` stays at 41: the update of global step 42 never comes."""

    def run(self, fetch: object) -> int:
        return 41


def test_waiting_for_an_earlier_push_ends_when_a_new_epoch_opens(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(steploop, "EPOCH_LOOK_SECONDS", 0.0)
    epochs = iter([7, 7, 8])
    protocol = SimpleNamespace(state=lambda: SimpleNamespace(epoch=next(epochs)))
    ctx = SimpleNamespace(protocol=protocol, leaving=threading.Event())
    training = SimpleNamespace(epoch=7, handed_out="handed_out")
    loop = StepLoop.__new__(StepLoop)
    loop.ctx, loop.sess, loop.training = ctx, FakeSession(), training  # type: ignore[assignment]
    with pytest.raises(EpochEnded, match="a new sync epoch was opened"):
        loop.wait_handed_out(42)
