"""status.lastRecovery: this pass's failures start a recovery, the replica back and the
global step moving end it (the rules are in ``core/recovery.py``).
"""

from __future__ import annotations

from .. import naming, recovery
from ..actions import NORMAL, RECOVERIES, CountMetric
from ..timefmt import parse_time
from .context import PlanContext


def report_recovery(ctx: PlanContext) -> bool:
    """status.restoredStep as read, and status.lastRecovery from this pass's failures."""
    observed = ctx.observed
    rejoined = None
    if observed.restored_step is not None:
        known = ctx.status.get("restoredStep")
        if known is not None and known != observed.restored_step:
            rejoined = observed.restored_step
        ctx.status["restoredStep"] = observed.restored_step
    progress = recovery.Progress(
        global_step=ctx.status.get("globalStep"),
        rejoined_from=rejoined,
        ready=ctx.ready_replicas(),
    )
    track_recovery(ctx, progress)
    return False


def track_recovery(ctx: PlanContext, progress: recovery.Progress) -> None:
    """Start, continue or end status.lastRecovery; count each start, an Event at the end."""
    record = ctx.status.get("lastRecovery")
    if record and recovery.in_progress(record) and ctx.resized_away_key(str(record["replica"])):
        # It would never end (its replica is not coming back) and would hold every
        # straggler eviction back (one at a time).
        ctx.status["lastRecovery"] = recovery.end_without_replica(
            record, f"{record['replica']} removed by a resize", ctx.timestamp
        )
    update = recovery.track_recovery(
        ctx.status.get("lastRecovery"), ctx.failures, progress, ctx.timestamp
    )
    if update.record is not None:
        ctx.status["lastRecovery"] = update.record
    for failure in update.started:
        ctx.actions.append(CountMetric(RECOVERIES, labels=(("cause", failure.cause),)))
    if update.ended and update.record is not None:
        started = parse_time(update.record.get("startedAt"))
        took = (ctx.now - started).total_seconds() if started else None
        ctx.event(
            NORMAL,
            naming.REASON_REPLICA_RECOVERED,
            recovery.recovered_message(update.record, took),
        )
