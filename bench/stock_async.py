"""Stock TensorFlow baseline: asynchronous between-graph training with parameter servers.

What a TF1 user ran before synchronous training: every replica applies its own gradient to
the variables on the parameter servers as soon as it has it (``replica_device_setter``, a
plain optimizer, no ``SyncReplicasOptimizer``), so a slow replica never holds the others up
and its gradients arrive stale. ``bench/accuracy.py`` compares it with the runtime's
synchronous training in time to a held-out accuracy.

The model is one of the runtime's built-in model functions (``--model``): ``digits`` (an MLP
fed by ``feed(step)``) or ``digits_cnn`` (Keras layers on a tf.data dataset, which this
script shards by replica, shuffles, repeats and batches as the runtime does), with its loss
and held-out accuracy, so both sides do the same math per step. ``--straggler`` slows this
replica as the runtime's debug step delay does (the same forms, the same seeded draws for
the same replica name: foundation/stepdelay.py).

The session is made the plain way (``SessionManager``: the chief initialises, the others
wait until the variables are), polling every 0.5 s instead of the 30 s that
``MonitoredTrainingSession`` waits between checks: the comparison is of the algorithms, not
of that wait.

Every line on stdout is one JSON object with a wall-clock ``t``: ``imported``,
``server_up``, ``session_ready``, ``step`` (the global step after this replica's update),
``eval`` (the chief, each time the global step passes a multiple of ``--eval-every-steps``:
held-out accuracy), ``done``, ``error``.
"""

from __future__ import annotations

import argparse
import time

from _stockrun import emit, run, start_server


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=2000, help="global steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model", choices=("digits", "digits_cnn"), default="digits")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--filters", type=int, default=16, help="digits_cnn")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every-steps", type=int, default=20)
    parser.add_argument("--straggler", default="0",
                        help="sleep before every local step: MS or pareto:MS:ALPHA")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import tensorflow as tf
    from syncreplicas_runtime.foundation.stepdelay import ParetoDelays, parse_step_delay
    from syncreplicas_runtime.models import digits, digits_cnn

    server, cluster, job, index, total = start_server()  # a PS stays in there
    is_chief = job == "chief"
    replica = index + (0 if is_chief else 1)
    delay = parse_step_delay(args.straggler)
    draws = ParetoDelays(*delay.pareto, f"{job}-{index}") if delay.pareto else None

    def sleep() -> None:
        seconds = draws.next() if draws is not None else delay.ms / 1000.0
        if seconds > 0:
            time.sleep(seconds)

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    with tf.Graph().as_default():
        setter = v1.train.replica_device_setter(worker_device=f"/job:{job}/task:{index}",
                                                cluster=cluster)  # fmt: skip
        with v1.device(setter):
            global_step = v1.train.get_or_create_global_step()
            if args.model == "digits":
                model = digits.build(replica=replica, num_replicas=total,
                                     batch_size=args.batch_size, seed=args.seed,
                                     hidden=args.hidden)  # fmt: skip
            else:
                model = digits_cnn.build(replica=replica, num_replicas=total,
                                         batch_size=args.batch_size, seed=args.seed,
                                         filters=args.filters, hidden=args.hidden)  # fmt: skip
                data = (model["dataset"].shard(total, replica)
                        .shuffle(2048, seed=args.seed + replica).repeat()
                        .batch(args.batch_size))  # fmt: skip
                batch = v1.data.make_one_shot_iterator(data).get_next()
                model = {**model, "loss": model["loss"](batch), "feed": lambda _: None}
            rate = args.learning_rate
            opt = (v1.train.GradientDescentOptimizer(rate) if args.optimizer == "sgd"
                   else v1.train.AdamOptimizer(rate))  # fmt: skip
            train_op = opt.minimize(model["loss"], global_step=global_step)
            with v1.control_dependencies([train_op]):
                step_after = global_step.read_value()
            init = v1.global_variables_initializer()
            ready = v1.report_uninitialized_variables()
        manager = v1.train.SessionManager(ready_op=ready, recovery_wait_secs=0.5)
        config = v1.ConfigProto(device_filters=["/job:ps", f"/job:{job}/task:{index}"])
        if is_chief:
            sess = manager.prepare_session(server.target, init_op=init, config=config)
        else:
            sess = manager.wait_for_session(server.target, config=config)
        emit("session_ready", job=job, index=index)
        accuracy, eval_feed = model["eval"]["accuracy"], model["eval_feed"]
        local, g, evaluated = 0, 0, 0
        while g < args.max_steps:
            sleep()
            g = int(sess.run(step_after, feed_dict=model["feed"](local)))
            local += 1
            emit("step", g=g, l=local)
            if is_chief and g // args.eval_every_steps > evaluated:
                evaluated = g // args.eval_every_steps
                emit("eval", g=g, accuracy=float(sess.run(accuracy, feed_dict=eval_feed)))
    emit("done", local_steps=local)
    return 0


if __name__ == "__main__":
    run(main)
