"""Which sync epoch a replica (chief or worker) joins after it left one, and the wait for it.

After a peer error in an epoch, the checks decide (``epoch_to_skip``): every PS answers and
PS 0 still runs the epoch, so only a link failed (typically a PS still dialling the address
a replaced pod had, until gRPC resolves the name again: process/sessions.py) and the replica
joins the same epoch again; or a PS was lost, the epoch moved on or ended, or the link failed
too often in a row, and it waits for a new epoch. The "left sync epoch" line names the check
that decided.

A PS that did not answer is not enough to join the old epoch again once it answers: a PS
that was lost and is back answers before PS 0 has opened the new epoch, and a replica that
joined the old one then would read its variables uninitialized on that PS
(FailedPreconditionError). But PS 0 opens a new epoch only after losing a PS, so a replica
whose own link failed (a probe that timed out under load, a PS still dialling a replaced
pod's old address) would wait for one until ``chiefLostTimeoutSeconds`` while the others
train on without it. It joins the epoch it left again once the epoch shows itself healthy
without it (:class:`Healing`): every PS answers, and after that the global step moves on
in that same epoch, which no update could do with a PS that lost its variables.
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
# The epoch a replica left because a PS did not answer is healthy once every PS answers and
# its global step then moves on by this many updates (Healing); the probe is made at most
# every HEAL_PROBE_SECONDS.
HEALED_STEPS = 2
HEAL_PROBE_SECONDS = 2.0


@dataclass(frozen=True)
class Skip:
    """After a peer error in an epoch: the epoch not to join again (None: join it again),
    the check that decided, and whether that epoch may be joined again once it is healthy
    without this replica (a PS did not answer: :class:`Healing`)."""

    epoch: int | None
    why: str
    heals: bool = False


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
        return Skip(epoch, f"a PS did not answer: {peer_error(err, 160)}", heals=True)
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


class Healing:
    """Whether the sync epoch a replica left because a PS did not answer is healthy without
    it: every PS answered a probe, and after that the epoch's global step moved on by
    HEALED_STEPS (a PS lost and back would have failed those updates). A read of another
    epoch or phase starts over."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.answered = False  # every PS answered the last probe
        self.base: int | None = None  # the global step first read after that probe
        self.next_probe = 0.0

    def healed(self, protocol: SyncProtocol, state: SyncState) -> bool:
        if (state.epoch != self.epoch or state.phase != Phase.RUNNING
                or state.global_step is None):  # fmt: skip
            self.answered, self.base = False, None
            return False
        if not self.answered:
            now = time.monotonic()
            if now < self.next_probe:
                return False
            self.next_probe = now + HEAL_PROBE_SECONDS
            try:
                protocol.probe()
            except PEER_ERRORS:
                protocol.reopen()
                return False
            self.answered = True  # the step read with this state came before the probe
            return False
        if self.base is None:
            self.base = state.global_step
        return state.global_step >= self.base + HEALED_STEPS


def wait_for_epoch(ctx: Context, protocol: SyncProtocol, left: int | None, limit: float,
                   heals: bool = False) -> SyncState:  # fmt: skip
    """The next sync epoch to join (not ``left``), or the DONE state; with ``heals``, also
    ``left`` itself once it is healthy without this replica (:class:`Healing`)."""
    deadline = time.monotonic() + limit
    healing = Healing(left) if heals and left is not None else None
    ctx.watchdog_armed = False  # this wait has its own bound
    while True:
        check_leaving(ctx)
        try:
            state = protocol.state()
            if state.initialized and (state.phase == Phase.DONE or (
                    state.phase in JOINABLE and state.epoch not in (0, left))):
                return state
            if healing is not None and state.initialized and healing.healed(protocol, state):
                ctx.log(f"sync epoch {state.epoch:x} went on without this replica (every PS "
                        f"answers, global step {healing.base} -> {state.global_step}): "
                        f"joining it again")
                return state
        except PEER_ERRORS:
            protocol.reopen()
        if time.monotonic() > deadline:
            raise Exit(exitcodes.RETRY, f"no sync epoch was opened within {limit:.0f}s")
        time.sleep(POLL * 2)
