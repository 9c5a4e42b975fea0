"""Recovery, Degraded and stragglers: the pure pieces as tables, then through the planner."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import naming, recovery, straggler
from syncreplicas_operator.core.actions import (
    RECOVERIES,
    STRAGGLER_EVICTIONS,
    CountMetric,
    CreateChild,
    DeletePod,
    EmitEvent,
)
from syncreplicas_operator.core.plan.context import Observed, Plan
from syncreplicas_operator.core.plan.pipeline import plan_job
from syncreplicas_operator.core.recovery import Failure, Progress, SeenPod
from syncreplicas_operator.core.spec import Job
from syncreplicas_operator.core.status import ObservedPod
from syncreplicas_operator.core.straggler import GradientCounts

from tests.support.jobs import planner_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = "2026-01-01T00:10:00Z"

# --- detect_failures ----------------------------------------------------------------------


def pod(name: str = "j-worker-1", **kw: Any) -> ObservedPod:
    rtype, index = naming.parse_replica_name("j", name) or ("", 0)
    base: dict[str, Any] = dict(uid="u1", phase="Running", ready=True)
    base.update(kw)
    return ObservedPod(name, rtype, index, **base)


SEEN = {"j-worker-1": SeenPod("worker-1", "u1", 0)}


@pytest.mark.parametrize(
    ("seen", "pods", "expected"),
    [
        (None, [], []),  # no pass before (operator start): nothing to compare with
        (SEEN, [pod()], []),
        (SEEN, [], [("worker-1", recovery.CAUSE_DELETED)]),
        (SEEN, [pod(deleting=True)], [("worker-1", recovery.CAUSE_DELETED)]),
        (
            SEEN,
            [pod(deleting=True, disruption="Evicted: node pressure")],
            [("worker-1", recovery.CAUSE_EVICTED)],
        ),
        (SEEN, [pod(uid="u2")], [("worker-1", recovery.CAUSE_DELETED)]),
        (
            SEEN,
            [pod(restart_count=1, last_exit_code=137)],
            [("worker-1", recovery.CAUSE_CONTAINER_RESTARTED)],
        ),
        # a pod created last pass has no uid yet: its first uid is no replacement
        ({"j-worker-1": SeenPod("worker-1", "", 0)}, [pod(uid="u9")], []),
    ],
)
def test_detect_failures(
    seen: dict[str, SeenPod] | None, pods: list[ObservedPod], expected: list[tuple[str, str]]
) -> None:
    found = recovery.detect_failures(seen, pods)
    assert [(f.replica, f.cause) for f in found] == expected


def test_a_container_restart_names_the_exit_code() -> None:
    (failure,) = recovery.detect_failures(SEEN, [pod(restart_count=1, last_exit_code=137)])
    assert "137" in failure.detail


@pytest.mark.parametrize(
    ("kw", "detail"),
    [
        (
            dict(restart_count=1, last_exit_code=65, last_exit_reason="cannot import 'm'"),
            "j-worker-1 restarted after exiting with MODEL (65): cannot import 'm'",
        ),
        (
            dict(restart_count=1, last_exit_code=137),
            "j-worker-1 restarted after exiting with EXIT (137)",
        ),
        (dict(restart_count=1), "j-worker-1 restarted"),
    ],
)
def test_a_container_restart_says_the_runtimes_reason(kw: dict[str, Any], detail: str) -> None:
    (failure,) = recovery.detect_failures(SEEN, [pod(**kw)])
    assert failure.detail == detail


@pytest.mark.parametrize(
    ("kw", "code", "cause", "detail"),
    [
        (dict(exit_reason="lost a PS"), 75, recovery.CAUSE_EXITED,
         "j-worker-1 exited with RETRY (75): lost a PS"),
        ({}, 1, recovery.CAUSE_EXITED, "j-worker-1 exited with EXIT (1)"),
        (dict(disruption="Evicted: low on memory", exit_reason="stopped by SIGTERM"), 143,
         recovery.CAUSE_EVICTED, "j-worker-1 stopped by the cluster (Evicted: low on memory)"),
    ],
)  # fmt: skip
def test_exit_failure(kw: dict[str, Any], code: int, cause: str, detail: str) -> None:
    assert recovery.exit_failure(pod(**kw), code) == Failure("worker-1", cause, detail)


def test_remember_leaves_out_pods_on_their_way_out() -> None:
    seen = recovery.remember([pod(), pod("j-worker-0", deleting=True)])
    assert seen == {"j-worker-1": SeenPod("worker-1", "u1", 0)}


# --- track_recovery -----------------------------------------------------------------------

W1 = Failure("worker-1", recovery.CAUSE_EXITED, "j-worker-1 exited with 1")
PS0 = Failure("ps-0", recovery.CAUSE_EXITED, "j-ps-0 exited with 137")
OPEN = {
    "replica": "worker-1",
    "cause": "Exited",
    "message": "m",
    "startedAt": "2026-01-01T00:00:00Z",
    "globalStepBefore": 100,
}
OPEN_PS = {**OPEN, "replica": "ps-0"}
DONE = {**OPEN, "recoveredAt": "2026-01-01T00:01:00Z", "stepsLost": 0}


def progress(step: int | None, rejoined: int | None = None, *ready: str) -> Progress:
    return Progress(global_step=step, rejoined_from=rejoined, ready=frozenset(ready))


@pytest.mark.parametrize(
    ("record", "failures", "seen", "expected"),
    [
        # nothing happens, nothing recorded
        (None, [], progress(5), None),
        (DONE, [], progress(500, None, "worker-1"), DONE),
        # a failure starts a recovery at the step known then
        (None, [W1], progress(100), {**OPEN, "message": W1.detail, "startedAt": NOW}),
        (DONE, [W1], progress(100), {**OPEN, "message": W1.detail, "startedAt": NOW}),
        # metrics off: no step, the record says nothing about steps
        (
            None,
            [W1],
            progress(None),
            {k: v for k, v in OPEN.items() if k != "globalStepBefore"}
            | {"message": W1.detail, "startedAt": NOW},
        ),
        # the same replica failing again is the same recovery
        (OPEN, [W1], progress(100), OPEN),
        # another replica's failure: a new record, keeping the step before the first one
        (OPEN, [PS0], progress(120), {**OPEN_PS, "message": PS0.detail, "startedAt": NOW}),
        # the replica is back but the step has not moved since the failure: still recovering
        (OPEN, [], progress(100, None, "worker-1"), OPEN),
        # the step moves but the replica is not back (backups carry on): still recovering
        (OPEN, [], progress(110), OPEN),
        # back and the step moves: recovered, nothing lost
        (OPEN, [], progress(110, None, "worker-1"), {**OPEN, "recoveredAt": NOW, "stepsLost": 0}),
        # the step went back (the chief restored a checkpoint after a PS loss)
        (OPEN_PS, [], progress(80), {**OPEN_PS, "resumedFrom": 80}),
        (OPEN_PS, [], progress(100, 60), {**OPEN_PS, "resumedFrom": 60}),
        (
            {**OPEN_PS, "resumedFrom": 60},
            [],
            progress(61, None, "ps-0"),
            {**OPEN_PS, "resumedFrom": 60, "recoveredAt": NOW, "stepsLost": 40},
        ),
        # resumed from 60 but still at 60: not training yet
        (
            {**OPEN_PS, "resumedFrom": 60},
            [],
            progress(60, None, "ps-0"),
            {**OPEN_PS, "resumedFrom": 60},
        ),
        # a restored step above the step before is no step lost (variables kept)
        (OPEN_PS, [], progress(130, 100, "ps-0"), {**OPEN_PS, "recoveredAt": NOW, "stepsLost": 0}),
        # metrics off: back is recovered
        (
            {k: v for k, v in OPEN.items() if k != "globalStepBefore"},
            [],
            progress(None, None, "worker-1"),
            {k: v for k, v in OPEN.items() if k != "globalStepBefore"} | {"recoveredAt": NOW},
        ),
    ],
)
def test_track_recovery(
    record: dict[str, Any] | None,
    failures: list[Failure],
    seen: Progress,
    expected: dict[str, Any] | None,
) -> None:
    update = recovery.track_recovery(record, failures, seen, NOW)
    assert update.record == expected
    assert update.started == tuple(f for f in failures if not (record == OPEN and f == W1))
    assert update.ended == bool(expected and expected.get("recoveredAt") == NOW)


@pytest.mark.parametrize(
    ("aggregating", "lost", "live", "message"),
    [
        (2, ["worker-1"], 2, "aggregating 2 of 3 gradients per update (replica worker-1 lost)"),
        (
            1,
            ["chief-0", "worker-1"],
            None,
            "aggregating 1 of 3 gradients per update (replicas chief-0, worker-1 lost)",
        ),
        (2, [], 2, "aggregating 2 of 3 gradients per update (2 replica(s) pushing gradients)"),
    ],
)
def test_degraded_message(
    aggregating: int, lost: list[str], live: int | None, message: str
) -> None:
    assert recovery.degraded_message(aggregating, 3, lost, live) == message


# --- drop fractions and the straggler decision --------------------------------------------


def counts(**replicas: tuple[float, float]) -> dict[str, GradientCounts]:
    return {r.replace("_", "-"): GradientCounts(*c) for r, c in replicas.items()}


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ([], {}),
        ([counts(worker_0=(10, 0))], {}),  # one scrape: no interval yet
        ([counts(worker_0=(10, 0)), counts(worker_0=(30, 15))], {"worker-0": 0.75}),
        # too few pushes in the window to say anything
        ([counts(worker_0=(10, 0)), counts(worker_0=(12, 2))], {}),
        # counters went down: a new process, its counts since it started
        ([counts(worker_0=(100, 50)), counts(worker_0=(10, 1))], {"worker-0": 0.1}),
        # a replica first seen mid-window: from its first scrape
        (
            [
                counts(chief_0=(0, 0)),
                counts(chief_0=(20, 0), worker_1=(5, 0)),
                counts(chief_0=(40, 0), worker_1=(25, 10)),
            ],
            {"chief-0": 0.0, "worker-1": 0.5},
        ),
    ],
)
def test_drop_fractions(
    window: list[dict[str, GradientCounts]], expected: dict[str, float]
) -> None:
    assert straggler.drop_fractions(window) == expected


OLD, NEW = "uid-old", "uid-new"


@pytest.mark.parametrize(
    ("window", "holders", "expected"),
    [
        # the pod was replaced mid-window: only the new pod's scrapes count, even when its
        # counters have passed the old pod's first ones
        (
            [
                {"worker-1": GradientCounts(10, 9, OLD)},
                {"worker-1": GradientCounts(50, 45, OLD)},
                {"worker-1": GradientCounts(10, 0, NEW)},
                {"worker-1": GradientCounts(60, 1, NEW)},
            ],
            {"worker-1": NEW},
            {"worker-1": 0.02},
        ),
        # a read of the old pod that ends after its replacement: says nothing of the new one
        (
            [
                {"worker-1": GradientCounts(10, 9, OLD)},
                {"worker-1": GradientCounts(50, 45, OLD)},
            ],
            {"worker-1": NEW},
            {},
        ),
        # ... nor of a replica no pod holds now
        ([{"worker-1": GradientCounts(10, 9, OLD)}, {"worker-1": GradientCounts(50, 45, OLD)}],
         {}, {}),
    ],
)  # fmt: skip
def test_drop_fractions_count_the_pod_that_holds_the_replica(
    window: list[dict[str, GradientCounts]], holders: dict[str, str], expected: dict[str, float]
) -> None:
    assert straggler.drop_fractions(window, holders) == expected


FLAGGED = {"replica": "worker-2", "dropFraction": 0.8, "since": "2026-01-01T00:00:00Z"}


def everyone(_: str) -> bool:
    return True


def nobody(_: str) -> bool:
    return False


@pytest.mark.parametrize(
    ("state", "fractions", "evict_after", "at", "evictable", "expected"),
    [
        # nothing above the threshold
        (None, {"worker-1": 0.3}, None, 0, everyone, (None, None, None, None)),
        # the worst above the threshold is flagged
        (
            None,
            {"worker-1": 0.6, "worker-2": 0.8, "chief-0": 0.1},
            None,
            0,
            everyone,
            (
                {"replica": "worker-2", "dropFraction": 0.8, "since": "2026-01-01T00:00:00Z"},
                "worker-2",
                None,
                None,
            ),
        ),
        # hysteresis: between half the threshold and the threshold it stays flagged
        (
            FLAGGED,
            {"worker-2": 0.3},
            None,
            10,
            everyone,
            ({**FLAGGED, "dropFraction": 0.3}, None, None, None),
        ),
        # below half: cleared
        (FLAGGED, {"worker-2": 0.2}, None, 10, everyone, (None, None, "worker-2", None)),
        # cleared, and another replica is above: that one is flagged instead
        (
            FLAGGED,
            {"worker-2": 0.1, "worker-1": 0.9},
            None,
            10,
            everyone,
            (
                {"replica": "worker-1", "dropFraction": 0.9, "since": "2026-01-01T00:00:10Z"},
                "worker-1",
                "worker-2",
                None,
            ),
        ),
        # not measured this pass: the flag stays
        (FLAGGED, None, None, 10, everyone, (FLAGGED, None, None, None)),
        # a worse replica does not take the flag while the flagged one stays above half
        (
            FLAGGED,
            {"worker-2": 0.5, "worker-1": 0.99},
            None,
            10,
            everyone,
            ({**FLAGGED, "dropFraction": 0.5}, None, None, None),
        ),
        # flagged long enough: evicted (the flag goes with it)
        (FLAGGED, {"worker-2": 0.8}, 60, 60, everyone, (None, None, None, "worker-2")),
        # due, but not measured this pass (the flag may be older than the pod that holds
        # the replica now): the next read decides
        (FLAGGED, None, 60, 61, everyone, (FLAGGED, None, None, None)),
        (FLAGGED, {"worker-1": 0.0}, 60, 61, everyone, (FLAGGED, None, None, None)),
        # not yet
        (FLAGGED, {"worker-2": 0.8}, 60, 59, everyone, (FLAGGED, None, None, None)),
        # due but not evictable (the chief, another recovery running): stays flagged
        (FLAGGED, {"worker-2": 0.8}, 60, 120, nobody, (FLAGGED, None, None, None)),
    ],
)
def test_decide_straggler(
    state: dict[str, Any] | None,
    fractions: dict[str, float] | None,
    evict_after: int | None,
    at: int,
    evictable: Any,
    expected: tuple[Any, str | None, str | None, str | None],
) -> None:
    decision = straggler.decide_straggler(
        state, fractions, 0.5, evict_after, T0 + timedelta(seconds=at), evictable
    )
    assert (decision.state, decision.detected, decision.cleared, decision.evict) == expected


# --- through the planner ------------------------------------------------------------------


def make_job(**spec: Any) -> Job:
    return planner_job(3, **spec)


@dataclass
class World:
    """Pods and status after each applied plan; the operator's memory of the last pass."""

    job: Job
    pods: dict[str, ObservedPod] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)
    status: dict[str, Any] = field(default_factory=dict)
    now: datetime = T0
    seen: Any = None
    last: Plan | None = None

    def plan(self, **observed: Any) -> Plan:
        obs = Observed(
            tuple(self.pods.values()),
            frozenset(self.services),
            True,
            seen_pods=self.seen,
            disruption_budget=True,
            **observed,
        )
        self.last = plan_job(self.job, obs, self.status, self.now)
        for action in self.last.actions:
            if isinstance(action, CreateChild):
                if action.kind == "Pod":
                    rtype, index = naming.parse_replica_name("j", action.name) or ("", 0)
                    self.pods[action.name] = ObservedPod(action.name, rtype, index)
                elif action.kind == "Service":
                    self.services.add(action.name)
            elif isinstance(action, DeletePod):
                self.pods.pop(action.name, None)
        self.status = self.last.status
        self.seen = self.last.seen_pods
        return self.last

    def run_all(self) -> None:
        for name, p in self.pods.items():
            if p.phase == "Pending":
                uid = f"uid-{name}-{len(self.status.get('conditions', []))}-{self.now.second}"
                self.pods[name] = replace(p, phase="Running", ready=True, uid=uid)

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def condition(self, ctype: str) -> dict[str, Any] | None:
        return next((c for c in self.status.get("conditions", []) if c["type"] == ctype), None)

    def is_true(self, ctype: str) -> bool:
        cond = self.condition(ctype)
        return cond is not None and cond["status"] == "True"


def events(plan: Plan) -> list[tuple[str, str]]:
    return [(a.reason, a.message) for a in plan.actions if isinstance(a, EmitEvent)]


def running(**spec: Any) -> World:
    world = World(make_job(**spec))
    world.plan()
    world.run_all()
    world.plan(global_step=10, replicas_to_aggregate=3, live_replicas=3, restored_step=0)
    return world


def test_degraded_follows_the_coordinators_r_with_an_event_per_change() -> None:
    world = running(minReplicasToAggregate=1)
    assert not world.is_true("Degraded") and world.status["replicasToAggregate"] == 3
    world.pods["j-worker-1"] = replace(world.pods["j-worker-1"], ready=False)
    world.tick(5)
    plan = world.plan(replicas_to_aggregate=2, live_replicas=2)
    degraded = world.condition("Degraded")
    assert degraded is not None and degraded["status"] == "True"
    assert degraded["reason"] == naming.REASON_AGGREGATING_FEWER
    assert degraded["lastTransitionTime"] == "2026-01-01T00:00:05Z"
    assert events(plan) == [
        (
            "Degraded",
            "Degraded: aggregating 2 of 3 gradients per update (replica worker-1 lost)",
        )
    ]
    # not read this pass: the condition stays as it was, no Event
    world.tick(5)
    assert events(world.plan()) == []
    assert world.is_true("Degraded") and world.status["liveReplicas"] == 2
    # R lowered again: another Event, the transition time stays
    world.pods["j-worker-0"] = replace(world.pods["j-worker-0"], ready=False)
    plan = world.plan(replicas_to_aggregate=1, live_replicas=1)
    assert [r for r, _ in events(plan)] == ["Degraded"]
    assert world.condition("Degraded")["lastTransitionTime"] == "2026-01-01T00:00:05Z"
    world.run_all()
    for name in ("j-worker-0", "j-worker-1"):
        world.pods[name] = replace(world.pods[name], ready=True)
    plan = world.plan(replicas_to_aggregate=3, live_replicas=3)
    assert not world.is_true("Degraded")
    assert events(plan) == [("Recovered", "Recovered: aggregating 3 of 3 gradients per update")]


def test_a_job_that_finishes_degraded_is_no_longer_degraded() -> None:
    world = running(minReplicasToAggregate=1)
    world.pods["j-worker-1"] = replace(world.pods["j-worker-1"], ready=False)
    world.plan(replicas_to_aggregate=2, live_replicas=2)
    assert world.is_true("Degraded")
    world.pods["j-chief-0"] = replace(world.pods["j-chief-0"], phase="Succeeded", exit_code=0)
    world.tick(1)
    world.plan()
    assert world.is_true("Succeeded")
    degraded = world.condition("Degraded")
    assert degraded is not None and degraded["status"] == "False"
    assert degraded["reason"] == world.condition("Succeeded")["reason"]
    # a finished job's later passes leave it as it is
    world.tick(5)
    world.plan(replicas_to_aggregate=2, live_replicas=2)
    assert not world.is_true("Degraded")


def test_a_worker_exit_is_recovered_with_no_steps_lost() -> None:
    world = running(runPolicy={"restartPolicy": "ExitCode"})
    world.pods["j-worker-1"] = replace(world.pods["j-worker-1"], phase="Failed", exit_code=137)
    world.tick(1)
    plan = world.plan(global_step=40)
    rec = world.status["lastRecovery"]
    assert rec["replica"] == "worker-1" and rec["cause"] == "Exited"
    assert rec["startedAt"] == "2026-01-01T00:00:01Z" and rec["globalStepBefore"] == 40
    assert "recoveredAt" not in rec
    assert CountMetric(RECOVERIES, labels=(("cause", "Exited"),)) in plan.actions
    world.plan()  # created again
    world.run_all()
    world.tick(9)
    plan = world.plan(global_step=41)
    rec = world.status["lastRecovery"]
    assert rec["recoveredAt"] == "2026-01-01T00:00:10Z" and rec["stepsLost"] == 0
    assert any(r == naming.REASON_REPLICA_RECOVERED and "in 9s" in m for r, m in events(plan))
    # the recovery is counted once
    assert not any(isinstance(a, CountMetric) and a.name == RECOVERIES for a in plan.actions)


def test_a_ps_loss_counts_the_steps_the_chief_resumed_below() -> None:
    world = running()
    world.pods["j-ps-0"] = replace(world.pods["j-ps-0"], restart_count=1, last_exit_code=137)
    world.tick(1)
    world.plan(global_step=250)
    rec = world.status["lastRecovery"]
    assert (rec["replica"], rec["cause"], rec["globalStepBefore"]) == (
        "ps-0",
        "ContainerRestarted",
        250,
    )
    # the chief rejoins from its checkpoint at 200 and trains on
    world.tick(5)
    world.plan(global_step=203, restored_step=200)
    rec = world.status["lastRecovery"]
    assert rec["resumedFrom"] == 200 and rec["stepsLost"] == 50
    assert world.status["restoredStep"] == 200


def test_a_pod_deleted_behind_the_operators_back_starts_a_recovery() -> None:
    world = running()
    del world.pods["j-worker-0"]
    plan = world.plan()
    assert world.status["lastRecovery"]["cause"] == "Deleted"
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-worker-0"]
    # pods the operator deletes itself are not failures of their own (suspend)
    world = running()
    world.job = make_job(runPolicy={"suspend": True})
    world.plan()
    world.plan()
    assert "lastRecovery" not in world.status


def straggling(world: World, fraction: float, **observed: Any) -> Plan:
    return world.plan(drop_fractions={"worker-1": fraction, "worker-0": 0.0}, **observed)


def test_a_straggler_is_reported_and_without_a_policy_never_evicted() -> None:
    world = running()
    plan = straggling(world, 0.9)
    cond = world.condition("StragglerDetected")
    assert cond is not None and cond["status"] == "True" and "worker-1" in cond["message"]
    assert [r for r, _ in events(plan)] == ["StragglerDetected"]
    world.tick(3600)
    plan = straggling(world, 0.9)
    assert not any(isinstance(a, DeletePod) for a in plan.actions)
    plan = straggling(world, 0.1)
    assert not world.is_true("StragglerDetected") and "straggler" not in world.status
    assert [r for r, _ in events(plan)] == ["StragglerCleared"]


def test_straggler_eviction_one_at_a_time_never_the_chief() -> None:
    world = running(runPolicy={"stragglerPolicy": {"evictAfterSeconds": 60}})
    straggling(world, 0.9)
    world.tick(30)
    plan = straggling(world, 0.9)
    assert not any(isinstance(a, DeletePod) for a in plan.actions)
    assert plan.requeue_after == pytest.approx(30)
    world.tick(30)
    plan = straggling(world, 0.9)
    assert DeletePod("j-worker-1") in plan.actions
    assert CountMetric(STRAGGLER_EVICTIONS) in plan.actions
    assert CountMetric(RECOVERIES, labels=(("cause", "StragglerEvicted"),)) in plan.actions
    assert world.status["lastRecovery"]["cause"] == "StragglerEvicted"
    cond = world.condition("StragglerDetected")
    assert cond["status"] == "False" and cond["reason"] == naming.REASON_STRAGGLER_EVICTED
    # the next pass sees the pod gone: it is re-created, and its going is not a new failure
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-worker-1"]
    # another straggler while the evicted one is not back: flagged, not evicted
    world.tick(1)
    world.plan(drop_fractions={"worker-0": 0.9})
    world.tick(120)
    plan = world.plan(drop_fractions={"worker-0": 0.9})
    assert not any(isinstance(a, DeletePod) for a in plan.actions)
    assert world.status["straggler"]["replica"] == "worker-0"
    # back and training: the next one may go
    world.run_all()
    plan = world.plan(global_step=500, drop_fractions={"worker-0": 0.9})
    assert naming.REASON_REPLICA_RECOVERED in [r for r, _ in events(plan)]
    assert DeletePod("j-worker-0") in plan.actions
    assert world.status["lastRecovery"]["replica"] == "worker-0"
    # the chief is flagged but never evicted
    world = running(runPolicy={"stragglerPolicy": {"evictAfterSeconds": 1, "minDropFraction": 0.3}})
    world.plan(drop_fractions={"chief-0": 0.95})
    world.tick(600)
    plan = world.plan(drop_fractions={"chief-0": 0.95})
    assert world.status["straggler"]["replica"] == "chief-0"
    assert not any(isinstance(a, DeletePod) for a in plan.actions)


def test_restarts_in_place_beyond_the_budget_name_the_one_just_seen() -> None:
    world = running(runPolicy={"backoffLimit": 1})  # OnFailure: the kubelet restarts in place
    world.pods["j-ps-0"] = replace(world.pods["j-ps-0"], restart_count=1, last_exit_code=137)
    world.plan()
    assert not world.is_true("Failed")
    world.pods["j-worker-0"] = replace(
        world.pods["j-worker-0"], restart_count=1, last_exit_code=64,
        last_exit_reason="bad configuration: x",
    )  # fmt: skip
    plan = world.plan()
    message = (
        "replicas restarted 2 times, more than runPolicy.backoffLimit (1); last: j-worker-0 "
        "restarted after exiting with CONFIG (64): bad configuration: x"
    )
    assert world.condition("Failed")["message"] == message
    assert (naming.REASON_BACKOFF_LIMIT_EXCEEDED, message) in events(plan)
