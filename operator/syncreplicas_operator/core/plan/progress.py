"""Progress conditions: Running, Restarting (cleared), Degraded and Stalled, and the global
step with the time it last moved (the stall clock).
"""

from __future__ import annotations

from .. import eta, naming, recovery
from ..actions import NORMAL, WARNING
from ..status import POD_FAILED, POD_RUNNING, condition_is_true, exit_summary, is_stalled
from ..timefmt import format_time, parse_time
from .context import PlanContext


def report_progress(ctx: PlanContext) -> bool:
    """Running, Restarting, Degraded and Stalled from the pods and the global step."""
    spec = ctx.spec
    live = ctx.live_pods()
    running = [p for p in live if p.phase == POD_RUNNING]
    by_type = {t: [p for p in running if p.replica_type == t] for t in naming.REPLICA_TYPES}
    chief_running = bool(by_type[naming.CHIEF])
    ps_running = len(by_type[naming.PS]) == spec.parameter_servers
    replicas_running = len(by_type[naming.CHIEF]) + len(by_type[naming.WORKER])
    lost = [
        p.name
        for p in live
        if p.replica_type == naming.WORKER
        and p.phase == POD_FAILED
        and not ctx.resized_away(p.replica_type, p.index)
    ]
    is_running = chief_running and ps_running
    if is_running and ctx.condition(
        naming.CONDITION_RUNNING,
        True,
        naming.REASON_RUNNING,
        f"chief and {spec.parameter_servers} PS running, {replicas_running} of "
        f"{spec.total_replicas} replicas running",
    ):
        ctx.event(NORMAL, naming.REASON_RUNNING, "the chief and every PS are running")
    all_running = len(running) == sum(spec.replica_counts().values()) - len(lost)
    if all_running and not ctx.status.get("restartJob"):
        ctx.condition(
            naming.CONDITION_RESTARTING, False, naming.REASON_RUNNING, "every replica is running"
        )
    report_degraded(ctx, lost)
    track_step(ctx, is_running)
    report_stalled(ctx, lost, is_running)
    return False


def report_degraded(ctx: PlanContext, lost: list[str]) -> None:
    """Degraded while updates aggregate fewer than R gradients (the coordinator's R, as
    last read) or while workers are lost for good; an Event on every change."""
    spec = ctx.spec
    observed = ctx.observed
    previous = ctx.status.get("replicasToAggregate")
    if observed.replicas_to_aggregate is not None:
        ctx.status["replicasToAggregate"] = observed.replicas_to_aggregate
    if observed.live_replicas is not None:
        ctx.status["liveReplicas"] = observed.live_replicas
    aggregating = ctx.status.get("replicasToAggregate")
    wanted = spec.replicas_to_aggregate
    if aggregating is not None and aggregating < wanted:
        reason = naming.REASON_AGGREGATING_FEWER
        message = recovery.degraded_message(
            aggregating, wanted, replicas_down(ctx), ctx.status.get("liveReplicas")
        )
    elif lost:
        left = spec.total_replicas - len(lost)
        reason = naming.REASON_DEGRADED
        message = (
            f"lost {len(lost)} worker(s) ({lost_workers(ctx, lost)}); {left} of "
            f"{spec.total_replicas} replicas left for replicasToAggregate {wanted}"
        )
    else:
        reason, message = naming.REASON_PROGRESSING, ""
    was = condition_is_true(ctx.conditions, naming.CONDITION_DEGRADED)
    if message:
        flipped = ctx.condition(naming.CONDITION_DEGRADED, True, reason, message)
        r_changed = previous is not None and previous != aggregating
        if flipped or (was and r_changed):
            ctx.event(WARNING, naming.REASON_JOB_DEGRADED, f"Degraded: {message}")
        return
    whole = f"aggregating {aggregating} of {wanted} gradients per update"
    if aggregating is None:
        whole = "no replica lost"
    if ctx.condition(naming.CONDITION_DEGRADED, False, reason, whole):
        ctx.event(NORMAL, naming.REASON_RECOVERED, f"Recovered: {whole}")


def track_step(ctx: PlanContext, is_running: bool) -> None:
    """status.globalStep as read, and lastProgressTime when it moved; the progress and the
    estimated completion from the steps since the last move."""
    step = ctx.observed.global_step
    if step is not None and step != ctx.status.get("globalStep"):
        moved_from, moved_at = ctx.status.get("globalStep"), parse_time(
            ctx.status.get("lastProgressTime"))
        ctx.status["globalStep"] = step
        ctx.status["lastProgressTime"] = ctx.timestamp
        if isinstance(moved_from, int) and moved_at is not None:
            rate = eta.step_rate(ctx.status.get("stepsPerSecond"), step - moved_from,
                                 (ctx.now - moved_at).total_seconds())
            if rate is not None:
                ctx.status["stepsPerSecond"] = float(f"{rate:.3g}")
        report_eta(ctx, step)
    elif is_running and "lastProgressTime" not in ctx.status:
        # The stall clock starts when the job starts running.
        ctx.status["lastProgressTime"] = ctx.timestamp


def report_eta(ctx: PlanContext, step: int) -> None:
    """status.progress, and eta with estimatedCompletionTime while the job has a rate and
    steps to go (none once maxSteps is reached)."""
    max_steps = ctx.spec.training.max_steps
    ctx.status["progress"] = eta.percent(step, max_steps)
    left = eta.remaining_seconds(step, max_steps, ctx.status.get("stepsPerSecond"))
    if left:
        ctx.status["eta"] = eta.duration(left)
        ctx.status["estimatedCompletionTime"] = format_time(eta.completion(ctx.now, left))
    else:
        ctx.status.pop("eta", None)
        ctx.status.pop("estimatedCompletionTime", None)


def report_stalled(ctx: PlanContext, lost: list[str], is_running: bool) -> None:
    """Stalled when too few replicas are left for R, or the step has not moved for
    stallTimeoutSeconds; else plan again when the timeout would run out."""
    spec = ctx.spec
    needed = min(spec.replicas_to_aggregate, spec.total_replicas)
    stalled_why = ""
    left = spec.total_replicas - len(lost)
    if lost and left < needed:
        stalled_why = (
            f"only {left} replica(s) left, fewer than the {needed} gradients each step "
            "waits for: training cannot advance"
        )
    elif is_running:
        last = parse_time(ctx.status.get("lastProgressTime"))
        timeout = spec.stall_timeout_seconds
        if last is not None and timeout > 0:
            idle = (ctx.now - last).total_seconds()
            if is_stalled(True, last.timestamp(), ctx.now.timestamp(), timeout):
                step = ctx.status.get("globalStep")
                stalled_why = f"global step {step} has not advanced for {int(idle)}s"
            else:
                ctx.requeue.append(timeout - idle)
    if stalled_why:
        if ctx.condition(naming.CONDITION_STALLED, True, naming.REASON_STALLED, stalled_why):
            ctx.event(WARNING, naming.REASON_STALLED, stalled_why)
    else:
        ctx.condition(
            naming.CONDITION_STALLED, False, naming.REASON_PROGRESSING, "training is advancing"
        )


def lost_workers(ctx: PlanContext, lost: list[str]) -> str:
    """The lost workers with how each exited (the runtime's reason: a bad model or
    configuration shows here, not only in the pod's log); five at most."""
    said = []
    for name in sorted(lost)[:5]:
        pod = ctx.pods.get(name)
        code = pod.exit_code if pod is not None else None
        if pod is None or code is None:
            said.append(name)
        else:
            said.append(f"{name}: {exit_summary(code, pod.exit_reason)}")
    more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
    return "; ".join(said) + more


def replicas_down(ctx: PlanContext) -> list[str]:
    """Chief and workers whose pod is not running and ready (by replica key)."""
    ready = ctx.ready_replicas()
    return [
        naming.replica_key(t, i)
        for t in (naming.CHIEF, naming.WORKER)
        for i in range(ctx.spec.replica_count(t))
        if naming.replica_key(t, i) not in ready
    ]
