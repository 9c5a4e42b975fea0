"""The parameter server: serve variables and sync state until the chief says training ended."""

from __future__ import annotations

import time

import tensorflow as tf

from . import exitcodes
from .context import Context
from .control import ps_done_queue
from .session import open_session

v1 = tf.compat.v1


def run_ps(ctx: Context) -> int:
    """Block on this PS's "done" queue (instead of ``server.join()``, which never returns)."""
    cfg = ctx.cfg
    graph = tf.Graph()
    with graph.as_default():
        wait_done = ps_done_queue(cfg.index).dequeue()
    sess = open_session(cfg, ctx.server.target, graph)
    ctx.readiness.ready = True
    ctx.metrics.ready.set(1)
    ctx.log(f"serving on {cfg.address}")
    sess.run(wait_done)
    # Let the chief's release call and the replicas' last reads complete before going away.
    time.sleep(1.0)
    ctx.log("the chief reported training finished")
    return exitcodes.OK
