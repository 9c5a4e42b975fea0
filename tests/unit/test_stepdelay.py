"""The debug step delay's setting (runtime/syncreplicas_runtime/foundation/stepdelay.py)."""

from __future__ import annotations

import statistics

import pytest
from syncreplicas_runtime.foundation.stepdelay import ParetoDelays, StepDelay, parse_step_delay


@pytest.mark.parametrize(("setting", "expected"), [
    ("", StepDelay()),
    ("0", StepDelay()),
    ("100", StepDelay(ms=100.0)),
    ("2.5", StepDelay(ms=2.5)),
    ("@/tmp/delay", StepDelay(file="/tmp/delay")),
    ("pareto:50:1.5", StepDelay(pareto=(50.0, 1.5))),
])
def test_each_form_means_what_it_says(setting: str, expected: StepDelay) -> None:
    assert parse_step_delay(setting) == expected


@pytest.mark.parametrize("setting", ["-1", "fast", "@", "pareto:50", "pareto:50:0",
                                     "pareto:-5:2", "pareto:a:b"])
def test_anything_else_is_refused_with_the_forms(setting: str) -> None:
    with pytest.raises(ValueError, match=r"milliseconds, @FILE or pareto:MS:ALPHA"):
        parse_step_delay(setting)


def test_pareto_delays_have_their_floor_a_heavy_tail_and_repeat_by_name() -> None:
    draws = [ParetoDelays(50, 1.5, "worker-2").next() for _ in range(1)]
    again = ParetoDelays(50, 1.5, "worker-2")
    many = [again.next() for _ in range(20000)]
    assert draws[0] == many[0]  # seeded by the replica's name
    assert min(many) >= 0.050
    assert statistics.median(many) == pytest.approx(0.050 * 2 ** (1 / 1.5), rel=0.05)
    assert max(many) > 20 * statistics.median(many)  # the tail
    assert ParetoDelays(50, 1.5, "worker-1").next() != many[0]
