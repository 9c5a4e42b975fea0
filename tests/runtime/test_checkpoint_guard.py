"""A checkpoint's global step never goes back: the chief's save path refuses a checkpoint
at a lower step than the newest one in the directory (a superseded chief that woke up late;
the fence stops it too, tests/runtime/test_fencing.py). In one process, no cluster."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import tensorflow as tf
from syncreplicas_runtime.state.checkpoints import newest_checkpoint_step, save_checkpoint

v1 = tf.compat.v1


@pytest.mark.parametrize(("names", "newest"), [
    ([], None),
    (["checkpoint", "model.ckpt-5.data-00000-of-00001"], None),
    (["model.ckpt-5.index", "model.ckpt-40.index", "model.ckpt-100.index", "checkpoint"], 100),
    (["model.ckpt-7.index", "other.ckpt-900.index", "model.ckpt-x.index"], 7),
])
def test_newest_checkpoint_step(names: list[str], newest: int | None) -> None:
    assert newest_checkpoint_step(names) == newest


def test_a_save_below_the_newest_checkpoint_is_refused(tmp_path: Path) -> None:
    graph = tf.Graph()
    with graph.as_default():
        step = v1.get_variable("global_step", [], tf.int64, initializer=v1.zeros_initializer())
        saver = v1.train.Saver([step], sharded=False, max_to_keep=3, save_relative_paths=True)
        set_step = v1.placeholder(tf.int64, [])
        assign = step.assign(set_step)
        init = v1.global_variables_initializer()
    training = SimpleNamespace(saver=saver)
    logged: list[str] = []
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(assign, {set_step: 100})
        assert save_checkpoint(sess, training, str(tmp_path), 100, logged.append)  # type: ignore[arg-type]
        before = sorted(os.listdir(tmp_path))
        state = (tmp_path / "checkpoint").read_text()
        sess.run(assign, {set_step: 40})
        assert save_checkpoint(sess, training, str(tmp_path), 40, logged.append) is None  # type: ignore[arg-type]
        assert sorted(os.listdir(tmp_path)) == before
        assert (tmp_path / "checkpoint").read_text() == state  # still points at step 100
        assert logged == [f"checkpoint at global step 40 refused: {tmp_path} holds one at "
                          "global step 100, and a checkpoint's step never goes back"]
        # The same step again, or a later one, is written.
        assert save_checkpoint(sess, training, str(tmp_path), 100, logged.append)  # type: ignore[arg-type]
        assert save_checkpoint(sess, training, str(tmp_path), 120, logged.append)  # type: ignore[arg-type]
    assert v1.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-120")
    assert len(logged) == 1
