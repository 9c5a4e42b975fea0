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
"""

from __future__ import annotations

import signal
import threading
import time

import tensorflow as tf

from ..process.context import Context
from ..process.sessions import coordinator_session_config
from ..sync.handover import HANDOVER_WAIT_SECONDS, POLL_SECONDS, ps_slot
from ..sync.protocol import SyncProtocol

SIGTERM_EXIT = 128 + signal.SIGTERM


def hand_over_at_sigterm(ctx: Context) -> None:
    """The SIGTERM handler of a PS (runs the handover in a thread: the handler returns)."""
    if ctx.stopping:
        return
    ctx.stopping = True
    threading.Thread(target=hand_over, args=(ctx,), name="handover", daemon=True).start()


def hand_over(ctx: Context) -> None:
    """Ask, wait for the chief's snapshot (bounded), exit 143 with what happened."""
    t0 = time.monotonic()
    if not ctx.cfg.training.snapshot_every_steps:
        ctx.log("handover: none (snapshots are off: snapshotEverySteps 0); the replacement "
                "is restored from the latest checkpoint")
        ctx.exit_now(SIGTERM_EXIT, "stopped by SIGTERM (no handover: snapshots are off)")
    outcome: list[int | str] = []
    asker = threading.Thread(target=lambda: outcome.append(ask_and_wait(ctx, t0)),
                             name="handover-ask", daemon=True)
    asker.start()
    asker.join(HANDOVER_WAIT_SECONDS + 0.5)
    took = time.monotonic() - t0
    result = outcome[0] if outcome else f"no answer within {HANDOVER_WAIT_SECONDS:.0f}s"
    if isinstance(result, int):
        ctx.log(f"handover: the chief's snapshot holds global step {result}; exiting "
                f"{took:.2f}s after SIGTERM at unix time {time.time():.3f}")
        ctx.exit_now(SIGTERM_EXIT, f"stopped by SIGTERM after handing over its state at "
                     f"global step {result} ({took:.2f}s)", result)
    ctx.log(f"handover: none ({result}); exiting {took:.2f}s after SIGTERM: the replacement "
            "is restored from the chief's last snapshot or the latest checkpoint")
    ctx.exit_now(SIGTERM_EXIT, f"stopped by SIGTERM without a handover ({result})")


def ask_and_wait(ctx: Context, t0: float) -> int | str:
    """The held global step once the chief's snapshot holds it, or why not."""
    cfg = ctx.cfg
    deadline = t0 + HANDOVER_WAIT_SECONDS
    try:
        # Every PS: this one and PS 0, where the handover's state lives.
        protocol = SyncProtocol(cfg, ctx.server.target, config=coordinator_session_config())
        protocol.ask_handover(ps_slot(cfg.index))
        while time.monotonic() < deadline:
            _, held, saved = protocol.handover_state()
            if held >= 0 and saved >= held:
                return held
            time.sleep(POLL_SECONDS)
    except tf.errors.OpError as err:
        return f"PS 0 did not answer: {type(err).__name__}"
    return f"no snapshot within {HANDOVER_WAIT_SECONDS:.0f}s: no chief, or it is not training"
