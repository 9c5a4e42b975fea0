"""The packing cells' model trained alone: one process, no PS, no sync, plain SGD.

A reference for the packing benchmark: how much a step of the model itself slows down when
the same parameters are held in more variables (more matmuls, reads and updates in the
graph), with no transport at all. bench/runtime.py runs it in a subprocess (so TensorFlow
is imported there, not in the harness) and prints its steps/s next to the cluster cells.

    .venv/bin/python bench/_modelalone.py --variables 2,64,256 --dim 16384 --batch-size 2

Prints one JSON object: {"steps_per_s": {"2": [..], ...}} with one value per repeat; the
variable counts are timed in turn within each repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build(variables: int, dim: int, batch_size: int) -> tuple[Any, Any, Any]:
    """(session, train op, feed function) of the linear model in its own graph."""
    import tensorflow as tf
    from syncreplicas_runtime.models import linear

    graph = tf.Graph()
    with graph.as_default():
        model = linear.build(replica=0, num_replicas=1, batch_size=batch_size, seed=7,
                             dim=dim, variables=variables)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(model["loss"])
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=1, inter_op_parallelism_threads=1))
    sess.run(init)
    return sess, train, model["feed"]


def rate(sess: Any, train: Any, feed: Any, seconds: float) -> float:
    """Steps/s over ``seconds`` (after a few warm-up steps)."""
    for step in range(5):
        sess.run(train, feed_dict=feed(step))
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(train, feed_dict=feed(steps))
        steps += 1
    return steps / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variables", default="2,64,256")
    p.add_argument("--dim", type=int, default=16384)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    opts = p.parse_args(argv)
    counts = [int(n) for n in opts.variables.split(",")]
    built = {n: build(n, opts.dim, opts.batch_size) for n in counts}
    out: dict[str, list[float]] = {str(n): [] for n in counts}
    for _ in range(opts.repeats):
        for n in counts:
            out[str(n)].append(rate(*built[n], opts.seconds))
    print(json.dumps({"steps_per_s": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
