"""A model with every kind of variable packing meets, for the packing tests.

Dense get_variable weights of two dtypes' worth of shapes, a Keras layer, an embedding
(its gradient is IndexedSlices: kept unpacked), a trainable variable the loss does not use
(no gradient: kept unpacked) and a non-trainable counter (left on the PS). Batches are a
pure function of (seed, replica, step), so two runs see the same data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

VOCAB, DIM = 12, 6


def batch(seed: int, replica: int, step: int, n: int) -> tuple[np.ndarray, ...]:
    rng = np.random.RandomState([seed, replica, step])
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    ids = rng.randint(0, VOCAB, size=(n,)).astype(np.int64)
    y = (x.sum(axis=1, keepdims=True) + 0.1 * ids[:, None]).astype(np.float32)
    return x, ids, y


def build(*, replica: int, num_replicas: int, batch_size: int, seed: int,
          keras: bool = True) -> dict[str, Any]:
    import tensorflow as tf

    v1 = tf.compat.v1
    del num_replicas
    x = v1.placeholder(tf.float32, [None, DIM], name="x")
    ids = v1.placeholder(tf.int64, [None], name="ids")
    y = v1.placeholder(tf.float32, [None, 1], name="y")
    init = v1.glorot_uniform_initializer(seed=seed)
    w1 = v1.get_variable("mix/w1", [DIM, 8], initializer=init)
    b1 = v1.get_variable("mix/b1", [8], initializer=v1.zeros_initializer())
    emb = v1.get_variable("mix/embedding", [VOCAB, 8], initializer=init)
    v1.get_variable("mix/unused", [3], initializer=v1.ones_initializer())
    v1.get_variable("mix/counter", [], tf.int64, initializer=v1.zeros_initializer(),
                    trainable=False)
    h = tf.nn.relu(tf.matmul(x, w1) + b1 + tf.nn.embedding_lookup(emb, ids))
    if keras:
        out = tf.keras.layers.Dense(1, name="mix_head",
                                    kernel_initializer=tf.keras.initializers.GlorotUniform(
                                        seed=seed))(h)
    else:
        w2 = v1.get_variable("mix/w2", [8, 1], initializer=init)
        out = tf.matmul(h, w2)
    loss = tf.reduce_mean(tf.square(out - y))

    def feed(step: int) -> dict[Any, Any]:
        bx, bi, by = batch(seed, replica, step, batch_size)
        return {x: bx, ids: bi, y: by}

    ex, ei, ey = batch(seed, 10_000, 0, 64)
    return {"loss": loss, "feed": feed, "eval": {"mse": loss},
            "eval_feed": {x: ex, ids: ei, y: ey}}
