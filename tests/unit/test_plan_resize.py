"""Elastic workers in the planner: a resize's children, the Resizing condition and Event,
and the workers a scale down removes (never restarted, never a failure, a recovery or a
straggler); the PodGroup's minMember (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from syncreplicas_operator.core import manifests, naming
from syncreplicas_operator.core.actions import (
    CreateChild,
    DeletePod,
    DeleteService,
    EmitEvent,
)
from syncreplicas_operator.core.plan.context import Observed, Plan
from syncreplicas_operator.core.plan.pipeline import plan_job
from syncreplicas_operator.core.recovery import SeenPod
from syncreplicas_operator.core.spec import Job
from syncreplicas_operator.core.status import ObservedPod

from tests.support.jobs import planner_job
from tests.support.plans import T0

ELASTIC = {"minReplicasToAggregate": 1, "elasticPolicy": {"minWorkers": 1, "maxWorkers": 6}}


def elastic_job(workers: int, **spec: Any) -> Job:
    """``j``: R 2, minReplicasToAggregate 1, elasticPolicy 1..6, ``workers`` workers."""
    return planner_job(2, workers=workers, **{**ELASTIC, **spec})


@dataclass
class World:
    """The job's children as the API holds them after each applied plan; pods the plan
    deletes stay, terminating, until ``gone``."""

    job: Job
    pods: dict[str, ObservedPod] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)
    status: dict[str, Any] = field(default_factory=dict)
    seen: dict[str, SeenPod] | None = None
    fractions: dict[str, float] | None = None
    last: Plan | None = None

    def plan(self) -> Plan:
        observed = Observed(
            tuple(self.pods.values()),
            frozenset(self.services),
            True,
            seen_pods=self.seen,
            drop_fractions=self.fractions,
            disruption_budget=True,
        )
        plan = self.last = plan_job(self.job, observed, self.status, T0)
        for action in plan.actions:
            if isinstance(action, CreateChild) and action.kind == "Pod":
                rtype, index = naming.parse_replica_name("j", action.name) or ("", 0)
                self.pods[action.name] = ObservedPod(action.name, rtype, index, uid=action.name)
            elif isinstance(action, CreateChild) and action.kind == "Service":
                self.services.add(action.name)
            elif isinstance(action, DeletePod):
                self.pods[action.name] = replace(self.pods[action.name], deleting=True)
            elif isinstance(action, DeleteService):
                self.services.discard(action.name)
        self.status, self.seen = plan.status, dict(plan.seen_pods)
        return plan

    def run_all(self) -> None:
        for name, pod in self.pods.items():
            if pod.phase == "Pending":
                self.pods[name] = replace(pod, phase="Running", ready=True)

    def gone(self) -> None:
        """The kubelet confirms every deletion."""
        self.pods = {n: p for n, p in self.pods.items() if not p.deleting}

    def condition(self, ctype: str) -> tuple[str, str, str] | None:
        found = next((c for c in self.status.get("conditions", []) if c["type"] == ctype), None)
        return None if found is None else (found["status"], found["reason"], found["message"])


def running(workers: int, per_replica: bool = False, **spec: Any) -> World:
    """An elastic job with every replica created, running and ready; with
    ``per_replica`` a Service each (one seen makes the planner keep them: a job an earlier
    operator made), else the job's one Service."""
    world = World(elastic_job(workers, **spec))
    if per_replica:
        world.services.add("j-ps-0")
    world.plan()
    world.run_all()
    world.plan()
    assert world.condition("Running") is not None
    return world


def events(plan: Plan) -> list[tuple[str, str]]:
    return [(a.reason, a.message) for a in plan.actions if isinstance(a, EmitEvent)]


def children(plan: Plan) -> list[tuple[str, str]]:
    """The creates and deletes of a plan, in order."""
    out = []
    for action in plan.actions:
        if isinstance(action, CreateChild):
            out.append((f"create {action.kind}", action.name))
        elif isinstance(action, DeletePod | DeleteService):
            out.append((type(action).__name__, action.name))
    return out


# --- scale up ------------------------------------------------------------------------------


PER_REPLICA = pytest.mark.parametrize("per_replica", [False, True])


@PER_REPLICA
def test_scale_up_creates_the_new_workers_services_then_pods(per_replica: bool) -> None:
    world = running(2, per_replica)
    world.job = elastic_job(4)
    plan = world.plan()
    services = [("create Service", "j-worker-2"), ("create Service", "j-worker-3")]
    assert children(plan) == [
        *(services if per_replica else []),
        ("create Pod", "j-worker-2"), ("create Pod", "j-worker-3"),
    ]  # fmt: skip
    assert (naming.REASON_RESIZING, "workers 2 -> 4 (elasticPolicy 1..6)") in events(plan)
    # New slots, not replacements: no Restarting, no ReplicaRestarted.
    assert naming.REASON_REPLICA_RESTARTED not in [r for r, _ in events(plan)]
    assert world.condition("Restarting") is None
    assert world.condition("Resizing") == ("True", naming.REASON_SCALING_UP, "workers 2 -> 4")
    assert world.status["workers"] == 4
    assert world.status["workerSelector"] == (
        "syncreplicas.io/job-name=j,syncreplicas.io/replica-type=worker"
    )
    # The new workers are told the current count and every PS the maxWorkers slots.
    pod = next(
        a.body
        for a in plan.actions
        if isinstance(a, CreateChild) and a.kind == "Pod" and a.name == "j-worker-3"
    )
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    settings = json.loads(env[naming.ENV_JOB])
    assert settings["workers"] == 4
    assert settings["elasticPolicy"] == {"minWorkers": 1, "maxWorkers": 6}
    assert json.loads(env[naming.ENV_TF_CONFIG])["cluster"]["worker"] == {
        "3": "j-worker-3.ns.svc:2222" if per_replica else "j-worker-3.j.ns.svc:2222"
    }
    # The next pass sees them, not yet training: still resizing, and no second Event.
    plan = world.plan()
    assert children(plan) == []
    assert naming.REASON_RESIZING not in [r for r, _ in events(plan)]
    assert world.condition("Resizing") == ("True", naming.REASON_SCALING_UP, "workers 2 -> 4")
    # Once they are ready (the runtime's /readyz: training), the resize is done.
    world.run_all()
    world.plan()
    assert world.condition("Resizing") == ("False", naming.REASON_RESIZED, "workers 4")
    assert world.status["ready"] == "6/6"
    assert world.condition("Restarting") is None


# --- scale down ----------------------------------------------------------------------------


@PER_REPLICA
def test_scale_down_deletes_the_highest_workers_then_their_services(per_replica: bool) -> None:
    world = running(4, per_replica)
    world.job = elastic_job(1)
    plan = world.plan()
    assert children(plan) == [
        ("DeletePod", "j-worker-3"), ("DeletePod", "j-worker-2"), ("DeletePod", "j-worker-1"),
    ]  # fmt: skip
    assert (naming.REASON_RESIZING, "workers 4 -> 1 (elasticPolicy 1..6)") in events(plan)
    assert world.condition("Resizing") == ("True", naming.REASON_SCALING_DOWN, "workers 4 -> 1")
    assert world.status["workers"] == 1
    # Each leaves at SIGTERM and exits 0 while terminating: nothing to do, nothing failed.
    for index in (1, 2, 3):
        world.pods[f"j-worker-{index}"] = replace(
            world.pods[f"j-worker-{index}"], phase="Succeeded", exit_code=0, ready=False
        )
    plan = world.plan()
    assert children(plan) == []  # the Services wait for their pods to be gone
    # Done only once the removed pods are gone.
    assert world.condition("Resizing") == ("True", naming.REASON_SCALING_DOWN, "workers 4 -> 1")
    assert naming.REASON_RESIZING not in [r for r, _ in events(plan)]
    world.gone()
    plan = world.plan()
    assert world.condition("Resizing") == ("False", naming.REASON_RESIZED, "workers 1")
    assert children(plan) == [
        ("DeleteService", "j-worker-1"), ("DeleteService", "j-worker-2"),
        ("DeleteService", "j-worker-3"),
    ][: 3 if per_replica else 0]  # fmt: skip
    plan = world.plan()
    assert children(plan) == [] and events(plan) == []
    assert world.status["replicaStatuses"]["worker"] == {
        "active": 1, "ready": 1, "succeeded": 0, "failed": 0, "restarts": 0,
    }  # fmt: skip
    assert world.status["ready"] == "3/3"
    assert world.status["phase"] == naming.PHASE_RUNNING
    for ctype in ("Restarting", "Degraded", "Stalled", "Succeeded", "Failed"):
        assert (world.condition(ctype) or ("False",))[0] == "False", ctype
    assert "lastRecovery" not in world.status


@PER_REPLICA
def test_a_new_target_while_resizing_is_a_new_resize(per_replica: bool) -> None:
    """4 -> 1, then 3 before the removed pods are gone: no pod is created over a
    terminating one; then workers 1 and 2 come back as new pods (no Restarting)."""
    world = running(4, per_replica)
    world.job = elastic_job(1)
    world.plan()
    world.job = elastic_job(3)
    plan = world.plan()
    assert children(plan) == []
    assert events(plan) == [(naming.REASON_RESIZING, "workers 1 -> 3 (elasticPolicy 1..6)")]
    assert world.condition("Resizing") == ("True", naming.REASON_SCALING_UP, "workers 1 -> 3")
    world.gone()
    plan = world.plan()
    assert children(plan) == [
        ("create Pod", "j-worker-1"), ("create Pod", "j-worker-2"),
        *([("DeleteService", "j-worker-3")] if per_replica else []),
    ]  # fmt: skip
    assert naming.REASON_RESIZING not in [r for r, _ in events(plan)]
    world.run_all()
    world.plan()
    assert world.condition("Resizing") == ("False", naming.REASON_RESIZED, "workers 3")
    assert world.condition("Restarting") is None
    # 3 -> 2, then back to 3 while worker-2 terminates: from the 2 there now.
    world.job = elastic_job(2)
    world.plan()
    world.job = elastic_job(3)
    plan = world.plan()
    assert events(plan) == [(naming.REASON_RESIZING, "workers 2 -> 3 (elasticPolicy 1..6)")]
    # Then to the count there now: nothing to do but say it is done once worker-2 is gone.
    world.job = elastic_job(2)
    plan = world.plan()
    assert events(plan) == []
    world.gone()
    world.plan()
    assert world.condition("Resizing") == ("False", naming.REASON_RESIZED, "workers 2")


@PER_REPLICA
@pytest.mark.parametrize(
    ("phase", "code"),
    [("Succeeded", 0), ("Failed", 143), ("Failed", 1), ("Failed", 64)],
)
def test_a_removed_worker_that_exits_first_is_neither_restarted_nor_a_failure(
    phase: str, code: int, per_replica: bool
) -> None:
    """A worker beyond spec.workers that stops before its deletion shows: under
    restartPolicy ExitCode, no restart, no job failure, no success; just deleted."""
    world = running(3, per_replica, runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 0})
    world.job = elastic_job(2, runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 0})
    world.pods["j-worker-2"] = replace(
        world.pods["j-worker-2"], phase=phase, exit_code=code, ready=False
    )
    plan = world.plan()
    assert children(plan) == [("DeletePod", "j-worker-2")]
    assert world.status["phase"] == naming.PHASE_RUNNING
    assert world.status["replicaStatuses"]["worker"]["restarts"] == 0
    assert world.condition("Restarting") is None
    assert "lastRecovery" not in world.status
    world.gone()
    plan = world.plan()
    assert children(plan) == ([("DeleteService", "j-worker-2")] if per_replica else [])
    assert world.status["phase"] == naming.PHASE_RUNNING


def test_a_worker_lost_while_not_resizing_is_no_resize() -> None:
    """Someone deletes worker-1 of an elastic job: replaced as today, Restarting, a
    recovery; no Resizing."""
    world = running(2)
    del world.pods["j-worker-1"]
    plan = world.plan()
    assert children(plan) == [("create Pod", "j-worker-1")]
    assert naming.REASON_RESIZING not in [r for r, _ in events(plan)]
    assert world.condition("Resizing") is None
    assert (world.condition("Restarting") or ("",))[0] == "True"
    assert world.status["lastRecovery"]["replica"] == "worker-1"


def test_a_worker_removed_ends_its_recovery_and_its_straggler_flag() -> None:
    world = running(3)
    world.status["lastRecovery"] = {
        "replica": "worker-2", "cause": "Exited", "message": "j-worker-2 exited with 1",
        "startedAt": "2025-12-31T23:59:00Z",
    }  # fmt: skip
    world.status["straggler"] = {"replica": "worker-2", "dropFraction": 0.9, "since": "t"}
    world.status["conditions"].append(
        {"type": "StragglerDetected", "status": "True", "reason": "StragglerDetected",
         "message": "worker-2", "lastTransitionTime": "t"}
    )  # fmt: skip
    world.fractions = {"chief-0": 0.0, "worker-0": 0.0, "worker-1": 0.1, "worker-2": 0.95}
    world.job = elastic_job(2)
    plan = world.plan()
    record = world.status["lastRecovery"]
    assert record["recoveredAt"] == "2026-01-01T00:00:00Z"
    assert record["message"].endswith("; worker-2 removed by a resize")
    assert "straggler" not in world.status
    assert world.condition("StragglerDetected") == (
        "False", naming.REASON_STRAGGLER_CLEARED, "worker-2 was removed by a resize",
    )  # fmt: skip
    assert naming.REASON_REPLICA_RECOVERED not in [r for r, _ in events(plan)]


def test_a_job_that_ends_while_resizing_is_no_longer_resizing() -> None:
    world = running(2)
    world.job = elastic_job(4)
    world.plan()
    assert (world.condition("Resizing") or ("",))[0] == "True"
    world.pods["j-chief-0"] = replace(world.pods["j-chief-0"], phase="Succeeded", exit_code=0)
    world.plan()
    assert world.status["phase"] == naming.PHASE_SUCCEEDED
    assert world.condition("Resizing") == (
        "False", naming.REASON_SUCCEEDED, "the chief finished training",
    )  # fmt: skip


def test_creating_an_elastic_job_is_no_resize() -> None:
    world = World(elastic_job(3))
    plan = world.plan()
    assert naming.REASON_RESIZING not in [r for r, _ in events(plan)]
    world.run_all()
    world.plan()
    assert world.condition("Resizing") is None
    assert world.status["workers"] == 3


def test_a_job_without_elastic_policy_has_no_resizing() -> None:
    world = World(planner_job(2))
    world.plan()
    world.run_all()
    world.plan()
    assert world.condition("Resizing") is None
    assert world.status["workers"] == 2


# --- gang scheduling ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "min_member"),
    [
        ({"workers": 2}, 1 + 2),  # PS + min(R 2, 1 + 2)
        ({"workers": 0, "replicasToAggregate": 1}, 1 + 1),
        ({**ELASTIC, "workers": 4}, 1 + 2),  # PS + min(R 2, 1 + minWorkers 1)
        ({**ELASTIC, "workers": 1}, 1 + 2),
        ({"workers": 4, "minReplicasToAggregate": 1,
          "elasticPolicy": {"minWorkers": 0, "maxWorkers": 6}}, 1 + 1),
        ({"workers": 6, "replicasToAggregate": 5, "parameterServers": 2,
          "elasticPolicy": {"minWorkers": 4, "maxWorkers": 8}}, 2 + 5),
    ],
)  # fmt: skip
def test_pod_group_min_member(spec: dict[str, Any], min_member: int) -> None:
    gang = {"runPolicy": {"schedulingPolicy": {"gangScheduler": "Coscheduling"}}}
    job = planner_job(**{"replicasToAggregate": 2, **spec, **gang})
    assert manifests.pod_group_min_member(job.spec) == min_member
    assert manifests.build_pod_group(job)["spec"]["minMember"] == min_member


def test_pod_group_follows_the_spec_through_a_resize() -> None:
    """The group a resized job would get is the one it has: nothing to update."""
    gang = {"runPolicy": {"schedulingPolicy": {"gangScheduler": "Volcano"}}}
    groups = [manifests.build_pod_group(elastic_job(w, **gang)) for w in (1, 2, 6)]
    assert all(g == groups[0] for g in groups)
