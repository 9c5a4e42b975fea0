"""A parameter server at SIGTERM (a node drained, a spot node preempted, its pod deleted):
hand its state over before it exits, so that its replacement loses no update.

The PS asks PS 0's sync loop to hold the updates and waits until the chief's snapshot holds
the step they are held at (sync/handover.py); then it exits 143. Its replacement comes back
empty, PS 0 opens a new sync epoch and the chief restores that snapshot onto every PS: the
job goes on from the step the updates stopped at. Bounded: without an answer within
HANDOVER_WAIT_SECONDS (no chief, PS 0 gone, a chief too busy) it exits as before, saying so;
its replacement is then restored from the chief's last periodic snapshot or the checkpoint.
With snapshots off (``snapshotEverySteps`` 0) there is nowhere to hand over to: it exits at
once, as before, and says so.

When the whole job stops (suspended, evicted by its queue, deleted), the chief writes its
SIGTERM checkpoint at the same time, reading every PS: a PS that sees the chief ask too stays
until that checkpoint is written (the chief withdraws; bounded by CHECKPOINT_WAIT_SECONDS),
whether or not its snapshot came first: leaving would fail the checkpoint.
"""

from __future__ import annotations

import threading
import time

import tensorflow as tf

from ..process.context import SIGTERM_EXIT, Context
from ..process.sessions import coordinator_session_config
from ..sync.handover import (
    CHECKPOINT_WAIT_SECONDS,
    HANDOVER_WAIT_SECONDS,
    POLL_SECONDS,
    ps_slot,
)
from ..sync.protocol import SyncProtocol


def hand_over_at_sigterm(ctx: Context) -> None:
    """The SIGTERM handler of a PS (runs the handover in a thread: the handler returns)."""
    if ctx.stopping:
        return
    ctx.stopping = True
    threading.Thread(target=hand_over, args=(ctx,), name="handover", daemon=True).start()


def hand_over(ctx: Context) -> None:
    """Ask, wait for the chief's snapshot or SIGTERM checkpoint (bounded), exit 143 with
    what happened."""
    t0 = time.monotonic()
    if not ctx.cfg.training.snapshot_every_steps:
        ctx.log("handover: none (snapshots are off: snapshotEverySteps 0); the replacement "
                "is restored from the latest checkpoint")
        ctx.exit_now(SIGTERM_EXIT, "stopped by SIGTERM (no handover: snapshots are off)")
    outcome: list[tuple[int, str] | str] = []
    asker = threading.Thread(target=lambda: outcome.append(ask_and_wait(ctx, t0)),
                             name="handover-ask", daemon=True)
    asker.start()
    asker.join(HANDOVER_WAIT_SECONDS + CHECKPOINT_WAIT_SECONDS + 0.5)
    took = time.monotonic() - t0
    result = outcome[0] if outcome else f"no answer within {HANDOVER_WAIT_SECONDS:.0f}s"
    if isinstance(result, tuple):
        step, holder = result
        ctx.log(f"handover: {holder} holds global step {step}; exiting "
                f"{took:.2f}s after SIGTERM at unix time {time.time():.3f}")
        ctx.exit_now(SIGTERM_EXIT, f"stopped by SIGTERM after handing over its state at "
                     f"global step {step} ({took:.2f}s)", step)
    ctx.log(f"handover: none ({result}); exiting {took:.2f}s after SIGTERM: the replacement "
            "is restored from the chief's last snapshot or the latest checkpoint")
    ctx.exit_now(SIGTERM_EXIT, f"stopped by SIGTERM without a handover ({result})")


SNAPSHOT = "the chief's snapshot"
CHECKPOINT = "the chief's SIGTERM checkpoint"


def ask_and_wait(ctx: Context, t0: float) -> tuple[int, str] | str:
    """(the held global step, what holds it) once the chief's snapshot holds it, or its
    SIGTERM checkpoint when the chief is stopping too; else why not."""
    cfg = ctx.cfg
    deadline = t0 + HANDOVER_WAIT_SECONDS
    chief_stopping = False
    try:
        # Every PS: this one and PS 0, where the handover's state lives.
        protocol = SyncProtocol(cfg, ctx.server.target, config=coordinator_session_config())
        protocol.ask_handover(ps_slot(cfg.index))
        while time.monotonic() < deadline:
            state = protocol.handover_state()
            if state.chief_asks and not chief_stopping:
                # The whole job stops: the chief's checkpoint reads this PS; stay for it.
                chief_stopping = True
                deadline = time.monotonic() + CHECKPOINT_WAIT_SECONDS
                ctx.log("handover: the chief is checkpointing at SIGTERM; staying until "
                        "it is written")
            elif chief_stopping and not state.chief_asks and state.held >= 0:
                return state.held, CHECKPOINT
            elif not chief_stopping and state.held >= 0 and state.saved >= state.held:
                return state.held, SNAPSHOT
            time.sleep(POLL_SECONDS)
    except tf.errors.OpError as err:
        return f"PS 0 did not answer: {type(err).__name__}"
    if chief_stopping:
        return f"the chief's checkpoint not written within {CHECKPOINT_WAIT_SECONDS:.0f}s"
    return f"no snapshot within {HANDOVER_WAIT_SECONDS:.0f}s: no chief, or it is not training"
