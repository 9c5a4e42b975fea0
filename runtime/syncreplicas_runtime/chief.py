"""The chief replica: it opens each sync epoch and trains in it like any replica.

Opening an epoch: wake every replica still blocked on the last epoch's tokens, keep or
restore the variables, open the start gate once the replicas have joined, start the sync
loop. While training it also writes checkpoints, evaluates, and at maxSteps ends the job.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import tensorflow as tf

from . import exitcodes
from .context import Context, exit_now
from .control import PEER_ERRORS, SyncProtocol, new_epoch_id
from .coordinator import Coordinator
from .exits import Exit
from .graph import TrainingGraph
from .phases import Phase
from .session import open_session, restore_or_initialize, save_checkpoint
from .steploop import POLL, REJOIN_GATE_SECONDS, StepLoop

# After a chief restart the gate opens once min(R, replicas) replicas have joined and the
# others had GATE_GRACE_SECONDS more to join (a replica that is itself restarting joins the
# running epoch later; per-replica tokens keep an update from being one replica's pushes),
# or after REJOIN_GATE_SECONDS in any case.
GATE_GRACE_SECONDS = 1.0
FINISH_WAIT_SECONDS = 30.0


def run_chief(ctx: Context) -> int:
    cfg = ctx.cfg
    ctx.metrics.add_chief()
    protocol = SyncProtocol(cfg, ctx.server.target)
    # The first epoch's graph needs nothing from the cluster: build it while the PS comes up.
    prebuilt: TrainingGraph | None = ctx.build_graph(new_epoch_id())
    try:
        protocol.wait_for_ps(time.monotonic() + cfg.training.startup_timeout_seconds)
    except PEER_ERRORS as err:
        raise Exit(exitcodes.UNREACHABLE, f"PS not reachable within "
                   f"{cfg.training.startup_timeout_seconds:.0f}s: {type(err).__name__}") from err
    signal.signal(signal.SIGTERM, lambda *_: graceful_stop(ctx, protocol))
    first_epoch = True
    while True:
        try:
            graph_for_epoch, prebuilt = prebuilt, None  # an epoch id is never used twice
            result = chief_epoch(ctx, protocol, first_epoch, graph_for_epoch)
        except PEER_ERRORS as err:
            result = f"lost a PS ({type(err).__name__})"
        first_epoch = False
        if result == "done":
            return exitcodes.OK
        ctx.log(f"sync epoch ended: {result}; opening a new one")
        ctx.readiness.ready = False
        protocol.reopen()
        try:
            protocol.wait_for_ps(time.monotonic() + cfg.training.chief_lost_timeout_seconds)
        except PEER_ERRORS as err:
            raise Exit(exitcodes.RETRY, f"a PS stayed unreachable for "
                       f"{cfg.training.chief_lost_timeout_seconds:.0f}s") from err


def chief_epoch(ctx: Context, protocol: SyncProtocol, first_epoch: bool,
                prebuilt: TrainingGraph | None = None) -> str:
    """Open a sync epoch and train in it; returns "done" or why the epoch ended."""
    cfg, m = ctx.cfg, ctx.metrics
    t_start = time.monotonic()
    training = prebuilt or ctx.build_graph(new_epoch_id())
    epoch = training.epoch
    state = protocol.state()
    protocol.init_if_needed()
    protocol.set_phase(Phase.RESETTING)
    if state.initialized and state.epoch:
        # Wake every replica still blocked on the last epoch's tokens; they rejoin.
        protocol.close_token_queues(state.epoch)
    # Publish the id while still resetting: replicas build their graphs during the restore.
    protocol.set_epoch(epoch)
    sess = open_session(cfg, ctx.server.target, training.graph)
    how, step = restore_or_initialize(sess, training, cfg.training.checkpoint_dir)
    if first_epoch:
        starts = int(sess.run(training.bump_chief_starts))
        if starts > 1:
            m.chief_restarts.inc(starts - 1)
    sess.run(training.chief_init_op)
    step = int(sess.run(training.global_step))
    m.restored_step.set(step)
    m.global_step.set(step)
    ctx.log(f"sync epoch {epoch:x}: variables {how}, global step {step}")
    ctx.session, ctx.graph = sess, training
    if step >= cfg.training.max_steps:
        return finish_chief(ctx, protocol, sess, training, step)
    if how.startswith("initialized") and step == 0:
        protocol.reset_done()
    protocol.set_ready(0, epoch)
    protocol.set_phase(Phase.GATHERING)
    if first_epoch and how == "initialized":  # a new job: everyone, before the first update
        wait_for_replicas(ctx, protocol, epoch, cfg.training.startup_timeout_seconds,
                          quorum=cfg.total_replicas)
    else:
        wait_for_replicas(ctx, protocol, epoch, REJOIN_GATE_SECONDS,
                          quorum=min(cfg.replicas_to_aggregate, cfg.total_replicas))
    coordinator = Coordinator(ctx, sess, training)
    coordinator.open()
    sess.run(training.gate_tokens_op)
    stop = threading.Event()
    threading.Thread(target=coordinator.run, args=(stop,), name="sync", daemon=True).start()
    threading.Thread(target=sample_loop, args=(ctx, sess, training, stop), name="sampler",
                     daemon=True).start()
    protocol.set_phase(Phase.RUNNING)
    ctx.set_ready(True)
    ctx.log(f"gate open: sync epoch {epoch:x} running from global step {step} "
            f"({time.monotonic() - t_start:.2f}s after the chief started it) "
            f"at unix time {time.time():.3f}")
    loop = StepLoop(ctx, sess, training, step)
    every = cfg.training.checkpoint_every_steps
    ctx.last_checkpoint = step
    try:
        while True:
            global_step = loop.step()
            if cfg.training.checkpoint_dir and global_step // every > ctx.last_checkpoint // every \
                    and global_step < cfg.training.max_steps:
                save_checkpoint(sess, training, cfg.training.checkpoint_dir, global_step)
                ctx.last_checkpoint = global_step
                m.checkpoint_step.set(global_step)
                ctx.log(f"checkpoint at global step {global_step}")
            if global_step >= cfg.training.max_steps:
                stop.set()
                return finish_chief(ctx, protocol, sess, training, global_step)
            evals = cfg.training.eval_every_steps
            if evals and training.model.eval and global_step // evals > loop.last_eval // evals:
                evaluate(ctx, sess, training, global_step)
                loop.last_eval = global_step
    except tf.errors.OutOfRangeError as err:
        if ctx.stopping:
            time.sleep(3600)  # the SIGTERM thread is checkpointing and will end the process
        if coordinator.failure:
            return f"the sync loop stopped ({coordinator.failure})"
        raise Exit(exitcodes.RETRY, "this chief's token queue was closed by another chief") \
            from err
    finally:
        stop.set()


def wait_for_replicas(ctx: Context, protocol: SyncProtocol, epoch: int, limit: float,
                      quorum: int) -> None:
    """The start gate: every replica joined ``epoch``, or ``quorum`` of them did and the
    rest had GATE_GRACE_SECONDS more, or ``limit`` seconds passed."""
    deadline = time.monotonic() + limit
    quorum_at = None
    while True:
        state = protocol.state()
        missing = [r for r, e in enumerate(state.ready) if e != epoch]
        joined = len(state.ready) - len(missing)
        if not missing:
            return
        if joined >= quorum:
            quorum_at = quorum_at or time.monotonic()
            if time.monotonic() - quorum_at >= GATE_GRACE_SECONDS:
                ctx.log(f"gate: opening with {joined} of {len(state.ready)} replicas; "
                        f"{missing} join when they come")
                return
        if time.monotonic() > deadline:
            ctx.log(f"gate: opening without replicas {missing} after {limit:.0f}s "
                    "(they join the running epoch when they come)")
            return
        time.sleep(POLL)


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


def finish_chief(ctx: Context, protocol: SyncProtocol, sess: Any, training: TrainingGraph,
                 global_step: int) -> str:
    """Checkpoint, evaluate, end the epoch, wait for the replicas, release the PS."""
    cfg = ctx.cfg
    if cfg.training.checkpoint_dir:
        save_checkpoint(sess, training, cfg.training.checkpoint_dir, global_step)
        ctx.metrics.checkpoint_step.set(global_step)
    if training.model.eval:
        evaluate(ctx, sess, training, global_step)
    protocol.set_phase(Phase.DONE)
    sess.run(training.close_tokens_op)
    protocol.set_done(0)
    deadline = time.monotonic() + FINISH_WAIT_SECONDS
    while time.monotonic() < deadline:
        state = protocol.state()
        if all(state.done):
            break
        time.sleep(POLL * 5)
    else:
        ctx.log(f"finish: replicas {[r for r, d in enumerate(state.done) if not d]} did not "
                f"confirm within {FINISH_WAIT_SECONDS:.0f}s")
    protocol.release_ps()
    ctx.log(f"finished at global step {global_step}")
    return "done"


def evaluate(ctx: Context, sess: Any, training: TrainingGraph, global_step: int) -> None:
    """Run the model's held-out metrics (chief only); log and export them."""
    values = sess.run(dict(training.model.eval), feed_dict=training.model.eval_feed)
    for name, value in values.items():
        ctx.metrics.eval_metric.labels(name=name).set(float(value))
    ctx.log(f"eval at global step {global_step}: "
            + " ".join(f"{k}={float(v):.4f}" for k, v in sorted(values.items())))


def graceful_stop(ctx: Context, protocol: SyncProtocol) -> None:
    """SIGTERM on the chief: checkpoint, send the replicas back to the gate, exit 143."""
    if ctx.stopping:
        return
    ctx.stopping = True

    def stop() -> None:
        reason = "stopped by SIGTERM"
        try:
            sess, training = ctx.session, ctx.graph
            if sess is not None and training is not None and ctx.cfg.training.checkpoint_dir:
                global_step = int(sess.run(training.global_step))
                path = save_checkpoint(sess, training, ctx.cfg.training.checkpoint_dir,
                                       global_step)
                reason += f" after writing {os.path.basename(path)}"
            protocol.set_phase(Phase.RESETTING)
            if training is not None:
                protocol.close_token_queues(training.epoch)
        except Exception as err:  # still exit: the orchestrator is waiting
            reason += f" (clean-up failed: {type(err).__name__})"
        exit_now(128 + signal.SIGTERM, reason)

    threading.Thread(target=stop, name="sigterm", daemon=True).start()
