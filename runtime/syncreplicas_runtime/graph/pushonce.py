"""Each replica's gradient counted once per accumulator, even when its process died half-way
through a push.

A push applies the replica's gradient to one accumulator per variable, each on its variable's
PS, and only then marks the push on PS 0 (graph/training.py). The applies land one by one: a
process killed between them (or while one PS was slow to answer) leaves its gradient in some
accumulators and not in others, and no mark. Its next process pushes that step again, since
nothing says it was pushed, and an accumulator that already holds the first gradient would
take a second: its update would average R + 1 gradients, this replica's twice.

So each accumulator has, on its own PS and in the epoch's container as the accumulator itself,
a table of the last local step each replica applied to it. A push whose step is not above
the table's is given local step -1, which the accumulator drops as stale (it drops any
gradient whose local step is below its own global step, and that is never below 0). The table
is written after the apply, in the same run on the same PS: once a gradient has reached a PS,
both happen there whatever becomes of the process that sent it. A table that does not exist
yet (a new epoch, a PS that restarted) reads -1 for everyone.

Only for a replica that pushes one gradient per update and holds no initial tokens: any other
pushes several gradients at one local step by design (graph.training.tokens_per_replica).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

TABLE_PREFIX = "syncreplicas_applied"


def table_name(accumulator: Any) -> str:
    """The table's shared name: its accumulator's, which names the variable it belongs to."""
    shared = accumulator.accumulator_ref.op.get_attr("shared_name").decode()
    return f"{TABLE_PREFIX}/{shared.replace(':', '_')}"


def push_once(apply_ops: list[Any], accumulators: list[tuple[Any, str]], replica: int,
              container: str) -> list[Any]:
    """Guard ``apply_ops`` (the optimizer's, one per accumulator) so that ``replica``'s
    gradient for a local step enters each accumulator at most once; the tables live in
    ``container`` (the epoch's). Returns, per apply, the op that ends it (its table
    written): a push has landed when all of them ran."""
    by_ref = {acc.accumulator_ref.op.name: (acc, device) for acc, device in accumulators}
    done = []
    key = tf.constant([replica], tf.int64)
    for apply_op in apply_ops:
        acc, device = by_ref[apply_op.inputs[0].op.name]
        step = apply_op.inputs[1]
        with tf.device(device):
            table = tf.raw_ops.MutableHashTableV2(
                key_dtype=tf.int64, value_dtype=tf.int64, container=container,
                shared_name=table_name(acc), use_node_name_sharing=False)
            last = tf.raw_ops.LookupTableFindV2(
                table_handle=table, keys=key, default_value=tf.constant(-1, tf.int64))[0]
            guarded = tf.where(last < step, step, tf.constant(-1, tf.int64))
            apply_op._update_input(1, guarded)
            with tf.control_dependencies([apply_op]):
                done.append(tf.raw_ops.LookupTableInsertV2(
                    table_handle=table, keys=key, values=tf.reshape(step, [1])))
    return done
