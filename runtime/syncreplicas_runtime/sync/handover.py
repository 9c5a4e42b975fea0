"""Handing over at SIGTERM: PS 0's sync loop holds the updates while the chief copies the
state that a leaving process would otherwise lose, so that its replacement starts from the
latest update.

Three small variables on PS 0, outside checkpoints and every sync epoch's container:

- ``request[slot]`` (slot 0: the chief, 1 + k: PS k): 1 while that process asks for the
  updates to be held. PS 0's sync loop reads the maximum in the state read it makes before
  every update anyway (graph/training.py), so asking costs no run per step;
- ``held``: the global step the loop holds the updates at (-1: not holding). The loop holds
  between two updates (it is one thread and applies an update in one run), so every
  variable on every PS is then from that step;
- ``saved``: the global step of the chief's snapshot taken while held (-1: none yet).

A PS at SIGTERM asks, waits until ``saved >= held >= 0`` (its state is in the chief's
memory) and exits; its replacement is restored from that snapshot (state/checkpoints.py),
at the step the updates were held at: no update lost. The chief at SIGTERM asks too, and
writes its checkpoint at the held step, then withdraws its request (the others go on). A PS
that sees the chief ask (the whole job stopping: that checkpoint reads every PS) waits for
the withdrawal instead, however early its state was in the snapshot (ps/handover.py).
Opening a sync epoch clears all three (a PS that handed over is gone by then); PS 0 lets the
updates go on by itself after HOLD_LIMIT_SECONDS whatever was asked.

The chief's acknowledgement and its own request run behind its fence (sync/fencing.py): a
superseded chief process can neither hold the job nor tell a PS that its state is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import tensorflow as tf

from .names import (
    HANDOVER_HELD_VARIABLE,
    HANDOVER_REQUEST_VARIABLE,
    HANDOVER_SAVED_VARIABLE,
    SYNC_STATE_DEVICE,
)

v1 = tf.compat.v1

# A leaving PS waits this long for the chief's snapshot, then exits without it.
HANDOVER_WAIT_SECONDS = 5.0
# ... and, once its state is in that snapshot, this long more for the chief's SIGTERM
# checkpoint (within Kubernetes' default grace period of 30 s).
CHECKPOINT_WAIT_SECONDS = 20.0
# PS 0 holds the updates no longer than this, whoever asked (a requester that died).
HOLD_LIMIT_SECONDS = 10.0
# How often the chief looks for a request (its snapshot thread: a read of PS 0 each time,
# for the whole run, so the most of an idle job's CPU at 0.05 s), and a leaver for the
# answer. A leaving PS's updates are held up to this much longer; it waits 5 s at most.
CHIEF_POLL_SECONDS = 0.25
POLL_SECONDS = 0.02
CHIEF_SLOT = 0


def ps_slot(ps_index: int) -> int:
    return 1 + ps_index


def request_variable(parameter_servers: int) -> Any:
    """The request flags on PS 0 (built under a graph's ``as_default()``)."""
    with tf.device(SYNC_STATE_DEVICE):
        return v1.get_variable(HANDOVER_REQUEST_VARIABLE, [1 + parameter_servers], tf.int64,
                               initializer=v1.zeros_initializer(), trainable=False,
                               collections=[], use_resource=True)


class HandoverState(NamedTuple):
    """What PS 0 says of the handover (-1: none)."""

    asked: bool       # anyone asks the updates to be held
    held: int         # the global step they are held at
    saved: int        # the step of the chief's snapshot taken while held
    chief_asks: bool  # the chief asks (its SIGTERM checkpoint: the whole job may be stopping)


@dataclass
class HandoverOps:
    """The ops of the handover, in the sync protocol's graph (sync/protocol.py)."""

    init: Any        # also run when an epoch opens: nothing asked, nothing held
    read: list[Any]  # [any request, held, saved, the chief's request]
    slot: Any        # placeholder: the asking slot
    step: Any        # placeholder: a global step
    ask: Any
    withdraw: Any
    hold: Any
    ack: Any


def build_handover(parameter_servers: int, fence_check: Any | None) -> HandoverOps:
    """Built under the protocol graph's ``as_default()``; ``fence_check`` (a replica's)
    goes before its writes."""
    request = request_variable(parameter_servers)
    with tf.device(SYNC_STATE_DEVICE):
        kw: dict[str, Any] = {"trainable": False, "collections": [], "use_resource": True,
                              "initializer": v1.constant_initializer(-1)}
        held = v1.get_variable(HANDOVER_HELD_VARIABLE, [], tf.int64, **kw)
        saved = v1.get_variable(HANDOVER_SAVED_VARIABLE, [], tf.int64, **kw)
        slot = v1.placeholder(tf.int32, [])
        step = v1.placeholder(tf.int64, [])
        init = tf.group(request.assign(tf.zeros([1 + parameter_servers], tf.int64),
                                       read_value=False),
                        held.assign(-1, read_value=False), saved.assign(-1, read_value=False))
        fenced = tf.control_dependencies([fence_check] if fence_check is not None else [])
        with fenced:
            ask = v1.scatter_update(request, [slot], [tf.constant(1, tf.int64)])
            withdraw = tf.group(v1.scatter_update(request, [slot], [tf.constant(0, tf.int64)]))
            ack = saved.assign(step, read_value=False)
        return HandoverOps(
            init=init, read=[tf.reduce_max(request.read_value()), held.read_value(),
                             saved.read_value(), request.read_value()[CHIEF_SLOT]],
            slot=slot, step=step, ask=tf.group(ask), withdraw=withdraw,
            hold=tf.group(held.assign(step, read_value=False),
                          saved.assign(-1, read_value=False)),
            ack=ack)

