"""One training step and its metrics, and the wait for a phase: shared by chief and workers."""

from __future__ import annotations

import time
from typing import Any

from ..foundation import exitcodes
from ..foundation.phases import Phase
from ..graph.training import TrainingGraph
from ..process.context import Context
from ..process.exits import Exit
from ..sync.protocol import POLL, REJOIN_GATE_SECONDS, SyncProtocol

# How often a replica waiting for the update of its earlier gradient looks at the epoch.
EPOCH_LOOK_SECONDS = 0.5


class EpochEnded(Exception):
    """The current sync epoch ended under this replica (reason in args)."""


class Leaving(Exception):
    """A worker of an elastic job was asked to leave (SIGTERM: the job is scaled down)."""


def check_leaving(ctx: Context) -> None:
    if ctx.leaving.is_set():
        raise Leaving()


class StepLoop:
    """Runs training steps of one replica in one epoch and records their metrics."""

    def __init__(self, ctx: Context, sess: Any, training: TrainingGraph, tag: int) -> None:
        self.ctx, self.sess, self.training, self.tag = ctx, sess, training, tag
        self.window_start = time.monotonic()
        self.window_step = tag
        self.last_eval = tag
        self.joined = False
        # This process's own gradients, and those of them dropped as stale (the summaries').
        self.pushed = self.stale = 0
        # The last step's feed and fetched values (the chief's summaries run with them).
        self.feed: Any = None
        self.out: dict[str, Any] = {}

    def join(self) -> None:
        """Before this process's first push in the epoch: if an earlier process of this
        replica already pushed for the current global step (it died waiting for its token,
        or, partitioned and fenced off, still waits for it), that gradient counts: wait for
        that update instead of pushing the same step again (which would put this replica in
        one update twice). Then drop the tokens its queue gathered while it was away."""
        self.joined = True
        seen = self.sess.run(self.training.already_pushed)
        pushed = int(seen["pushed"])
        if pushed == int(seen["global_step"]):
            self.ctx.log(f"this replica's gradient for global step {pushed} was pushed "
                         "before its restart; waiting for that update")
            self.wait_handed_out(pushed)
        dropped = int(self.sess.run(self.training.drain))
        if dropped:
            self.ctx.log(f"dropped {dropped} token(s) its queue gathered while it was away "
                         f"(global step {int(seen['global_step'])})")
        if pushed == int(seen["global_step"]):
            self.tag = int(self.sess.run(self.training.skip)["gs_after"])
            self.ctx.progress()

    def wait_handed_out(self, step: int) -> None:
        """Until PS 0 handed out the tokens of the update of ``step`` (the watchdog bounds
        it: that update needs the other replicas, as a take of its token would); EpochEnded
        when a new sync epoch is opened meanwhile: that update will never be made."""
        protocol = self.ctx.protocol
        look_at = time.monotonic() + EPOCH_LOOK_SECONDS
        while int(self.sess.run(self.training.handed_out)) <= step:
            check_leaving(self.ctx)
            if protocol is not None and time.monotonic() >= look_at:
                look_at = time.monotonic() + EPOCH_LOOK_SECONDS
                if protocol.state().epoch != self.training.epoch:
                    raise EpochEnded("a new sync epoch was opened")
            time.sleep(POLL)

    def debug_delay(self) -> float:
        """Sleep the debug step delay; one read from a file is cut short when it changes."""
        start = time.monotonic()
        if self.ctx.step_delays is not None:  # a fresh draw for this step
            time.sleep(self.ctx.step_delays.next())
            return time.monotonic() - start
        while (elapsed := time.monotonic() - start) < (delay := self.ctx.current_step_delay()):
            time.sleep(min(0.05, delay - elapsed))
        return time.monotonic() - start

    def step(self) -> int:
        """One training step; returns the global step after it. Raises TF errors."""
        ctx, m = self.ctx, self.ctx.metrics
        check_leaving(ctx)
        if not self.joined:
            self.join()
        model = self.training.model
        feed = model.feed_for(self.sess, self.tag)
        delay = self.debug_delay()
        t0 = time.monotonic()
        out = self.sess.run(self.training.fetches, feed_dict=feed)
        took = time.monotonic() - t0
        self.feed, self.out = feed, out
        staleness = max(0, int(out["gs_at_push"]) - self.tag)
        m.gradients_pushed.inc()
        m.staleness.observe(staleness)
        self.pushed += 1
        if staleness > 0:
            m.stale_dropped.inc()
            self.stale += 1
        m.tokens_consumed.inc()
        m.token_wait.observe(max(0.0, float(out["t_token"] - out["t_pushed"])))
        m.step_duration.observe(took + delay)
        m.examples.inc(ctx.cfg.training.batch_size)
        m.loss.set(float(out["loss"]))
        m.learning_rate.set(float(out["learning_rate"]))
        ctx.local_steps += 1
        if ctx.local_steps == 1:
            ctx.log(f"first step done at unix time {time.time():.3f} "
                    f"(global step {out['gs_after']})")
        m.local_step.set(ctx.local_steps)
        self.tag = int(out["gs_after"])
        m.global_step.set(self.tag)
        ctx.progress()
        every = ctx.cfg.training.log_every_steps
        if self.tag // every > self.window_step // every:
            now = time.monotonic()
            rate = (self.tag - self.window_step) / max(now - self.window_start, 1e-9)
            ctx.log(f"global_step={self.tag} local_step={ctx.local_steps} "
                    f"steps/s={rate:.1f} loss={float(out['loss']):.6g} "
                    f"lr={float(out['learning_rate']):.6g}")
            self.window_start, self.window_step = now, self.tag
        return self.tag


def wait_for_phase(ctx: Context, protocol: SyncProtocol, epoch: int, want: Phase) -> None:
    """Block until ``epoch`` reaches ``want``; EpochEnded if the epoch changes.

    The gate may legitimately stay closed for up to startupTimeoutSeconds (a fresh job
    waits for every replica), so this wait has its own bound instead of the watchdog's.
    """
    t = ctx.cfg.training
    limit = max(t.startup_timeout_seconds, t.chief_lost_timeout_seconds) + REJOIN_GATE_SECONDS
    deadline = time.monotonic() + limit
    ctx.watchdog_armed = False
    while True:
        check_leaving(ctx)
        state = protocol.state()
        if state.phase == Phase.DONE:
            raise EpochEnded("done")
        if state.epoch != epoch:
            raise EpochEnded("a new sync epoch was opened")
        if state.phase >= want:
            ctx.progress()
            ctx.watchdog_armed = True
            return
        if time.monotonic() > deadline:
            raise Exit(exitcodes.RETRY, f"the start gate did not open within "
                       f"{limit:.0f}s")
        time.sleep(POLL)
