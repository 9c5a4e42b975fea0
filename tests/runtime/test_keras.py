"""A Keras model fed through tf.data, in real processes, through a chief SIGKILL and a PS
SIGKILL: every replica exits 0, the checkpoint names the layers' variables as a fresh build
does, held-out accuracy is reached, every batch is the one its global step says, and the
weights equal large-batch SGD on the replicas' concatenated batches (R = replicas, plain SGD).

The model is the port example (examples/port/after.py) with its batches logged
(tests/runtime/kerasmodels.py). One cluster for every assertion: TensorFlow starts slowly.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.runtime.rtutil import linear_job, runtime_env
from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

pytestmark = pytest.mark.slow

STEPS, LR, BATCH, SEED, REPLICAS = 100, 0.5, 32, 0, 2
CHIEF_KILL_AT, PS_KILL_AT = 25, 55
HANG_GUARD = 240.0
ACCURACY = 0.92  # the port's MLP after 100 steps of 2 x 32 examples (0.95 in one process)
EVAL_RE = re.compile(r"eval at global step (\d+): accuracy=([\d.]+)")
EPOCH_RE = re.compile(r"sync epoch [0-9a-f]+: variables (\w+)")
GATE = "gate open: sync epoch"  # PS 0 opens the start gate of each sync epoch
JOINED = "training in sync epoch"


def wait_for(cluster: LocalCluster, what: str, ok: Any) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not ok():
        assert time.monotonic() < deadline, f"waited for {what}\n{cluster.logs()}"
        assert all(c is None for c in cluster.poll().values()), cluster.logs()
        time.sleep(0.05)


def chief_step(cluster: LocalCluster) -> int:
    text = cluster.try_metrics_text("chief", 0)
    value = metric_value(text, "syncreplicas_global_step") if text else None
    return int(value) if value is not None else -1


def logged_batches(path: Path) -> list[tuple[int, int, int, list[int]]]:
    """(pid, replica, global step, example ids) of every step, in order."""
    out = []
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"(\d+) (\d+) (\d+) \[([\d ]*)\]", line.strip())
        assert m, line
        out.append((int(m[1]), int(m[2]), int(m[3]), [int(i) for i in m[4].split()]))
    return out


def expected_batches(log_dir: str, steps: int) -> dict[int, list[list[int]]]:
    """Each replica's example ids at global steps 0..steps-1, from model/data.py in this process."""
    import tensorflow as tf
    from syncreplicas_runtime.model.data import DatasetInput

    from tests.runtime import kerasmodels

    v1 = tf.compat.v1
    out = {}
    for r in range(REPLICAS):
        with tf.Graph().as_default():
            v1.set_random_seed(SEED)
            built = kerasmodels.logged_port(replica=r, num_replicas=REPLICAS, batch_size=BATCH,
                                            seed=SEED, log_dir=log_dir)
            inp = DatasetInput(built["dataset"], replica=r, num_replicas=REPLICAS,
                               batch_size=BATCH, seed=SEED)
            with v1.Session() as sess:
                inp.position(sess, 0)
                out[r] = [sess.run(inp.batch[1]).tolist() for _ in range(steps)]
    return out


def reference_sgd(steps: int) -> tuple[dict[str, np.ndarray], float]:
    """One process, the same Keras model and seeds, SGD on both replicas' batches of a step."""
    import tensorflow as tf
    from syncreplicas_runtime.model.data import DatasetInput
    from syncreplicas_runtime.model.keras_names import stable_names

    from examples.port import after

    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.set_random_seed(SEED)
        with stable_names():
            built = after.build(replica=0, num_replicas=REPLICAS, batch_size=BATCH, seed=SEED)
        inputs = [DatasetInput(built["dataset"], replica=r, num_replicas=REPLICAS,
                               batch_size=BATCH, seed=SEED) for r in range(REPLICAS)]
        x = v1.placeholder(tf.float32, [None, 64])
        y = v1.placeholder(tf.int64, [None])
        loss = built["loss"]((x, y))  # the mean over both batches = the mean of their means
        train = v1.train.GradientDescentOptimizer(LR).minimize(loss)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for step in range(steps):
                parts = []
                for inp in inputs:
                    inp.position(sess, step)
                    parts.append(sess.run(inp.batch))
                sess.run(train, {x: np.concatenate([p[0] for p in parts]),
                                 y: np.concatenate([p[1] for p in parts])})
            weights = {v.op.name: sess.run(v) for v in v1.trainable_variables()}
            accuracy = float(sess.run(built["eval"]["accuracy"], built["eval_feed"]))
    return weights, accuracy


@pytest.mark.timeout(1200)
def test_keras_tf_data_model_survives_chief_and_ps_kills(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    job = linear_job(
        replicasToAggregate=REPLICAS, minReplicasToAggregate=REPLICAS,
        model={"entrypoint": "tests.runtime.kerasmodels:logged_port",
               "args": {"log_dir": str(tmp_path)}},
        training__learningRate=LR, training__batchSize=BATCH, training__maxSteps=STEPS,
        training__checkpointDir=str(ckpt), training__checkpointEverySteps=10,
        training__logEverySteps=10, training__startupTimeoutSeconds=int(HANG_GUARD),
        training__chiefLostTimeoutSeconds=int(HANG_GUARD),
        training__packMinBytesPerPS=0)  # the layers spread over both PS: PS 1 holds some
    env = {**runtime_env(), "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "40"}
    with start_cluster(job, workers=1, ps=2, workdir=tmp_path, env=env) as cluster:
        wait_for(cluster, f"global step {CHIEF_KILL_AT}",
                 lambda: chief_step(cluster) >= CHIEF_KILL_AT)
        cluster.restart("chief", 0)
        # The restarted chief joins the running sync epoch (PS 0 runs it: no new gate).
        wait_for(cluster, "the restarted chief training",
                 lambda: cluster.log("chief", 0).count(JOINED) >= 2)
        wait_for(cluster, f"global step {PS_KILL_AT}", lambda: chief_step(cluster) >= PS_KILL_AT)
        cluster.restart("ps", 1)
        wait_for(cluster, "the gate after the PS loss",
                 lambda: cluster.log("ps", 0).count(GATE) >= 2)
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    assert set(codes.values()) == {0} and len(codes) == 4, logs
    assert cluster.replica("chief", 0).exit_codes == [-9], logs
    assert cluster.replica("ps", 1).exit_codes == [-9], logs
    chief_log = cluster.log("chief", 0)
    assert f"finished at global step {STEPS}" in chief_log, logs
    # Packing is on (the default): the Keras layers' variables are packed, none left alone.
    assert re.search(r"packing: 4 trainable variables in \d packed PS variables? \(model on 2 "
                     r"of 2 PS\)\n", chief_log), chief_log
    assert "unpacked (sparse or no gradient)" not in chief_log
    assert [m[1] for m in EPOCH_RE.finditer(chief_log)][-2:] == ["kept", "restored"], chief_log

    import tensorflow as tf

    weights, ref_accuracy = reference_sgd(STEPS)
    # Checkpoint names: the layers' variables as a fresh build names them, and no others.
    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == STEPS
    names = set(reader.get_variable_to_shape_map())
    assert names - {"global_step", "syncreplicas/chief_starts"} == set(weights), names
    assert all(n.startswith("sequential/dense") for n in weights), sorted(weights)

    # Equivalence, through both kills: every step's batches are the ones its step says.
    for name, value in weights.items():
        np.testing.assert_allclose(reader.get_tensor(name), value, rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    accuracy = [float(m[2]) for m in EVAL_RE.finditer(chief_log) if int(m[1]) == STEPS]
    assert accuracy and accuracy[-1] >= ACCURACY, chief_log
    assert accuracy[-1] == pytest.approx(ref_accuracy, abs=0.01)

    # Position: each logged batch is the pure one of its (replica, step); after the chief's
    # restart it went on from the global step, not from the start of its data.
    expected = expected_batches(str(tmp_path), STEPS)
    for r in range(REPLICAS):
        rows = logged_batches(tmp_path / f"batches-{r}.txt")
        assert rows and {row[1] for row in rows} == {r}
        for _, _, step, ids in rows:
            assert ids == expected[r][step], (r, step)
        assert {row[2] for row in rows} == set(range(STEPS)), r  # no step went untrained
    chief_rows = logged_batches(tmp_path / "batches-0.txt")
    pids = list(dict.fromkeys(row[0] for row in chief_rows))
    assert len(pids) == 2, pids
    before = [row[2] for row in chief_rows if row[0] == pids[0]]
    after = [row[2] for row in chief_rows if row[0] == pids[1]]
    assert after[0] >= before[-1] >= CHIEF_KILL_AT - 1, (before[-5:], after[:5])
