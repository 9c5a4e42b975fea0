"""The chief replica: it trains like any replica and alone keeps, restores or initializes
the variables, writes checkpoints and evaluates.

PS 0 runs the sync epochs (ps/coordinator.py). A chief that starts, or comes back after a
crash, joins the epoch PS 0 is running, like a worker: no other replica notices beyond the
gradients it did not push. Only in an epoch still being reset (PS 0 just opened it: a new
job or a lost PS) does the chief bring the variables to a consistent state and then tell
PS 0 they are ready. At maxSteps it writes the last checkpoint, evaluates and reports done;
PS 0 then ends training.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import tensorflow as tf

from ..foundation import exitcodes
from ..foundation.laps import Laps
from ..foundation.phases import Phase
from ..graph.training import TrainingGraph, build_epoch_graph
from ..process.context import SIGTERM_EXIT, Context
from ..process.exits import Exit
from ..process.mainthread import run_off_main_thread
from ..process.sessions import close_quietly, open_session
from ..state.checkpoints import restore_or_initialize, save_checkpoint
from ..state.export import beats, best_root, best_so_far, export_saved_model
from ..state.snapshots import SnapshotStore, Snapshotter
from ..state.summaries import Summaries, every_steps
from ..sync.fencing import superseded_by
from ..sync.handover import CHIEF_SLOT, POLL_SECONDS
from ..sync.protocol import PEER_ERRORS, POLL, SyncProtocol, peer_error, unconfirmed
from .rejoin import LinkFailures, after_peer_error, wait_for_epoch
from .steploop import EpochEnded, StepLoop, wait_for_phase
from .worker import reach_ps

FINISH_WAIT_SECONDS = 30.0


def run_chief(ctx: Context) -> int:
    """Train as the chief until the end of the job. The steps run in a thread
    (process/mainthread.py): SIGTERM is seen at once, even while a step waits for its token,
    and the chief asks for the updates to be held before a PS stopping with it leaves."""
    signal.signal(signal.SIGTERM, lambda *_: graceful_stop(ctx))
    return run_off_main_thread(lambda: train_chief(ctx))


def train_chief(ctx: Context) -> int:
    cfg = ctx.cfg
    ctx.metrics.add_chief()
    protocol = reach_ps(ctx)
    ctx.protocol = protocol
    store = SnapshotStore()  # the freshest snapshot, kept across this process's sync epochs
    t = cfg.training
    summaries = Summaries(t.checkpoint_dir, every_steps(t.summary_every_steps, t.log_every_steps),
                          evaluates=False)
    first = True
    left: int | None = None
    heals = False  # left may be joined again once healthy without this chief (rejoin.py)
    links = LinkFailures()
    while True:
        limit = (cfg.training.startup_timeout_seconds if first
                 else cfg.training.chief_lost_timeout_seconds)
        # An epoch this chief left is joined again while it is still being reset (the chief
        # lost a PS while restoring: PS 0 waits for the chief in it), or when only a link
        # failed and PS 0 still runs it (rejoin.py).
        laps = Laps()
        state = wait_for_epoch(ctx, protocol, left, limit, heals)
        if state.phase == Phase.DONE:
            return finished_before(ctx, state.global_step)
        laps.lap("epoch")
        epoch = state.epoch
        joined = time.monotonic()
        link_failed = False
        took = ""
        try:
            result = chief_epoch(ctx, protocol, epoch, store, summaries, laps)
        except EpochEnded as why:  # "done": PS 0 ended training after an earlier last checkpoint
            result = "training ended" if str(why) == "done" else str(why)
        except PEER_ERRORS as err:
            result = f"lost a peer ({peer_error(err)})"
            link_failed = True
        first = False
        if result == "done":
            return exitcodes.OK
        ctx.metrics.sync_resets.inc()
        ctx.set_ready(False)
        heals = False
        if link_failed:
            skip, took = after_peer_error(ctx, protocol, links, epoch, joined)
            left, heals = skip.epoch, skip.heals
        else:
            try:
                left = None if protocol.state().phase == Phase.RESETTING else epoch
            except PEER_ERRORS:
                protocol.reopen()
                left = epoch
        ctx.log(f"left sync epoch {epoch:x}: {result}; "
                f"{'rejoining it' if left is None else 'rejoining'}{took}")


def finished_before(ctx: Context, global_step: int | None) -> int:
    """Training already ended (PS 0 set DONE after an earlier chief's last checkpoint)."""
    if global_step is not None:
        # This chief ran no step: the gauge gives its exit message the job's final step.
        ctx.metrics.global_step.set(global_step)
    global_step = global_step or 0
    if global_step < ctx.cfg.training.max_steps:
        raise Exit(exitcodes.RETRY, f"training ended at global step {global_step}, before "
                   f"maxSteps {ctx.cfg.training.max_steps}")
    ctx.log(f"finished at global step {global_step}")
    return exitcodes.OK


def chief_epoch(ctx: Context, protocol: SyncProtocol, epoch: int, store: SnapshotStore,
                summaries: Summaries, laps: Laps) -> str:  # fmt: skip
    """Join ``epoch`` (resetting it first if PS 0 waits for that) and train; returns "done"
    or why the epoch ended. ``store`` holds the freshest snapshot of this process, and
    ``summaries`` its TensorBoard files; ``laps`` began when the chief started to wait for
    the epoch (the join's parts are added)."""
    cfg, m = ctx.cfg, ctx.metrics
    protocol.claim()  # slot 0 is this process's (or it is fenced off: 77)
    laps.lap("claim")
    training = build_epoch_graph(ctx, epoch)
    check_best_metric(ctx, training)
    laps.lap("graph")
    sess = open_session(cfg, ctx.server.target, training.graph)
    laps.lap("session")
    snapshots = None
    try:
        how, step = keep_or_restore(ctx, protocol, sess, training, epoch, store)
        laps.lap("restore")
        if not ctx.start_counted:  # once per process, once the variables are there
            ctx.start_counted = True
            starts = int(sess.run(training.bump_chief_starts))
            if starts > 1:
                m.chief_restarts.inc(starts - 1)
        m.restored_step.set(step)
        m.global_step.set(step)
        ctx.log(f"sync epoch {epoch:x}: variables {how}, global step {step}")
        ctx.session, ctx.graph = sess, training
        wait_for_phase(ctx, protocol, epoch, Phase.GATHERING)
        sess.run(training.local_init_op)
        step = int(sess.run(training.global_step))
        if step >= cfg.training.max_steps:
            return finish_chief(ctx, protocol, sess, training, step, summaries)
        protocol.set_ready(0, epoch)
        wait_for_phase(ctx, protocol, epoch, Phase.RUNNING)
        laps.lap("gate")
        ctx.set_ready(True)
        ctx.log(f"training in sync epoch {epoch:x} from global step {step} "
                f"at unix time {time.time():.3f} (joined in {laps})")
        if cfg.training.snapshot_every_steps:
            snapshots = Snapshotter(ctx, store, sess, training, step, protocol)
        summaries.evaluates = bool(training.model.eval)
        summaries.started(step)
        return train(ctx, protocol, sess, training, step, snapshots, summaries)
    except tf.errors.OutOfRangeError as err:
        if ctx.stopping:
            time.sleep(3600)  # the SIGTERM thread is checkpointing and will end the process
        state = protocol.state()
        if state.phase == Phase.DONE:
            step = int(sess.run(training.global_step))
            if step >= cfg.training.max_steps:
                return finish_chief(ctx, protocol, sess, training, step, summaries)
            raise Exit(exitcodes.RETRY, f"training ended at global step {step}, before "
                       f"maxSteps {cfg.training.max_steps}") from err
        return "its token queue was closed"
    finally:
        if snapshots is not None:
            snapshots.stop()
        if ctx.session is sess and not ctx.stopping:
            ctx.session = ctx.graph = None
        if not ctx.stopping:
            close_quietly(sess)


def keep_or_restore(ctx: Context, protocol: SyncProtocol, sess: Any, training: TrainingGraph,
                    epoch: int, store: SnapshotStore) -> tuple[str, int]:
    """The variables for ``epoch``: restored or initialized while PS 0 resets it, else kept.

    A running epoch with variables missing (a PS restarted and PS 0 has not noticed yet) is
    never restored into: PS 0 opens a new epoch within a second, which ends this wait.
    """
    while True:
        state = protocol.state()
        if state.epoch != epoch or state.phase == Phase.DONE:
            raise EpochEnded("a new sync epoch was opened" if state.epoch != epoch
                             else "training ended")
        if state.phase == Phase.RESETTING:
            store.invalidate()  # no copy begun before this restore is kept
            how, step = restore_or_initialize(sess, training, ctx.cfg.training.checkpoint_dir,
                                              store.latest())
            if not protocol.variables_ready(epoch):
                raise EpochEnded("a new sync epoch was opened while restoring")
            return how, step
        if not len(sess.run(training.report_uninitialized)):
            return "kept", int(sess.run(training.global_step))
        time.sleep(POLL * 10)


def train(ctx: Context, protocol: SyncProtocol, sess: Any, training: TrainingGraph,
          step: int, snapshots: Snapshotter | None, summaries: Summaries) -> str:
    cfg, m = ctx.cfg, ctx.metrics
    loop = StepLoop(ctx, sess, training, step)
    every = cfg.training.checkpoint_every_steps
    ctx.last_checkpoint = step
    while True:
        global_step = loop.step()
        if snapshots is not None:
            snapshots.notify(global_step)
        saved = None  # this step's checkpoint, for an evaluation of the same step to export
        if cfg.training.checkpoint_dir and global_step // every > ctx.last_checkpoint // every \
                and global_step < cfg.training.max_steps:
            ctx.last_checkpoint = global_step
            saved = save_checkpoint(sess, training, cfg.training.checkpoint_dir, global_step,
                                    ctx.log)
            if saved:
                m.checkpoint_step.set(global_step)
                ctx.log(f"checkpoint at global step {global_step}")
        last = global_step >= cfg.training.max_steps
        if summaries.due(global_step) or (last and summaries.on):
            summarize(ctx, sess, training, loop, summaries)
        if last:
            return finish_chief(ctx, protocol, sess, training, global_step, summaries)
        evals = cfg.training.eval_every_steps
        if evals and training.model.eval and global_step // evals > loop.last_eval // evals:
            evaluate(ctx, sess, training, global_step, summaries, saved)
            loop.last_eval = global_step


def finish_chief(ctx: Context, protocol: SyncProtocol, sess: Any, training: TrainingGraph,
                 global_step: int, summaries: Summaries) -> str:
    """Checkpoint, evaluate, report done; wait for PS 0 to end training and the replicas."""
    cfg = ctx.cfg
    # The step of exit 0's message (a chief may finish without a step of its own here).
    ctx.metrics.global_step.set(global_step)
    saved = None  # the last checkpoint's path
    if cfg.training.checkpoint_dir:
        saved = save_checkpoint(sess, training, cfg.training.checkpoint_dir, global_step,
                                ctx.log)
        if saved:
            ctx.metrics.checkpoint_step.set(global_step)
    if training.model.eval:
        evaluate(ctx, sess, training, global_step, summaries, saved)
    protocol.set_done(0)
    deadline = time.monotonic() + FINISH_WAIT_SECONDS
    while time.monotonic() < deadline:
        state = protocol.state()
        if state.phase == Phase.DONE and not (waiting := unconfirmed(cfg.elastic, state)):
            break
        time.sleep(POLL * 5)
    else:
        ctx.log(f"finish: replicas {waiting} did not confirm within "
                f"{FINISH_WAIT_SECONDS:.0f}s")
    # From the checkpoint on disk, in a graph of its own: once the others are released.
    if saved and training.model.serving is not None:
        export(ctx, saved, global_step)
    ctx.log(f"finished at global step {global_step}")
    return "done"


def export(ctx: Context, checkpoint: str, global_step: int) -> None:
    """The SavedModel of the last checkpoint (state/export.py)."""
    path = export_or_say(ctx, "export", checkpoint, global_step)
    if path is not None:
        ctx.log(f"exported a SavedModel of global step {global_step} to {path}")
        ctx.exported["export"] = (path, global_step)


def export_or_say(ctx: Context, what: str, checkpoint: str, global_step: int,
                  root: str | None = None,
                  metrics: dict[str, float] | None = None) -> str | None:  # fmt: skip
    """export_saved_model; a failure is said and gives None, and training still ends well
    or goes on: the checkpoint holds the model."""
    try:
        return export_saved_model(ctx.cfg, ctx.model_fn, checkpoint, global_step, root,
                                  metrics)  # fmt: skip
    except Exception as err:  # the model's serving graph, the disk: say which, go on
        ctx.log(f"{what} of global step {global_step} failed: {type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}")
        return None


def check_best_metric(ctx: Context, training: TrainingGraph) -> None:
    """``training.export.best.metric`` names one of the model's evaluation metrics."""
    export = ctx.cfg.training.export
    if export is None or export.best is None or export.best.metric in training.model.eval:
        return
    have = ", ".join(sorted(training.model.eval)) or "none: the model returns no eval"
    raise Exit(exitcodes.CONFIG, f"bad configuration: training.export.best.metric: "
               f"{export.best.metric!r} is not one of the model's evaluation metrics ({have})")


def export_if_best(ctx: Context, sess: Any, training: TrainingGraph, global_step: int,
                   values: dict[str, float], checkpoint: str | None) -> None:
    """With ``training.export.best``: export this evaluation's model if its metric beats
    every one exported before (a checkpoint of this step is written first, unless given)."""
    t = ctx.cfg.training
    if t.export is None or t.export.best is None or training.model.serving is None \
            or not t.checkpoint_dir:  # fmt: skip
        return
    metric, goal = t.export.best.metric, t.export.best.goal
    root = best_root(t.checkpoint_dir)
    best = best_so_far(root, metric, goal)
    if not beats(goal, values[metric], best):
        return
    if checkpoint is None:
        checkpoint = save_checkpoint(sess, training, t.checkpoint_dir, global_step, ctx.log)
        if checkpoint is None:
            return  # a newer checkpoint is there: this chief is not the job's latest word
        ctx.last_checkpoint = global_step
        ctx.metrics.checkpoint_step.set(global_step)
    path = export_or_say(ctx, "best export", checkpoint, global_step, root, values)
    if path is not None:
        before = "the first" if best is None else f"the best before: {best:.4f}"
        ctx.log(f"best export: global step {global_step}, {metric} {values[metric]:.4f} "
                f"({before}), to {path}")
        ctx.exported["bestExport"] = (path, global_step)


def summarize(ctx: Context, sess: Any, training: TrainingGraph, loop: StepLoop,
              summaries: Summaries) -> None:
    """The summary of the step ``loop`` just ran, with the model's own summary ops run on
    that step's feed (a model whose summaries need a feed the step does not give, an eval
    placeholder say, has them left out from then on, said once)."""
    model_summary = None
    if training.model_summary is not None and summaries.model_ops:
        try:
            model_summary = sess.run(training.model_summary, feed_dict=loop.feed)
        except tf.errors.InvalidArgumentError as err:
            summaries.model_ops = False
            ctx.log(f"the model's summary ops are not written: {err.message.splitlines()[0]}")
    out = loop.out
    summaries.write(loop.tag, float(out["loss"]), float(out["learning_rate"]), loop.pushed,
                    loop.stale, model_summary)


def evaluate(ctx: Context, sess: Any, training: TrainingGraph, global_step: int,
             summaries: Summaries, checkpoint: str | None = None) -> None:
    """Run the model's held-out metrics (chief only); log, export and summarize them, and
    export the model when they are the best so far (``checkpoint``: this step's, if one was
    just written)."""
    run = sess.run(dict(training.model.eval), feed_dict=training.model.eval_feed)
    values = {name: float(v) for name, v in run.items()}
    summaries.write_eval(global_step, values)
    for name, value in values.items():
        ctx.metrics.eval_metric.labels(name=name).set(value)
    ctx.log(f"eval at global step {global_step}: "
            + " ".join(f"{k}={v:.4f}" for k, v in sorted(values.items())))
    export_if_best(ctx, sess, training, global_step, values, checkpoint)


# At SIGTERM the chief waits this long for PS 0 to hold the updates for its checkpoint.
HOLD_WAIT_SECONDS = 2.0


def hold_updates(ctx: Context) -> int | None:
    """Ask PS 0 to hold the updates (sync/handover.py) and wait until it does: the step they
    are held at, None (not held: the checkpoint is written while they go on)."""
    protocol = ctx.protocol
    if protocol is None:
        return None
    protocol.ask_handover(CHIEF_SLOT)  # behind the fence: a superseded chief holds nothing
    deadline = time.monotonic() + HOLD_WAIT_SECONDS
    while time.monotonic() < deadline:
        held = protocol.handover_state().held
        if held >= 0:
            return held
        time.sleep(POLL_SECONDS)
    protocol.withdraw_handover(CHIEF_SLOT)
    return None


def release_hold(ctx: Context) -> None:
    """The chief's hold withdrawn once its SIGTERM checkpoint is written. A PS 0 that stops
    too (the whole job at SIGTERM) waits for this withdrawal and exits as soon as it reads
    it, which can be before the call returns here: then the call fails as PS 0's
    connection closes, and that is no failure of the checkpoint."""
    if ctx.protocol is None:
        return
    try:
        ctx.protocol.withdraw_handover(CHIEF_SLOT)
    except PEER_ERRORS as err:
        ctx.log(f"SIGTERM: PS 0 gone as the hold was withdrawn ({peer_error(err)})")


def graceful_stop(ctx: Context) -> None:
    """SIGTERM on the chief: checkpoint the latest update and exit 143 (the others train on
    without it). The updates are held while the checkpoint is written, so that it holds
    every variable at one global step, the latest; a PS handing over meanwhile is answered
    by the snapshot thread, which goes on until the exit."""
    if ctx.stopping:
        return
    ctx.stopping = True

    def stop() -> None:
        reason = "stopped by SIGTERM"
        global_step = None
        try:
            sess, training = ctx.session, ctx.graph
            if sess is not None and training is not None and ctx.cfg.training.checkpoint_dir:
                t0 = time.monotonic()
                ctx.log(f"SIGTERM at unix time {time.time():.3f}: checkpointing, asking "
                        "for the updates to be held")
                held = hold_updates(ctx)
                global_step = int(sess.run(training.global_step))
                path = save_checkpoint(sess, training, ctx.cfg.training.checkpoint_dir,
                                       global_step, ctx.log)
                ctx.log(f"SIGTERM: checkpoint at global step {global_step} "
                        + ("with the updates held" if held is not None
                           else "while the updates went on (PS 0 did not hold them)")
                        + f", {time.monotonic() - t0:.2f}s")
                reason += (f" after writing {os.path.basename(path)}" if path
                           else " (its checkpoint refused: the directory holds a newer one)")
                if held is not None:
                    release_hold(ctx)
        except Exception as err:  # still exit: the orchestrator is waiting
            if (fence := superseded_by(err)) is not None:  # a newer chief holds slot 0
                ctx.exit_now(exitcodes.FENCED, exitcodes.fenced_reason(
                    0, fence.mine, fence.owner), global_step)
            reason += f" (clean-up failed: {type(err).__name__})"
        ctx.exit_now(SIGTERM_EXIT, reason, global_step)

    threading.Thread(target=stop, name="sigterm", daemon=True).start()
