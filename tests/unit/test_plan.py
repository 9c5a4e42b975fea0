"""plan_job end to end: every run policy, every phase, chief restarts, idempotence (pure).

Each step's own tables are in test_plan_<step>.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import openapi_schema_validator
import pytest
import yaml
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import (
    CHIEF_CLEANUPS,
    JOB_RESTARTS,
    PODS_CREATED,
    CountMetric,
    CreateChild,
    DeleteJob,
    DeletePod,
    DeletePodGroup,
    EmitEvent,
    PatchStatus,
    PublishPod,
)
from syncreplicas_operator.core.plan.children import FORCE_DELETE_AFTER_SECONDS
from syncreplicas_operator.core.plan.context import Observed, Plan
from syncreplicas_operator.core.plan.pipeline import plan_job
from syncreplicas_operator.core.spec import Job
from syncreplicas_operator.core.status import ObservedPod

from tests.support.jobs import planner_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- a tiny world the plans act on -------------------------------------------------------


def make_job(**spec: Any) -> Job:
    return planner_job(2, **spec)


@dataclass
class World:
    """Children and status as the API would hold them after each applied plan."""

    job: Job
    pods: dict[str, ObservedPod] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)
    policy: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    now: datetime = T0
    step: int | None = None
    last: Plan | None = None
    pod_group: bool | None = None
    pod_group_api: bool = True
    budget: bool | None = None

    def plan(self) -> Plan:
        observed = Observed(
            tuple(self.pods.values()),
            frozenset(self.services),
            self.policy,
            self.step,
            pod_group=self.pod_group,
            pod_group_api=self.pod_group_api,
            disruption_budget=self.budget,
        )
        self.last = plan_job(self.job, observed, self.status, self.now)
        for action in self.last.actions:
            if isinstance(action, CreateChild):
                if action.kind == "Pod":
                    rtype, index = naming.parse_replica_name("j", action.name) or ("", 0)
                    self.pods[action.name] = ObservedPod(action.name, rtype, index, uid=f"u{index}")
                elif action.kind == "Service":
                    self.services.add(action.name)
                elif action.kind == "PodGroup":
                    self.pod_group = True
                elif action.kind == "PodDisruptionBudget":
                    self.budget = True
                else:
                    self.policy = True
            elif isinstance(action, DeletePod):
                self.pods.pop(action.name, None)
            elif isinstance(action, DeletePodGroup):
                self.pod_group = False
            elif isinstance(action, PublishPod) and action.name in self.pods:
                self.pods[action.name] = replace(self.pods[action.name],
                                                 published=action.published)  # fmt: skip
        self.status = self.last.status
        return self.last

    def settle(self) -> Plan:
        """Plan until nothing is left to do (at most a few passes)."""
        for _ in range(5):
            plan = self.plan()
            if not any(isinstance(a, CreateChild | DeletePod) for a in plan.actions):
                return plan
        raise AssertionError("the plan does not converge")

    def set(self, name: str, **changes: Any) -> None:
        self.pods[name] = replace(self.pods[name], **changes)

    def set_deleting(self, name: str, disruption: str) -> None:
        """A pod the operator deleted, seen again before it is gone (watch lag)."""
        self.pods[name] = replace(
            self.pods.get(name) or ObservedPod(name, *naming.parse_replica_name("j", name)),
            deleting=True,
            disruption=disruption,
        )

    def run_all(self) -> None:
        for name, pod in self.pods.items():
            if pod.phase == "Pending":
                self.pods[name] = replace(pod, phase="Running", ready=True, pod_ip="10.0.0.1")

    def condition(self, ctype: str) -> dict[str, Any] | None:
        return next((c for c in self.status.get("conditions", []) if c["type"] == ctype), None)

    def is_true(self, ctype: str) -> bool:
        cond = self.condition(ctype)
        return cond is not None and cond["status"] == "True"


def kinds(plan: Plan) -> list[str]:
    return [type(a).__name__ for a in plan.actions]


def reasons(plan: Plan) -> list[str]:
    return [a.reason for a in plan.actions if isinstance(a, EmitEvent)]


def counted(plan: Plan, name: str) -> int:
    return sum(a.amount for a in plan.actions if isinstance(a, CountMetric) and a.name == name)


def running_world(**spec: Any) -> World:
    world = World(make_job(**spec))
    world.settle()
    world.run_all()
    world.settle()
    return world


# --- creation and idempotence ------------------------------------------------------------


def test_first_pass_creates_policy_services_then_pods_in_order() -> None:
    world = World(make_job(workers=2, parameterServers=2))
    plan = world.plan()
    created = [(a.kind, a.name) for a in plan.actions if isinstance(a, CreateChild)]
    assert created[0] == ("NetworkPolicy", "j-grpc")
    assert [n for k, n in created if k == "Service"] == ["j"]  # the job's, before its pods
    assert created.index(("Service", "j")) < created.index(("Pod", "j-ps-0"))
    assert [n for k, n in created if k == "Pod"] == [
        "j-ps-0", "j-ps-1", "j-chief-0", "j-worker-0", "j-worker-1",
    ]  # fmt: skip
    assert counted(plan, PODS_CREATED) == 5
    assert isinstance(plan.actions[-1], PatchStatus)  # status after the children
    assert world.status["phase"] == naming.PHASE_CREATED
    assert world.status["startTime"] == "2026-01-01T00:00:00Z"
    assert world.status["observedGeneration"] == 1


def test_a_settled_job_plans_nothing_not_even_a_status_write() -> None:
    world = running_world()
    assert world.status["phase"] == naming.PHASE_RUNNING
    world.now += timedelta(seconds=30)
    assert world.plan().actions == ()


def test_creation_costs_one_event_and_one_status_write() -> None:
    world = World(make_job(workers=3))
    plan = world.plan()
    assert reasons(plan) == [naming.REASON_CREATED]
    assert kinds(plan).count("PatchStatus") == 1
    # The children show up Pending: nothing to write until something changes.
    assert world.plan().actions == ()


def test_pods_present_or_terminating_are_never_created_again() -> None:
    world = World(make_job())
    world.plan()
    world.set("j-worker-0", deleting=True)
    plan = world.plan()
    assert not [a for a in plan.actions if isinstance(a, CreateChild)]


def test_out_of_range_children_are_deleted() -> None:
    world = World(make_job(workers=1))
    world.pods["j-worker-5"] = ObservedPod("j-worker-5", "worker", 5)
    world.services.add("j-worker-5")
    plan = world.plan()
    assert DeletePod("j-worker-5") in plan.actions
    assert "DeleteService" in kinds(plan)


# --- success, failure, clean-up, TTL ------------------------------------------------------


@pytest.mark.parametrize(
    ("clean", "left"),
    [
        ("Running", {"j-chief-0"}),
        ("All", set()),
        ("None", {"j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"}),
    ],
)
def test_chief_success_finishes_and_cleans_per_policy(clean: str, left: set[str]) -> None:
    world = running_world(runPolicy={"cleanPodPolicy": clean})
    world.status["globalStep"] = 500
    world.set("j-chief-0", phase="Succeeded", exit_code=0)
    plan = world.plan()
    assert world.status["phase"] == naming.PHASE_SUCCEEDED
    assert world.status["completionTime"] == "2026-01-01T00:00:00Z"
    assert "at global step 500" in world.condition("Succeeded")["message"]
    assert not world.is_true("Running")
    assert set(world.pods) == left
    assert naming.REASON_SUCCEEDED in reasons(plan)
    world.now += timedelta(hours=1)
    assert world.plan().actions == ()  # finished and clean: nothing more


@pytest.mark.parametrize(
    ("known", "read", "said", "final"),
    [
        (1148, None, 3000, 3000),  # it finished between two reads of its metrics
        (1148, 1500, None, 1500),  # read this very pass; no message (an older runtime)
        (1148, 2999, 3000, 3000),
        (3000, None, 2990, 3000),  # never lower than what was read
        (None, None, 3000, 3000),
        (None, None, None, None),
    ],
)
def test_success_reports_the_chiefs_final_step(
    known: int | None, read: int | None, said: int | None, final: int | None
) -> None:
    world = running_world()
    if known is not None:
        world.status["globalStep"] = known
    world.step = read
    world.set("j-chief-0", phase="Succeeded", exit_code=0, exit_step=said)
    plan = world.plan()
    assert world.status.get("globalStep") == final
    message = world.condition("Succeeded")["message"]
    at = f" at global step {final}" if final is not None else ""
    assert message == f"the chief finished training{at}"
    assert EmitEvent("Normal", naming.REASON_SUCCEEDED, message) in plan.actions
    patch = next(a for a in plan.actions if isinstance(a, PatchStatus)).patch
    assert patch.get("globalStep") == (final if final != known else None)


BAD_CONFIG = "bad configuration: TF_CONFIG.task.type: unknown role 'evaluator'"


@pytest.mark.parametrize(
    ("policy", "who", "code"),
    [
        ("ExitCode", "j-worker-0", 64),  # non-retryable
        ("Never", "j-ps-0", 64),  # an essential replica under Never
    ],
)
def test_a_failed_job_says_the_runtimes_reason(policy: str, who: str, code: int) -> None:
    world = running_world(runPolicy={"restartPolicy": policy})
    world.set(who, phase="Failed", exit_code=code, exit_reason=BAD_CONFIG)
    plan = world.plan()
    message = world.condition("Failed")["message"]
    assert message.startswith(f"{who} exited with CONFIG (64) (restartPolicy {policy}")
    assert message.endswith(f"restarts used): {BAD_CONFIG}")
    events = [a for a in plan.actions if isinstance(a, EmitEvent) and a.type == "Warning"]
    assert [e.message for e in events if e.reason == world.condition("Failed")["reason"]] == [
        message
    ]


def test_a_restarted_replica_is_named_with_its_reason() -> None:
    world = running_world(runPolicy={"restartPolicy": "ExitCode"})
    world.plan()  # a pass to compare with (lastRecovery)
    world.set("j-worker-1", phase="Failed", exit_code=75, exit_reason="lost a PS")
    plan = world.plan()
    restarting = world.condition("Restarting")["message"]
    assert restarting == "restarting j-worker-1 (RETRY (75): lost a PS)"
    assert EmitEvent("Warning", naming.REASON_REPLICA_RESTARTED, restarting) in plan.actions
    assert world.status["lastRecovery"]["message"] == "j-worker-1 exited with RETRY (75): lost a PS"


def test_restarts_beyond_the_budget_name_the_last_reason() -> None:
    world = running_world(runPolicy={"backoffLimit": 1})  # OnFailure: kubelet restarts
    world.set(
        "j-worker-0", restart_count=2, last_exit_code=65, last_exit_reason="cannot import 'm'"
    )
    world.plan()
    failed = world.condition("Failed")
    assert failed["reason"] == naming.REASON_BACKOFF_LIMIT_EXCEEDED
    assert failed["message"] == (
        "replicas restarted 2 times, more than runPolicy.backoffLimit (1); last: j-worker-0 "
        "restarted after exiting with MODEL (65): cannot import 'm'"
    )


def test_a_chief_restart_in_place_says_why_it_exited() -> None:
    world = running_world()
    world.set("j-chief-0", restart_count=1, last_exit_code=75, last_exit_reason="lost a PS")
    world.plan()
    assert world.status["lastCleanup"]["reason"] == (
        "the chief container restarted after exiting with RETRY (75): lost a PS (restart 1)"
    )


def test_a_lost_worker_is_named_with_its_reason() -> None:
    world = running_world(workers=3, replicasToAggregate=2, runPolicy={"restartPolicy": "Never"})
    world.set("j-worker-0", phase="Failed", exit_code=65, exit_reason="cannot import 'm'")
    world.set("j-worker-2", phase="Failed", exit_code=1)
    world.plan()
    assert world.condition("Degraded")["message"] == (
        "lost 2 worker(s) (j-worker-0: MODEL (65): cannot import 'm'; j-worker-2: EXIT (1)); "
        "2 of 4 replicas left for replicasToAggregate 2"
    )


def test_ttl_deletes_the_job_from_its_completion_time() -> None:
    world = running_world(runPolicy={"ttlSecondsAfterFinished": 60})
    world.set("j-chief-0", phase="Succeeded", exit_code=0)
    plan = world.plan()
    assert plan.requeue_after == pytest.approx(60)
    world.now += timedelta(seconds=59)
    assert world.plan().requeue_after == pytest.approx(1)
    # An operator restarted later derives the deadline from status.completionTime alone.
    world.now += timedelta(seconds=1)
    plan = world.plan()
    assert DeleteJob(naming.REASON_TTL_EXPIRED) in plan.actions
    assert not any(isinstance(a, PatchStatus) for a in plan.actions)


def test_active_deadline_fails_the_job() -> None:
    world = running_world(runPolicy={"activeDeadlineSeconds": 100})
    world.now += timedelta(seconds=40)
    assert world.plan().requeue_after == pytest.approx(60)
    world.now += timedelta(seconds=60)
    world.plan()
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == naming.REASON_DEADLINE_EXCEEDED
    assert set(world.pods) == set()  # Running pods stopped (chief included: it was running)


@pytest.mark.parametrize(
    ("policy", "who", "code", "reason"),
    [
        ("ExitCode", "j-worker-0", 64, naming.REASON_NON_RETRYABLE_EXIT),
        ("ExitCode", "j-ps-0", 65, naming.REASON_NON_RETRYABLE_EXIT),
        ("Never", "j-ps-0", 1, naming.REASON_REPLICA_FAILED),
        ("Never", "j-chief-0", 137, naming.REASON_REPLICA_FAILED),
    ],
)
def test_fatal_exits_fail_the_job(policy: str, who: str, code: int, reason: str) -> None:
    world = running_world(runPolicy={"restartPolicy": policy})
    world.set(who, phase="Failed", exit_code=code)
    plan = world.plan()
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == reason
    assert who in failed["message"] and str(code) in failed["message"]
    assert world.status["phase"] == naming.PHASE_FAILED
    assert reason in reasons(plan)
    assert all(not p.active for p in world.pods.values())  # PS never outlive the job


def test_retryable_exit_replaces_the_pod_and_counts_the_restart() -> None:
    world = running_world(runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 1})
    world.set("j-worker-1", phase="Failed", exit_code=75)
    plan = world.plan()
    assert DeletePod("j-worker-1") in plan.actions
    assert world.is_true("Restarting")
    assert world.status["replicaStatuses"]["worker"]["restarts"] == 1
    plan = world.plan()  # the pod is gone: created again
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-worker-1"]
    world.run_all()
    world.plan()
    assert not world.is_true("Restarting")
    # The budget is spent: the next failure of a worker loses it (backups absorb it).
    world.set("j-worker-1", phase="Failed", exit_code=75)
    world.plan()
    assert world.is_true("Degraded") and not world.is_true("Failed")
    assert "j-worker-1" in world.condition("Degraded")["message"]


def test_in_place_restarts_spend_the_backoff_budget() -> None:
    world = running_world(runPolicy={"backoffLimit": 3})
    world.set("j-worker-0", restart_count=2)
    world.set("j-ps-0", restart_count=1)
    world.plan()
    assert not world.is_true("Failed")
    world.set("j-worker-1", restart_count=1)
    world.plan()
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == naming.REASON_BACKOFF_LIMIT_EXCEEDED


# --- backups -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "r", "lost", "degraded", "stalled"),
    [
        (3, 2, 1, True, False),  # 3 replicas left >= R=2
        (3, 3, 1, True, False),  # 3 left >= 3
        (3, 4, 1, True, True),  # 3 left < 4
        (1, 2, 1, True, True),  # only the chief left
    ],
)
def test_losing_workers(workers: int, r: int, lost: int, degraded: bool, stalled: bool) -> None:
    world = running_world(
        workers=workers, replicasToAggregate=r, runPolicy={"restartPolicy": "Never"}
    )
    for i in range(lost):
        world.set(f"j-worker-{i}", phase="Failed", exit_code=1)
    world.plan()
    assert world.is_true("Degraded") is degraded
    assert world.is_true("Stalled") is stalled
    assert not world.is_true("Failed")


# --- chief restarts ----------------------------------------------------------------------


def test_chief_container_restart_under_reset_sync_state() -> None:
    world = running_world()
    world.set("j-chief-0", restart_count=1, last_exit_code=137)
    plan = world.plan()
    assert world.status["chiefRestarts"] == 1
    assert world.status["lastCleanup"]["policy"] == "ResetSyncState"
    assert "restarted" in world.status["lastCleanup"]["reason"]
    assert counted(plan, CHIEF_CLEANUPS) == 1
    assert naming.REASON_CHIEF_RESTARTED in reasons(plan)
    assert naming.REASON_CHIEF_CLEANUP in reasons(plan)
    assert not [a for a in plan.actions if isinstance(a, DeletePod)]
    assert world.plan().actions == ()  # counted once


def test_replaced_chief_pod_is_a_chief_restart() -> None:
    world = running_world()
    world.set("j-chief-0", uid="another-uid")
    world.plan()
    assert world.status["chiefRestarts"] == 1
    assert "replaced" in world.status["lastCleanup"]["reason"]


def test_chief_restart_under_restart_job_restarts_ps_then_workers() -> None:
    world = running_world(chiefRestartPolicy="RestartJob", workers=2)
    world.set("j-chief-0", restart_count=1)
    plan = world.plan()
    deleted = [a.name for a in plan.actions if isinstance(a, DeletePod)]
    assert deleted == ["j-worker-0", "j-worker-1", "j-ps-0"]  # workers first
    assert counted(plan, JOB_RESTARTS) == 1 and counted(plan, CHIEF_CLEANUPS) == 1
    assert world.status["restartJob"]["round"] == 1
    assert world.is_true("Restarting")
    plan = world.plan()  # PS first; workers wait for them
    created = [a.name for a in plan.actions if isinstance(a, CreateChild)]
    assert created == ["j-ps-0"]
    pod = next(a for a in plan.actions if isinstance(a, CreateChild))
    assert pod.body["metadata"]["annotations"][naming.ANNOTATION_RESTART_ROUND] == "1"
    # PS still pending: workers keep waiting.
    assert not [a for a in world.plan().actions if isinstance(a, CreateChild)]
    world.run_all()
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == [
        "j-worker-0", "j-worker-1",
    ]  # fmt: skip
    assert "restartJob" not in world.status
    world.run_all()
    world.plan()
    assert not world.is_true("Restarting")
    assert world.status["chiefRestarts"] == 1


def test_chief_restart_under_fail_fails_the_job() -> None:
    world = running_world(chiefRestartPolicy="Fail")
    world.set("j-chief-0", restart_count=1)
    world.plan()
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == naming.REASON_CHIEF_RESTARTED


def test_failed_chief_replaced_by_the_operator_counts_one_restart() -> None:
    world = running_world(runPolicy={"restartPolicy": "ExitCode"})
    world.set("j-chief-0", phase="Failed", exit_code=75)
    plan = world.plan()
    assert DeletePod("j-chief-0") in plan.actions
    assert world.status["chiefRestarts"] == 1
    world.plan()  # recreated with a new uid
    world.run_all()
    world.plan()
    world.plan()
    assert world.status["chiefRestarts"] == 1


# --- suspend, progress -------------------------------------------------------------------


def test_suspend_deletes_pods_and_resume_creates_them() -> None:
    world = running_world(runPolicy={"activeDeadlineSeconds": 100})
    world.job = make_job(runPolicy={"activeDeadlineSeconds": 100, "suspend": True})
    plan = world.plan()
    # The chief and the workers, then (the chief gone) the PS: its checkpoint reads it.
    assert len([a for a in plan.actions if isinstance(a, DeletePod)]) == 3
    assert [a.name for a in world.plan().actions if isinstance(a, DeletePod)] == ["j-ps-0"]
    assert world.status["phase"] == naming.PHASE_SUSPENDED
    assert "startTime" not in world.status
    world.now += timedelta(seconds=500)  # suspended time does not count
    world.job = make_job(runPolicy={"activeDeadlineSeconds": 100})
    plan = world.plan()
    assert len([a for a in plan.actions if isinstance(a, CreateChild)]) == 4
    assert world.condition("Suspended")["status"] == "False"
    assert not world.is_true("Failed")
    assert naming.REASON_RESUMED in reasons(plan)
    world.run_all()
    world.plan()
    assert "chiefRestarts" not in world.status  # a resumed chief is not a restarted one


def test_global_step_progress_and_stall() -> None:
    world = running_world(stallTimeoutSeconds=60)
    world.step = 10
    world.plan()
    assert world.status["globalStep"] == 10
    world.step = None  # not read this pass
    world.now += timedelta(seconds=30)
    assert world.plan().requeue_after == pytest.approx(30)
    world.now += timedelta(seconds=30)
    plan = world.plan()
    assert world.is_true("Stalled")
    assert "global step 10" in world.condition("Stalled")["message"]
    assert naming.REASON_STALLED in reasons(plan)
    world.step = 11
    world.plan()
    assert not world.is_true("Stalled")


# --- the status fits the CRD's schema (a real API server prunes unknown fields) -----------


def crd_status_schema() -> dict[str, Any]:
    crd = yaml.safe_load((Path(__file__).parents[2] / "crds" / "syncreplicasjobs.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == naming.VERSION)
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return _no_unknown_fields(schema)


def _no_unknown_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with additionalProperties false wherever it lists properties: a field the
    operator writes but the CRD does not declare would be pruned by the API server."""
    out = dict(schema)
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["properties"] = {k: _no_unknown_fields(v) for k, v in out["properties"].items()}
        out["additionalProperties"] = False
    if isinstance(out.get("items"), dict):
        out["items"] = _no_unknown_fields(out["items"])
    return out


def test_every_status_the_planner_writes_fits_the_crd() -> None:
    schema = crd_status_schema()
    world = running_world(chiefRestartPolicy="RestartJob", stallTimeoutSeconds=10)
    world.step = 7
    world.plan()
    statuses = [dict(world.status)]
    world.set("j-chief-0", restart_count=1, last_exit_code=1)
    world.plan()  # restartJob, lastCleanup, chiefRestarts
    statuses.append(dict(world.status))
    for _ in range(3):  # PS back, then workers
        world.settle()
        world.run_all()
    world.now += timedelta(seconds=60)
    world.set("j-worker-0", phase="Failed", exit_code=1)
    world.plan()  # recreations, Degraded/Stalled
    statuses.append(dict(world.status))
    world.set("j-chief-0", phase="Succeeded", exit_code=0)
    world.plan()
    statuses.append(dict(world.status))
    for status in statuses:
        openapi_schema_validator.validate(status, schema)
    with pytest.raises(jsonschema.ValidationError):  # the check does bite
        openapi_schema_validator.validate({"chief": {"uid": "u", "pod": "x"}}, schema)
    assert {"restartJob", "recreations", "chief", "lastCleanup"} <= set().union(*statuses)


def test_restarts_of_deleted_pods_still_count() -> None:
    world = running_world(chiefRestartPolicy="RestartJob", runPolicy={"backoffLimit": 3})
    world.set("j-worker-0", restart_count=2)
    world.plan()
    assert world.status["replicaStatuses"]["worker"]["restarts"] == 2
    world.set("j-chief-0", restart_count=1)
    world.plan()  # RestartJob deletes the workers: their 2 restarts stay on the books
    assert world.status["replicaStatuses"]["worker"]["restarts"] == 2
    assert world.status["recreations"]["worker"] == 2
    world.set("j-chief-0", restart_count=2)  # 2 + 2 = 4 > backoffLimit 3
    world.plan()
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == naming.REASON_BACKOFF_LIMIT_EXCEEDED


# --- failures users hit with TFJob (kubeflow/training-operator issues) ------------------


def test_pods_gone_after_the_job_finished_are_not_run_again() -> None:
    """#1186: a finished job's pods deleted or garbage-collected re-run nothing."""
    world = running_world(runPolicy={"cleanPodPolicy": "None"})
    world.set("j-chief-0", phase="Succeeded", exit_code=0)
    world.plan()
    world.pods.clear()  # every pod deleted (by a user, or the pod garbage collector)
    world.now += timedelta(minutes=5)
    plan = world.plan()
    assert not [a for a in plan.actions if isinstance(a, CreateChild)]
    assert world.status["phase"] == naming.PHASE_SUCCEEDED


@pytest.mark.parametrize(
    "cause",
    [
        "Evicted: The node was low on resource: memory.",
        "Preempting: Preempted in order to admit critical pod",
        "Terminated: Pod was terminated in response to imminent node shutdown.",
        "PreemptionByScheduler: kube-scheduler: preempting to accommodate a higher priority pod",
    ],
)
def test_an_evicted_or_preempted_replica_is_restarted_and_named(cause: str) -> None:
    """#1560, #1570, #999: not a job failure, nor a restart the job's budget pays for."""
    world = running_world(runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 0})
    world.set("j-ps-0", phase="Failed", exit_code=137, disruption=cause)
    plan = world.plan()
    assert DeletePod("j-ps-0") in plan.actions
    assert not world.is_true("Failed")
    restarting = world.condition("Restarting")
    assert restarting is not None and cause in restarting["message"]
    assert "j-ps-0" in restarting["message"]
    event = next(a for a in plan.actions if isinstance(a, EmitEvent))
    assert event.reason == naming.REASON_REPLICA_RESTARTED and cause in event.message
    assert world.status["replicaStatuses"]["ps"]["restarts"] == 0
    world.set_deleting("j-ps-0", cause)  # still going: the same news is no new Event
    # (only its address out of its Service, once)
    assert world.plan().actions == (PublishPod("j-ps-0", published=False),)
    assert world.plan().actions == ()
    del world.pods["j-ps-0"]
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-ps-0"]


def test_a_pod_the_cluster_deletes_is_named_once_and_replaced() -> None:
    world = running_world(runPolicy={"restartPolicy": "ExitCode"})
    cause = "EvictionByEvictionAPI: Eviction API: evicting"
    world.set("j-worker-1", deleting=True, disruption=cause)
    plan = world.plan()
    assert reasons(plan) == [naming.REASON_REPLICA_RESTARTED]
    assert cause in world.condition("Restarting")["message"]
    assert world.plan().actions == ()  # still going: nothing new to say or do
    del world.pods["j-worker-1"]
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-worker-1"]
    world.run_all()
    world.plan()
    assert not world.is_true("Restarting") and not world.is_true("Failed")


def test_a_chief_the_cluster_deletes_is_a_chief_restart() -> None:
    world = running_world(chiefRestartPolicy="RestartJob")
    world.set("j-chief-0", deleting=True, disruption="PreemptionByScheduler: preempted")
    plan = world.plan()
    assert world.status["chiefRestarts"] == 1
    assert "PreemptionByScheduler" in world.status["lastCleanup"]["reason"]
    assert counted(plan, JOB_RESTARTS) == 1
    world.plan()
    assert world.status["chiefRestarts"] == 1  # counted once


def test_a_pod_stuck_terminating_is_force_deleted_and_replaced() -> None:
    """#2072: a lost node never confirms a deletion; the replica must not wait forever."""
    world = running_world()
    due = world.now + timedelta(seconds=30)  # deletionTimestamp: the end of the grace period
    world.set("j-worker-0", deleting=True, deletion_timestamp=due.isoformat())
    plan = world.plan()
    assert not [a for a in plan.actions if isinstance(a, DeletePod)]
    assert plan.requeue_after == pytest.approx(30 + FORCE_DELETE_AFTER_SECONDS)
    world.now = due + timedelta(seconds=FORCE_DELETE_AFTER_SECONDS)
    plan = world.plan()
    assert DeletePod("j-worker-0", grace_period_seconds=0) in plan.actions
    assert naming.REASON_FORCE_DELETED in reasons(plan)
    plan = world.plan()  # gone now: replaced
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-worker-0"]


def test_a_failed_ps_under_never_fails_the_job_and_stops_the_rest() -> None:
    """#881: a job never shows Running with a dead PS."""
    world = running_world(runPolicy={"restartPolicy": "Never"})
    world.set("j-ps-0", phase="Failed", exit_code=1)
    world.plan()
    assert world.status["phase"] == naming.PHASE_FAILED
    assert not world.is_true("Running")
    assert set(world.pods) == {"j-ps-0"}  # cleanPodPolicy Running: the others stopped


def test_the_chiefs_success_ends_the_job_and_releases_every_ps() -> None:
    """#774, #1059: the chief's exit 0 ends the job; parameter servers never linger."""
    world = running_world(parameterServers=2)
    world.set("j-worker-0", phase="Failed", exit_code=1)  # a worker's fate does not matter
    world.set("j-chief-0", phase="Succeeded", exit_code=0)
    world.plan()
    assert world.status["phase"] == naming.PHASE_SUCCEEDED
    assert not any(name.startswith("j-ps-") for name in world.pods)


# --- gang scheduling ---------------------------------------------------------------------

COSCHEDULING = {"schedulingPolicy": {"gangScheduler": "Coscheduling", "scheduleTimeoutSeconds": 90}}


def test_the_pod_group_comes_first_and_goes_when_the_job_ends() -> None:
    world = World(make_job(workers=3, replicasToAggregate=3, runPolicy=COSCHEDULING))
    plan = world.plan()
    first = plan.actions[0]
    assert isinstance(first, CreateChild) and first.kind == "PodGroup"
    assert first.body["apiVersion"] == naming.COSCHEDULING_API_VERSION
    assert first.body["spec"] == {"minMember": 1 + 3, "scheduleTimeoutSeconds": 90}
    pods = [a.body for a in plan.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    for pod in pods:
        assert pod["spec"]["schedulerName"] == naming.COSCHEDULING_SCHEDULER_NAME
        assert pod["metadata"]["labels"][naming.COSCHEDULING_POD_GROUP_LABEL] == "j"
    assert not [a for a in world.plan().actions if isinstance(a, CreateChild)]  # made once
    world.run_all()
    world.plan()
    world.set("j-chief-0", phase="Succeeded", exit_code=0)
    plan = world.plan()
    assert DeletePodGroup("j", naming.COSCHEDULING_API_VERSION) in plan.actions
    assert not [a for a in world.plan().actions if isinstance(a, DeletePodGroup)]


def test_suspend_releases_the_pod_group_and_resume_makes_it_again() -> None:
    world = running_world(runPolicy=COSCHEDULING)
    world.job = make_job(runPolicy={**COSCHEDULING, "suspend": True})
    world.plan()
    assert world.pod_group is False
    world.job = make_job(runPolicy=COSCHEDULING)
    world.plan()
    assert world.pod_group is True


def test_a_missing_gang_scheduler_fails_the_job_naming_its_api() -> None:
    world = World(make_job(runPolicy={"schedulingPolicy": {"gangScheduler": "Volcano"}}))
    world.pod_group_api = False
    plan = world.plan()
    assert not [a for a in plan.actions if isinstance(a, CreateChild)]
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == naming.REASON_GANG_SCHEDULER_MISSING
    assert naming.VOLCANO_API_VERSION in failed["message"]
    assert naming.REASON_GANG_SCHEDULER_MISSING in reasons(plan)


def test_a_gang_scheduler_gone_after_the_pods_were_created_fails_nothing() -> None:
    world = running_world(runPolicy=COSCHEDULING)
    world.pod_group, world.pod_group_api = None, False  # operator restarted; API gone
    plan = world.plan()
    assert not world.is_true("Failed")
    assert not [a for a in plan.actions if isinstance(a, CreateChild | DeletePodGroup)]


def test_a_pod_deleted_by_someone_is_replaced_and_named() -> None:
    """A plain delete (kubectl delete pod) leaves no cause on the pod: say what is known."""
    world = running_world(runPolicy={"restartPolicy": "ExitCode", "backoffLimit": 0})
    del world.pods["j-worker-0"]
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, CreateChild)] == ["j-worker-0"]
    assert "j-worker-0: deleted while the job ran" in world.condition("Restarting")["message"]
    assert naming.REASON_REPLICA_RESTARTED in reasons(plan)
    assert world.status["replicaStatuses"]["worker"]["restarts"] == 0
    world.run_all()
    world.plan()
    assert not world.is_true("Restarting") and not world.is_true("Failed")
