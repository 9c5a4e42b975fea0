"""The training graph of one sync epoch: variables on the PS, SyncReplicasOptimizer, tokens.

Each start of PS 0 (and each loss of another PS) opens a new *sync epoch*. The queues and
gradient accumulators of an epoch live in their own resource container on the PS, named
after the epoch, so nothing from an earlier epoch (a closed token queue, gradients pushed
against rolled-back variables, tokens carrying an old step) can reach the new one. Variables,
optimizer slots and the global step live outside those containers and survive.

Tokens are per replica (one FIFO queue each) instead of the optimizer's single shared queue:
a replica can then never take another's token, so an update is made of R gradients from R
different pushes in turn, never of one fast replica's gradients, and each queue is topped up
to a fixed level after every update, which bounds the tokens held at one step's worth plus
``initialTokens``. The token is a barrier only: the step a gradient is tagged with is the
global step read right after the token is taken, so leftover tokens cannot smuggle an old
step past the accumulators' staleness check.

Elastic R: the optimizer's update takes its number of gradients from a variable on PS 0,
not from a graph constant, so the coordinator (ps/coordinator.py) can lower it while replicas
are lost and raise it when they return. Each push also stamps the replica's heartbeat (PS 0
clock) and enqueues one entry on the epoch's push queue, in the step's own run. A take that
is already blocking keeps the count it started with, and cancelling a take over several
accumulators could complete on some and not others, so the coordinator never starts an
update that can block: it runs one only once every accumulator holds the gradients it
takes (counts only grow while it waits; only the coordinator takes).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from ..foundation import exitcodes
from ..foundation.config import ClusterConfig
from ..model.contract import BuiltModel, ModelError, build_model
from ..process.context import Context
from ..process.exits import Exit
from ..process.sessions import cluster_spec
from ..sync.fencing import FenceOps, build_fence, owner_table
from ..sync.handover import request_variable
from ..sync.names import (
    AGGREGATE_VARIABLE,
    CHIEF_STARTS_VARIABLE,
    HANDED_OUT_VARIABLE,
    HEARTBEAT_VARIABLE,
    PUSHED_STEP_VARIABLE,
    READY_VARIABLE,
    SYNC_STATE_DEVICE,
    container_name,
    push_queue_name,
)
from ..sync.protocol import token_queue
from . import initfrom
from .initfrom import InitFrom
from .packing import Packing, local_model_variables, pack
from .pushonce import push_once
from .rates import clip, learning_rate, make_optimizer
from .seqlock import SeqLock, add_seqlock

v1 = tf.compat.v1


def push_queue(epoch: int) -> Any:
    """The epoch's queue of one entry per push (the coordinator waits on it, never a take)."""
    with tf.device(SYNC_STATE_DEVICE), v1.container(container_name(epoch)):
        return v1.FIFOQueue(-1, tf.int32, shapes=[()], shared_name=push_queue_name(),
                            name=push_queue_name())


def tokens_per_replica(total: int, replicas_to_aggregate: int,
                       initial: int) -> list[tuple[int, int]]:
    """(per-update tokens, initial tokens) for each replica.

    Every update needs max(total, R) pushes; replica i is given its share of those and of
    the configured initial tokens. A replica's first push needs no token, so the gate
    enqueues ``per_update - 1 + initial`` and each update tops the queue up to
    ``per_update + initial``.
    """
    per_step = max(total, replicas_to_aggregate)
    out = []
    for i in range(total):
        base = per_step // total + (1 if i < per_step % total else 0)
        extra = initial // total + (1 if i < initial % total else 0)
        out.append((base, extra))
    return out


def stock_pieces(sync_opt: Any) -> tuple[list[Any], Any]:
    """(apply-gradient ops, update op) out of a SyncReplicasOptimizer after apply_gradients.

    The optimizer exposes neither; they are read from the graph it built: the dequeue of
    its token queue depends on the apply ops, and the fill of its token enqueue depends on
    the update. tests/runtime/test_tf_internals.py fails loudly if TensorFlow changes this.
    """
    queue_ref = sync_opt._sync_token_queue.queue_ref
    dequeues = [op for op in queue_ref.consumers() if op.type.startswith("QueueDequeue")]
    if len(dequeues) != 1:
        raise RuntimeError(f"expected one dequeue of sync_token_q, found {len(dequeues)}")
    apply_ops = list(dequeues[0].control_inputs)
    enqueue = sync_opt._chief_queue_runner.enqueue_ops[0]
    fills = [t.op for t in enqueue.inputs if t.op.type == "Fill"]
    # The fill of step tokens and its inputs are built under control_dependencies([update]).
    found = {c for op in fills for c in op.control_inputs}
    found |= {c for op in fills for t in op.inputs for c in t.op.control_inputs}
    if len(fills) != 1 or len(found) != 1:
        raise RuntimeError("cannot find the update op of SyncReplicasOptimizer")
    return apply_ops, found.pop()


def take_ops(sync_opt: Any) -> list[Any]:
    """The optimizer's take-gradient ops, one per accumulator (their input 1 is R)."""
    found = [op for acc, _ in sync_opt._accumulator_list
             for op in acc.accumulator_ref.consumers() if op.type.endswith("TakeGradient")]
    if len(found) != len(sync_opt._accumulator_list):
        raise RuntimeError("cannot find the take-gradient ops of SyncReplicasOptimizer")
    return found


@dataclass
class ElasticOps:
    """What the coordinator runs for elastic R (PS 0 only; built everywhere, cheap)."""

    init: Any            # R = replicasToAggregate, every heartbeat = now (PS 0 clock)
    set_r: Any           # assign ``r_value`` to the R variable
    r_value: Any
    read: dict[str, Any]           # counts per accumulator, R, heartbeats, now, hold
    wait_and_read: dict[str, Any]  # the same after at least one push (drains the queue)
    updated_at: Any      # PS 0 time right after the update (run with sync_op)
    leave: Any           # replica: silent from now on (heartbeat 0), and wake the loop


@dataclass
class TrainingGraph:
    graph: Any
    model: BuiltModel
    global_step: Any
    chief_starts: Any
    bump_chief_starts: Any            # chief: count this start (kept in checkpoints)
    fetches: dict[str, Any]           # run by every replica each step
    local_init_op: Any                # replica: local step = global step
    chief_init_op: Any                # PS 0: also set the accumulators' step
    sync_op: Any                      # PS 0: take R gradients, update, top up tokens
    gate_tokens_op: Any               # PS 0: the tokens enqueued when the gate opens
    close_tokens_op: Any              # PS 0: close every token queue, cancel waiters
    depth: Any                        # sum of token queue sizes
    pending: Any                      # gradients accumulated towards the next update
    elastic: ElasticOps
    seqlock: SeqLock | None           # with snapshots: the update counter (seqlock.py)
    report_uninitialized: Any
    saver: Any
    epoch: int
    packing: Packing | None = None    # training.packVariables: the packed PS variables
    # Rejoining: this replica's last pushed step and the global step; then, once the update
    # of that step handed out its tokens (``handed_out`` > it), drain and ``skip``: the
    # local step and the copies from the global step after that update.
    already_pushed: dict[str, Any] = field(default_factory=dict)
    skip: dict[str, Any] = field(default_factory=dict)
    handed_out: Any = None
    # A replica's fence (sync/fencing.py): its writes to the shared state run behind it.
    fence: FenceOps | None = None
    # Joining: drop the tokens this replica's queue gathered while it was away (it holds
    # a joiner's share, as at the gate); fetches the number dropped.
    drain: Any = None
    # Chief, with training.warmStart: the model's variables from another run (initfrom.py).
    init_from: InitFrom | None = None
    # Chief: the model's own tf.compat.v1.summary ops, merged (None: it made none).
    model_summary: Any = None


def build_training_graph(cfg: ClusterConfig, model_fn: Any, epoch: int) -> TrainingGraph:
    """Build everything one replica runs in ``epoch``. Raises ModelError for a bad model."""
    t = cfg.training
    total = cfg.total_replicas
    # PS 0 builds the graph to run the sync loop, never a step: as the chief's, on its device.
    replica = max(cfg.replica_id, 0)
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(t.seed)
        with tf.device(SYNC_STATE_DEVICE):
            global_step = v1.train.get_or_create_global_step()
            chief_starts = v1.get_variable(CHIEF_STARTS_VARIABLE, [], tf.int64,
                                           initializer=v1.zeros_initializer(), trainable=False)
        setter = v1.train.replica_device_setter(cluster=cluster_spec(cfg),
                                                worker_device=cfg.device)
        own = f"{cfg.device}/device:CPU:0"
        with v1.device(setter):
            # Packing: the model's trainable variables are local copies of packed PS ones.
            with (local_model_variables(own) if t.pack_variables else nullcontext([])) as copies:
                built = build_model(model_fn, entrypoint=cfg.model.entrypoint,
                                    args=cfg.model.args, replica=replica, num_replicas=total,
                                    batch_size=t.batch_size, seed=t.seed)
            if built.learning_rate is not None and t.learning_rate_schedule is not None:
                raise ModelError("the model returns a learning_rate and the job sets "
                                 "training.learningRateSchedule: one or the other")
            with tf.device(SYNC_STATE_DEVICE):
                rate = (built.learning_rate if built.learning_rate is not None else
                        learning_rate(t.learning_rate, t.learning_rate_schedule, global_step))
            opt = make_optimizer(t, rate)
            sync_opt = v1.train.SyncReplicasOptimizer(
                opt, replicas_to_aggregate=cfg.replicas_to_aggregate, total_num_replicas=total)
            # Clipped here, before packing: the norm is over the model's own variables.
            gvs = clip(sync_opt.compute_gradients(built.loss), t.clip_gradient_norm)
            packing = (pack(gvs, copies, cfg.parameter_servers, own, t.pack_min_bytes_per_ps)
                       if copies else None)
            if packing is not None:
                gvs = packing.grads_and_vars
            var_list = [v for g, v in gvs if g is not None]
            # Slots belong with the variables, outside the epoch container.
            opt._create_slots(var_list)
            with v1.container(container_name(epoch)):
                sync_opt.apply_gradients(gvs, global_step=global_step)
        apply_ops, update_op = stock_pieces(sync_opt)
        # Every write of a replica to the shared state runs behind its fence (on PS 0, from
        # PS 0's own constant and owner table: it holds even when PS 0 cannot reach it).
        fence = (build_fence(owner_table(total), replica, cfg.incarnation)
                 if cfg.replica_id >= 0 else None)
        fenced = [fence.check] if fence is not None else []
        shares = tokens_per_replica(total, cfg.replicas_to_aggregate, cfg.initial_tokens)
        queues = [token_queue(i, epoch) for i in range(total)]
        pushes = push_queue(epoch)
        with tf.device(SYNC_STATE_DEVICE):
            # Outside checkpoints and global_variables: the coordinator sets both when it
            # opens an epoch.
            kw: dict[str, Any] = {"trainable": False, "collections": [], "use_resource": True}
            aggregate = v1.get_variable(AGGREGATE_VARIABLE, [], tf.int32,
                                        initializer=v1.constant_initializer(
                                            cfg.replicas_to_aggregate), **kw)
            heartbeat = v1.get_variable(HEARTBEAT_VARIABLE, [total], tf.float64,
                                        initializer=v1.zeros_initializer(), **kw)
            pushed_step = v1.get_variable(PUSHED_STEP_VARIABLE, [total], tf.int64,
                                          initializer=v1.constant_initializer(-1), **kw)
            handed_out = v1.get_variable(HANDED_OUT_VARIABLE, [], tf.int64,
                                         initializer=v1.constant_initializer(-1), **kw)
            # The epoch each replica joined (the protocol's, sync/protocol.py): members.
            ready = v1.get_variable(READY_VARIABLE, [total], tf.int64,
                                    initializer=v1.zeros_initializer(), **kw)
            r_now = aggregate.read_value()
        for op in take_ops(sync_opt):
            op._update_input(1, r_now)
        with tf.device(SYNC_STATE_DEVICE):
            # Read before the push, not after: when this push is the R-th, the update can
            # advance the global step before a later read, and an accepted gradient would
            # look stale. Read first, it can only miss a drop that happens in that instant.
            # Behind the fence: so is every apply, and the token taken after them.
            with tf.control_dependencies(fenced):
                gs_at_push = global_step.read_value()
            for op in apply_ops:
                op._add_control_input(gs_at_push.op)
            landed = (push_once(apply_ops, sync_opt._accumulator_list, replica,
                                container_name(epoch))
                      if shares[replica] == (1, 0) else apply_ops)
            with tf.control_dependencies(landed):
                beat = tf.raw_ops.ResourceScatterUpdate(
                    resource=heartbeat.handle, indices=[replica],
                    updates=tf.reshape(tf.timestamp(), [1]))
                mark = tf.raw_ops.ResourceScatterUpdate(
                    resource=pushed_step.handle, indices=[replica],
                    updates=tf.reshape(tf.cast(gs_at_push, tf.int64), [1]))
                pushed = pushes.enqueue(replica)
            with tf.control_dependencies([*landed, beat, mark, pushed]):
                token = queues[replica].dequeue()
            with tf.control_dependencies([token]):
                gs_after = global_step.read_value()
        with tf.device(own):
            with tf.control_dependencies(landed):
                t_pushed = tf.timestamp()
            with tf.control_dependencies([token]):
                t_token = tf.timestamp()
            train_op = sync_opt._local_step.assign(gs_after, read_value=False)
        local_init_op, chief_init_op = sync_opt.local_step_init_op, sync_opt.chief_init_op
        if packing is not None:
            # The next step's variables, read after this step's token and tag.
            train_op = tf.group(train_op, packing.refresh([gs_after, built.loss]))
            # Joining an epoch fills the copies. Only replicas join: PS 0 runs chief_init_op
            # and never a step, so its copies are never read, written or allocated.
            local_init_op = tf.group(local_init_op,
                                     packing.refresh([sync_opt.local_step_init_op]))
        with tf.device(own):
            # Reported: the rate of the update at the global step this step ends at (the
            # next update's, unless another comes first), from the step already read; a
            # model's own rate as it was when read during the step.
            reported = (rate if built.learning_rate is not None else tf.cast(
                learning_rate(t.learning_rate, t.learning_rate_schedule, gs_after), tf.float32))
        fetches = {"train": train_op, "loss": built.loss, "gs_at_push": gs_at_push,
                   "gs_after": gs_after, "t_pushed": t_pushed, "t_token": t_token,
                   "learning_rate": reported}
        # Rejoining a running epoch: an earlier process of this replica may have pushed its
        # gradient for the current step and died waiting for the token, or still wait for
        # it (a partitioned process, fenced off: its pending take is served first). That
        # gradient is in the accumulators; pushing the same step again would count this
        # replica twice in one update. The rejoiner waits until that update handed out its
        # tokens, drains its queue like any joiner (the token is there, or the old take got
        # it) and goes on from the global step after it (replica/steploop.py).
        with tf.device(SYNC_STATE_DEVICE):
            already = {"pushed": pushed_step.read_value()[replica],
                       "global_step": global_step.read_value()}
            handed_out_read = handed_out.read_value()
            gs_rejoin = global_step.read_value()
        with tf.device(own):
            skip_op = sync_opt._local_step.assign(gs_rejoin, read_value=False)
        if packing is not None:
            skip_op = tf.group(skip_op, packing.refresh([gs_rejoin]))
        skip = {"skip": skip_op, "gs_after": gs_rejoin}
        with tf.device(SYNC_STATE_DEVICE):
            # A replica away while updates went on (restarted, or a new worker of an elastic
            # job in a slot that was empty) finds its queue topped up: taking those tokens
            # would let it push twice for one update. Keep what the gate gives a joiner.
            own_base, own_extra = shares[replica]
            keep = tf.constant(own_base - 1 + own_extra, tf.int32)
            with tf.control_dependencies(fenced):
                drain = tf.size(queues[replica].dequeue_many(
                    tf.maximum(queues[replica].size() - keep, 0)))
        with tf.device(SYNC_STATE_DEVICE):
            with tf.control_dependencies([update_op]):
                gs_new = global_step.read_value()
                top_ups = []
                for q, (base, extra) in zip(queues, shares, strict=True):
                    n = tf.maximum(tf.constant(base + extra, tf.int32) - q.size(), 0)
                    top_ups.append(q.enqueue_many([tf.fill([n], gs_new)]))
                with tf.control_dependencies(top_ups):
                    handed = handed_out.assign(gs_new, read_value=False)
                sync_op = tf.group(*top_ups, handed, name="syncreplicas_sync")
            gate = [q.enqueue_many([tf.fill([base - 1 + extra], global_step.read_value())])
                    for q, (base, extra) in zip(queues, shares, strict=True)
                    if base - 1 + extra > 0]
            gate_tokens_op = tf.group(*gate, name="syncreplicas_gate_tokens")
            close_tokens_op = tf.group(*[q.close(cancel_pending_enqueues=True) for q in queues],
                                       pushes.close(cancel_pending_enqueues=True))
            depth = tf.add_n([q.size() for q in queues])

        def accumulated() -> Any:
            counts = []
            for acc, _ in sync_opt._accumulator_list:
                with v1.colocate_with(acc.accumulator_ref):  # on the accumulator's PS
                    counts.append(acc.num_accumulated())
            return tf.stack(counts)

        pending = tf.reduce_max(accumulated())
        with tf.device(SYNC_STATE_DEVICE):
            r_value = v1.placeholder(tf.int32, [])
            now = tf.fill([total], tf.timestamp())
            if cfg.elastic:  # only members (joined this epoch at the gate) count as live
                now = tf.where(tf.equal(ready.read_value(), epoch), now, tf.zeros_like(now))
            init = tf.group(aggregate.assign(cfg.replicas_to_aggregate, read_value=False),
                            heartbeat.assign(now, read_value=False),
                            pushed_step.assign(tf.fill([total], tf.constant(-1, tf.int64)),
                                               read_value=False),
                            handed_out.assign(-1, read_value=False))

            handover = request_variable(cfg.parameter_servers)  # sync/handover.py

            def read_state() -> dict[str, Any]:
                # Built here, under the caller's control dependencies: counts read before
                # the wait for a push would be stale, and the loop would wait for the next.
                return {"counts": accumulated(), "r": aggregate.read_value(),
                        "beats": heartbeat.read_value(), "now": tf.timestamp(),
                        "global_step": global_step.read_value(),
                        "hold": tf.reduce_max(handover.read_value())}

            read = read_state()
            first = pushes.dequeue()
            with tf.control_dependencies([first]):
                rest = pushes.size()  # only the coordinator dequeues: this never blocks
            with tf.control_dependencies([pushes.dequeue_many(rest)]):
                wait_and_read = read_state()
            with tf.control_dependencies([update_op]):
                updated_at = tf.timestamp()
            with tf.control_dependencies(fenced):
                silent = tf.raw_ops.ResourceScatterUpdate(
                    resource=heartbeat.handle, indices=[replica],
                    updates=tf.zeros([1], tf.float64))
            with tf.control_dependencies([silent]):
                leave = pushes.enqueue(replica)
            elastic = ElasticOps(init=init, set_r=aggregate.assign(r_value, read_value=False),
                                 r_value=r_value, read=read, wait_and_read=wait_and_read,
                                 updated_at=updated_at, leave=leave)
        # Snapshots (state/snapshots.py): every update counts itself on PS 0, before and after.
        seqlock = (add_seqlock(take_ops(sync_opt), update_op, sync_op)
                   if t.snapshot_every_steps else None)
        saver = report = init_from = model_summary = None
        if cfg.is_chief:  # only the chief saves and restores: less to build on the others
            with tf.device(own):
                model_summary = v1.summary.merge_all()
            # Behind the fence: every save and every restore (the ops the Saver builds).
            with tf.device(own), tf.control_dependencies(fenced):
                saved = (packing.saver_var_list(opt, v1.global_variables()) if packing
                         else v1.global_variables())
                saver = v1.train.Saver(saved, sharded=False, max_to_keep=3,
                                       save_relative_paths=True)
                # Not once the job has a checkpoint of its own: it restores that.
                if not (t.checkpoint_dir and v1.train.latest_checkpoint(t.checkpoint_dir)):
                    init_from = initfrom.build(t.warm_start, packing,
                                               v1.trainable_variables(), own)  # fmt: skip
        if cfg.is_chief or cfg.role == "ps":  # PS 0 watches for a PS that lost its variables
            report = v1.report_uninitialized_variables(v1.global_variables())
        # Unused report ops would be logged as errors when the graph is collected.
        for tensor in (report, sync_opt.ready_for_local_init_op,
                       seqlock.is_initialized if seqlock else None):
            getattr(tensor, "mark_used", lambda: None)()
        bump = chief_starts.assign_add(1, read_value=True)
    return TrainingGraph(
        graph=graph, model=built, global_step=global_step, chief_starts=chief_starts,
        bump_chief_starts=bump,
        fetches=fetches, local_init_op=local_init_op,
        chief_init_op=chief_init_op, sync_op=sync_op, gate_tokens_op=gate_tokens_op,
        close_tokens_op=close_tokens_op, depth=depth, pending=pending, elastic=elastic,
        seqlock=seqlock,
        report_uninitialized=report, saver=saver, epoch=epoch, packing=packing,
        already_pushed=already, skip=skip, drain=drain, handed_out=handed_out_read,
        fence=fence, init_from=init_from, model_summary=model_summary)


def build_epoch_graph(ctx: Context, epoch: int) -> TrainingGraph:
    """This replica's training graph for ``epoch``; a broken model ends the process (65)."""
    try:
        training = build_training_graph(ctx.cfg, ctx.model_fn, epoch)
    except ModelError as err:
        raise Exit(exitcodes.MODEL, str(err)) from err
    if training.packing is not None:
        ctx.log(training.packing.describe())
    return training
