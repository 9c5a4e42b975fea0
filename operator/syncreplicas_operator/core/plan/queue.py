"""Kueue's admission (rules in ``core/kueue.py``): a job in a queue runs only while its
Workload is admitted, with the admitted flavors' node labels and tolerations.

``admit`` comes before every step that creates pods. It returns True (the pass ends) while
the job is held: no Workload yet, waiting for quota, evicted, or queued again after a
change its admission does not cover. Admitted, it hands the rest of the pass a job whose
role templates carry the flavors' placement. A finished job's Workload is marked Finished.
"""

from __future__ import annotations

from dataclasses import replace

from .. import kueue, naming
from ..actions import (
    NORMAL,
    QUEUE_WAIT,
    WARNING,
    CreateChild,
    DeleteWorkload,
    ObserveMetric,
    PatchWorkload,
)
from ..status import POD_PENDING, POD_RUNNING, POD_UNKNOWN, condition_is_true, find_condition
from ..timefmt import parse_time
from .context import PlanContext
from .lifecycle import hold

# Pod phases that still hold their node's resources (a pod being deleted included).
RUNS = (POD_PENDING, POD_RUNNING, POD_UNKNOWN)


def admit(ctx: PlanContext) -> bool:
    queue = kueue.queue_name(ctx.job)
    if queue is None or not ctx.observed.kueue:
        return False
    workload = ctx.observed.workload
    if ctx.finished():
        if workload is not None and not workload.deleting:
            done, _ = kueue.state(workload)
            if done != kueue.State.FINISHED:
                succeeded = condition_is_true(ctx.conditions, naming.CONDITION_SUCCEEDED)
                said = "the job succeeded" if succeeded else "the job failed"
                patch = kueue.finish_patch(workload, succeeded, said, ctx.timestamp)
                ctx.actions.append(PatchWorkload(workload.name, patch, status=True))
        return False
    if not ctx.observed.kueue_served:
        _held(ctx, f"the job is in queue {queue}, but the API server does not serve Kueue's "
              f"Workloads ({kueue.API_VERSION}): install Kueue, or remove the label "
              f"{kueue.QUEUE_NAME_LABEL}")  # fmt: skip
        return True
    if ctx.spec.run_policy.suspend:
        # The user's suspend (plan_suspended stops the pods): the Workload is deactivated,
        # so that Kueue takes its quota back (and gives it again on resume).
        if workload is not None and workload.active and not workload.deleting:
            ctx.actions.append(PatchWorkload(workload.name, {"spec": {"active": False}}))
        _release_if_stopped(ctx)
        return False
    if workload is None:
        prebuilt = kueue.prebuilt_workload(ctx.job)
        if prebuilt is not None:
            _held(ctx, f"waiting for Workload {prebuilt}, which MultiKueue makes for the job")
            return True
        problem = kueue.workload_problem(ctx.job, ctx.observed.priority_problem)
        if problem:
            _held(ctx, problem, warn=True)
            return True
        body = kueue.build_workload(ctx.job, queue, priority=ctx.observed.priority,
                                    default_image=ctx.inputs.default_image)  # fmt: skip
        ctx.actions.append(CreateChild(body))
        _held(ctx, f"waiting for Kueue to admit Workload {body['metadata']['name']} in "
              f"queue {queue}")  # fmt: skip
        return True
    if workload.deleting:
        _held(ctx, f"Workload {workload.name} is being deleted; the job is queued again after")
        return True
    if not workload.active:
        ctx.actions.append(PatchWorkload(workload.name, {"spec": {"active": True}}))
    sets = kueue.pod_sets(ctx.job, default_image=ctx.inputs.default_image)
    templates = kueue.templates_hash(sets)
    if not kueue.fits(workload, ctx.job, templates) and kueue.prebuilt_workload(ctx.job):
        # MultiKueue's Workload is not this operator's to make again: the manager cluster's
        # copy of the job is the one to change.
        _held(ctx, f"the job does not fit Workload {workload.name}, which MultiKueue made for "
              "it (its workers or templates differ): change the job on the manager cluster",
              warn=True)  # fmt: skip
        return True
    if not kueue.fits(workload, ctx.job, templates):
        why = (f"the job no longer fits Workload {workload.name} (its workers or templates "
               f"changed): queued again in {queue}")  # fmt: skip
        _held(ctx, why, reason=kueue.REASON_QUEUED)
        if not _running(ctx):
            ctx.actions.append(DeleteWorkload(workload.name))
        return True
    state, said = kueue.state(workload)
    if state == kueue.State.EVICTED:
        why = kueue.eviction_reason(workload) or "Evicted"
        _held(ctx, f"evicted by Kueue ({why}): {said}", reason=kueue.REASON_EVICTED)
        _release_if_stopped(ctx)
        return True
    if state != kueue.State.ADMITTED:
        _held(ctx, said)
        return True
    _observe_wait(ctx, queue)
    if ctx.condition(naming.CONDITION_SUSPENDED, False, kueue.REASON_ADMITTED,
                     f"admitted by Kueue in queue {queue} (Workload {workload.name})"):
        ctx.event(NORMAL, kueue.REASON_ADMITTED,
                  f"Workload {workload.name} admitted in queue {queue}: creating its pods")
        ctx.resumed = True  # fmt: skip
    admitted = kueue.admitted_job(ctx.job, workload, ctx.observed.flavors)
    ctx.inputs = replace(ctx.inputs, job=admitted)
    return False


def _observe_wait(ctx: PlanContext, queue: str) -> None:
    """Admitted after waiting: how long, from when the queue began to hold the job (created,
    or evicted) to now, into the queue-wait histogram."""
    if kueue.waiting_in(ctx.job, ctx.conditions) is None:
        return
    held = find_condition(ctx.conditions, naming.CONDITION_SUSPENDED)
    since = parse_time((held or {}).get("lastTransitionTime"))
    if since is None:
        return
    labels = (("job_namespace", ctx.job.namespace), ("local_queue", queue))
    waited = max(0.0, (ctx.now - since).total_seconds())
    ctx.actions.append(ObserveMetric(QUEUE_WAIT, waited, labels))


def _held(ctx: PlanContext, message: str, *, reason: str = kueue.REASON_QUEUED,
          warn: bool = False) -> None:  # fmt: skip
    """Hold the job as a suspend does, the Suspended condition saying Kueue's reason (an
    Event when it turns true; a Warning when it is the job's own fault)."""
    event = "held by Kueue" if reason == kueue.REASON_QUEUED else message
    hold(ctx, reason, message, event, event_type=WARNING if warn else NORMAL)


def _release_if_stopped(ctx: PlanContext) -> None:
    """Give an evicted Workload's quota back once the job has no pod left."""
    workload = ctx.observed.workload
    if workload is None or workload.admission is None or workload.deleting:
        return
    state, _ = kueue.state(workload)
    if state != kueue.State.EVICTED or _running(ctx):
        return
    ctx.actions.append(
        PatchWorkload(workload.name, kueue.release_patch(workload, ctx.timestamp), status=True)
    )


def _running(ctx: PlanContext) -> bool:
    """Whether a pod of the job (a spare too) may still hold its node's resources: being
    deleted counts (the chief checkpoints while it terminates)."""
    return any(p.phase in RUNS for p in ctx.observed.pods) or any(
        not s.ended for s in ctx.observed.spares
    )
