"""Keras models for the runtime tests: a functional model on placeholders, and the port
example (examples/port/after.py) with every batch's example ids logged for the tests."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def functional(*, replica: int, num_replicas: int, batch_size: int, seed: int) -> dict[str, Any]:
    """A functional Keras model called on placeholders, data from ``feed(step)``."""
    import tensorflow as tf

    del num_replicas
    inputs = tf.keras.Input((4,))
    hidden = tf.keras.layers.Dense(8, activation="tanh", name="hidden")(inputs)
    net = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(hidden))
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    loss = tf.reduce_mean(tf.square(net(x) - y))

    def feed(step: int) -> dict[Any, Any]:
        rng = np.random.RandomState([seed, replica, step])
        bx = rng.normal(size=(batch_size, 4)).astype(np.float32)
        return {x: bx, y: bx.sum(axis=1, keepdims=True)}

    return {"loss": loss, "feed": feed}


def logged_port(*, replica: int, num_replicas: int, batch_size: int, seed: int,
                log_dir: str, **args: Any) -> dict[str, Any]:
    """examples/port/after.py, each step logging ``pid replica global_step [example ids]``.

    The ids are the examples' positions in the model's dataset. The log is written before
    the forward pass (a control dependency), so the global step it reads is the one the
    replica reads the variables at (R = replicas: no update can happen before its push).
    """
    import tensorflow as tf

    from examples.port import after

    out = after.build(replica=replica, num_replicas=num_replicas, batch_size=batch_size,
                      seed=seed, **args)
    dataset = tf.data.Dataset.zip((out["dataset"], tf.data.Dataset.range(2**62)))
    inner = out["loss"]
    path = os.path.join(log_dir, f"batches-{replica}.txt")

    def loss(batch: Any) -> Any:
        example, ids = batch
        step = tf.compat.v1.train.get_global_step().read_value()
        logged = tf.print(os.getpid(), replica, step, ids, summarize=-1,
                          output_stream=f"file://{path}")
        with tf.control_dependencies([logged]):
            example = tf.nest.map_structure(tf.identity, example)
        return inner(example)

    return {**out, "dataset": dataset, "loss": loss}
