"""A user's model, shipped to the pods in a ConfigMap: logistic regression on synthetic,
linearly separable points (a model of the runtime's contract, not one of its built-ins)."""

from __future__ import annotations

from typing import Any

import numpy as np


def build(*, replica: int, num_replicas: int, batch_size: int, seed: int,
          dim: int = 8) -> dict[str, Any]:  # fmt: skip
    import tensorflow as tf

    v1 = tf.compat.v1
    del num_replicas
    truth = np.random.RandomState(seed).normal(size=(dim, 1)).astype(np.float32)
    x = v1.placeholder(tf.float32, [None, dim], name="x")
    y = v1.placeholder(tf.float32, [None, 1], name="y")
    w = v1.get_variable("user/w", [dim, 1], initializer=v1.zeros_initializer())
    b = v1.get_variable("user/b", [], initializer=v1.zeros_initializer())
    logits = tf.matmul(x, w) + b
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), y), tf.float32))

    def points(replica: int, step: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.RandomState([seed, replica, step % (2**31)])
        px = rng.normal(size=(n, dim)).astype(np.float32)
        return px, (px @ truth > 0).astype(np.float32)

    def feed(step: int) -> dict[Any, Any]:
        px, py = points(replica, step, batch_size)
        return {x: px, y: py}

    ex, ey = points(10_000, 0, 512)
    # What a server is given: points, and the probability of class 1 for each.
    serving = {"inputs": {"x": x}, "outputs": {"probability": tf.sigmoid(logits)}}
    return {"loss": loss, "feed": feed, "eval": {"accuracy": accuracy},
            "eval_feed": {x: ex, y: ey}, "serving": serving}  # fmt: skip
