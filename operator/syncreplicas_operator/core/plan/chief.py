"""Chief restarts: notice a chief replaced or restarted, apply ``chiefRestartPolicy``.

A new chief restores its checkpoint; the rest of the job follows the policy: the runtime
resets the sync state (ResetSyncState), every PS and worker restarts (RestartJob, PS first),
or the job fails (Fail).
"""

from __future__ import annotations

from .. import naming
from ..actions import CHIEF_CLEANUPS, JOB_RESTARTS, NORMAL, WARNING, CountMetric
from ..enums import ChiefRestartPolicy
from ..status import POD_RUNNING, exit_summary
from .context import PlanContext
from .lifecycle import fail


def check_chief(ctx: PlanContext) -> bool:
    """Notice a chief that restarted behind the operator's back; True if the job ended."""
    previous = ctx.status.get("chief") or {}
    chief = ctx.holder(naming.CHIEF, 0)
    why = ""
    if chief is None or chief.deleting:
        if previous and chief is None:
            why = "the chief pod disappeared and is being replaced"
        elif previous and chief is not None:
            cause = f" ({chief.disruption})" if chief.disruption else ""
            why = f"the chief pod is being deleted{cause} and will be replaced"
        ctx.status.pop("chief", None)
    else:
        if previous.get("uid") and chief.uid and previous["uid"] != chief.uid:
            why = f"the chief pod was replaced (uid {chief.uid})"
        elif chief.restart_count > int(previous.get("restartCount", chief.restart_count)):
            last = chief.last_exit_code
            code = ""
            if last is not None:
                code = f" after exiting with {exit_summary(last, chief.last_exit_reason)}"
            why = f"the chief container restarted{code} (restart {chief.restart_count})"
        if previous or chief.phase == POD_RUNNING:
            # Remember the chief once it runs (its identity rides along with the
            # Running transition's status write instead of costing one of its own).
            ctx.status["chief"] = {"uid": chief.uid, "restartCount": chief.restart_count}
    if why:
        chief_restarted(ctx, why)
    return ctx.finished()


def chief_restarted(ctx: PlanContext, why: str) -> None:
    """Count a chief restart and apply chiefRestartPolicy to the rest of the job."""
    policy = ctx.spec.chief_restart_policy
    count = int(ctx.status.get("chiefRestarts", 0)) + 1
    ctx.status["chiefRestarts"] = count
    ctx.status["lastCleanup"] = {
        "time": ctx.timestamp,
        "policy": str(policy),
        "reason": why,
    }
    ctx.actions.append(CountMetric(CHIEF_CLEANUPS))
    ctx.event(WARNING, naming.REASON_CHIEF_RESTARTED, f"{why}; chiefRestartPolicy {policy}")
    if policy == ChiefRestartPolicy.FAIL:
        fail(ctx, naming.REASON_CHIEF_RESTARTED, f"{why} and chiefRestartPolicy is Fail")
    elif policy == ChiefRestartPolicy.RESTART_JOB:
        # Workers first, then parameter servers: no worker ever sees a half-reset PS.
        order = {naming.WORKER: 0, naming.PS: 1}
        doomed = sorted(
            (p for p in ctx.live_pods() if p.replica_type in order),
            key=lambda p: (order[p.replica_type], p.index),
        )
        deleted = ctx.delete_pods(doomed)
        ctx.status["restartJob"] = {"round": count, "since": ctx.timestamp}
        ctx.actions.append(CountMetric(JOB_RESTARTS))
        ctx.event(
            NORMAL,
            naming.REASON_JOB_RESTART,
            f"restarting the job: deleted {deleted} PS and worker pod(s); parameter servers "
            "come back first, then workers, and the chief restores its checkpoint",
        )
        ctx.condition(naming.CONDITION_RESTARTING, True, naming.REASON_JOB_RESTART, why)
    else:
        ctx.event(
            NORMAL,
            naming.REASON_CHIEF_CLEANUP,
            "the runtime resets the sync state (token queue, accumulators) as the chief "
            "restores its checkpoint",
        )
