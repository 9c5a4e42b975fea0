"""Which sync epoch a replica (chief or worker) joins after it left one, and the wait for it.

After a peer error in an epoch, the checks decide (``epoch_to_skip``): every PS answers and
PS 0 still runs the epoch, so only a link failed (typically a PS still dialling the address
a replaced pod had, until gRPC resolves the name again: process/sessions.py) and the replica
joins the same epoch again; or a PS was lost, the epoch moved on or ended, or the link failed
too often in a row, and it waits for a new epoch. The "left sync epoch" line names the check
that decided.

A PS that did not answer is not probed again while the epoch runs: a PS that was lost and
is back answers before PS 0 has opened the new epoch, and a replica that joined the old one
then would read its variables uninitialized on that PS (FailedPreconditionError).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..foundation import exitcodes
from ..foundation.laps import Laps
from ..foundation.phases import Phase
from ..process.context import Context
from ..process.exits import Exit
from ..sync.protocol import PEER_ERRORS, POLL, SyncProtocol, SyncState, peer_error
from .steploop import check_leaving

# The phases in which a replica may join an epoch.
JOINABLE = (Phase.RESETTING, Phase.GATHERING, Phase.RUNNING)

# A replica whose link to a peer failed rejoins the same epoch (epoch_to_skip) at most this
# many times in a row, each failing within LINK_RETRY_WINDOW s of joining, then waits for a
# new epoch like a replica that lost a PS.
LINK_RETRIES = 5
LINK_RETRY_WINDOW = 60.0
LINK_RETRY_PAUSE = 1.0


@dataclass(frozen=True)
class Skip:
    """After a peer error in an epoch: the epoch not to join again (None: join it again),
    and the check that decided."""

    epoch: int | None
    why: str


class LinkFailures:
    """A replica's peer errors in a row, each within LINK_RETRY_WINDOW s of joining."""

    def __init__(self) -> None:
        self.count = 0

    def epoch_to_skip(self, protocol: SyncProtocol, epoch: int, joined: float) -> Skip:
        """The epoch not to join again after a peer error in ``epoch`` joined at ``joined``
        (time.monotonic)."""
        quick = time.monotonic() - joined < LINK_RETRY_WINDOW
        self.count = self.count + 1 if quick else 1
        return epoch_to_skip(protocol, epoch, self.count)


def epoch_to_skip(protocol: SyncProtocol, epoch: int, failures: int) -> Skip:
    """After a peer error in ``epoch`` (the ``failures``-th in a row): the epoch not to join
    again, None when every PS answers and PS 0 still runs ``epoch`` (the link failed, not a
    PS)."""
    if failures > LINK_RETRIES:
        return Skip(epoch, f"{failures} link failures in a row")
    try:
        protocol.probe()
        state = protocol.state()
    except PEER_ERRORS as err:
        protocol.reopen()
        return Skip(epoch, f"a PS did not answer: {peer_error(err, 160)}")
    if state.epoch != epoch:
        return Skip(epoch, f"PS 0 runs sync epoch {state.epoch:x}")
    if state.phase not in JOINABLE:
        return Skip(epoch, f"the epoch is {state.phase.name}")
    time.sleep(LINK_RETRY_PAUSE)
    return Skip(None, "every PS answers and PS 0 still runs it")


def after_peer_error(ctx: Context, protocol: SyncProtocol, links: LinkFailures, epoch: int,
                     joined: float) -> tuple[Skip, str]:  # fmt: skip
    """The checks after a peer error in ``epoch`` (joined at ``joined``): a new session
    unless superseded (``reopen`` stands down first), then the epoch not to join again
    (LinkFailures). That decision, and the "left sync epoch" line's account of the checks:
    which decided, and how long each took (the error came that long before the line)."""
    laps = Laps()
    protocol.reopen()
    laps.lap("fence and session")
    skip = links.epoch_to_skip(protocol, epoch, joined)
    laps.lap("probe")
    return skip, f" ({skip.why}; checks after the error {laps})"


def wait_for_epoch(ctx: Context, protocol: SyncProtocol, left: int | None,
                   limit: float) -> SyncState:  # fmt: skip
    """The next sync epoch to join (not ``left``), or the DONE state."""
    deadline = time.monotonic() + limit
    ctx.watchdog_armed = False  # this wait has its own bound
    while True:
        check_leaving(ctx)
        try:
            state = protocol.state()
            if state.initialized and (state.phase == Phase.DONE or (
                    state.phase in JOINABLE and state.epoch not in (0, left))):
                return state
        except PEER_ERRORS:
            protocol.reopen()
        if time.monotonic() > deadline:
            raise Exit(exitcodes.RETRY, f"no sync epoch was opened within {limit:.0f}s")
        time.sleep(POLL * 2)
