"""Before: a TF1 between-graph replicated training script, the shape many jobs still have.

Each process is started by hand with its own TF_CONFIG; the script builds the cluster, the
device setter, SyncReplicasOptimizer and MonitoredTrainingSession itself. after.py is the
same model under syncreplicas: only the part between the two marked lines moves there.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

v1 = tf.compat.v1
BATCH, STEPS, LR, HIDDEN, SEED = 32, 100, 0.5, 64, 0


def main() -> None:
    v1.disable_eager_execution()
    config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(config["cluster"])
    role, index = config["task"]["type"], config["task"]["index"]
    server = tf.distribute.Server(cluster, job_name=role, task_index=index)
    if role == "ps":
        server.join()  # never returns: someone has to kill the PS at the end
    replicas = len(config["cluster"].get("worker", [])) + 1
    is_chief = role == "chief"
    worker_device = f"/job:{role}/task:{index}"
    with v1.device(v1.train.replica_device_setter(cluster=cluster,
                                                   worker_device=worker_device)):
        # ---- the model (moves to after.py) ----
        digits = load_digits()
        x_train, x_test, y_train, y_test = train_test_split(
            (digits.data / 16.0).astype("float32"), digits.target.astype("int64"),
            test_size=0.2, random_state=0)
        net = tf.keras.Sequential([
            tf.keras.layers.Dense(HIDDEN, activation="relu",
                                  kernel_initializer=tf.keras.initializers.GlorotUniform(SEED)),
            tf.keras.layers.Dense(10,
                                  kernel_initializer=tf.keras.initializers.GlorotUniform(SEED)),
        ])
        dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                   .shard(replicas, 0 if is_chief else index + 1)
                   .shuffle(len(x_train)).repeat().batch(BATCH))
        images, labels = v1.data.make_one_shot_iterator(dataset).get_next()
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            labels, net(images), from_logits=True))
        x = v1.placeholder(tf.float32, [None, 64])
        y = v1.placeholder(tf.int64, [None])
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(net(x), 1), y), tf.float32))
        # ---- end of the model ----
        global_step = v1.train.get_or_create_global_step()
        optimizer = v1.train.SyncReplicasOptimizer(
            v1.train.GradientDescentOptimizer(LR), replicas_to_aggregate=replicas,
            total_num_replicas=replicas)
        train_op = optimizer.minimize(loss, global_step=global_step)
    hooks = [optimizer.make_session_run_hook(is_chief), v1.train.StopAtStepHook(last_step=STEPS)]
    with v1.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief,
                                           checkpoint_dir="/tmp/port-checkpoints",
                                           hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train_op)
        if is_chief:
            print("accuracy", sess.run(accuracy, {x: x_test, y: y_test}))


if __name__ == "__main__":
    main()
