"""The update counter on PS 0 that makes a snapshot consistent (a seqlock).

Every run of the sync loop's ``sync_op`` increments it once before its first gradient take
and once after the global step moved, so it is odd exactly while an update is applied.
The chief's snapshot reads (``state/snapshots.py``) keep a copy only between two equal,
even counts. Built into the training graph when snapshots are on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from ..sync.names import SNAPSHOT_SEQ_VARIABLE, SYNC_STATE_DEVICE

v1 = tf.compat.v1


@dataclass
class SeqLock:
    """The update counter on PS 0 (outside checkpoints and global_variables)."""

    counter: Any
    is_initialized: Any
    settle: Any          # round an odd count (an update that failed half-way) up to even


def add_seqlock(take_ops: list[Any], update_op: Any, sync_op: Any) -> SeqLock:
    """Make every run of ``sync_op`` count +1 before its first take and +1 after the update.

    Built in the training graph (training.py), under its ``as_default()``.
    """
    with tf.device(SYNC_STATE_DEVICE):
        counter = v1.get_variable(SNAPSHOT_SEQ_VARIABLE, [], tf.int64,
                                  initializer=v1.zeros_initializer(), trainable=False,
                                  collections=[], use_resource=True)
        begin = counter.assign_add(1, read_value=False)
        for op in take_ops:  # the update's first ops: every apply needs a taken gradient
            op._add_control_input(begin)
        with tf.control_dependencies([update_op]):
            end = counter.assign_add(1, read_value=False)
        sync_op._add_control_input(end)
        settle = counter.assign_add(tf.math.floormod(counter.read_value(), 2),
                                    read_value=False)
        return SeqLock(counter=counter, is_initialized=v1.is_variable_initialized(counter),
                       settle=settle)


def settle_seqlock(sess: Any, seqlock: SeqLock) -> None:
    """PS 0, when it opens an epoch, before the sync loop runs: a usable, even counter."""
    if not sess.run(seqlock.is_initialized):
        sess.run(seqlock.counter.initializer)
    sess.run(seqlock.settle)
