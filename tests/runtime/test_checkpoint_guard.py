"""A checkpoint's global step never goes back: the chief's save path refuses a checkpoint
at a lower step than the newest one in the directory, before its write and after it (a
superseded chief that woke up late, in the middle of a save; the fence stops it too,
tests/runtime/test_fencing.py), and a checkpoint appears whole or not at all. In one
process, no cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tensorflow as tf
from syncreplicas_runtime.state import ckptfiles
from syncreplicas_runtime.state.checkpoints import save_checkpoint
from syncreplicas_runtime.state.ckptfiles import newest_checkpoint_step

v1 = tf.compat.v1


@pytest.mark.parametrize(("names", "newest"), [
    ([], None),
    (["checkpoint", "model.ckpt-5.data-00000-of-00001"], None),
    (["model.ckpt-5.index", "model.ckpt-40.index", "model.ckpt-100.index", "checkpoint"], 100),
    (["model.ckpt-7.index", "other.ckpt-900.index", "model.ckpt-x.index"], 7),
])
def test_newest_checkpoint_step(names: list[str], newest: int | None) -> None:
    assert newest_checkpoint_step(names) == newest


class Chief:
    """A one-variable graph (the global step) with the chief's saver, and a fence that
    passes until ``superseded`` is fed True."""

    def __init__(self) -> None:
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.step = v1.get_variable("global_step", [], tf.int64,
                                        initializer=v1.zeros_initializer())
            self.superseded = v1.placeholder_with_default(False, [])
            check = tf.debugging.Assert(tf.logical_not(self.superseded), ["superseded"])
            saver = v1.train.Saver([self.step], sharded=False, save_relative_paths=True)
            self.set_step = v1.placeholder(tf.int64, [])
            self.assign = self.step.assign(self.set_step)
            init = v1.global_variables_initializer()
        self.training = SimpleNamespace(saver=saver, fence=SimpleNamespace(check=check))
        self.sess = v1.Session(graph=self.graph)
        self.sess.run(init)
        self.logged: list[str] = []

    def save(self, directory: Path, step: int) -> str | None:
        self.sess.run(self.assign, {self.set_step: step})
        with self.graph.as_default():  # as the chief's session loop has it
            return save_checkpoint(self.sess, self.training, str(directory), step,  # type: ignore[arg-type]
                                   self.logged.append)


@pytest.fixture
def chief() -> Iterator[Chief]:
    c = Chief()
    yield c
    c.sess.close()


def state_names(directory: Path) -> str:
    return (directory / "checkpoint").read_text()


def test_a_save_below_the_newest_checkpoint_is_refused(tmp_path: Path, chief: Chief) -> None:
    assert chief.save(tmp_path, 100)
    before = sorted(os.listdir(tmp_path))
    state = state_names(tmp_path)
    assert chief.save(tmp_path, 40) is None
    assert sorted(os.listdir(tmp_path)) == before
    assert state_names(tmp_path) == state  # still points at step 100
    assert chief.logged == [f"checkpoint at global step 40 refused: {tmp_path} holds one at "
                            "global step 100, and a checkpoint's step never goes back"]
    # The same step again, or a later one, is written.
    assert chief.save(tmp_path, 100)
    assert chief.save(tmp_path, 120)
    assert v1.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-120")
    assert len(chief.logged) == 1


def test_a_newer_checkpoint_written_during_a_save_refuses_it_and_nothing_of_it_shows(
        tmp_path: Path, chief: Chief) -> None:
    """A chief stopped in the middle of its save of step 15 while its replacement wrote
    step 20: waking up, it finishes the write, finds 20 and leaves no trace of 15."""
    assert chief.save(tmp_path, 10)
    newer = Chief()
    real = chief.training.saver

    class Stopped:  # the replacement commits 20 while this save is under way
        def save(self, *args: Any, **kwargs: Any) -> str:
            path = real.save(*args, **kwargs)
            assert newer.save(tmp_path, 20)
            return str(path)

    chief.training.saver = Stopped()
    assert chief.save(tmp_path, 15) is None
    newer.sess.close()
    assert ckptfiles.checkpoint_steps(os.listdir(tmp_path)) == [10, 20]
    assert not [n for n in os.listdir(tmp_path) if "ckpt-15" in n or n.startswith(".staging")]
    assert v1.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-20")
    assert chief.logged[-1].startswith("checkpoint at global step 15 refused")


def test_a_save_whose_fence_fails_once_written_raises_and_leaves_nothing(
        tmp_path: Path, chief: Chief) -> None:
    assert chief.save(tmp_path, 10)
    before, state = sorted(os.listdir(tmp_path)), state_names(tmp_path)
    with chief.graph.as_default():
        chief.training.fence = SimpleNamespace(
            check=tf.debugging.Assert(tf.constant(False), ["superseded"]))  # claimed meanwhile
    with pytest.raises(tf.errors.InvalidArgumentError, match="superseded"):
        chief.save(tmp_path, 15)
    assert sorted(os.listdir(tmp_path)) == before
    assert state_names(tmp_path) == state


def test_the_directory_keeps_the_newest_three_and_names_the_newest(
        tmp_path: Path, chief: Chief) -> None:
    for step in (5, 10, 15, 20, 25):
        assert chief.save(tmp_path, step)
    assert ckptfiles.checkpoint_steps(os.listdir(tmp_path)) == [15, 20, 25]
    assert sorted(n for n in os.listdir(tmp_path) if n != "checkpoint") == sorted(
        f"model.ckpt-{s}.{ext}" for s in (15, 20, 25)
        for ext in ("index", "data-00000-of-00001"))
    state = v1.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-15", "model.ckpt-20", "model.ckpt-25"]


def test_a_late_commit_below_the_newest_leaves_the_state_naming_the_newest(
        tmp_path: Path, chief: Chief) -> None:
    """The moment between the second check and the renames: even a checkpoint moved in
    then does not turn the state file back; a stale staging directory is cleared."""
    assert chief.save(tmp_path, 20)
    staging = ckptfiles.staging_dir(str(tmp_path), 15)
    chief.sess.run(chief.assign, {chief.set_step: 15})
    with chief.graph.as_default():
        staged = chief.training.saver.save(chief.sess, os.path.join(staging, "model.ckpt"),
                                           global_step=15, write_meta_graph=False,
                                           write_state=False)
    ckptfiles.commit(str(tmp_path), staged)
    stale = ckptfiles.staging_dir(str(tmp_path), 12)
    assert ckptfiles.tidy(str(tmp_path)) == [15, 20]
    assert v1.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-20")
    assert not os.path.exists(stale)
