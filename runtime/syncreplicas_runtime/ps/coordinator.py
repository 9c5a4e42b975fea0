"""The sync epochs, run where the sync state lives (a thread of PS task 0): open an epoch,
open its start gate, run the sync loop with elastic R (aggregate, update and hand out
tokens; lower R while replicas are lost and raise it again when they return), end training.

PS 0 holds the token queues, the accumulators and the protocol variables, and its loss loses
them anyway: running the loop here makes a chief's loss cost only the chief's gradients.
An epoch is opened when PS 0 starts and when another PS loses its variables; the chief
keeps, restores or initializes the variables (phase RESETTING -> GATHERING), PS 0 waits for
the replicas to join, opens the gate (RUNNING) and runs the loop until maxSteps, when it
waits for the chief's last checkpoint, ends the epoch (DONE) and releases every PS.

Liveness comes from the heartbeats every push stamps on PS 0 (PS 0's clock, in the step's
own run). A replica is live when it pushed since the last update (it waits on this one) or
within the silence limit: ``max(SILENCE_FLOOR_SECONDS, SILENCE_UPDATES x`` the median
interval of the last updates``)``, so a slow model is not declared dead while it computes.
Live replicas are counted in gradients: each brings its share of ``max(replicas, R)``
(``graph.training.tokens_per_replica``), 1 when there are backups. The update then aggregates

    R_eff = clamp(live gradients, minReplicasToAggregate, replicasToAggregate)

An update is started only once every accumulator holds R_eff gradients, so no take ever
blocks with a stale count or is cancelled half-way (graph/training.py). Between updates the loop
waits on the epoch's push queue, TICK_SECONDS at most, so a lost replica is noticed while
every other one is blocked.

A loop that gives no sign of life for LOOP_STALL_SECONDS outside an update (its runs between
updates are reads of PS 0 and a wait bounded by TICK_SECONDS) is stuck in a run that does not
return: the epoch's watch logs where it waits and ends the epoch, and the job goes on in a new
one instead of waiting for the operator's stall timeout.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from ..foundation import exitcodes
from ..foundation.config import STALL_AT_ENV, UPDATES_FILE_ENV
from ..foundation.laps import Laps
from ..foundation.phases import Phase
from ..graph.seqlock import settle_seqlock
from ..graph.training import TrainingGraph, build_epoch_graph, tokens_per_replica
from ..process.context import Context
from ..process.exits import Exit
from ..process.sessions import close_quietly, coordinator_session_config, open_session
from ..sync.handover import HOLD_LIMIT_SECONDS
from ..sync.protocol import (
    PEER_ERRORS,
    POLL,
    REJOIN_GATE_SECONDS,
    SyncProtocol,
    members,
    new_epoch_id,
    peer_error,
    unconfirmed,
)

TICK_SECONDS = 0.25
WATCH_SECONDS = 0.5
# The gate of an epoch opened on a running job (PS 0 restarted, or another PS lost its
# variables) opens once min(R, replicas) replicas have joined and the others had
# GATE_GRACE_SECONDS more, or after REJOIN_GATE_SECONDS in any case: a replica that is itself
# restarting joins the running epoch later.
GATE_GRACE_SECONDS = 1.0
FINISH_WAIT_SECONDS = 30.0
SILENCE_FLOOR_SECONDS = 2.0
SILENCE_UPDATES = 20
INTERVALS_KEPT = 50
# The sync loop's silence, outside an update, after which its epoch ends (see above).
LOOP_STALL_SECONDS = 15.0


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

    def __init__(self, ctx: Context, sess: Any, training: TrainingGraph,
                 protocol: SyncProtocol, stall_at: int | None = None) -> None:
        cfg = ctx.cfg
        self.ctx, self.sess, self.training, self.protocol = ctx, sess, training, protocol
        self.held_since: float | None = None  # holding the updates for a handover since
        self.r = cfg.replicas_to_aggregate
        self.minimum = cfg.min_replicas_to_aggregate
        self.shares = [base for base, _ in tokens_per_replica(
            cfg.total_replicas, cfg.replicas_to_aggregate, cfg.initial_tokens)]
        self.intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self.r_eff = self.r
        self.last_update_at = 0.0
        self.failure: str | None = None  # why the loop stopped before its epoch ended
        self.beat = time.monotonic()  # the loop's last sign of life
        self.updating = False         # in an update's run: its length is the model's
        self.stall_at = stall_at  # the test hook (foundation/config.py's STALL_AT_ENV)

    def open(self, joined: int) -> None:
        """R back to replicasToAggregate and every heartbeat fresh (an elastic job's: every
        member's, the empty slots' silent): run at the gate, with ``joined`` replicas."""
        e = self.training.elastic
        self.last_update_at = float(self.sess.run([e.init, e.read["now"]])[1])
        self.r_eff = self.r
        m = self.ctx.metrics
        m.replicas_to_aggregate.set(self.r)
        m.live_replicas.set(joined)

    def run(self, stop: threading.Event) -> None:
        """Aggregate, update and hand out tokens until the epoch ends.

        This replaces the optimizer's queue runner, which closes the shared token queue
        when its coordinator stops and so ends every worker as if training had finished.
        """
        e = self.training.elastic
        wait = tf.compat.v1.RunOptions(timeout_in_ms=int(TICK_SECONDS * 1000))
        path = os.environ.get(UPDATES_FILE_ENV)
        with open(path, "a", buffering=1) if path else contextlib.nullcontext() as updates:
            self._run(stop, e, wait, updates)

    def stalled_for(self) -> float:
        """Seconds since the loop's last sign of life outside an update (0 in one)."""
        return 0.0 if self.updating else time.monotonic() - self.beat

    def _run(self, stop: threading.Event, e: Any, wait: Any, updates: Any) -> None:
        while not stop.is_set():
            self.beat = time.monotonic()
            try:
                try:
                    state = self.sess.run(e.wait_and_read, options=wait)
                except tf.errors.DeadlineExceededError:
                    state = self.sess.run(e.read)  # nobody pushed: look at who is silent
                if stop.is_set():
                    return
                self.adjust(state)
                if self.holding(bool(state["hold"]), int(state["global_step"])):
                    continue
                if self.stall_at is not None and int(state["global_step"]) >= self.stall_at:
                    stop.wait()  # the test hook: a run that never returns, until the epoch ends
                    return
                if int(min(state["counts"])) >= self.r_eff:
                    self.updating = True
                    try:
                        _, at = self.sess.run([self.training.sync_op, e.updated_at])
                    finally:
                        self.beat, self.updating = time.monotonic(), False
                    self.intervals.append(max(0.0, float(at) - self.last_update_at))
                    self.last_update_at = float(at)
                    if updates is not None:
                        updates.write(f"{int(state['global_step']) + 1} {float(at):.6f} "
                                      f"{self.r_eff}\n")
            except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
                return  # the epoch's queues were closed
            except tf.errors.OpError as err:
                if not stop.is_set():
                    self.failure = f"{type(err).__name__}: {err.message.splitlines()[0]}"
                    self.ctx.log(f"sync loop stopped: {self.failure}")
                    self.wake_replicas()
                return

    def holding(self, asked: bool, step: int) -> bool:
        """Hold the updates while a handover is asked (sync/handover.py): the loop is between
        two updates here, so every variable is at ``step``; go on when nobody asks any more,
        or after HOLD_LIMIT_SECONDS whatever was asked."""
        now, since = time.monotonic(), self.held_since
        if asked and since is None:
            self.held_since = now
            self.protocol.hold_updates(step)
            self.ctx.log(f"handover: updates held at global step {step} "
                         f"at unix time {time.time():.3f}")
            return True
        if since is None:
            return False
        if asked and now - since < HOLD_LIMIT_SECONDS:
            return True
        if asked:  # a requester that never went away: nothing is worth a longer pause
            self.protocol.clear_handover()
            self.ctx.log(f"handover: nobody went away within {HOLD_LIMIT_SECONDS:.0f}s")
        else:
            self.protocol.hold_updates(-1)
        self.ctx.log(f"handover: updates go on from global step {step} after {now - since:.2f}s")
        self.held_since = None
        return False

    def wake_replicas(self) -> None:
        """After the loop failed (a PS lost mid-update): close the epoch's token queues.

        A replica whose push had landed before the loss waits for a token that this loop
        will never hand out; closing wakes it at once instead of at the next epoch
        (watch_epoch notices the loop is gone and opens one).
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
                         f"aggregates {r_eff} gradients, from global step "
                         f"{int(state['global_step'])} at unix time {time.time():.3f}")
        self.r_eff = r_eff
        m.replicas_to_aggregate.set(r_eff)


def serve_sync_epochs(ctx: Context) -> None:
    """PS 0's coordinator thread: sync epochs until training ends, then release every PS.

    Anything unexpected ends the PS process (exit 75): its restart opens a new epoch, which
    is better than replicas waiting on a loop that no longer runs.
    """
    try:
        run_sync_epochs(ctx)
    except Exit as err:
        ctx.exit_now(err.code, err.reason)
    except Exception as err:  # the process must not outlive its sync loop
        ctx.exit_now(exitcodes.RETRY, f"the sync loop failed: {type(err).__name__}: "
                     f"{str(err).splitlines()[0] if str(err) else ''}")


def run_sync_epochs(ctx: Context) -> None:
    cfg = ctx.cfg
    protocol = SyncProtocol(cfg, ctx.server.target, config=coordinator_session_config())
    try:
        protocol.wait_for_ps(time.monotonic() + cfg.training.startup_timeout_seconds)
    except PEER_ERRORS as err:
        raise Exit(exitcodes.UNREACHABLE, f"PS not reachable within "
                   f"{cfg.training.startup_timeout_seconds:.0f}s: {type(err).__name__}") from err
    first = True
    while True:
        try:
            result = sync_epoch(ctx, protocol, first)
        except PEER_ERRORS as err:
            result = f"lost a PS ({peer_error(err)})"
        if result == "done":
            return
        first = False
        ctx.log(f"sync epoch ended: {result}; opening a new one")
        protocol.reopen()
        try:
            protocol.wait_for_ps(time.monotonic() + cfg.training.chief_lost_timeout_seconds)
        except PEER_ERRORS as err:
            raise Exit(exitcodes.RETRY, f"a PS stayed unreachable for "
                       f"{cfg.training.chief_lost_timeout_seconds:.0f}s") from err


def sync_epoch(ctx: Context, protocol: SyncProtocol, first: bool) -> str:
    """Open a sync epoch, run it; returns "done" or why it ended."""
    cfg = ctx.cfg
    training = build_epoch_graph(ctx, new_epoch_id())
    epoch = training.epoch
    state = protocol.state()
    protocol.init_if_needed()
    # The new id and RESETTING in one run, before waking the last epoch's replicas: a
    # replica that wakes up finds the epoch to join.
    protocol.open_epoch(epoch)
    if state.initialized and state.epoch:
        protocol.close_token_queues(state.epoch)
    laps = Laps()
    ctx.log(f"sync epoch {epoch:x} opened; waiting for the chief to keep, restore or "
            "initialize the variables")
    sess = open_session(cfg, ctx.server.target, training.graph,
                        config=coordinator_session_config())
    stop = threading.Event()
    try:
        wait_for_variables(ctx, protocol, epoch)
        laps.lap("variables")
        sess.run(training.chief_init_op)
        if training.seqlock is not None:  # before the first update of the epoch
            settle_seqlock(sess, training.seqlock)
        step = int(sess.run(training.global_step))
        if step >= cfg.training.max_steps:
            return finish(ctx, protocol, sess, training, step)
        if first and step == 0:  # a new job: everyone, before the first update
            expected = range(cfg.initial_replicas)
            joined = wait_for_replicas(ctx, protocol, epoch, cfg.training.startup_timeout_seconds,
                                       expected, quorum=len(expected))
        else:
            # An elastic job waits for the members of the epoch before, not for empty slots.
            expected = (members(state.ready, state.epoch) or range(cfg.initial_replicas)
                        if cfg.elastic and state.initialized else range(cfg.total_replicas))
            joined = wait_for_replicas(ctx, protocol, epoch, REJOIN_GATE_SECONDS, expected,
                                       quorum=min(cfg.replicas_to_aggregate, len(expected)))
        laps.lap("replicas")
        stall_at = os.environ.get(STALL_AT_ENV, "")
        coordinator = Coordinator(ctx, sess, training, protocol,
                                  int(stall_at) if first and stall_at.isdigit() else None)
        coordinator.open(joined)
        sess.run(training.gate_tokens_op)
        loop = threading.Thread(target=coordinator.run, args=(stop,), name="sync", daemon=True)
        loop.start()
        threading.Thread(target=sample_loop, args=(ctx, sess, training, stop), name="sampler",
                         daemon=True).start()
        protocol.set_phase(Phase.RUNNING)
        laps.lap("gate")
        ctx.log(f"gate open: sync epoch {epoch:x} running from global step {step} "
                f"at unix time {time.time():.3f} ({laps} after it was opened)")
        return watch_epoch(ctx, protocol, sess, training, (loop, coordinator), stop)
    finally:
        stop.set()
        close_quietly(sess)


def wait_for_variables(ctx: Context, protocol: SyncProtocol, epoch: int) -> None:
    """Until the chief moved ``epoch`` to GATHERING (no bound: a chief is always restarted)."""
    next_note = time.monotonic() + 60.0
    while True:
        state = protocol.state()
        if state.epoch == epoch and state.phase >= Phase.GATHERING:
            return
        if time.monotonic() > next_note:
            ctx.log(f"sync epoch {epoch:x}: still waiting for the chief")
            next_note = time.monotonic() + 60.0
        time.sleep(POLL * 5)


def wait_for_replicas(ctx: Context, protocol: SyncProtocol, epoch: int, limit: float,
                      expected: Sequence[int], quorum: int) -> int:
    """The start gate: every ``expected`` replica joined ``epoch``, or ``quorum`` of them
    did and the rest had GATE_GRACE_SECONDS more, or ``limit`` seconds passed. Returns how
    many replicas joined (an elastic job's other slots may join too)."""
    deadline = time.monotonic() + limit
    quorum_at = None
    while True:
        state = protocol.state()
        joined = set(members(state.ready, epoch))  # a set: polled every 20 ms at any W
        missing = [r for r in expected if r not in joined]
        if not missing:
            return len(joined)
        if len(expected) - len(missing) >= quorum:
            quorum_at = quorum_at or time.monotonic()
            if time.monotonic() - quorum_at >= GATE_GRACE_SECONDS:
                ctx.log(f"gate: opening with {len(joined)} of {len(expected)} replicas; "
                        f"{missing} join when they come")
                return len(joined)
        if time.monotonic() > deadline:
            ctx.log(f"gate: opening without replicas {missing} after {limit:.0f}s "
                    "(they join the running epoch when they come)")
            return len(joined)
        time.sleep(POLL)


def watch_epoch(ctx: Context, protocol: SyncProtocol, sess: Any, training: TrainingGraph,
                sync: tuple[threading.Thread, Coordinator], stop: threading.Event) -> str:
    """While the epoch runs: end it at maxSteps, or when a PS or the loop is lost or stuck.
    Logs every change of an elastic job's members (workers joining and leaving)."""
    loop, coordinator = sync
    seen: list[int] | None = None
    while True:
        time.sleep(WATCH_SECONDS)
        state = protocol.state()  # PEER_ERRORS: a PS is gone (caller opens a new epoch)
        step = state.global_step or 0
        now = members(state.ready, state.epoch)
        if ctx.cfg.elastic and now != seen:
            if seen is not None:
                joined, left = sorted(set(now) - set(seen)), sorted(set(seen) - set(now))
                ctx.log(f"members: {len(now)} replicas {now} (joined: {joined}, left: "
                        f"{left}) at global step {step} at unix time {time.time():.3f}")
            seen = now
        if step >= ctx.cfg.training.max_steps:
            stop.set()
            return finish(ctx, protocol, sess, training, step)
        protocol.probe()
        # Bounded, like every run of this watch: it must see a stuck loop (DeadlineExceeded
        # ends the epoch, as a lost PS does).
        missing = sess.run(training.report_uninitialized, options=tf.compat.v1.RunOptions(
            timeout_in_ms=int(LOOP_STALL_SECONDS * 1000)))
        if len(missing):
            return (f"a PS lost its variables ({len(missing)} missing, e.g. "
                    f"{missing[0].decode()})")
        if not loop.is_alive():
            return "the sync loop stopped"
        if (silent := coordinator.stalled_for()) > LOOP_STALL_SECONDS:
            ctx.log(f"sync loop stuck: no sign of life for {silent:.0f}s outside an update, "
                    f"at global step {step}; it waits in:\n{stack_of(loop)}")
            return f"the sync loop was stuck for {silent:.0f}s"


def stack_of(thread: threading.Thread, frames: int = 10) -> str:
    """The innermost ``frames`` of a running thread's Python stack."""
    frame = sys._current_frames().get(thread.ident or 0)
    if frame is None:
        return "  (the thread is gone)"
    return "".join(traceback.format_stack(frame)[-frames:]).rstrip()


def sample_loop(ctx: Context, sess: Any, training: TrainingGraph, stop: threading.Event) -> None:
    """Token queue depth and pending gradients, sampled on their own clock (not per step)."""
    opts = tf.compat.v1.RunOptions(timeout_in_ms=2000)
    while not stop.wait(0.5):
        try:
            depth, pending = sess.run([training.depth, training.pending], options=opts)
        except tf.errors.OpError:
            continue
        ctx.metrics.token_queue_depth.set(int(depth))
        ctx.metrics.accumulator_pending.set(int(pending))


def finish(ctx: Context, protocol: SyncProtocol, sess: Any, training: TrainingGraph,
           global_step: int) -> str:
    """At maxSteps: wait for the chief's last checkpoint, end the epoch, wait for the
    replicas, release every PS."""
    ctx.log(f"global step {global_step} reached maxSteps; waiting for the chief's last "
            "checkpoint")
    while not protocol.state().done[0]:  # the chief comes back if it is down: no bound
        time.sleep(POLL * 5)
    protocol.set_phase(Phase.DONE)
    sess.run(training.close_tokens_op)  # wakes any replica still blocked on a token
    deadline = time.monotonic() + FINISH_WAIT_SECONDS
    while time.monotonic() < deadline:
        state = protocol.state()
        if not (waiting := unconfirmed(ctx.cfg.elastic, state)):
            break
        time.sleep(POLL * 5)
    else:
        ctx.log(f"finish: replicas {waiting} did not confirm within "
                f"{FINISH_WAIT_SECONDS:.0f}s")
    ctx.log(f"training finished at global step {global_step}; releasing the parameter servers")
    protocol.release_ps()
    return "done"
