"""Replica exits: what each stopped pod means for the job (``policy.decide_replica_exit``),
restarts against ``backoffLimit``, and the Restarting condition that names them. The pods
of workers an elastic job was scaled down from mean nothing here: they leave on purpose.
"""

from __future__ import annotations

from .. import exitcodes, naming, recovery
from ..actions import WARNING
from ..policy import ReplicaExitDecision, decide_replica_exit, job_failure_reason
from ..status import ObservedPod, exit_summary, find_condition
from .chief import chief_restarted
from .context import PlanContext
from .lifecycle import fail, finish
from .progress import report_eta


def handle_exits(ctx: PlanContext) -> bool:
    """Apply decide_replica_exit to every pod that has stopped; True if the job ended."""
    policy = ctx.spec.run_policy
    restarted: list[str] = []
    for pod in sorted(ctx.live_pods(), key=_creation_order):
        if not pod.finished or pod.exit_code is None:
            continue
        if ctx.resized_away(pod.replica_type, pod.index):
            continue  # left the job on purpose (exit 0 at SIGTERM); children.py deletes it
        spent = ctx.restarts_so_far()
        # A fenced replica stood down for a newer incarnation of itself: like a disrupted
        # one, not its failure, whatever the policy; its pod goes and the replica is
        # created again (a pod of its name cannot be the newer one).
        disrupted = bool(pod.disruption) or pod.fenced
        decision = (
            ReplicaExitDecision.RESTART
            if pod.fenced
            else decide_replica_exit(
                policy, pod.replica_type, pod.exit_code, spent, disrupted=disrupted
            )
        )
        code = exitcodes.describe(pod.exit_code)
        # A disrupted pod's code is the kill's (137, 143 or none): its cause says more.
        why = _disrupted(pod) if disrupted else exit_summary(pod.exit_code, pod.exit_reason)
        if decision is ReplicaExitDecision.SUCCEED_JOB:
            step = final_step(ctx, pod)
            for kind, path, at_step in pod.exports:  # its SavedModels, where and of which step
                ctx.status[kind] = {"path": path, "globalStep": at_step}
            at = f" at global step {step}" if step is not None else ""
            finish(ctx, True, naming.REASON_SUCCEEDED, f"the chief finished training{at}")
            return True
        if decision is ReplicaExitDecision.FAIL_JOB:
            said = f": {pod.exit_reason}" if pod.exit_reason else ""
            fail(
                ctx,
                job_failure_reason(policy, pod.exit_code),
                f"{pod.name} exited with {code} (restartPolicy {policy.restart_policy}, "
                f"{spent} of backoffLimit {policy.backoff_limit} restarts used){said}",
            )
            return True
        if decision is ReplicaExitDecision.RESTART:
            ctx.delete_pods([pod])
            ctx.failures.append(recovery.exit_failure(pod, pod.exit_code))
            if not disrupted:
                ctx.carry_restarts(pod.replica_type, 1)
            restarted.append(f"{pod.name} ({why})")
            if pod.replica_type == naming.CHIEF:
                # Counted here, not again when the deleted pod is seen going.
                ctx.status.pop("chief", None)
                # The replacement is a new chief: count it once, here.
                chief_restarted(ctx, f"{pod.name} stopped ({why}) and is being replaced")
                if ctx.finished():
                    return True
    # In-place restarts by the kubelet spend the same budget.
    spent = ctx.restarts_so_far()
    if spent > policy.backoff_limit:
        last = last_failure(ctx)
        fail(
            ctx,
            naming.REASON_BACKOFF_LIMIT_EXCEEDED,
            f"replicas restarted {spent} times, more than runPolicy.backoffLimit "
            f"({policy.backoff_limit})" + (f"; last: {last}" if last else ""),
        )
        return True
    acted = bool(restarted)
    # Pods the cluster is deleting on purpose (preemption, eviction, taint): replaced
    # once gone. Named here, as they go, because a vanished pod tells no cause.
    restarted += [
        f"{p.name} ({_disrupted(p)})"
        for p in sorted(ctx.observed.pods, key=_creation_order)
        if p.deleting
        and p.disruption
        and p.replica_type != naming.CHIEF
        and not ctx.resized_away(p.replica_type, p.index)
    ]
    if restarted:
        message = "restarting " + ", ".join(restarted)
        current = find_condition(ctx.conditions, naming.CONDITION_RESTARTING) or {}
        news = current.get("status") != "True" or current.get("message") != message
        ctx.condition(naming.CONDITION_RESTARTING, True, naming.REASON_REPLICA_RESTARTED, message)
        if acted or news:
            ctx.event(WARNING, naming.REASON_REPLICA_RESTARTED, message)
    return False


def final_step(ctx: PlanContext, chief: ObservedPod) -> int | None:
    """The job's final global step, into status: the highest of the step read last
    (status), the one read this pass and the chief's own word as it exited (its
    termination message), which a job that ends between two reads of the chief's
    metrics would otherwise miss."""
    known = ctx.status.get("globalStep")
    candidates = [s for s in (known, ctx.observed.global_step, chief.exit_step) if s is not None]
    if not candidates:
        return None
    step = max(int(s) for s in candidates)
    if step != known:
        ctx.status["globalStep"] = step
        ctx.status["lastProgressTime"] = ctx.timestamp
    report_eta(ctx, step)
    return step


def last_failure(ctx: PlanContext) -> str:
    """The latest replica failure in words, for the message of a job that restarts ran
    out: one seen this pass, else an in-place restart the pods still show."""
    if ctx.failures:
        return ctx.failures[-1].detail
    for pod in sorted(ctx.live_pods(), key=_creation_order):
        if pod.restart_count and pod.last_exit_code is not None:
            summary = exit_summary(pod.last_exit_code, pod.last_exit_reason)
            return f"{pod.name} restarted after exiting with {summary}"
    return ""


def _creation_order(pod: ObservedPod) -> tuple[int, int]:
    # The chief's verdict first: a chief that finished makes every other exit moot.
    order = {naming.CHIEF: 0, naming.PS: 1, naming.WORKER: 2}
    return order.get(pod.replica_type, 3), pod.index


def _disrupted(pod: ObservedPod) -> str:
    cause = pod.disruption or f"{exit_summary(pod.exit_code or 0, pod.exit_reason)}: fenced"
    return f"{cause}; not counted against backoffLimit"
