"""``spec.managedBy``: whether this operator runs the job, and what it does for a job
another controller runs. PURE.

Unset, or this operator's own name (``syncreplicas.io/operator``): the operator runs it.
``kueue.x-k8s.io/multikueue``: the job was submitted to a MultiKueue manager cluster;
Kueue copies it to a worker cluster (without the field, so that the worker's operator runs
it) and copies its status back. Here the operator writes the job's Workload, as it does for
any queued job (Kueue makes none for a kind of another controller), so that Kueue can
admit and dispatch it, and nothing else: no pod, Service or status. Any other value: the
job is another controller's, left alone. Either way, one Event says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncreplicas_api.resource import MULTIKUEUE_MANAGER, OPERATOR_MANAGER

from . import kueue
from .actions import NORMAL, WARNING, Action, CreateChild, EmitEvent
from .plan.context import Plan
from .spec import Job

REASON_MANAGED_ELSEWHERE = "ManagedElsewhere"


def manager(job: Job) -> str:
    return job.spec.managed_by or OPERATOR_MANAGER


def runs_here(job: Job) -> bool:
    return manager(job) == OPERATOR_MANAGER


def announcement(job: Job) -> str:
    """The Event's message for a job this operator does not run."""
    who = manager(job)
    if who != MULTIKUEUE_MANAGER:
        return (f"spec.managedBy is {who}: the job is that controller's; this operator "
                "leaves it alone")  # fmt: skip
    queue = kueue.queue_name(job)
    if queue is None:
        return (f"spec.managedBy is {who}, but the job is in no queue (label "
                f"{kueue.QUEUE_NAME_LABEL}): MultiKueue dispatches only queued jobs; "
                "nothing runs")  # fmt: skip
    return (f"spec.managedBy is {who}: Kueue dispatches the job to a worker cluster from "
            f"queue {queue} and copies its status back; this operator writes its Workload "
            "only (kubectl get workloads)")  # fmt: skip


def _owes_workload(job: Job, kueue_fields: Mapping[str, Any]) -> bool:
    """A MultiKueue job in a queue, Kueue served, its Workload not there yet."""
    return (manager(job) == MULTIKUEUE_MANAGER and kueue.queue_name(job) is not None
            and bool(kueue_fields.get("kueue_served"))
            and kueue_fields.get("workload") is None)  # fmt: skip


def workload_problem(job: Job, kueue_fields: Mapping[str, Any]) -> str:
    """Why a MultiKueue job's Workload is not written ("" if it is, or is not this
    operator's to write): the same rules as for a job queued here (kueue.workload_problem)."""
    if not _owes_workload(job, kueue_fields):
        return ""
    return kueue.workload_problem(job, str(kueue_fields.get("priority_problem") or ""))


def plan_elsewhere(
    job: Job, kueue_fields: Mapping[str, Any], *, announce: bool, default_image: str,
    warned: str = "",
) -> Plan:  # fmt: skip
    """One pass for a job this operator does not run (``kueue_fields``: what
    controller/queueing observed): the Event when ``announce``, and a MultiKueue job's
    Workload once (the job owns it: deleting the job deletes it, and Kueue then the worker
    cluster's copy). No status: the job's controller writes it (MultiKueue: the worker's).
    A Workload that cannot be written (:func:`workload_problem`) is a Warning Event instead,
    once for each problem (``warned``: the one last posted)."""
    actions: list[Action] = []
    if announce:
        actions.append(EmitEvent(NORMAL, REASON_MANAGED_ELSEWHERE, announcement(job)))
    queue = kueue.queue_name(job)
    if queue is not None and _owes_workload(job, kueue_fields):
        problem = kueue.workload_problem(job, str(kueue_fields.get("priority_problem") or ""))
        if not problem:
            actions.append(CreateChild(kueue.build_workload(
                job, queue, priority=kueue_fields.get("priority"), default_image=default_image)))
        elif problem != warned:
            actions.append(EmitEvent(WARNING, kueue.REASON_QUEUED, f"{problem}: no Workload "
                                     "is written, so MultiKueue dispatches nothing"))  # fmt: skip
    return Plan(actions=tuple(actions), status={})
