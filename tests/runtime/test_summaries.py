"""The chief's TensorBoard summaries (runtime/syncreplicas_runtime/state/summaries.py), read
back as TensorBoard reads them (its EventAccumulator, orphaned data purged as it does)."""

from __future__ import annotations

from pathlib import Path

import pytest
from syncreplicas_runtime.state.summaries import (
    LEARNING_RATE,
    LOSS,
    STALE_FRACTION,
    STEPS_PER_SEC,
    Summaries,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.runtime.rtutil import linear_job, runtime_env
from tests.support.tfcluster import start_cluster

HANG_GUARD = 120.0


def board(logdir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def steps(acc: EventAccumulator, tag: str) -> list[int]:
    return [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def first_run(logdir: Path) -> None:
    """A chief that wrote summaries up to global step 40 and an evaluation there, then died."""
    first = Summaries(str(logdir), 10, evaluates=True)
    first.started(0)
    for step in (10, 20, 30, 40):
        first.write(step, 1.0 / step, 0.1, pushed=step, stale=step // 10)
    first.write_eval(40, {"mse": 0.5})
    first.close()


def test_a_restart_from_an_earlier_step_drops_the_points_after_it(tmp_path: Path) -> None:
    """A new chief that restored global step 20 (the job rolled back): TensorBoard drops the
    earlier chief's points after 20, in the train and eval runs alike, before the new
    chief writes any; the curve then goes on from 20 once."""
    first_run(tmp_path)
    second = Summaries(str(tmp_path), 10, evaluates=True)
    second.started(20)
    assert steps(board(tmp_path), LOSS) == [10, 20]
    assert steps(board(tmp_path / "eval"), "mse") == []
    for step in (30, 40, 50):
        second.write(step, 2.0 / step, 0.05, pushed=step - 20, stale=0)
    acc = board(tmp_path)
    assert steps(acc, LOSS) == [10, 20, 30, 40, 50]
    assert [e.value for e in acc.Scalars(LEARNING_RATE)] == pytest.approx([0.1, 0.1, 0.05,
                                                                           0.05, 0.05])
    assert acc.Scalars(LOSS)[2].value == pytest.approx(2.0 / 30)  # the new chief's


def test_without_the_start_event_the_orphaned_points_stay(tmp_path: Path) -> None:
    """What the START event is for: a restarted chief that did not write it leaves the
    rolled-back stretch in TensorBoard (until a point of each tag comes in out of order)."""
    first_run(tmp_path)
    second = Summaries(str(tmp_path), 10, evaluates=True)
    second.write_eval(20, {"mse": 0.7})
    assert steps(board(tmp_path), LOSS) == [10, 20, 30, 40]


def test_the_rates_cover_the_window_since_the_last_summary(tmp_path: Path) -> None:
    s = Summaries(str(tmp_path), 10, evaluates=False)
    s.started(0)
    s.write(10, 1.0, 0.1, pushed=10, stale=2)
    s.write(20, 0.5, 0.1, pushed=18, stale=3)
    acc = board(tmp_path)
    assert [e.value for e in acc.Scalars(STALE_FRACTION)] == pytest.approx([0.2, 1 / 8])
    assert all(e.value > 0 for e in acc.Scalars(STEPS_PER_SEC))
    assert not list(tmp_path.glob("eval"))  # no evaluations: no eval run
    off = Summaries(str(tmp_path / "off"), 0, evaluates=True)
    off.started(0)
    assert not off.due(10) and not (tmp_path / "off").exists()


@pytest.mark.timeout(300)
def test_a_job_leaves_summaries_tensorboard_reads_and_a_saved_model_that_serves(
        tmp_path: Path) -> None:  # fmt: skip
    """A real job (chief, a worker, a PS): the chief's loss, learning rate, global steps/s and
    the model's own summary ops every summaryEverySteps, and the final evaluation under
    eval/, in the checkpoint directory; and the SavedModel of its last checkpoint, loaded
    in a fresh process as a model server would, gives that checkpoint's outputs."""
    steps_total, every, lr = 60, 10, 0.05
    ckpt = tmp_path / "ckpt"
    job = linear_job(replicasToAggregate=2, model__entrypoint="tests.runtime.summarymodel:build",
                     training__maxSteps=steps_total, training__learningRate=lr,
                     training__checkpointDir=str(ckpt), training__checkpointEverySteps=1000,
                     training__summaryEverySteps=every, training__logEverySteps=1000)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env()) as cluster:
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    assert set(codes.values()) == {0}, logs
    acc = board(ckpt)
    loss = steps(acc, LOSS)
    # The chief's own steps: about one summary per ``every`` global steps, and the last.
    assert loss == sorted(set(loss)) and loss[-1] == steps_total, loss
    assert len(loss) >= steps_total // every - 1, loss
    assert all(e.value == pytest.approx(lr) for e in acc.Scalars(LEARNING_RATE))
    assert all(e.value > 0 for e in acc.Scalars(STEPS_PER_SEC))
    # The model's own: at the same steps, the batch's scalar run with the step's feed.
    assert steps(acc, "w_norm") == loss and steps(acc, "batch_mean_y") == loss
    assert "w" in acc.Tags()["histograms"]
    assert steps(board(ckpt / "eval"), "mse") == [steps_total]
    # The same job's export (tests/runtime/test_export.py): the last checkpoint, served.
    export = ckpt / "export" / str(steps_total)
    assert f"exported a SavedModel of global step {steps_total} to {export}" in cluster.log(
        "chief", 0), logs
    assert sorted(p.name for p in (ckpt / "export").iterdir()) == [str(steps_total)]
    import numpy as np
    import tensorflow as tf

    from tests.runtime.test_export import served

    reader = tf.train.load_checkpoint(str(ckpt))
    assert int(reader.get_tensor("global_step")) == steps_total
    w, b = reader.get_tensor("linear/w"), float(reader.get_tensor("linear/b"))
    assert np.abs(w).sum() > 0  # trained, not the zeros it starts from
    x = np.random.RandomState(1).normal(size=(5, w.shape[0])).astype(np.float32)
    np.testing.assert_allclose(served(export, x)["y"], x @ w + b, rtol=1e-5, atol=1e-6)
