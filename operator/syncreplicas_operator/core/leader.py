"""Leader election on a ``coordination.k8s.io/v1`` Lease: the rules, pure.

Several operator replicas run; one acts. The Lease in the operator's namespace names the
one (``holderIdentity``), as client-go's leaderelection does for every controller-runtime
operator, and with its timings (``leaseDuration`` 15 s, ``renewDeadline`` 10 s,
``retryPeriod`` 2 s by default):

- Every replica reads the Lease every retry period. A follower never compares its clock
  with the times written in the Lease: it notes, on its own monotonic clock, when it last
  saw the record change, and takes the Lease only once ``leaseDuration`` has passed since
  then without a change (or at once when the Lease is released: no holder).
- The leader renews every retry period. If no renewal has succeeded for ``renewDeadline``,
  it stops acting. renewDeadline < leaseDuration, and a follower's wait starts no earlier
  than the last successful renewal was written, so the old leader has stopped before
  anyone else can take over (as long as clocks run at the same rate, not the same time).
- A leader that stops (SIGTERM) releases the Lease: no holder, a duration of 1 s, so a
  follower takes over at its next look instead of after leaseDuration.
- Writes are conditional on the resourceVersion read: of two replicas taking an expired
  Lease at once, one wins and the other reads again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Final

LEASE_DURATION: Final = 15.0
RENEW_DEADLINE: Final = 10.0
RETRY_PERIOD: Final = 2.0
RELEASED_DURATION: Final = 1


@dataclass(frozen=True)
class Timings:
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    def problems(self) -> list[str]:
        """What makes these timings unsafe or useless (empty when none)."""
        found = []
        if not self.retry_period > 0:
            found.append("the retry period must be > 0")
        if not self.renew_deadline > self.retry_period:
            found.append("the renew deadline must be longer than the retry period")
        if not self.lease_duration > self.renew_deadline:
            found.append("the lease duration must be longer than the renew deadline")
        return found


@dataclass(frozen=True)
class LeaseRecord:
    """The part of a Lease's spec that election reads and writes."""

    holder: str  # "" once released
    duration: int  # leaseDurationSeconds
    acquired: str | None = None  # acquireTime (RFC 3339, microseconds)
    renewed: str | None = None  # renewTime
    transitions: int = 0  # leaseTransitions


class Decision(Enum):
    CREATE = "create"  # no Lease yet
    TAKE = "take"  # released, or its holder silent for a lease duration
    RENEW = "renew"  # ours
    WAIT = "wait"  # another replica's, and alive


@dataclass(frozen=True)
class Observation:
    """The record as last read, and when (own monotonic clock) it was first seen so."""

    record: LeaseRecord | None
    since: float


def observe(previous: Observation | None, record: LeaseRecord | None, now: float) -> Observation:
    """A new reading: ``since`` moves only when the record changed."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def decide(me: str, seen: Observation, now: float) -> Decision:
    record = seen.record
    if record is None:
        return Decision.CREATE
    if record.holder == me:
        return Decision.RENEW
    if not record.holder or now - seen.since >= record.duration:
        return Decision.TAKE
    return Decision.WAIT


def next_record(me: str, record: LeaseRecord | None, decision: Decision, now: str,
                timings: Timings) -> LeaseRecord:  # fmt: skip
    """The record to write for ``decision`` (not WAIT) at wall time ``now`` (RFC 3339)."""
    duration = max(1, round(timings.lease_duration))
    if decision is Decision.RENEW and record is not None:
        return replace(record, duration=duration, renewed=now)
    transitions = 0 if record is None else record.transitions + 1
    return LeaseRecord(me, duration, acquired=now, renewed=now, transitions=transitions)


def released(record: LeaseRecord, now: str) -> LeaseRecord:
    """What a stopping leader writes: nobody holds it, and it is stale in a second."""
    return replace(record, holder="", duration=RELEASED_DURATION, renewed=now)


def still_leading(last_renewed: float, now: float, timings: Timings) -> bool:
    """Whether a leader whose last successful renewal was at ``last_renewed`` may act."""
    return now - last_renewed < timings.renew_deadline


def record_of(lease: dict[str, Any] | None) -> LeaseRecord | None:
    """A Lease object (JSON) -> its record (None: no Lease)."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration=int(spec.get("leaseDurationSeconds") or 0),
        acquired=spec.get("acquireTime"),
        renewed=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def lease_spec(record: LeaseRecord) -> dict[str, Any]:
    """The Lease spec that holds ``record``."""
    return {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": record.duration,
        "acquireTime": record.acquired,
        "renewTime": record.renewed,
        "leaseTransitions": record.transitions,
    }
