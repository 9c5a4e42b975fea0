"""Leader election's loop (controller/election.py) with real threads and timers, against an
in-memory Lease with the API server's conflict rule (a write must carry the
resourceVersion it read). Short timings: lease 1.2 s, renew deadline 0.8 s, retry 0.1 s;
the cut-off case has a wider margin (lease 4 s, renew deadline 2 s, retry 0.2 s), as the
defaults do (15/10/2 s): its order must hold while the machine runs other work and a
thread wakes late (with 1.2/0.8 s, a watchdog woken 0.4 s late let the two meet).

- Of two candidates one leads; the other follows and writes nothing.
- The leader's release lets the follower lead at its next look.
- A leader cut off from the API stops (on_lost) before the follower takes the Lease over:
  never two at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import pytest
from syncreplicas_operator.controller.election import WATCHDOG_SECONDS, Elector
from syncreplicas_operator.core.leader import LeaseRecord, Timings
from syncreplicas_operator.resources.k8s import ApiError

TIMINGS = Timings(lease_duration=1.2, renew_deadline=0.8, retry_period=0.1)
WIDE = Timings(lease_duration=4.0, renew_deadline=2.0, retry_period=0.2)


@dataclass
class Lease:
    """One Lease as the API server keeps it."""

    record: LeaseRecord | None = None
    version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    writes: list[tuple[float, str]] = field(default_factory=list)  # (time, holder)


class Store:
    """LeaseStore's interface over :class:`Lease`; ``cut`` makes every request fail,
    ``delay`` makes each take that long."""

    namespace, name = "ops", "leader"

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.read_version: int | None = None
        self.cut = False
        self.delay = 0.0
        self.reads = 0

    def read(self) -> LeaseRecord | None:
        time.sleep(self.delay)
        if self.cut:
            raise TimeoutError("cut off")
        self.reads += 1
        with self.lease.lock:
            self.read_version = self.lease.version if self.lease.record else None
            return self.lease.record

    def write(self, record: LeaseRecord) -> bool:
        time.sleep(self.delay)
        if self.cut:
            raise TimeoutError("cut off")
        with self.lease.lock:
            current = self.lease.version if self.lease.record else None
            if current != self.read_version:
                return False  # 409 Conflict
            self.lease.record = record
            self.lease.version += 1
            self.read_version = self.lease.version
            self.lease.writes.append((time.monotonic(), record.holder))
            return True


class Candidate:
    def __init__(self, name: str, lease: Lease, timings: Timings = TIMINGS,
                 delay: float = 0.0) -> None:  # fmt: skip
        self.store = Store(lease)
        self.store.delay = delay
        self.changes: list[tuple[float, bool]] = []
        self.lost = threading.Event()
        self.elector = Elector(self.store, name, timings,  # type: ignore[arg-type]
                               lambda leads: self.changes.append((time.monotonic(), leads)),
                               on_lost=self.lost.set)  # fmt: skip
        self.acquired = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        if self.elector.acquire():
            self.acquired.set()


def wait(event: threading.Event, timeout: float = 5.0) -> None:
    assert event.wait(timeout), "not within the time"


def test_one_leads_and_the_other_takes_over_at_once_after_a_release() -> None:
    lease = Lease()
    a = Candidate("a", lease)
    wait(a.acquired)
    b = Candidate("b", lease)
    time.sleep(1.0)  # longer than the lease duration: a renews, b keeps following
    assert not b.acquired.is_set() and lease.record is not None and lease.record.holder == "a"
    assert {holder for _, holder in lease.writes} == {"a"}, "a follower writes nothing"
    released_at = time.monotonic()
    a.elector.release()
    assert lease.record is not None and lease.record.holder == ""
    wait(b.acquired)
    assert time.monotonic() - released_at < 3 * TIMINGS.retry_period
    assert lease.record.holder == "b" and lease.record.transitions == 1
    assert a.changes[-1][1] is False and b.changes == [(b.changes[0][0], True)]
    b.elector.release()


def test_a_leader_cut_off_stops_before_anyone_else_leads() -> None:
    lease = Lease()
    a = Candidate("a", lease, WIDE)
    wait(a.acquired)
    b = Candidate("b", lease, WIDE)
    time.sleep(0.5)
    a.store.cut = True
    wait(a.lost)
    stopped_at = a.changes[-1][0]
    wait(b.acquired, timeout=10.0)
    took_over_at = b.changes[0][0]
    # The old leader stopped acting before the new one started: by the lease duration
    # minus the renew deadline, less the watchdog's period and a retry period of jitter
    # (1.6 s here) when every thread wakes on time. Of that, up to 1.1 s may go to a
    # watchdog that wakes late on a loaded machine; the order itself never breaks.
    margin = WIDE.lease_duration - WIDE.renew_deadline - WATCHDOG_SECONDS - WIDE.retry_period
    assert margin == pytest.approx(1.6)
    assert took_over_at - stopped_at > margin - 1.1
    assert lease.record is not None and lease.record.holder == "b"
    b.elector.release()


def test_a_leader_renews_unread_and_keeps_the_lease_through_a_slow_api() -> None:
    # Every request 1.5 s, from the start; a renew deadline of 4 s. A renewal that read the
    # Lease first (two requests, a retry period after the last) would be confirmed 6.2 s
    # after the last one began; written unread, 3.2 s after the last write began. The Lease
    # taken (a read, then a write) counts from its write, not its read (4.7 s else).
    timings = Timings(lease_duration=8.0, renew_deadline=4.0, retry_period=0.2)
    lease = Lease()
    a = Candidate("a", lease, timings, delay=1.5)
    wait(a.acquired, timeout=10.0)
    reads, led_at = a.store.reads, time.monotonic()
    time.sleep(7.0)
    assert not a.lost.is_set(), a.changes
    assert a.store.reads == reads, "a renewal reads nothing"
    assert len([t for t, _ in lease.writes if t > led_at]) >= 3, lease.writes
    a.store.delay = 0.0
    a.elector.release()


def test_a_leader_whose_lease_was_written_by_another_reads_it_and_stops() -> None:
    lease = Lease()
    a = Candidate("a", lease)
    wait(a.acquired)
    with lease.lock:  # another replica's write (its renewal unread conflicts with it)
        lease.record = LeaseRecord("b", 15, renewed="2026-12-06T00:00:00.000000Z")
        lease.version += 1
    wait(a.lost, timeout=2.0)
    assert a.changes[-1][1] is False and a.store.reads >= 2


class Refusing(Store):
    """A Lease whose reads RBAC refuses (the role lacks `get` on leases)."""

    def read(self) -> LeaseRecord | None:
        raise ApiError("GET", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/leader", 403,
                       '{"kind": "Status", "message": "leases.coordination.k8s.io \\"leader\\" '
                       'is forbidden: User \\"system:serviceaccount:ops:op\\" cannot get"}')


def test_a_refused_lease_is_said_once_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    elector = Elector(Refusing(Lease()), "a", TIMINGS, lambda leads: None)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="syncreplicas.operator"):
        assert [elector.look() for _ in range(3)] == [False, False, False]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot get" in warnings[0].getMessage(), caplog.records
