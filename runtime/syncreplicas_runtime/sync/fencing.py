"""Fencing: a replaced replica whose old process still runs never counts again.

Every replica process has an *incarnation* (``SYNCREPLICAS_INCARNATION``,
foundation/config.py): the operator's clock in ms when it created the pod, so a
replacement's is higher than the process it replaces. PS 0 keeps the **owner table**
(``syncreplicas/owner``, one int64 per replica slot, outside checkpoints): the highest
incarnation that joined each slot. A process claims its slot every time it joins a sync
epoch, with an atomic ``scatter_max`` of its incarnation, and finds out at once when a newer
one holds it.

Every write a replica makes to the shared state (a gradient push and the token it takes,
the tokens it drops on joining, leaving an elastic job, its ``ready``/``done`` flags, the
chief's restore, initialization and checkpoint save) runs behind :attr:`FenceOps.check`:
an assertion on PS 0, built from a constant on PS 0 (no tensor from the replica, so it
holds even when PS 0 cannot reach the replica) and placed, by control dependencies, before
anything of that run touches the shared state. A superseded process's run fails there
(InvalidArgumentError naming both incarnations) and the process exits FENCED (77).

The check passes while ``owner[slot] <= mine``: equal after this process's claim, lower
only when PS 0 restarted and lost the table (then every run of the old epoch fails on the
lost PS anyway, and the replica claims again as it joins the next epoch).

**Asking PS 0 without a session of one's own.** TensorFlow fences masters by itself, in a
way that cannot be used here: when a master task (``/job:worker/task:0``) creates a session
on a PS with a different incarnation of its devices than the sessions it made before, the
PS deletes those older sessions. A replacement's first session therefore ends every session
of the old process (its runs fail, Aborted), and, the other way round, an old process that
wakes up and opens a session again would end every session of its replacement. So an old
process must learn that it is superseded without opening a session under its own name:
:class:`FenceReader` reads the owner table through PS 0's own master (a session whose target
is PS 0), and a replica checks it before it opens any session again (``SyncProtocol.reopen``)
and after any failed run.

A process blocked in a run that never returns (its token taken by nobody, its peer gone)
would never reach the check: :func:`start_fence_watch` reads ``owner[slot]`` once a second
while the replica makes no progress, so an old process that can reach PS 0 again exits
within a second or two of waking, whatever it was doing.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ..foundation import exitcodes
from ..foundation.config import ClusterConfig
from ..process.context import Context
from ..process.exits import Exit
from .names import OWNER_VARIABLE, SYNC_STATE_DEVICE

v1 = tf.compat.v1

# The first datum of the check's assertion: how its error is told from any other.
FENCE_MARK = "syncreplicas-fence"
_FENCE_ERROR = re.compile(re.escape(FENCE_MARK) + r"\] \[(-?\d+)\] \[(-?\d+)\]")
# The watch reads the owner table only while the replica made no progress this long, and
# then at most once per FENCE_POLL_SECONDS: a replica that trains is checked by its steps.
FENCE_IDLE_SECONDS = 2.0
FENCE_POLL_SECONDS = 1.0


def owner_table(total: int) -> Any:
    """The owner table on PS 0 (the same resource in every graph that builds it)."""
    with tf.device(SYNC_STATE_DEVICE):
        return v1.get_variable(OWNER_VARIABLE, [total], tf.int64, trainable=False,
                               collections=[], use_resource=True,
                               initializer=v1.zeros_initializer())


@dataclass
class FenceOps:
    """The owner table as one replica process sees it (built in any graph of it)."""

    owner: Any           # the table
    check: Any           # op: fails unless no newer incarnation holds this slot
    held: Any            # owner[slot]
    claim: Any           # scatter_max(owner[slot], mine); fetches owner[slot] after it
    merge: Any           # scatter_max of ``merged`` into every slot (a snapshot's table)
    merged: Any          # placeholder: a whole table
    read_all: Any        # the whole table


def build_fence(owner: Any, slot: int, incarnation: int) -> FenceOps:
    """The fence ops of replica ``slot`` with ``incarnation`` on ``owner`` (owner_table)."""
    total = int(owner.shape[0])
    with tf.device(SYNC_STATE_DEVICE):
        mine = tf.constant(incarnation, tf.int64)
        held = owner.sparse_read(slot)
        check = tf.debugging.Assert(tf.less_equal(held, mine), [FENCE_MARK, held, mine],
                                    name="syncreplicas_fence")
        raised = tf.raw_ops.ResourceScatterMax(resource=owner.handle, indices=[slot],
                                               updates=tf.reshape(mine, [1]))
        with tf.control_dependencies([raised]):
            claim = owner.sparse_read(slot)
        merged = v1.placeholder(tf.int64, [total])
        merge = tf.raw_ops.ResourceScatterMax(resource=owner.handle,
                                              indices=tf.range(total), updates=merged)
        read_all = owner.read_value()
    return FenceOps(owner=owner, check=check, held=held, claim=claim, merge=merge,
                    merged=merged, read_all=read_all)


@dataclass(frozen=True)
class Superseded:
    """A fence check failed: ``owner`` holds the slot, this process is ``mine``."""

    owner: int
    mine: int


def superseded_by(err: BaseException) -> Superseded | None:
    """The incarnations of a failed fence check, or None for any other error."""
    message = getattr(err, "message", None) or str(err)
    found = _FENCE_ERROR.search(message)
    return Superseded(int(found[1]), int(found[2])) if found else None


def fenced(cfg: ClusterConfig, owner: int) -> Exit:
    """The exit of a process superseded by ``owner`` (FENCED: never restarted)."""
    return Exit(exitcodes.FENCED, exitcodes.fenced_reason(cfg.replica_id, cfg.incarnation,
                                                          owner))


class FenceReader:
    """Reads ``owner[slot]`` through PS 0's master (see the module's docstring: a session
    under this replica's own name would end its replacement's sessions). Thread-safe."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.held = owner_table(cfg.total_replicas).sparse_read(cfg.replica_id)
        self._target = f"grpc://{cfg.ps_addresses[0]}"
        # A bound on creating and extending the session too (RunOptions' timeout covers
        # only the run): PS 0 out of reach must fail the read, not hang the caller.
        self._config = v1.ConfigProto(device_filters=[SYNC_STATE_DEVICE],
                                      operation_timeout_in_ms=5000)
        self._session: Any = None
        self._lock = threading.Lock()

    def read(self, timeout: float = 2.0) -> int:
        """``owner[slot]``; an OpError while PS 0 cannot be reached."""
        with self._lock:
            if self._session is None:
                self._session = v1.Session(self._target, graph=self.graph,
                                           config=self._config)
            try:
                return int(self._session.run(self.held, options=v1.RunOptions(
                    timeout_in_ms=int(timeout * 1000))))
            except (tf.errors.OpError, UnicodeDecodeError) as err:
                old, self._session = self._session, None  # a new one next time
                threading.Thread(target=old.close, daemon=True).start()
                if isinstance(err, UnicodeDecodeError):
                    raise tf.errors.AbortedError(None, None, str(err)) from err
                raise


def merge_owners(sess: Any, fence: FenceOps, owners: np.ndarray) -> None:
    """Raise the owner table to at least ``owners`` (never lowers a slot)."""
    sess.run(fence.merge, {fence.merged: owners})


def start_fence_watch(ctx: Context, read_owner: Any) -> None:
    """Exit FENCED from any state once a newer incarnation holds this replica's slot.

    ``read_owner()`` reads ``owner[slot]`` (an OpError while PS 0 cannot be reached). Also
    makes the liveness watchdog (process/context.py) check the fence before it exits 75.
    """
    cfg = ctx.cfg

    def superseded() -> int | None:
        try:
            owner = int(read_owner())
        except tf.errors.OpError:
            return None  # PS 0 out of reach (or restarted, its table not made yet)
        return owner if owner > cfg.incarnation else None

    ctx.superseded = superseded

    def watch() -> None:
        while True:
            time.sleep(FENCE_POLL_SECONDS)
            if time.monotonic() - ctx.last_progress < FENCE_IDLE_SECONDS:
                continue
            owner = superseded()
            if owner is not None:
                err = fenced(cfg, owner)
                ctx.exit_now(err.code, err.reason)

    threading.Thread(target=watch, name="fence", daemon=True).start()
