"""The digits CNN fed by ``feed(step)`` instead of tf.data, for bench/input.py: the same
network, data and batch size as ``syncreplicas_runtime.models.digits_cnn``."""

from __future__ import annotations

from typing import Any

import numpy as np


def cnn_feed(*, replica: int, num_replicas: int, batch_size: int, seed: int,
             filters: int = 16, hidden: int = 64) -> dict[str, Any]:
    import tensorflow as tf
    from syncreplicas_runtime.models.digits import split
    from syncreplicas_runtime.models.digits_cnn import network

    x_train, y_train, _, _ = split(seed)
    shard = np.arange(replica, len(x_train), num_replicas)  # what the runtime's shard takes
    images, labels = x_train.reshape(-1, 8, 8, 1)[shard], y_train[shard]
    net = network(filters, hidden, seed)
    x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 1])
    y = tf.compat.v1.placeholder(tf.int64, [None])
    loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        y, net(x), from_logits=True))
    per_epoch = len(shard) // batch_size

    def feed(step: int) -> dict[Any, Any]:
        epoch, pos = divmod(step, per_epoch)
        order = np.random.RandomState([seed, replica, epoch % (2**31)]).permutation(len(shard))
        idx = order[pos * batch_size:(pos + 1) * batch_size]
        return {x: images[idx], y: labels[idx]}

    return {"loss": loss, "feed": feed}
