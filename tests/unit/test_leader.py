"""Leader election rules (core/leader.py): who may take, renew or must wait, and what is
written."""

from __future__ import annotations

import pytest
from syncreplicas_operator.core.leader import (
    Decision,
    LeaseRecord,
    Observation,
    Timings,
    decide,
    lease_spec,
    next_record,
    observe,
    record_of,
    released,
    still_leading,
)

MINE = LeaseRecord("me", 15, "t0", "t1", 2)
THEIRS = LeaseRecord("them", 15, "t0", "t1", 2)
FREE = LeaseRecord("", 1, "t0", "t2", 2)


@pytest.mark.parametrize(
    ("record", "since", "now", "expected"),
    [
        (None, 0.0, 0.0, Decision.CREATE),
        (MINE, 0.0, 100.0, Decision.RENEW),  # ours, however old
        (THEIRS, 10.0, 24.9, Decision.WAIT),  # seen unchanged for 14.9 s of 15
        (THEIRS, 10.0, 25.0, Decision.TAKE),  # unchanged for the whole lease duration
        (FREE, 10.0, 10.0, Decision.TAKE),  # released: at once
    ],
)
def test_decide(record: LeaseRecord | None, since: float, now: float, expected: Decision) -> None:
    assert decide("me", Observation(record, since), now) is expected


def test_a_follower_times_the_lease_from_its_last_change_on_its_own_clock() -> None:
    seen = observe(None, THEIRS, 100.0)
    assert observe(seen, THEIRS, 110.0).since == 100.0  # the same record: still from 100
    renewed = LeaseRecord("them", 15, "t0", "t9", 2)
    assert observe(seen, renewed, 110.0).since == 110.0  # renewed: the wait starts again
    assert decide("me", observe(seen, renewed, 110.0), 124.0) is Decision.WAIT


def test_what_is_written() -> None:
    timings = Timings(lease_duration=15.0)
    created = next_record("me", None, Decision.CREATE, "now", timings)
    assert created == LeaseRecord("me", 15, "now", "now", 0)
    taken = next_record("me", THEIRS, Decision.TAKE, "now", timings)
    assert taken == LeaseRecord("me", 15, "now", "now", 3)  # a transition counted
    renewed = next_record("me", MINE, Decision.RENEW, "now", timings)
    assert renewed == LeaseRecord("me", 15, "t0", "now", 2)  # acquired when it was
    assert released(MINE, "now") == LeaseRecord("", 1, "t0", "now", 2)


def test_a_leader_stops_before_a_follower_can_take_over() -> None:
    timings = Timings(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
    assert still_leading(100.0, 109.9, timings)
    assert not still_leading(100.0, 110.0, timings)
    # A follower that saw the renewal at 100 (no earlier: it was written after the leader's
    # request began) takes over at 115 at the earliest.
    assert decide("them", Observation(MINE, 100.0), 114.9) is Decision.WAIT


@pytest.mark.parametrize(
    ("timings", "problem"),
    [
        (Timings(), None),
        (Timings(retry_period=0), "retry period"),
        (Timings(renew_deadline=2.0, retry_period=2.0), "renew deadline"),
        (Timings(lease_duration=10.0, renew_deadline=10.0), "lease duration"),
    ],
)
def test_timings_that_could_overlap_leaders_are_refused(timings: Timings,
                                                         problem: str | None) -> None:  # fmt: skip
    found = timings.problems()
    assert (not found) if problem is None else any(problem in p for p in found), found


def test_lease_json_round_trip() -> None:
    lease = {"spec": lease_spec(MINE)}
    assert record_of(lease) == MINE
    assert record_of({"spec": lease_spec(FREE)}) == FREE
    assert lease_spec(FREE)["holderIdentity"] is None
    assert record_of(None) is None
