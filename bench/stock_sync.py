"""Stock TensorFlow baseline: SyncReplicasOptimizer training written the usual way.

One process per task (``ps``, ``chief``, ``worker``), cluster and task from the standard
``TF_CONFIG``. This is what the benchmarks compare the runtime against, so it deliberately
uses nothing from ``syncreplicas_runtime``: ``tf.compat.v1`` graph mode,
``replica_device_setter``, ``SyncReplicasOptimizer`` with ``make_session_run_hook``,
``MonitoredTrainingSession`` with its defaults, and ``server.join()`` on the parameter
server (which therefore never exits; the harness kills it).

The model is the runtime's built-in ``linear`` model function itself
(``syncreplicas_runtime.models.linear:build``: placeholders, variables, loss and a
deterministic ``feed(step)``), so both sides do exactly the same math per step; it is a
plain model-building function and brings no runtime machinery with it.

Every line on stdout is one JSON object with a wall-clock ``t`` so the harness can compute
time to first step and steps/s: ``start``, ``imported``, ``server_up``, ``session_ready``,
``step`` (after every local step, with the global step read after it in the same run), ``done``,
``error``.
"""

from __future__ import annotations

import argparse
import os
import time

from _stockrun import emit, run, start_server

T_START = time.time()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas-to-aggregate", type=int, required=True)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument(
        "--variables", type=int, default=2, help="the linear model's parameters in this many"
    )
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="", help="'' = no checkpoints")
    parser.add_argument("--checkpoint-every-steps", type=int, default=100)
    parser.add_argument(
        "--slow-ms", type=float, default=0.0, help="sleep this long after every local step"
    )
    parser.add_argument(
        "--device-filters",
        action="store_true",
        help="tuned variant: restrict each session to the PS and its own task",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    emit("start", t_process=T_START, pid=os.getpid())
    import tensorflow as tf  # imported here so the harness can time the import
    from syncreplicas_runtime.models import linear

    server, cluster, job, index, total = start_server()  # a PS stays in there
    is_chief = job == "chief"
    replica_id = index + (0 if is_chief else 1)
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        with v1.device(
            v1.train.replica_device_setter(
                worker_device=f"/job:{job}/task:{index}", cluster=cluster
            )
        ):
            global_step = v1.train.get_or_create_global_step()
            model = linear.build(
                replica=replica_id,
                num_replicas=total,
                batch_size=args.batch_size,
                seed=args.seed,
                dim=args.dim,
                variables=args.variables,
            )
            loss, feed = model["loss"], model["feed"]
            opt = v1.train.SyncReplicasOptimizer(
                v1.train.GradientDescentOptimizer(args.learning_rate),
                replicas_to_aggregate=args.replicas_to_aggregate,
                total_num_replicas=total,
            )
            train_op = opt.minimize(loss, global_step=global_step)
            # The global step once this replica's step is done (read after the token), so
            # logged steps are monotonic in time, as a progress bar would show them.
            with v1.control_dependencies([train_op]):
                step_after = global_step.read_value()
        hooks = [
            opt.make_session_run_hook(is_chief),
            v1.train.StopAtStepHook(last_step=args.max_steps),
        ]
        config = None
        if args.device_filters:
            config = v1.ConfigProto(device_filters=["/job:ps", f"/job:{job}/task:{index}"])
        with v1.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=is_chief,
            checkpoint_dir=args.checkpoint_dir or None,
            save_checkpoint_steps=args.checkpoint_every_steps if args.checkpoint_dir else None,
            save_checkpoint_secs=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            hooks=hooks,
            config=config,
        ) as sess:
            emit("session_ready", job=job, index=index)
            local_step, step_value = 0, 0
            while not sess.should_stop():
                # The usual loop: feed the batch of the last global step this replica saw.
                step_value, loss_value = sess.run(
                    [step_after, loss], feed_dict=feed(int(step_value))
                )
                local_step += 1
                emit("step", g=int(step_value), l=local_step, loss=float(loss_value))
                if args.slow_ms:
                    time.sleep(args.slow_ms / 1000.0)
    emit("done", local_steps=local_step)
    return 0


if __name__ == "__main__":
    run(main)
