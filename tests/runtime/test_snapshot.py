"""PS loss with in-memory snapshots: a PS that comes back empty is restored from the chief's
freshest snapshot, so at most ``snapshotEverySteps`` steps are lost while the disk checkpoint
is far older; and training still equals large-batch SGD through the loss.

The seqlock and source rules are checked as tables; one real run (2 PS, PS 1 SIGKILLed)
checks the rest.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from syncreplicas_runtime.state.snapshots import checkpoint_step, choose_source, consistent, due

from tests.runtime.rtutil import linear_job, runtime_env
from tests.runtime.test_training import reference_sgd
from tests.support.tfcluster import metric_value, start_cluster

HANG_GUARD = 240.0


@pytest.mark.parametrize(
    ("before", "after", "ok"),
    [
        (4, 4, True),    # no update in between
        (0, 0, True),
        (5, 5, False),   # an update was being applied the whole time
        (4, 5, False),   # one started while reading
        (3, 4, False),   # one finished while reading
        (4, 6, False),   # one began and ended while reading
    ],
)
def test_a_read_is_kept_only_between_equal_even_counts(before: int, after: int,
                                                       ok: bool) -> None:
    assert consistent(before, after) is ok


@pytest.mark.parametrize(
    ("step", "last", "every", "expected"),
    [(10, 9, 10, True), (19, 10, 10, False), (21, 19, 10, True), (35, 12, 10, True),
     (100, 0, 0, False)],
)
def test_due(step: int, last: int, every: int, expected: bool) -> None:
    assert due(step, last, every) is expected


@pytest.mark.parametrize(
    ("snapshot", "checkpoint", "source"),
    [
        (50, 40, "snapshot"),
        (40, 40, "checkpoint"),   # a tie: the checkpoint, which a new chief would find too
        (30, 40, "checkpoint"),
        (None, 40, "checkpoint"),
        (30, None, "snapshot"),
        (None, None, "initialize"),
    ],
)
def test_the_freshest_source_wins(snapshot: int | None, checkpoint: int | None,
                                  source: str) -> None:
    assert choose_source(snapshot, checkpoint) == source


def test_checkpoint_step() -> None:
    assert checkpoint_step("/ckpt/model.ckpt-120") == 120
    assert checkpoint_step(None) is None
    assert checkpoint_step("/ckpt/model.ckpt") is None


RESTORED_RE = re.compile(r"variables restored from the snapshot at global step (\d+), "
                         r"global step (\d+)")
STEP_RE = re.compile(r"global_step=(\d+) ")


def kill_ps1_once(cluster: Any, step: int, snapshot: int = 0) -> None:
    """SIGKILL PS 1 (it restarts) once the chief's metrics show ``step`` and ``snapshot``."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        text = cluster.try_metrics_text("chief", 0)
        g = metric_value(text, "syncreplicas_global_step") if text else None
        snap = metric_value(text, "syncreplicas_snapshot_step") if text else None
        if g is not None and g >= step and (not snapshot or (snap is not None
                                                             and snap >= snapshot)):
            break
        assert time.monotonic() < deadline, cluster.logs()
        assert all(c is None for c in cluster.poll().values()), cluster.logs()
        time.sleep(0.05)
    cluster.restart("ps", 1)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_lost_ps_is_restored_from_the_snapshot(tmp_path: Path) -> None:
    steps, lr, every = 80, 0.05, 10
    ckpt = tmp_path / "ckpt"
    job = linear_job(training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=1000,
                     training__snapshotEverySteps=every, training__logEverySteps=1,
                     training__packMinBytesPerPS=0)
    env = {**runtime_env(), "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "40"}
    with start_cluster(job, workers=1, ps=2, workdir=tmp_path, env=env) as cluster:
        kill_ps1_once(cluster, step=33, snapshot=20)
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    assert set(codes.values()) == {0} and len(codes) == 4, logs
    assert cluster.replica("ps", 1).exit_codes == [-9], logs
    chief = cluster.log("chief", 0)
    assert f"finished at global step {steps}" in chief, logs
    # Packing is on (the default) and spread (packMinBytesPerPS 0): w and b, one on each PS,
    # each a packed PS variable; the snapshot holds those and restores the one PS 1 lost.
    assert "packing: 2 trainable variables in 2 packed PS variables (model on 2 of 2 PS)\n" in chief
    m = RESTORED_RE.search(chief)
    assert m and m[1] == m[2], chief
    restored = int(m[1])
    # Lost = the last global step the chief saw before the loss minus the step restored.
    seen = max(int(s) for s in STEP_RE.findall(chief[:m.start()]))
    lost = seen - restored
    assert 0 < restored <= seen and lost <= every, (seen, restored)
    assert "checkpoint at global step" not in chief  # nothing on disk to roll back to
    print(f"PS 1 lost at global step ~{seen}; restored from the snapshot at {restored} "
          f"({lost} steps lost; checkpoints every 1000)")

    # Equivalence through the loss: R = replicas, plain SGD -> one process's weights.
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w_ref, b_ref, _ = reference_sgd(0, 2, steps, 8, 4, lr)
    np.testing.assert_allclose(reader.get_tensor("linear/w"), w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)


@pytest.mark.timeout(900)
def test_losing_a_ps_that_holds_none_of_the_model_loses_no_step(tmp_path: Path) -> None:
    """The default minimum share keeps this small model on PS 0: PS 1 holds no variable, so
    its loss needs no restore (the replicas still rejoin a new sync epoch, variables kept),
    and the run still equals large-batch SGD."""
    steps, lr = 60, 0.05
    ckpt = tmp_path / "ckpt"
    job = linear_job(training__maxSteps=steps, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=1000,
                     training__logEverySteps=1)
    env = {**runtime_env(), "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "40"}
    with start_cluster(job, workers=1, ps=2, workdir=tmp_path, env=env) as cluster:
        kill_ps1_once(cluster, step=20)
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    assert set(codes.values()) == {0} and len(codes) == 4, logs
    assert cluster.replica("ps", 1).exit_codes == [-9], logs
    chief = cluster.log("chief", 0)
    assert "packing: 2 trainable variables in 1 packed PS variable (model on 1 of 2 PS)\n" in chief
    assert f"finished at global step {steps}" in chief, logs
    assert "variables restored" not in chief, chief
    assert re.search(r"sync epoch \w+: variables kept, global step [1-9]", chief), chief
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps
    w_ref, b_ref, _ = reference_sgd(0, 2, steps, 8, 4, lr)
    np.testing.assert_allclose(reader.get_tensor("linear/w"), w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)
