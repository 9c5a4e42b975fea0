"""An MLP on scikit-learn's bundled 8x8 digits (no download); reports held-out accuracy."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np


@lru_cache(maxsize=4)
def split(seed: int, test_fraction: float = 0.2) -> tuple[np.ndarray, ...]:
    """Train/test split of the digits data, features scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build(*, replica: int, num_replicas: int, batch_size: int, seed: int,
          hidden: int = 64) -> dict[str, Any]:
    import tensorflow as tf

    v1 = tf.compat.v1
    x_train, y_train, x_test, y_test = split(seed)
    x = v1.placeholder(tf.float32, [None, 64], name="x")
    y = v1.placeholder(tf.int64, [None], name="y")
    init = v1.glorot_uniform_initializer(seed=seed)
    w1 = v1.get_variable("digits/w1", [64, hidden], initializer=init)
    b1 = v1.get_variable("digits/b1", [hidden], initializer=v1.zeros_initializer())
    w2 = v1.get_variable("digits/w2", [hidden, 10], initializer=init)
    b2 = v1.get_variable("digits/b2", [10], initializer=v1.zeros_initializer())
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    n = len(x_train)

    def feed(step: int) -> dict[Any, Any]:
        # Each replica walks its own permutation of the training set, epoch by epoch.
        per_epoch = max(1, n // batch_size)
        epoch, pos = divmod(step, per_epoch)
        order = np.random.RandomState([seed, replica, epoch % (2**31)]).permutation(n)
        idx = order[pos * batch_size:(pos + 1) * batch_size]
        return {x: x_train[idx], y: y_train[idx]}

    # The export's signature: 64 pixel values in [0, 1] -> class probabilities and the class.
    serving = {"inputs": {"x": x},
               "outputs": {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, 1)}}
    return {"loss": loss, "feed": feed, "eval": {"accuracy": accuracy},
            "eval_feed": {x: x_test, y: y_test}, "serving": serving}
