"""In-memory snapshots of the variables on the parameter servers, kept by the chief, and
their restore onto a PS that came back empty.

A checkpoint is written every ``checkpointEverySteps`` (often hundreds of steps: it goes to
disk); a PS that restarts empty would roll training back to it. The chief also copies every
global variable (model variables, optimizer slots, the global step: all that lives on the
PS) into its own memory every ``snapshotEverySteps`` global steps, in a thread of its own
with its own session runs, so its training steps do not wait for it. The chief holds the
copy, so it survives the loss of any PS, PS 0 included (not the loss of the chief at the
same time: a new chief process starts with none and uses the checkpoint).

Consistency (a seqlock). Only PS 0's sync loop applies updates, each in one run of
``sync_op``. When snapshots are on, that run increments a counter on PS 0 before it takes the
first gradient and again after the global step moved (control dependencies), so the counter
is odd exactly while an update is being applied. A snapshot run reads the counter, then
every variable, then the counter again (ordered by control dependencies); the copy is kept
only when both reads are equal and even: no update started or was under way in between, so
every variable is from the same global step and none holds half of an update. Otherwise it
is read again at once (an update takes milliseconds). The reads are resource-variable reads,
which copy on a concurrent write, so a value fetched is the value read. An update that
failed half-way (a PS lost mid-update) leaves the counter odd, and every read is then
refused until PS 0 opens the next sync epoch and rounds it up to even (``settle``, in
graph/seqlock.py with the counter), after the chief has restored the variables.

A snapshot also copies the owner table (sync/fencing.py; not a variable of the model, read
in the same run without the seqlock: its slots only grow). A restore raises the table to
at least the copy (``scatter_max``), so after PS 0 restarts, an incarnation that had
superseded an older process still does before it joins again: the older one's claim, if it
wakes first, is refused. The restore itself runs behind the chief's fence.

The chief restores nothing while it snapshots: its snapshot thread belongs to one sync epoch
and its store refuses a copy begun under an earlier generation (``SnapshotStore.begin``), so
a read that overlapped a restore is never kept.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ..graph.training import TrainingGraph
from ..process.context import Context
from ..sync.fencing import merge_owners
from ..sync.handover import CHIEF_POLL_SECONDS
from ..sync.names import SYNC_STATE_DEVICE
from ..sync.protocol import SyncProtocol

v1 = tf.compat.v1

# A read that met an update is made again at once; after this many the thread waits for the
# next due step (an update every few milliseconds would otherwise keep it spinning).
READ_ATTEMPTS = 20
READ_TIMEOUT_SECONDS = 30.0
_CHECKPOINT_STEP = re.compile(r"-(\d+)$")


# -- the rules (pure) ------------------------------------------------------------------------

def consistent(before: int, after: int) -> bool:
    """A read between two equal, even counter values saw no update applied or under way."""
    return before == after and before % 2 == 0


def due(step: int, last: int, every: int) -> bool:
    """A snapshot is due when ``step`` crossed a multiple of ``every`` since ``last``."""
    return every > 0 and step // every > last // every


def checkpoint_step(path: str | None) -> int | None:
    """The global step of a checkpoint prefix (``.../model.ckpt-120`` -> 120)."""
    m = _CHECKPOINT_STEP.search(path or "")
    return int(m[1]) if m else None


def choose_source(snapshot_step: int | None, checkpoint: int | None) -> str:
    """"snapshot", "checkpoint" or "initialize": the freshest of what there is.

    A checkpoint at the same step wins (it is what a new chief process would find too).
    """
    if snapshot_step is not None and (checkpoint is None or snapshot_step > checkpoint):
        return "snapshot"
    return "checkpoint" if checkpoint is not None else "initialize"


# -- the store ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    step: int
    values: dict[str, np.ndarray]
    owners: np.ndarray | None = None  # the owner table (sync/fencing.py)


class SnapshotStore:
    """The chief's freshest snapshot. Thread-safe; one per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None
        self._generation = 0

    def begin(self) -> int:
        """The generation a snapshot thread reads under (see ``invalidate``)."""
        with self._lock:
            return self._generation

    def invalidate(self) -> None:
        """Before any restore: copies begun until now are refused."""
        with self._lock:
            self._generation += 1

    def offer(self, generation: int, snapshot: Snapshot) -> bool:
        with self._lock:
            if generation != self._generation:
                return False
            self._latest = snapshot
            return True

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._latest


# -- reading and restoring ---------------------------------------------------------------------

@dataclass
class ReadOps:
    before: Any
    values: dict[str, Any]
    after: Any
    owners: Any = None


def build_read(training: TrainingGraph) -> ReadOps:
    """Counter, then every global variable, then the counter again, in one run."""
    seqlock = training.seqlock
    assert seqlock is not None
    with training.graph.as_default():
        with tf.device(SYNC_STATE_DEVICE):
            before = seqlock.counter.read_value()
        with tf.control_dependencies([before]):
            values = {v.op.name: v.read_value() for v in v1.global_variables()}
        with tf.device(SYNC_STATE_DEVICE), tf.control_dependencies(list(values.values())):
            after = seqlock.counter.read_value()
    owners = training.fence.read_all if training.fence is not None else None
    return ReadOps(before=before, values=values, after=after, owners=owners)


def restore_snapshot(sess: Any, training: TrainingGraph, snapshot: Snapshot) -> bool:
    """Assign ``snapshot`` to every global variable in one run, behind the fence, and raise
    the owner table to the snapshot's; False (nothing written) when it does not match the
    graph's variables."""
    fence = training.fence
    with training.graph.as_default(), tf.control_dependencies(
            [fence.check] if fence is not None else []):
        variables = {v.op.name: v for v in v1.global_variables()}
        if set(variables) != set(snapshot.values) or any(
                tuple(v.shape.as_list()) != snapshot.values[name].shape
                for name, v in variables.items()):
            return False
        feeds, assigns = {}, []
        for name, v in variables.items():
            value = v1.placeholder(v.dtype.base_dtype, v.shape)
            feeds[value] = snapshot.values[name]
            assigns.append(v.assign(value, read_value=False))
        sess.run(tf.group(*assigns), feed_dict=feeds)
    if fence is not None and snapshot.owners is not None \
            and snapshot.owners.shape == tuple(fence.owner.shape.as_list()):
        merge_owners(sess, fence, snapshot.owners)
    return True


# -- the chief's thread ------------------------------------------------------------------------

class Snapshotter:
    """A snapshot every ``snapshotEverySteps`` global steps, for the chief's current epoch;
    and one whenever PS 0 holds the updates for a handover (sync/handover.py), which it
    acknowledges: a PS leaving at SIGTERM then exits, its state in this copy."""

    def __init__(self, ctx: Context, store: SnapshotStore, sess: Any, training: TrainingGraph,
                 step: int, protocol: SyncProtocol | None = None) -> None:
        self.ctx, self.store, self.sess, self.protocol = ctx, store, sess, protocol
        self.every = ctx.cfg.training.snapshot_every_steps
        self.read = build_read(training)
        self.step_name = training.global_step.op.name
        self.generation = store.begin()
        self.last = step
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.wake.set()  # one at once: the state the epoch starts from
        self.thread = threading.Thread(target=self.run, name="snapshot", daemon=True)
        self.thread.start()

    def notify(self, step: int) -> None:
        """After each of the chief's steps (cheap: no run unless one is due)."""
        if due(step, self.last, self.every):
            self.last = step
            self.wake.set()

    def stop(self) -> None:
        """Leaving the epoch: a read still under way is refused by the store."""
        self.stopped.set()
        self.wake.set()
        self.store.invalidate()

    def run(self) -> None:
        while True:
            woken = self.wake.wait(CHIEF_POLL_SECONDS if self.protocol is not None else None)
            if self.stopped.is_set():
                return
            if woken:
                self.wake.clear()
                self.take()
            else:
                self.hand_over()

    def hand_over(self) -> None:
        """If PS 0 holds the updates for a handover and no snapshot of the held step was
        acknowledged yet: take one (nothing moves, so it holds exactly that step) and say so."""
        assert self.protocol is not None
        try:
            asked, held, saved, _ = self.protocol.handover_state()
            if not asked or held < 0 or saved >= held:
                return
            step = self.take()
            if step != held:
                return  # read again at the next look
            self.protocol.ack_handover(step)
        except tf.errors.OpError:
            return  # PS 0 gone or fenced off: the epoch ends
        self.ctx.log(f"handover: snapshot at global step {step}, taken while the updates "
                     f"are held, at unix time {time.time():.3f}")

    def take(self) -> int | None:
        """A consistent snapshot into the store; its global step, None if none was kept."""
        opts = v1.RunOptions(timeout_in_ms=int(READ_TIMEOUT_SECONDS * 1000))
        fetches = {"before": self.read.before, "values": self.read.values,
                   "after": self.read.after}
        if self.read.owners is not None:
            fetches["owners"] = self.read.owners
        for _ in range(READ_ATTEMPTS):
            if self.stopped.is_set():
                return None
            try:
                out = self.sess.run(fetches, options=opts)
            except tf.errors.OpError:
                return None  # a PS lost or not restored yet: the epoch ends, or the next one works
            if consistent(int(out["before"]), int(out["after"])):
                step = int(out["values"][self.step_name])
                if self.store.offer(self.generation,
                                    Snapshot(step, out["values"], out.get("owners"))):
                    self.ctx.metrics.snapshot_step.set(step)
                    return step
                return None
            time.sleep(0)  # let the update finish
        return None
