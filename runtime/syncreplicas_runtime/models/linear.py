"""Synthetic linear regression: deterministic batches from (seed, replica, step).

No data files: every batch is generated from its coordinates, so a distributed run can be
compared with single-process training on the concatenated batches (see ``batch``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def true_weights(seed: int, dim: int) -> tuple[np.ndarray, float]:
    rng = np.random.RandomState(seed)
    return rng.normal(size=(dim, 1)).astype(np.float32), float(rng.normal())


def batch(seed: int, replica: int, step: int, batch_size: int, dim: int,
          noise: float) -> tuple[np.ndarray, np.ndarray]:
    """The batch of ``replica`` at global ``step``: a pure function of its arguments."""
    w, b = true_weights(seed, dim)
    rng = np.random.RandomState([seed % (2**31), replica, step % (2**31)])
    x = rng.normal(size=(batch_size, dim)).astype(np.float32)
    y = x @ w + b + noise * rng.normal(size=(batch_size, 1)).astype(np.float32)
    return x, y.astype(np.float32)


def split_rows(dim: int, parts: int) -> list[int]:
    """Rows of ``w`` in each of its ``parts`` pieces (as even as possible, first ones larger)."""
    return [dim // parts + (1 if i < dim % parts else 0) for i in range(parts)]


def build(*, replica: int, num_replicas: int, batch_size: int, seed: int,
          dim: int = 16, noise: float = 0.01, compute_ms: float = 0.0,
          variables: int = 2) -> dict[str, Any]:
    """Linear model ``y = x.w + b`` trained with mean squared error.

    ``compute_ms`` adds a fixed matmul workload per step (for benchmarks that need a
    heavier step than a 16-wide dot product); 0 adds nothing. ``variables`` (2..dim+1)
    holds the same parameters in that many variables: ``w`` cut by rows into
    ``linear/w_0 ..`` plus ``linear/b`` (2 keeps the single ``linear/w``). The model is the
    same function; only the number of variables (and so of tensors moved) changes.
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    del num_replicas
    if not 2 <= variables <= dim + 1:
        raise ValueError(f"variables must be in 2..{dim + 1} (dim + 1), got {variables}")
    x = v1.placeholder(tf.float32, [None, dim], name="x")
    y = v1.placeholder(tf.float32, [None, 1], name="y")
    if variables == 2:
        w = v1.get_variable("linear/w", [dim, 1], initializer=v1.zeros_initializer())
        xw = tf.matmul(x, w)
    else:
        rows = split_rows(dim, variables - 1)
        ws = [v1.get_variable(f"linear/w_{i}", [n, 1], initializer=v1.zeros_initializer())
              for i, n in enumerate(rows)]
        xw = tf.add_n([tf.matmul(xi, wi)
                       for xi, wi in zip(tf.split(x, rows, axis=1), ws, strict=True)])
    b = v1.get_variable("linear/b", [], initializer=v1.zeros_initializer())
    pred = xw + b
    loss = tf.reduce_mean(tf.square(pred - y))
    if compute_ms > 0:
        # About compute_ms of CPU per step, folded into the loss with weight 0.
        n = max(8, int(64 * (compute_ms ** (1 / 3))))
        m = tf.random.stateless_normal([n, n], seed=[seed, 1])
        busy = tf.reduce_sum(tf.matmul(m, m))
        loss = loss + 0.0 * busy

    def feed(step: int) -> dict[Any, Any]:
        bx, by = batch(seed, replica, step, batch_size, dim, noise)
        return {x: bx, y: by}

    ex, ey = batch(seed, 10_000, 0, 256, dim, noise)
    return {"loss": loss, "feed": feed, "eval": {"mse": loss}, "eval_feed": {x: ex, y: ey},
            "serving": {"inputs": {"x": x}, "outputs": {"y": pred}}}
