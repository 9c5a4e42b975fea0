"""After: the model of before.py as a syncreplicas model function.

What moved: the layers, the loss and the held-out accuracy, unchanged, into ``build``. The
dataset loses its ``shuffle``/``repeat``/``batch`` and the iterator (the runtime shards,
shuffles, batches and positions it per replica), and the loss becomes a function of the
batch. What went away: the cluster, the server, the device setter, SyncReplicasOptimizer,
the hooks and MonitoredTrainingSession; the job's manifest (port.yaml) holds the settings.
"""

from __future__ import annotations

from typing import Any


def build(*, replica: int, num_replicas: int, batch_size: int, seed: int,
          hidden: int = 64) -> dict[str, Any]:
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    del replica, num_replicas, batch_size  # the runtime shards and batches the dataset
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype("float32"), digits.target.astype("int64"),
        test_size=0.2, random_state=0)
    net = tf.keras.Sequential([
        tf.keras.layers.Dense(hidden, activation="relu",
                              kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed)),
        tf.keras.layers.Dense(10,
                              kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed)),
    ])
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))

    def loss(batch: tuple[Any, Any]) -> Any:
        images, labels = batch
        return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            labels, net(images), from_logits=True))

    x = tf.compat.v1.placeholder(tf.float32, [None, 64])
    y = tf.compat.v1.placeholder(tf.int64, [None])
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(net(x), 1), y), tf.float32))
    return {"dataset": dataset, "loss": loss, "eval": {"accuracy": accuracy},
            "eval_feed": {x: x_test, y: y_test}}
