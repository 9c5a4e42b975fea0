"""What the stock TensorFlow baselines (stock_sync.py, stock_async.py) share: one JSON object
per line on stdout, and a failure said as a line before it is raised."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def emit(event: str, **fields: object) -> None:
    """One event, with the wall clock as ``t``."""
    print(json.dumps({"t": time.time(), "event": event, **fields}), flush=True)


def run(main: Callable[[], int]) -> None:
    """Exit with ``main()``'s code; an exception is emitted first (a benchmark row must say
    why it has no numbers)."""
    try:
        sys.exit(main())
    except Exception as err:
        emit("error", kind=type(err).__name__, message=str(err)[:500])
        raise


def start_server() -> tuple[Any, Any, str, int, int]:
    """This process's task of TF_CONFIG as a gRPC server: (server, cluster spec, job, index,
    number of training replicas). A PS serves until it is killed, as stock PS do: for it
    this never returns."""
    import tensorflow as tf

    emit("imported")
    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job, index = tf_config["task"]["type"], int(tf_config["task"]["index"])
    server = tf.distribute.Server(cluster, job_name=job, task_index=index)
    emit("server_up", job=job, index=index)
    if job == "ps":
        server.join()
    total = len(tf_config["cluster"].get("chief", [])) + len(tf_config["cluster"].get("worker", []))
    return server, cluster, job, index, total
