"""The job's lifecycle: finish (and what follows), suspend and resume, activeDeadlineSeconds,
a missing gang scheduler, ttlSecondsAfterFinished and cleanPodPolicy.

The steps return True when the pass ends with them.
"""

from __future__ import annotations

from .. import manifests, naming
from ..actions import NORMAL, WARNING, DeleteJob, DeletePodGroup
from ..enums import CleanPodPolicy
from ..status import POD_RUNNING, ObservedPod, condition_is_true, find_condition
from ..timefmt import parse_time
from . import spares
from .context import PlanContext

# --- steps --------------------------------------------------------------------------------


def plan_finished(ctx: PlanContext) -> bool:
    """A finished job: its TTL, its pods per cleanPodPolicy, its PodGroup; nothing else."""
    if not ctx.finished():
        return False
    after_finish(ctx)
    return True


def plan_suspended(ctx: PlanContext) -> bool:
    """A suspended job: no pods, no PodGroup, no running clock (startTime goes)."""
    if not ctx.spec.run_policy.suspend:
        return False
    hold(ctx, naming.REASON_SUSPENDED, "runPolicy.suspend is true", "job suspended")
    return True


def hold(
    ctx: PlanContext, reason: str, message: str, event: str, event_type: str = NORMAL
) -> None:
    """Keep the job from running (suspended by its user, or held by its queue): its pods go
    (the chief checkpoints at SIGTERM, the parameter servers after it: ``stop_pods``), then
    its spares and PodGroup; the Suspended condition says why (an Event ``event: deleted N
    pod(s)`` when it turns true)."""
    deleted = stop_pods(ctx)
    spares.drop_spares(ctx, "the job is suspended")
    release_pod_group(ctx)
    if ctx.condition(naming.CONDITION_SUSPENDED, True, reason, message):
        ctx.event(event_type, reason, f"{event}: deleted {deleted} pod(s)")
    for other in (naming.CONDITION_RUNNING, naming.CONDITION_RESTARTING, naming.CONDITION_STALLED,
                  naming.CONDITION_TOPOLOGY_GATED):  # fmt: skip
        ctx.condition(other, False, reason, "the job is suspended")
    # The deadline counts running time only: it starts again on resume.
    ctx.status.pop("startTime", None)
    ctx.status.pop("restartJob", None)
    # The chief is gone on purpose: its replacement on resume is not a chief restart.
    ctx.status.pop("chief", None)


def stop_pods(ctx: PlanContext) -> int:
    """Delete the pods of a job that stops as a whole: the chief and the workers at once,
    the parameter servers once the chief has stopped (its SIGTERM checkpoint reads every
    one of them: deleted together, a PS could be gone before the checkpoint is written).
    Not waited for: a chief that is not running, on a lost node, or past its grace period.
    How many pods this pass deleted."""
    chief = next((p for p in ctx.pods.values()
                  if p.replica_type == naming.CHIEF and checkpointing(ctx, p)), None)  # fmt: skip
    doomed = [p for p in ctx.live_pods() if chief is None or p.replica_type != naming.PS]
    deleted = ctx.delete_pods(doomed)
    if chief is not None:
        gone_by = parse_time(chief.deletion_timestamp)
        # Looked at again when the chief's pod goes (a watch event) or its grace ends.
        ctx.requeue.append(max((gone_by - ctx.now).total_seconds(), 1.0) if gone_by else 1.0)
    return deleted


def checkpointing(ctx: PlanContext, chief: ObservedPod) -> bool:
    """Whether the chief may still be writing its SIGTERM checkpoint."""
    if chief.phase != POD_RUNNING:
        return False
    health = ctx.observed.nodes
    if health is not None and health.why_lost(chief.node_name):
        return False
    gone_by = parse_time(chief.deletion_timestamp)
    return gone_by is None or ctx.now < gone_by


def start(ctx: PlanContext) -> bool:
    """Resume a job that was suspended; start its clock (status.startTime) once."""
    # Already false: left as it is (its queue may have said why: plan/queue.py).
    current = find_condition(ctx.conditions, naming.CONDITION_SUSPENDED)
    if (current is None or current.get("status") == "True") and ctx.condition(
        naming.CONDITION_SUSPENDED, False, naming.REASON_RESUMED, "runPolicy.suspend is false"
    ):
        ctx.event(NORMAL, naming.REASON_RESUMED, "job resumed: creating its pods again")
        ctx.resumed = True
    ctx.status.setdefault("startTime", ctx.timestamp)
    return False


def check_deadline(ctx: PlanContext) -> bool:
    """Fail a job that ran longer than activeDeadlineSeconds; else plan again at the end."""
    deadline = ctx.spec.run_policy.active_deadline_seconds
    started = parse_time(ctx.status.get("startTime"))
    if deadline is None or started is None:
        return False
    remaining = deadline - (ctx.now - started).total_seconds()
    if remaining > 0:
        ctx.requeue.append(remaining)
        return False
    fail(
        ctx,
        naming.REASON_DEADLINE_EXCEEDED,
        f"the job ran longer than runPolicy.activeDeadlineSeconds ({deadline}s)",
    )
    return True


def check_gang_scheduler(ctx: PlanContext) -> bool:
    """Fail a job whose gang scheduler is not installed (its pods would never schedule).

    Only before its pods exist: pods a scheduler already placed run on without it."""
    policy = ctx.spec.run_policy.scheduling_policy
    created = condition_is_true(ctx.conditions, naming.CONDITION_CREATED)
    if policy is None or ctx.observed.pod_group_api or created:
        return False
    fail(
        ctx,
        naming.REASON_GANG_SCHEDULER_MISSING,
        f"runPolicy.schedulingPolicy.gangScheduler is {policy.gang_scheduler}, but the API "
        f"server does not serve {manifests.pod_group_api_version(ctx.spec)} "
        f"{naming.POD_GROUP_PLURAL}: install the scheduler (or remove schedulingPolicy) "
        "and create the job again",
    )
    return True


# --- shared with the other steps -----------------------------------------------------------


def finish(ctx: PlanContext, succeeded: bool, reason: str, message: str) -> None:
    """End the job: Succeeded or Failed, every other condition off, then ``after_finish``."""
    condition_type = naming.CONDITION_SUCCEEDED if succeeded else naming.CONDITION_FAILED
    ctx.condition(condition_type, True, reason, message)
    for other in (
        naming.CONDITION_RUNNING,
        naming.CONDITION_RESTARTING,
        naming.CONDITION_STALLED,
        naming.CONDITION_DEGRADED,
        naming.CONDITION_STRAGGLER_DETECTED,
        naming.CONDITION_RESIZING,
        naming.CONDITION_TOPOLOGY_GATED,
    ):
        ctx.condition(other, False, reason, message)
    ctx.status["completionTime"] = ctx.timestamp
    ctx.status.pop("restartJob", None)
    ctx.event(NORMAL if succeeded else WARNING, reason, message)
    after_finish(ctx)


def fail(ctx: PlanContext, reason: str, message: str) -> None:
    finish(ctx, False, reason, message)


def after_finish(ctx: PlanContext) -> None:
    """Delete the job once its TTL is over; until then stop its pods and PodGroup."""
    ttl = ctx.spec.run_policy.ttl_seconds_after_finished
    completed = parse_time(ctx.status.get("completionTime"))
    if ttl is not None and completed is not None:
        remaining = (completed - ctx.now).total_seconds() + ttl
        if remaining <= 0:
            ctx.event(
                NORMAL, naming.REASON_TTL_EXPIRED, f"deleting the job {ttl}s after it finished"
            )
            ctx.actions.append(DeleteJob(naming.REASON_TTL_EXPIRED))
            return
        ctx.requeue.append(remaining)
    clean_up_pods(ctx)
    spares.drop_spares(ctx, "the job finished")
    release_pod_group(ctx)


def clean_up_pods(ctx: PlanContext) -> None:
    """Stop the pods ``cleanPodPolicy`` says must not outlive a finished job."""
    policy = ctx.spec.run_policy.clean_pod_policy
    if policy == CleanPodPolicy.NONE:
        return
    doomed = [p for p in ctx.live_pods() if policy == CleanPodPolicy.ALL or p.active]
    if ctx.delete_pods(doomed):
        names = ", ".join(sorted(p.name for p in doomed)[:5])
        more = f" and {len(doomed) - 5} more" if len(doomed) > 5 else ""
        ctx.event(
            NORMAL,
            naming.REASON_CLEANED_UP,
            f"deleted {len(doomed)} pod(s) (cleanPodPolicy {policy}): {names}{more}",
        )


def release_pod_group(ctx: PlanContext) -> None:
    """Delete the PodGroup of a job that runs no more (it may hold queue capacity)."""
    api_version = manifests.pod_group_api_version(ctx.spec)
    if api_version is None or ctx.observed.pod_group is False:
        return
    if ctx.observed.pod_group_api:
        ctx.actions.append(DeletePodGroup(naming.pod_group_name(ctx.job.name), api_version))
