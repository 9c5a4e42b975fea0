"""Models that break the contract, for the exit-code tests."""

from typing import Any


def explode(**_: Any) -> dict[str, Any]:
    raise RuntimeError("the model failed to build")


def no_loss(**_: Any) -> dict[str, Any]:
    return {"feed": None}


def eager_numpy(**_: Any) -> dict[str, Any]:
    """Eager-only code: a value read while the graph is being built."""
    import tensorflow as tf

    x = tf.compat.v1.placeholder(tf.float32, [None, 1])
    scale = float(tf.reduce_mean(x).numpy())
    return {"loss": tf.reduce_mean(x) * scale}


def keras_fit(**_: Any) -> dict[str, Any]:
    """A Keras training loop where the runtime expects a graph."""
    import numpy as np
    import tensorflow as tf

    net = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    net.compile(optimizer="sgd", loss="mse")
    net.fit(np.zeros((8, 4), np.float32), np.zeros((8, 1), np.float32), verbose=0)
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    return {"loss": tf.reduce_mean(net(x))}
