"""Laps (laps.py): the parts of one piece of work, each from the end of the one before."""

from __future__ import annotations

from syncreplicas_runtime.foundation.laps import Laps


def test_each_lap_runs_from_the_previous_one_and_the_total_comes_first() -> None:
    ticks = iter([10.0, 10.25, 11.0, 11.05])
    laps = Laps(clock=lambda: next(ticks))
    for name in ("claim", "graph", "session"):
        laps.lap(name)
    assert str(laps) == "1.05s: claim 0.25s, graph 0.75s, session 0.05s"


def test_no_lap_yet_is_zero() -> None:
    assert str(Laps(clock=lambda: 3.0)) == "0.00s"
