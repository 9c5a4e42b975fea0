"""Kueue on the operator's side: the Workload a queued job gets, how its state reads, and
the admit step: held until admitted, placed on the admitted flavors, stopped and the quota
given back on eviction, queued again when it no longer fits, marked Finished at the end."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.core import kueue, naming
from syncreplicas_operator.core.actions import (
    QUEUE_WAIT,
    WARNING,
    CreateChild,
    DeletePod,
    DeleteWorkload,
    EmitEvent,
    ObserveMetric,
    PatchWorkload,
)
from syncreplicas_operator.core.kueue import Flavor, ObservedWorkload, State
from syncreplicas_operator.core.plan import pipeline
from syncreplicas_operator.core.plan.queue import admit
from syncreplicas_operator.core.status import ObservedPod
from syncreplicas_operator.core.timefmt import format_time

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context, kinds, pods_of, reasons


def queued(queue: str = "lq", **spec: Any) -> Any:
    job = planner_job(**spec)
    return replace(job, labels={kueue.QUEUE_NAME_LABEL: queue})


JOB = queued()
TEMPLATES = kueue.templates_hash(kueue.pod_sets(JOB, default_image="img"))
COUNTS = {"ps": 1, "chief": 1, "worker": 2}


def cond(kind: str, status: bool, reason: str = "r", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": "t0"}  # fmt: skip


def admission(flavor: str = "default", **count: int) -> dict[str, Any]:
    sets = {**COUNTS, **count}
    return {"clusterQueue": "cq", "podSetAssignments": [
        {"name": n, "count": c, "flavors": {"cpu": flavor, "memory": flavor}}
        for n, c in sets.items()]}  # fmt: skip


def workload(*conditions: dict[str, Any], admitted: dict[str, Any] | None = None,
             **changes: Any) -> ObservedWorkload:  # fmt: skip
    fields: dict[str, Any] = {
        "uid": "w-uid", "resource_version": "7", "generation": 1, "templates": TEMPLATES,
        "counts": dict(COUNTS), "conditions": conditions, "admission": admitted, **changes,
    }  # fmt: skip
    return ObservedWorkload(name=kueue.workload_name(JOB), **fields)


ADMITTED = workload(cond("QuotaReserved", True), cond("Admitted", True),
                    admitted=admission())  # fmt: skip
PENDING = workload(cond("QuotaReserved", False, "Pending",
                        "couldn't assign flavors to pod set worker: insufficient quota"))
EVICTED = workload(cond("QuotaReserved", True), cond("Admitted", True),
                   cond("Evicted", True, "Preempted", "Preempted to accommodate a workload"),
                   admitted=admission())  # fmt: skip


def ctx_for(job: Any = JOB, pods: Any = (), wl: ObservedWorkload | None = None,
            **observed: Any) -> Any:  # fmt: skip
    observed.setdefault("kueue", True)
    observed.setdefault("kueue_served", True)
    return context(job, list(pods), workload=wl, **observed)


# --- the Workload ------------------------------------------------------------------------


def test_the_workload_has_a_pod_set_per_role_with_the_pods_requests_and_is_owned() -> None:
    job = queued(template={"spec": {"containers": [{"name": "syncreplicas", "resources": {
        "requests": {"cpu": "500m", "memory": "1Gi"}}}]}})  # fmt: skip
    body = kueue.build_workload(job, "lq", priority=("high", 1000), default_image="img")
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    meta, spec = body["metadata"], body["spec"]
    assert meta["name"].startswith("syncreplicasjob-j-") and len(meta["name"]) == 23
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert meta["ownerReferences"][0]["controller"] is True
    assert meta["labels"][kueue.JOB_UID_LABEL] == "uid-1"
    assert meta["labels"][naming.LABEL_JOB_NAME] == "j"
    assert spec["queueName"] == "lq"
    assert spec["priority"] == 1000 and spec["priorityClassRef"]["name"] == "high"
    assert [(s["name"], s["count"]) for s in spec["podSets"]] == list(COUNTS.items())
    for pod_set in spec["podSets"]:
        (main,) = [c for c in pod_set["template"]["spec"]["containers"]
                   if c["name"] == naming.CONTAINER_NAME]  # fmt: skip
        assert main["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
        assert "env" not in main  # nothing that names one replica
        assert set(pod_set["template"]) == {"spec"}  # Kueue allows labels/annotations only


def test_spares_count_as_workers_in_the_quota() -> None:
    assert kueue.counts(queued(runPolicy={"spares": 2}))["worker"] == 4


def test_the_workload_name_is_stable_and_differs_per_job_identity() -> None:
    assert kueue.workload_name(JOB) == kueue.workload_name(queued())
    other = replace(JOB, uid="uid-2")
    assert kueue.workload_name(other) != kueue.workload_name(JOB)


def test_a_job_without_the_label_has_no_queue() -> None:
    assert kueue.queue_name(planner_job()) is None
    assert kueue.queue_name(JOB) == "lq"


@pytest.mark.parametrize(("wl", "state", "said"), [
    (PENDING, State.PENDING, "insufficient quota"),
    (workload(), State.PENDING, "waiting for quota"),
    (ADMITTED, State.ADMITTED, ""),
    (EVICTED, State.EVICTED, "Preempted to accommodate"),
    (workload(cond("Finished", True, "Succeeded", "done"), admitted=admission()),
     State.FINISHED, "done"),
    (workload(cond("QuotaReserved", True), cond("Admitted", False, "r", "checks pending"),
              admitted=admission()), State.PENDING, "checks pending"),
])  # fmt: skip
def test_the_workloads_state_in_kueues_words(wl: ObservedWorkload, state: State,
                                             said: str) -> None:  # fmt: skip
    got, message = kueue.state(wl)
    assert got == state and said in message


def test_a_workload_is_read_back_from_its_body() -> None:
    body = kueue.build_workload(JOB, "lq", default_image="img")
    body["metadata"].update(uid="w", resourceVersion="9", generation=2)
    body["status"] = {"conditions": [cond("QuotaReserved", True)], "admission": admission()}
    seen = kueue.observe_workload(body)
    assert (seen.templates, dict(seen.counts)) == (TEMPLATES, COUNTS)
    assert seen.resource_version == "9" and seen.admission is not None and seen.active


# --- fit ----------------------------------------------------------------------------------


def test_fewer_workers_run_within_the_admission_more_do_not() -> None:
    elastic = {"elasticPolicy": {"minWorkers": 1, "maxWorkers": 4}}
    assert kueue.fits(ADMITTED, queued(**elastic), TEMPLATES)
    down = queued(workers=1, **elastic)
    assert kueue.fits(ADMITTED, down, TEMPLATES)
    assert not kueue.fits(PENDING, down, TEMPLATES)  # not admitted: the counts must match
    assert not kueue.fits(ADMITTED, queued(workers=3, **elastic), TEMPLATES)
    assert not kueue.fits(ADMITTED, JOB, "another-template")


# --- the admit step -----------------------------------------------------------------------


def test_a_job_without_a_queue_or_with_kueue_off_is_untouched() -> None:
    ctx = ctx_for(planner_job())
    assert admit(ctx) is False and ctx.actions == []
    ctx = ctx_for(kueue=False)
    assert admit(ctx) is False and ctx.actions == []


def test_a_queued_job_gets_its_workload_and_no_pod() -> None:
    ctx = ctx_for(priority=("low", 100))
    assert admit(ctx) is True
    (create,) = [a for a in ctx.actions if isinstance(a, CreateChild)]
    assert create.kind == "Workload" and create.body["spec"]["priority"] == 100
    assert condition(ctx, "Suspended") == ("True", kueue.REASON_QUEUED)
    plan = pipeline.plan_job(JOB, ctx.observed, {}, T0, default_image="img")
    assert not [a for a in plan.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    assert plan.status["phase"] == "Suspended"


def test_a_missing_priority_class_holds_the_job_with_a_warning() -> None:
    ctx = ctx_for(priority_problem="WorkloadPriorityClass nope not found")
    assert admit(ctx) is True and "CreateChild" not in kinds(ctx)
    assert ctx.status["conditions"][0]["message"] == "WorkloadPriorityClass nope not found"
    assert ("Warning", kueue.REASON_QUEUED) in [(a.type, a.reason) for a in ctx.actions
                                                 if hasattr(a, "reason")]  # fmt: skip


def test_kueue_not_installed_holds_the_job_saying_so() -> None:
    ctx = ctx_for(kueue_served=False)
    assert admit(ctx) is True
    assert "does not serve Kueue's Workloads" in ctx.status["conditions"][0]["message"]


def test_pending_says_kueues_reason() -> None:
    ctx = ctx_for(wl=PENDING)
    assert admit(ctx) is True and "CreateChild" not in kinds(ctx)
    (suspended,) = [c for c in ctx.status["conditions"] if c["type"] == "Suspended"]
    assert "insufficient quota" in suspended["message"]


def test_admitted_the_pods_are_created_on_the_flavors_nodes() -> None:
    flavors = {"default": Flavor({"pool": "a"}, ({"key": "k", "operator": "Exists"},))}
    queued_status = {"conditions": [cond("Suspended", True, kueue.REASON_QUEUED)]}
    plan = pipeline.plan_job(JOB, ctx_for(wl=ADMITTED, flavors=flavors).observed,
                             queued_status, T0, default_image="img")  # fmt: skip
    pods = [a.body for a in plan.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    assert len(pods) == 4
    for pod in pods:
        assert pod["spec"]["nodeSelector"]["pool"] == "a"
        assert {"key": "k", "operator": "Exists"} in pod["spec"]["tolerations"]
    (suspended,) = [c for c in plan.status["conditions"] if c["type"] == "Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("False", kueue.REASON_ADMITTED)
    assert kueue.REASON_ADMITTED in [getattr(a, "reason", "") for a in plan.actions]


def test_admitted_after_waiting_the_wait_is_observed_once_by_queue() -> None:
    since = format_time(T0 - timedelta(seconds=90))
    held = {**cond("Suspended", True, kueue.REASON_EVICTED), "lastTransitionTime": since}
    plan = pipeline.plan_job(JOB, ctx_for(wl=ADMITTED).observed, {"conditions": [held]}, T0,
                             default_image="img")  # fmt: skip
    (observed,) = [a for a in plan.actions if isinstance(a, ObserveMetric)]
    assert observed == ObserveMetric(QUEUE_WAIT, 90.0, (("job_namespace", JOB.namespace),
                                                        ("local_queue", "lq")))  # fmt: skip
    # The next pass (admitted, running): nothing more.
    again = pipeline.plan_job(JOB, ctx_for(wl=ADMITTED).observed, plan.status, T0,
                              default_image="img")  # fmt: skip
    assert not [a for a in again.actions if isinstance(a, ObserveMetric)]


@pytest.mark.parametrize(("reason", "status", "waiting"), [
    (kueue.REASON_QUEUED, True, "lq"), (kueue.REASON_EVICTED, True, "lq"),
    (naming.REASON_SUSPENDED, True, None), (kueue.REASON_ADMITTED, False, None)])
def test_a_job_waits_in_its_queue_while_kueue_holds_it(reason: str, status: bool,
                                                        waiting: str | None) -> None:  # fmt: skip
    assert kueue.waiting_in(JOB, [cond("Suspended", status, reason)]) == waiting
    assert kueue.waiting_in(planner_job(), [cond("Suspended", True, reason)]) is None


def test_evicted_the_pods_go_first_then_the_quota_is_given_back() -> None:
    pods = pods_of(JOB)
    ctx = ctx_for(pods=pods, wl=EVICTED)
    assert admit(ctx) is True
    # The PS after the chief (its SIGTERM checkpoint reads it: lifecycle.stop_pods).
    assert sorted(a.name for a in ctx.actions if isinstance(a, DeletePod)) == sorted(
        p.name for p in pods if p.replica_type != "ps")
    assert not [a for a in ctx.actions if isinstance(a, PatchWorkload)]
    assert condition(ctx, "Suspended") == ("True", kueue.REASON_EVICTED)
    assert kueue.REASON_EVICTED in reasons(ctx)
    # Still terminating (the chief checkpoints): not yet.
    going = [replace(p, deleting=True) for p in pods]
    ctx = ctx_for(pods=going, wl=EVICTED)
    admit(ctx)
    assert not [a for a in ctx.actions if isinstance(a, PatchWorkload)]
    # Gone: the admission is cleared, the Workload requeued.
    ctx = ctx_for(wl=EVICTED)
    admit(ctx)
    (patch,) = [a for a in ctx.actions if isinstance(a, PatchWorkload)]
    assert patch.status and patch.patch["status"]["admission"] is None
    assert patch.patch["metadata"]["resourceVersion"] == "7"
    states = {c["type"]: (c["status"], c["reason"]) for c in patch.patch["status"]["conditions"]}
    assert states["QuotaReserved"] == ("False", "Pending")
    assert states["Admitted"] == ("False", "NoReservation")
    assert states["Requeued"] == ("True", "Preempted")
    assert states["Evicted"] == ("True", "Preempted")  # Kueue resets it on re-admission


def test_a_job_that_outgrew_its_admission_is_queued_again_with_a_new_workload() -> None:
    elastic = {"elasticPolicy": {"minWorkers": 1, "maxWorkers": 4}}
    grown = queued(workers=3, **elastic)
    wl = replace(ADMITTED, templates=kueue.templates_hash(kueue.pod_sets(grown,
                 default_image="img")))  # fmt: skip
    ctx = ctx_for(grown, pods=pods_of(queued(**elastic)), wl=wl)
    assert admit(ctx) is True and "DeletePod" in kinds(ctx) and "DeleteWorkload" not in kinds(ctx)
    ctx = ctx_for(grown, wl=wl)
    admit(ctx)
    assert [a for a in ctx.actions if isinstance(a, DeleteWorkload)] == [DeleteWorkload(wl.name)]


def test_a_copy_that_does_not_fit_multikueues_workload_is_held_and_the_workload_kept() -> None:
    copy = replace(queued(workers=3), labels={kueue.QUEUE_NAME_LABEL: "lq",
                                             kueue.PREBUILT_WORKLOAD_LABEL: ADMITTED.name})
    ctx = ctx_for(copy, wl=ADMITTED)
    assert admit(ctx) is True
    assert "DeleteWorkload" not in kinds(ctx) and "CreateChild" not in kinds(ctx)
    held = [c for c in ctx.status["conditions"] if c["type"] == naming.CONDITION_SUSPENDED]
    assert held[0]["status"] == "True" and "manager cluster" in held[0]["message"], held
    assert [e.type for e in ctx.actions if isinstance(e, EmitEvent)] == [WARNING]


def test_the_users_suspend_deactivates_the_workload_and_resume_activates_it() -> None:
    suspended = queued(runPolicy={"suspend": True})
    ctx = ctx_for(suspended, wl=ADMITTED)
    assert admit(ctx) is False  # plan_suspended stops the pods
    assert PatchWorkload(ADMITTED.name, {"spec": {"active": False}}) in ctx.actions
    ctx = ctx_for(wl=replace(PENDING, active=False))
    admit(ctx)
    assert PatchWorkload(ADMITTED.name, {"spec": {"active": True}}) in ctx.actions


def test_a_finished_job_marks_its_workload_finished_once() -> None:
    done = {"conditions": [cond("Succeeded", True)]}
    ctx = ctx_for(wl=ADMITTED, status=done)
    assert admit(ctx) is False
    (patch,) = [a for a in ctx.actions if isinstance(a, PatchWorkload)]
    finished = [c for c in patch.patch["status"]["conditions"] if c["type"] == "Finished"]
    assert finished[0]["status"] == "True" and finished[0]["reason"] == "Succeeded"
    finished_wl = workload(cond("Finished", True, "Succeeded"), admitted=admission())
    ctx = ctx_for(wl=finished_wl, status=done)
    admit(ctx)
    assert ctx.actions == []


def test_a_running_admitted_job_plans_nothing_new() -> None:
    pods = pods_of(JOB)
    plan = pipeline.plan_job(JOB, ctx_for(pods=pods, wl=ADMITTED).observed, {}, T0,
                             default_image="img")  # fmt: skip
    assert not [a for a in plan.actions if isinstance(a, (CreateChild, DeletePod))]


def test_pods_of_other_phases_do_not_keep_the_quota() -> None:
    ended = [ObservedPod("j-ps-0", "ps", 0, uid="u", phase="Succeeded")]
    ctx = ctx_for(pods=ended, wl=EVICTED)
    admit(ctx)
    assert [a for a in ctx.actions if isinstance(a, PatchWorkload)]
