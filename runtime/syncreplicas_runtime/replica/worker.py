"""A worker replica: join the current sync epoch, train, rejoin the next one, finish; in an
elastic job, leave it at SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import tensorflow as tf

from ..foundation import exitcodes
from ..foundation.laps import Laps
from ..foundation.phases import Phase, ReplicaPhase
from ..graph.training import build_epoch_graph
from ..process.context import Context, start_watchdog
from ..process.exits import Exit
from ..process.mainthread import run_off_main_thread
from ..process.sessions import close_quietly, open_session
from ..sync.fencing import start_fence_watch, superseded_by
from ..sync.protocol import PEER_ERRORS, SyncProtocol, peer_error
from .rejoin import LinkFailures, after_peer_error, wait_for_epoch
from .steploop import EpochEnded, Leaving, StepLoop, wait_for_phase

# A worker asked to leave ends its step first (at most one update); past this bound (the
# updates stalled) it leaves without it: its gradient, if pushed, still counts once.
LEAVE_WAIT_SECONDS = 5.0
# A leaving worker's two writes to PS 0 (not ready: SyncProtocol.run's 10 s; left: 5 s) end
# within this, answered or not.
TELL_PS_SECONDS = 11.0


def run_worker(ctx: Context) -> int:
    """Train until the end of the job; a worker of an elastic job leaves it at SIGTERM.

    The steps run in a thread: a main thread blocked in a session run (waiting for its
    token) would run no signal handler until the run returned, and a pod deleted then would
    wait out its whole grace period. So SIGTERM is seen at once, and every worker leaves the
    job: it ends the step in flight (at most one update), clears ``ready`` and goes silent,
    so that elastic R or a backup replica takes over at once rather than after the silence
    limit. A worker of an elastic job then exits 0 (scaled down), any other 143
    (``launch.plain``): it was stopped, and its pod is replaced."""
    def leave_if_asked(thread: threading.Thread) -> int | None:
        if not ctx.leaving.is_set():
            return None
        thread.join(LEAVE_WAIT_SECONDS)
        if not thread.is_alive():
            return None
        leave(ctx, ctx.protocol, ctx.session, ctx.graph,
              f"without a step boundary within {LEAVE_WAIT_SECONDS:.0f}s")
        return exitcodes.OK

    signal.signal(signal.SIGTERM, lambda *_: ctx.leaving.set())
    return run_off_main_thread(lambda: train_worker(ctx), leave_if_asked)


def leave(ctx: Context, protocol: SyncProtocol | None, sess: Any, training: Any,
          how: str = "after its step") -> None:
    """Leave the job at SIGTERM (an elastic job's worker: scaled down): no longer a member
    (the end of training does not wait for it), silent at once (the next update does not
    wait for its gradient: R adapts as for a lost replica, without the silence limit) and
    the sync loop woken. A gradient it pushed is in the accumulators and counts once; the
    token it leaves is dropped by the next worker in its slot (StepLoop.join). Best effort
    when PS 0 does not answer (it is leaving anyway), and bounded: PS 0 gone with the rest
    of the job (all of it stopped at once: suspended, evicted) can hold a run past its own
    timeout while gRPC reconnects, and the worker would wait out its pod's grace period. A
    fenced-off process still exits 77."""
    cfg = ctx.cfg
    told: list[BaseException | None] = []

    def tell() -> None:
        try:
            if protocol is not None:
                protocol.set_ready(cfg.replica_id, 0)
            if sess is not None and training is not None:
                opts = tf.compat.v1.RunOptions(timeout_in_ms=5000)
                sess.run(training.elastic.leave, options=opts)
            told.append(None)
        except BaseException as err:  # raised again below, unless PS 0 just did not answer
            told.append(err)

    teller = threading.Thread(target=tell, name="leave", daemon=True)
    teller.start()
    teller.join(TELL_PS_SECONDS)
    if not told:
        how += f"; PS 0 not told: no answer within {TELL_PS_SECONDS:.0f}s"
    elif (err := told[0]) is not None:
        if not isinstance(err, tf.errors.OpError) or superseded_by(err) is not None:
            raise err
        how += f"; PS 0 not told: {type(err).__name__}"
    ctx.left = True
    why = "scaled down" if cfg.elastic else "stopped"
    ctx.log(f"left the job ({how}; SIGTERM: {why}) at global step {ctx.seen_step()} "
            f"at unix time {time.time():.3f}")


def train_worker(ctx: Context) -> int:
    cfg = ctx.cfg
    protocol = reach_ps(ctx)
    ctx.protocol = protocol
    start_watchdog(ctx)
    left: int | None = None
    heals = False  # left may be joined again once healthy without this replica (rejoin.py)
    first = True
    links = LinkFailures()
    while True:
        limit = (cfg.training.startup_timeout_seconds if first
                 else cfg.training.chief_lost_timeout_seconds)
        laps = Laps()
        try:
            state = wait_for_epoch(ctx, protocol, left, limit, heals)
        except Leaving:
            leave(ctx, protocol, None, None, "between sync epochs")
            return exitcodes.OK
        if state.phase == Phase.DONE:
            return finish_worker(ctx, protocol)
        first = False
        epoch = state.epoch
        laps.lap("epoch")
        joined = time.monotonic()
        took = ""
        heals = False
        try:
            result = train_epoch(ctx, protocol, epoch, laps)
            left = epoch
        except EpochEnded as why:
            result, left = str(why), epoch
        except PEER_ERRORS as err:
            skip, took = after_peer_error(ctx, protocol, links, epoch, joined)
            left, heals = skip.epoch, skip.heals
            result = f"lost a peer ({peer_error(err)})"
        if result == "done":
            return finish_worker(ctx, protocol)
        if result == "left":
            return exitcodes.OK
        ctx.metrics.sync_resets.inc()
        ctx.set_ready(False)
        ctx.log(f"left sync epoch {epoch:x}: {result}; "
                f"{'rejoining it' if left is None else 'rejoining'}{took}")
        ctx.progress()


def reach_ps(ctx: Context) -> SyncProtocol:
    """The sync protocol once every PS answers (exit 69 after startupTimeoutSeconds)."""
    cfg = ctx.cfg
    protocol = SyncProtocol(cfg, ctx.server.target)
    ctx.set_phase(ReplicaPhase.WAITING_FOR_PS)
    try:
        protocol.wait_for_ps(time.monotonic() + cfg.training.startup_timeout_seconds)
    except PEER_ERRORS as err:
        raise Exit(exitcodes.UNREACHABLE, f"PS not reachable within "
                   f"{cfg.training.startup_timeout_seconds:.0f}s: {type(err).__name__}") from err
    ctx.set_phase(ReplicaPhase.GATHERING)
    # From now on, a newer incarnation of this replica ends this process (FENCED).
    start_fence_watch(ctx, protocol.owner)
    return protocol


def train_epoch(ctx: Context, protocol: SyncProtocol, epoch: int, laps: Laps) -> str:
    """Train in ``epoch`` until it ends; returns "done" or why the epoch ended. ``laps``
    began when this replica started to wait for the epoch (the join's parts are added)."""
    cfg = ctx.cfg
    protocol.claim()  # this replica's slot is this process's (or it is fenced off: 77)
    laps.lap("claim")
    training = build_epoch_graph(ctx, epoch)
    laps.lap("graph")
    sess = open_session(cfg, ctx.server.target, training.graph)
    ctx.session, ctx.graph = sess, training
    laps.lap("session")
    try:
        wait_for_phase(ctx, protocol, epoch, Phase.GATHERING)  # the chief restored variables
        laps.lap("restore")
        sess.run(training.local_init_op)
        tag = int(sess.run(training.global_step))
        protocol.set_ready(cfg.replica_id, epoch)
        wait_for_phase(ctx, protocol, epoch, Phase.RUNNING)
        laps.lap("gate")
        ctx.set_ready(True)
        ctx.log(f"training in sync epoch {epoch:x} from global step {tag} "
                f"at unix time {time.time():.3f} (joined in {laps})")
        loop = StepLoop(ctx, sess, training, tag)
        if tag >= cfg.training.max_steps:
            return "done"
        while loop.step() < cfg.training.max_steps:
            pass
        return "done"
    except tf.errors.OutOfRangeError:
        state = protocol.state()
        return "done" if state.phase == Phase.DONE else "its token queue was closed"
    except Leaving:
        leave(ctx, protocol, sess, training)
        return "left"
    finally:
        ctx.watchdog_armed = False
        ctx.session = ctx.graph = None
        close_quietly(sess)


def finish_worker(ctx: Context, protocol: SyncProtocol) -> int:
    """Exit 0 only when the global step really reached maxSteps."""
    state = protocol.state()
    global_step = state.global_step or 0
    if global_step < ctx.cfg.training.max_steps:
        raise Exit(exitcodes.RETRY, f"training ended at global step {global_step}, before "
                   f"maxSteps {ctx.cfg.training.max_steps}")
    protocol.set_done(ctx.cfg.replica_id)
    ctx.log(f"finished at global step {global_step}")
    return exitcodes.OK
