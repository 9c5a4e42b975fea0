"""The linear model with a large non-trainable variable on the PS: every checkpoint and
snapshot reads it, so each takes a while (the handover tests' slow SIGTERM checkpoint)."""

from __future__ import annotations

from typing import Any

from syncreplicas_runtime.models import linear


def build(*, ballast_floats: int = 16_000_000, **kwargs: Any) -> dict[str, Any]:
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.get_variable("ballast", [ballast_floats], initializer=v1.zeros_initializer(),
                    trainable=False)
    return linear.build(**kwargs)
