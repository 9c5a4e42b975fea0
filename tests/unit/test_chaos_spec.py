"""The --chaos SPEC parser and its seeded schedule."""

from __future__ import annotations

import pytest
from syncreplicas_operator.local.chaos import ChaosKill, ChaosSpecError, parse_chaos, plan_chaos


@pytest.mark.parametrize(
    ("text", "targets", "seed", "signal"),
    [
        ("chief:2", [("chief", 0, 2)], 0, "KILL"),
        ("chief:2,seed=7", [("chief", 0, 2)], 7, "KILL"),
        (" chief-0:1 , worker:3 ,signal=term", [("chief", 0, 1), ("worker", None, 3)], 0, "TERM"),
        ("worker-2:1,ps:1,signal=SIGKILL", [("worker", 2, 1), ("ps", None, 1)], 0, "KILL"),
    ],
)
def test_parse(text: str, targets: list[tuple[str, int | None, int]], seed: int, signal: str):
    spec = parse_chaos(text)
    assert [(t.role, t.index, t.count) for t in spec.targets] == targets
    assert spec.seed == seed
    assert spec.signal == signal


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty spec"),
        ("seed=3", "no TARGET:COUNT"),
        ("chief", "expected TARGET:COUNT"),
        ("boss:1", "expected TARGET:COUNT"),
        ("chief:0", "must be >= 1"),
        ("chief:x", "'x' is not an integer"),
        ("chief-1:1", "only one chief"),
        ("chief:1,seed=-1", "must be >= 0"),
        ("chief:1,signal=HUP", "KILL or TERM"),
        ("chief:1,window=0.9-0.1", "0 <= A <= B <= 1"),
        ("chief:1,window=half", "window=A-B"),
        ("chief:1,speed=2", "unknown setting 'speed'"),
        ("chief:101", "at most 100"),
    ],
)
def test_parse_errors_name_the_term(text: str, fragment: str):
    with pytest.raises(ChaosSpecError, match="--chaos") as err:
        parse_chaos(text)
    assert fragment in str(err.value)


def test_schedule_is_seeded_sorted_and_inside_the_window():
    spec = parse_chaos("chief:3,worker:2,seed=11")
    first = plan_chaos(spec, max_steps=200, workers=3, ps=1)
    assert first == plan_chaos(spec, max_steps=200, workers=3, ps=1)
    assert first != plan_chaos(parse_chaos("chief:3,worker:2,seed=12"), max_steps=200,
                               workers=3, ps=1)
    steps = [k.at_step for k in first]
    assert steps == sorted(steps) and len(set(steps)) == 5
    assert all(20 <= s <= 160 for s in steps)
    assert sorted(k.role for k in first) == ["chief", "chief", "chief", "worker", "worker"]
    assert all(0 <= k.index < 3 for k in first if k.role == "worker")


def test_schedule_with_a_fixed_replica_and_a_tiny_job():
    kills = plan_chaos(parse_chaos("worker-1:2,signal=TERM"), max_steps=3, workers=2, ps=1)
    assert kills == tuple(ChaosKill(at_step=k.at_step, role="worker", index=1, signal="TERM")
                          for k in kills)
    assert all(1 <= k.at_step <= 3 for k in kills)


@pytest.mark.parametrize(
    ("text", "workers", "ps", "fragment"),
    [
        ("worker:1", 0, 1, "no worker replica"),
        ("worker-3:1", 3, 1, "worker-3 does not exist"),
        ("ps-1:1", 2, 1, "ps-1 does not exist"),
    ],
)
def test_schedule_refuses_absent_replicas(text: str, workers: int, ps: int, fragment: str):
    with pytest.raises(ChaosSpecError, match=fragment):
        plan_chaos(parse_chaos(text), max_steps=100, workers=workers, ps=ps)
