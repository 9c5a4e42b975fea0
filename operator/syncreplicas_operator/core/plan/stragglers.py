"""StragglerDetected from the replicas' drop fractions, and under
``runPolicy.stragglerPolicy`` the straggler's eviction (the rules are in ``core/straggler.py``).
"""

from __future__ import annotations

from .. import naming, recovery, straggler
from ..actions import NORMAL, STRAGGLER_EVICTIONS, WARNING, CountMetric
from ..recovery import Failure
from ..spec import StragglerPolicy
from .context import PlanContext
from .recoveries import track_recovery


def report_straggler(ctx: PlanContext) -> bool:
    """StragglerDetected, and under runPolicy.stragglerPolicy the eviction."""
    policy = ctx.spec.run_policy.straggler_policy
    threshold = policy.min_drop_fraction if policy else straggler.DEFAULT_MIN_DROP_FRACTION
    ready = ctx.ready_replicas()
    recovering = recovery.in_progress(ctx.status.get("lastRecovery"))
    forget_resized_away(ctx)
    fractions = ctx.observed.drop_fractions
    if fractions is not None:
        # A worker a resize removes may still be scraped as it leaves: not a straggler.
        fractions = {r: f for r, f in fractions.items() if not ctx.resized_away_key(r)}

    def evictable(replica: str) -> bool:
        # Never the chief (it writes the checkpoints) and one eviction at a time: the
        # last failure's replica must be back and training first.
        return replica.startswith(f"{naming.WORKER}-") and replica in ready and not recovering

    decision = straggler.decide_straggler(
        ctx.status.get("straggler"),
        fractions,
        threshold,
        policy.evict_after_seconds if policy else None,
        ctx.now,
        evictable,
    )
    if decision.state is None:
        ctx.status.pop("straggler", None)
    else:
        ctx.status["straggler"] = decision.state
    if decision.evict_in is not None:
        ctx.requeue.append(decision.evict_in)
    if decision.detected is not None and decision.state is not None:
        message = straggler.straggler_message(decision.state, threshold)
        ctx.condition(
            naming.CONDITION_STRAGGLER_DETECTED, True, naming.REASON_STRAGGLER_DETECTED, message
        )
        ctx.event(WARNING, naming.REASON_STRAGGLER_DETECTED, f"straggler {message}")
    elif decision.state is not None:
        # Same straggler, the latest fraction (the transition time stays).
        ctx.condition(
            naming.CONDITION_STRAGGLER_DETECTED,
            True,
            naming.REASON_STRAGGLER_DETECTED,
            straggler.straggler_message(decision.state, threshold),
        )
    if decision.evict is not None:
        evict_straggler(ctx, decision.evict, policy)
    elif decision.cleared is not None and decision.state is None:
        message = f"{decision.cleared} is no longer a straggler"
        ctx.condition(
            naming.CONDITION_STRAGGLER_DETECTED, False, naming.REASON_STRAGGLER_CLEARED, message
        )
        ctx.event(NORMAL, naming.REASON_STRAGGLER_CLEARED, message)
    return False


def forget_resized_away(ctx: PlanContext) -> None:
    """A straggler that a resize removed is no longer one (it would stay flagged: nobody
    measures it again)."""
    state = ctx.status.get("straggler")
    if not state or not ctx.resized_away_key(str(state.get("replica", ""))):
        return
    ctx.status.pop("straggler", None)
    message = f"{state['replica']} was removed by a resize"
    ctx.condition(
        naming.CONDITION_STRAGGLER_DETECTED, False, naming.REASON_STRAGGLER_CLEARED, message
    )
    ctx.event(NORMAL, naming.REASON_STRAGGLER_CLEARED, message)


def evict_straggler(ctx: PlanContext, replica: str, policy: StragglerPolicy | None) -> None:
    """Delete the straggler's pod; its eviction starts a recovery of its own."""
    index = int(replica.rsplit("-", 1)[1])
    pod = ctx.holder(naming.WORKER, index)
    if pod is None or policy is None:
        return
    ctx.delete_pods([pod])
    message = (
        f"deleted {pod.name}: its gradients were dropped as stale above "
        f"{100 * policy.min_drop_fraction:.0f}% for {policy.evict_after_seconds}s "
        "(runPolicy.stragglerPolicy); the scheduler places its replacement"
    )
    ctx.failures = [
        Failure(replica, recovery.CAUSE_STRAGGLER_EVICTED, f"{pod.name} evicted as a straggler")
    ]
    track_recovery(ctx, recovery.Progress(ctx.status.get("globalStep"), None, ctx.ready_replicas()))
    ctx.actions.append(CountMetric(STRAGGLER_EVICTIONS))
    ctx.condition(
        naming.CONDITION_STRAGGLER_DETECTED, False, naming.REASON_STRAGGLER_EVICTED, message
    )
    ctx.event(WARNING, naming.REASON_STRAGGLER_EVICTED, message)
