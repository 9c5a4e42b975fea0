"""The parameter server: serve variables and sync state until training ended; PS 0 also
runs the sync epochs (coordinator.py) in a thread."""

from __future__ import annotations

import signal
import threading
import time

import tensorflow as tf

from ..foundation import exitcodes
from ..foundation.phases import ReplicaPhase
from ..process.context import Context
from ..process.sessions import open_session
from ..sync.protocol import ps_done_queue
from .coordinator import serve_sync_epochs
from .handover import hand_over_at_sigterm

v1 = tf.compat.v1


def run_ps(ctx: Context) -> int:
    """Block on this PS's "done" queue (instead of ``server.join()``, which never returns)."""
    cfg = ctx.cfg
    signal.signal(signal.SIGTERM, lambda *_: hand_over_at_sigterm(ctx))
    graph = tf.Graph()
    with graph.as_default():
        wait_done = ps_done_queue(cfg.index).dequeue()
    sess = open_session(cfg, ctx.server.target, graph)
    ctx.readiness.ready = True
    ctx.metrics.ready.set(1)
    ctx.set_phase(ReplicaPhase.COORDINATING if cfg.index == 0 else ReplicaPhase.SERVING)
    ctx.log(f"serving on {cfg.address}")
    if cfg.index == 0:
        ctx.metrics.add_coordinator()
        ctx.metrics.spec_replicas_to_aggregate.set(cfg.replicas_to_aggregate)
        threading.Thread(target=serve_sync_epochs, args=(ctx,), name="sync-epochs",
                         daemon=True).start()
    # The wait runs in a thread of its own: a main thread blocked inside TensorFlow would
    # never run the SIGTERM handler, and Kubernetes would wait out the pod's whole grace
    # period (30 s) before killing a deleted PS.
    done = threading.Event()

    def wait_for_done() -> None:
        sess.run(wait_done)
        done.set()

    threading.Thread(target=wait_for_done, name="done-queue", daemon=True).start()
    while not done.wait(0.5):
        pass
    # Let the release call and the replicas' last reads complete before going away.
    time.sleep(1.0)
    ctx.log("the chief reported training finished")
    return exitcodes.OK
