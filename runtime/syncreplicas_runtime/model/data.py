"""tf.data input: a model's dataset sharded per replica, positioned by the global step.

A model may return ``"dataset"``: a finite ``tf.data.Dataset`` of single examples (the
training set, in a fixed order). The runtime turns it into this replica's stream of
batches, in the replica's graph, so that the batch is a pure function of
``(seed, replica, global step)``, exactly like a deterministic ``feed(step)``:

- **shard**: replica ``r`` of ``n`` gets the examples ``i`` with ``i % n == r``;
- **data epochs**: with ``P = len(shard) // batch_size`` batches per epoch, global step
  ``s`` lies in the replica's data epoch ``e = s // P`` at batch ``s % P``; epoch ``e`` is a
  seeded shuffle of the shard (seed from ``(seed, r, e)``, buffer ``SHUFFLE_BUFFER``),
  batched with the remainder dropped.

So the position survives any rebuild and any restart: a replica that reads the variables at
global step ``s`` trains on the same batch whichever process, graph or sync epoch it is in,
and continues where the global step says, not at the start of the data.

The stream is an initializable iterator on the replica's own device. ``position(sess,
step)`` runs before each training step: it does nothing when the step follows the last one,
discards a few batches for a short jump forward (a backup replica missed an update), and
re-initializes the iterator at the step otherwise (first step of a graph, a rollback to a
checkpoint). Re-initializing costs one shuffle-buffer fill plus at most one epoch of
skipped batches.
"""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf

from ..foundation import exitcodes
from ..process.exits import Exit

v1 = tf.compat.v1

SHUFFLE_BUFFER = 10_000
# A forward jump of at most this many batches is cheaper to read through than to re-seek.
MAX_READ_THROUGH = 4
# The messages of the checks above (no quotes: TensorFlow escapes them in its error text).
DATASET_ERROR = re.compile(r"the (model dataset is infinite|shard of replica \d+ of the model "
                           r"dataset)[^\n.\]]*")


def epoch_seed(seed: int, replica: int, epoch: Any) -> Any:
    """The shuffle seed of one data epoch of one replica (distinct for every epoch)."""
    return (tf.cast(epoch, tf.int64) * 1_000_003 + replica * 7_919 + seed) % (2**31 - 1)


class DatasetInput:
    """This replica's batches of ``dataset`` and the op that moves them to a global step."""

    def __init__(self, dataset: Any, *, replica: int, num_replicas: int, batch_size: int,
                 seed: int) -> None:
        shard = dataset.shard(num_replicas, replica)
        card = shard.cardinality()
        size = tf.cond(card >= 0, lambda: card,
                       lambda: shard.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1))
        checks = [
            tf.debugging.assert_none_equal(
                card, tf.constant(tf.data.INFINITE_CARDINALITY, tf.int64),
                message="the model dataset is infinite: return one pass over the training set "
                        "(the runtime repeats it)"),
            tf.debugging.assert_greater_equal(
                size, tf.constant(batch_size, tf.int64),
                message=f"the shard of replica {replica} of the model dataset has fewer than "
                        f"batchSize={batch_size} examples"),
        ]
        with tf.control_dependencies(checks):
            per_epoch = size // batch_size
        self.start = v1.placeholder(tf.int64, [], name="data_start_step")

        def one_epoch(epoch: Any) -> Any:
            return (shard.shuffle(tf.minimum(size, SHUFFLE_BUFFER),
                                  seed=epoch_seed(seed, replica, epoch),
                                  reshuffle_each_iteration=False)
                    .batch(batch_size, drop_remainder=True))

        stream = (tf.data.Dataset.range(self.start // per_epoch, tf.int64.max)
                  .flat_map(one_epoch)
                  .skip(self.start % per_epoch)
                  .prefetch(1))
        self.iterator = v1.data.make_initializable_iterator(stream)
        self.batch = self.iterator.get_next()
        self.next_step: int | None = None  # the step the iterator's next batch belongs to

    def position(self, sess: Any, step: int) -> None:
        """Make the next batch the one of global ``step``; the caller then trains on it."""
        ahead = None if self.next_step is None else step - self.next_step
        if ahead is None or ahead < 0 or ahead > MAX_READ_THROUGH:
            try:
                sess.run(self.iterator.initializer, {self.start: step})
            except tf.errors.InvalidArgumentError as err:
                found = DATASET_ERROR.search(err.message or "")
                if found:  # the model's fault: retrying cannot help
                    raise Exit(exitcodes.MODEL, found[0]) from err
                raise
        else:
            for _ in range(ahead):
                sess.run(self.batch)
        # Any failure of the step's run ends this graph, so no batch can be half-taken.
        self.next_step = step + 1
