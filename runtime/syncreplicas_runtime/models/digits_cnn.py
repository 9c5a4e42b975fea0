"""A small convolutional network of Keras layers on scikit-learn's bundled 8x8 digits, fed
through tf.data (the runtime shards and positions it); reports held-out accuracy.

Written as a user would write it: Keras layers called on graph tensors, a dataset of single
examples, the loss as a function of the replica's batch (docs/model.md).
"""

from __future__ import annotations

from typing import Any

from .digits import split


def network(filters: int, hidden: int, seed: int) -> Any:
    """The network (made in every graph: Keras layers belong to the graph that built them)."""
    import tensorflow as tf

    layers = tf.keras.layers
    init = tf.keras.initializers
    return tf.keras.Sequential([
        layers.Input((8, 8, 1)),
        layers.Conv2D(filters, 3, padding="same", activation="relu",
                      kernel_initializer=init.HeNormal(seed=seed)),
        layers.Conv2D(2 * filters, 3, padding="same", activation="relu",
                      kernel_initializer=init.HeNormal(seed=seed + 1)),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(hidden, activation="relu", kernel_initializer=init.HeNormal(seed=seed + 2)),
        layers.Dense(10, kernel_initializer=init.GlorotUniform(seed=seed + 3)),
    ], name="digits_cnn")


def build(*, replica: int, num_replicas: int, batch_size: int, seed: int,
          filters: int = 16, hidden: int = 64) -> dict[str, Any]:
    import tensorflow as tf

    del replica, num_replicas, batch_size  # the runtime shards and batches the dataset
    x_train, y_train, x_test, y_test = split(seed)
    net = network(filters, hidden, seed)
    dataset = tf.data.Dataset.from_tensor_slices((x_train.reshape(-1, 8, 8, 1), y_train))

    def loss(batch: tuple[Any, Any]) -> Any:
        images, labels = batch
        return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            labels, net(images), from_logits=True))

    x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 1], name="x_test")
    y = tf.compat.v1.placeholder(tf.int64, [None], name="y_test")
    logits = net(x)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    # The export's signature: 8x8x1 images in [0, 1] -> class probabilities and the class.
    serving = {"inputs": {"images": x},
               "outputs": {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, 1)}}
    return {"dataset": dataset, "loss": loss, "eval": {"accuracy": accuracy},
            "eval_feed": {x: x_test.reshape(-1, 8, 8, 1), y: y_test}, "serving": serving}
