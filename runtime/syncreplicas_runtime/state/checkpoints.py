"""Checkpoints of the variables on the parameter servers, and bringing them to a consistent
state when an epoch is reset: keep, restore (snapshot or checkpoint) or initialize.

A checkpoint's global step never goes back: a save at a lower step than the newest
checkpoint in the directory is refused, before it is written and again once it is (a
superseded chief that woke up late, which the fence also stops; sync/fencing.py), and a
save becomes visible only whole (state/ckptfiles.py). Every save, restore and
initialization runs behind the chief's fence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..graph.training import TrainingGraph
from . import ckptfiles
from .snapshots import Snapshot, checkpoint_step, choose_source, restore_snapshot

v1 = tf.compat.v1


def restore_or_initialize(sess: Any, training: TrainingGraph, checkpoint_dir: str,
                          snapshot: Snapshot | None = None) -> tuple[str, int]:
    """Bring the variables on the PS to a consistent state; returns (how, global step).

    - every variable already initialized (the PS outlived the chief): keep them as they are;
      re-running the init op here is what rewinds stock TensorFlow jobs to step 0;
    - some or all missing (a new job, or a PS that restarted): restore the chief's in-memory
      ``snapshot`` if it is newer than the latest checkpoint, else the checkpoint, onto
      every PS, so all variables come from the same step;
    - neither: initialize only what is missing; when that is every variable (the job's
      first start), then take ``training.warmStart``'s variables from its checkpoint.
    """
    missing = {name.decode() for name in sess.run(training.report_uninitialized)}
    how = "kept"
    if missing:
        latest = v1.train.latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        source = choose_source(snapshot.step if snapshot else None, checkpoint_step(latest))
        if source == "snapshot" and snapshot and restore_snapshot(sess, training, snapshot):
            how = f"restored from the snapshot at global step {snapshot.step}"
        elif latest:
            training.saver.restore(sess, latest)
            how = f"restored {os.path.basename(latest)}"
        else:
            fenced = [training.fence.check] if training.fence is not None else []
            with training.graph.as_default(), tf.control_dependencies(fenced):
                todo = [v for v in v1.global_variables() if v.op.name in missing]
                sess.run(v1.variables_initializer(todo))
            everything = len(todo) == len(training.graph.get_collection("variables"))
            how = "initialized" if everything else f"initialized {len(todo)} missing variables"
            # A job's first start (nothing kept, no checkpoint, no snapshot): warm start.
            if everything and training.init_from is not None:
                how += f"; {training.init_from.restore(sess)}"
    return how, int(sess.run(training.global_step))


def save_checkpoint(sess: Any, training: TrainingGraph, checkpoint_dir: str, step: int,
                    log: Callable[[str], None] = print) -> str | None:
    """Write the checkpoint of global step ``step``; its path, or None (and a log line) when
    the directory holds a newer one, before the write or once it is written.

    Written aside and committed only after the fence and the directory are checked again
    (state/ckptfiles.py): a chief stopped in the middle of a save that a newer chief
    superseded never makes its late checkpoint visible. A failed fence raises, as every
    fenced run does."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    if _refused(checkpoint_dir, step, log):
        return None
    staging = ckptfiles.staging_dir(checkpoint_dir, step)
    try:
        staged = str(training.saver.save(
            sess, os.path.join(staging, ckptfiles.PREFIX), global_step=step,
            write_meta_graph=False, write_state=False))
        if training.fence is not None:
            sess.run(training.fence.check)  # still this chief's slot, now the write is done
        if _refused(checkpoint_dir, step, log):
            return None
        path = ckptfiles.commit(checkpoint_dir, staged)
    finally:
        ckptfiles.discard(staging)
    ckptfiles.tidy(checkpoint_dir)
    return path


def _refused(checkpoint_dir: str, step: int, log: Callable[[str], None]) -> bool:
    """True (and a log line) when the directory holds a checkpoint newer than ``step``."""
    newest = ckptfiles.newest_checkpoint_step(os.listdir(checkpoint_dir))
    if newest is not None and step < newest:
        log(f"checkpoint at global step {step} refused: {checkpoint_dir} holds one at global "
            f"step {newest}, and a checkpoint's step never goes back")
        return True
    return False
