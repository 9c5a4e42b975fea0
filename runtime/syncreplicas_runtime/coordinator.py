"""The sync loop with elastic R: aggregate, update and hand out tokens; lower R while
replicas are lost and raise it again when they return.

Liveness comes from the heartbeats every push stamps on PS 0 (PS 0's clock, in the step's
own run). A replica is live when it pushed since the last update (it waits on this one) or
within the silence limit: ``max(SILENCE_FLOOR_SECONDS, SILENCE_UPDATES x`` the median
interval of the last updates``)``, so a slow model is not declared dead while it computes.
Live replicas are counted in gradients: each brings its share of ``max(replicas, R)``
(``graph.tokens_per_replica``), 1 when there are backups. The update then aggregates

    R_eff = clamp(live gradients, minReplicasToAggregate, replicasToAggregate)

An update is started only once every accumulator holds R_eff gradients, so no take ever
blocks with a stale count or is cancelled half-way (graph.py). Between updates the loop
waits on the epoch's push queue, TICK_SECONDS at most, so a lost replica is noticed while
every other one is blocked.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from .context import Context
from .graph import TrainingGraph, tokens_per_replica

TICK_SECONDS = 0.25
SILENCE_FLOOR_SECONDS = 2.0
SILENCE_UPDATES = 20
INTERVALS_KEPT = 50


def live_replicas(beats: Sequence[float], now: float, last_update_at: float,
                  silence: float) -> list[bool]:
    """Per replica: pushed since the last update, or within ``silence`` seconds."""
    return [b >= last_update_at or now - b <= silence for b in beats]


def effective_r(live: Sequence[bool], shares: Sequence[int], minimum: int, r: int) -> int:
    """R_eff = clamp(gradients the live replicas bring per update, minimum, R)."""
    brings = sum(share for alive, share in zip(live, shares, strict=True) if alive)
    return max(minimum, min(r, brings))


def silence_limit(intervals: Sequence[float]) -> float:
    """How long a replica may stay silent before it counts as lost."""
    if not intervals:
        return SILENCE_FLOOR_SECONDS
    return max(SILENCE_FLOOR_SECONDS, SILENCE_UPDATES * statistics.median(intervals))


class Coordinator:
    """Runs the sync loop of one epoch on ``sess`` until ``stop`` is set or the epoch ends."""

    def __init__(self, ctx: Context, sess: Any, training: TrainingGraph) -> None:
        cfg = ctx.cfg
        self.ctx, self.sess, self.training = ctx, sess, training
        self.r = cfg.replicas_to_aggregate
        self.minimum = cfg.min_replicas_to_aggregate
        self.shares = [base for base, _ in tokens_per_replica(
            cfg.total_replicas, cfg.replicas_to_aggregate, cfg.initial_tokens)]
        self.intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self.r_eff = self.r
        self.last_update_at = 0.0
        self.failure: str | None = None  # why the loop stopped before its epoch ended

    def open(self) -> None:
        """R back to replicasToAggregate and every heartbeat fresh: run at the gate."""
        e = self.training.elastic
        self.last_update_at = float(self.sess.run([e.init, e.read["now"]])[1])
        self.r_eff = self.r
        m = self.ctx.metrics
        m.replicas_to_aggregate.set(self.r)
        m.live_replicas.set(self.ctx.cfg.total_replicas)

    def run(self, stop: threading.Event) -> None:
        """Aggregate, update and hand out tokens until the epoch ends.

        This replaces the optimizer's queue runner, which closes the shared token queue
        when its coordinator stops and so ends every worker as if training had finished.
        """
        e = self.training.elastic
        wait = tf.compat.v1.RunOptions(timeout_in_ms=int(TICK_SECONDS * 1000))
        while not stop.is_set():
            try:
                try:
                    state = self.sess.run(e.wait_and_read, options=wait)
                except tf.errors.DeadlineExceededError:
                    state = self.sess.run(e.read)  # nobody pushed: look at who is silent
                if stop.is_set():
                    return
                self.adjust(state)
                if int(min(state["counts"])) >= self.r_eff:
                    _, at = self.sess.run([self.training.sync_op, e.updated_at])
                    self.intervals.append(max(0.0, float(at) - self.last_update_at))
                    self.last_update_at = float(at)
            except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
                return  # the epoch's queues were closed
            except tf.errors.OpError as err:
                if not stop.is_set():
                    self.failure = f"{type(err).__name__}: {err.message.splitlines()[0]}"
                    self.ctx.log(f"sync loop stopped: {self.failure}")
                    self.wake_replicas()
                return

    def wake_replicas(self) -> None:
        """After the loop failed (a PS lost mid-update): close the epoch's token queues.

        A replica whose push had landed before the loss waits for a token that this loop
        will never hand out; closing wakes it (the chief opens a new epoch, workers
        rejoin). If PS 0 itself is gone the close fails too, and so do their waits.
        """
        opts = tf.compat.v1.RunOptions(timeout_in_ms=5000)
        with contextlib.suppress(tf.errors.OpError):
            self.sess.run(self.training.close_tokens_op, options=opts)

    def adjust(self, state: dict[str, Any]) -> None:
        """Set R for the next update from who is live (one small run when it changes)."""
        silence = silence_limit(self.intervals)
        live = live_replicas([float(b) for b in state["beats"]], float(state["now"]),
                             self.last_update_at, silence)
        r_eff = effective_r(live, self.shares, self.minimum, self.r)
        m = self.ctx.metrics
        m.live_replicas.set(sum(live))
        if r_eff != int(state["r"]):
            e = self.training.elastic
            self.sess.run(e.set_r, {e.r_value: r_eff})
            lost = [r for r, alive in enumerate(live) if not alive]
            self.ctx.log(f"elastic R: {sum(live)} of {len(live)} replicas live "
                         f"(lost: {lost}; silence limit {silence:.1f}s); each update now "
                         f"aggregates {r_eff} gradients at unix time {time.time():.3f}")
        self.r_eff = r_eff
        m.replicas_to_aggregate.set(r_eff)
