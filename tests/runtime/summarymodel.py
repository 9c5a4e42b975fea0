"""The linear model with summary ops of its own, as a model author adds them: a scalar of
its weights, a histogram, and a scalar of the batch (which needs the step's feed)."""

from __future__ import annotations

from typing import Any

from syncreplicas_runtime.models import linear


def build(**kwargs: Any) -> dict[str, Any]:
    import tensorflow as tf

    v1 = tf.compat.v1
    out = linear.build(**kwargs)
    w = next(v for v in v1.trainable_variables() if v.op.name == "linear/w")
    v1.summary.scalar("w_norm", tf.norm(w))
    v1.summary.histogram("w", w)
    y = tf.compat.v1.get_default_graph().get_tensor_by_name("y:0")
    v1.summary.scalar("batch_mean_y", tf.reduce_mean(y))
    return out
