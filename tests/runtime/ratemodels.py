"""A model with its own learning rate (the model contract's ``learning_rate``): the linear
model trained at 0.01 * (global step + 1)."""

from __future__ import annotations

from typing import Any

from syncreplicas_runtime.models import linear


def linear_with_own_rate(**kwargs: Any) -> dict[str, Any]:
    import tensorflow as tf

    out = linear.build(**kwargs)
    step = tf.compat.v1.train.get_global_step()
    return {**out, "learning_rate": 0.01 * tf.cast(step + 1, tf.float32)}
