"""Elastic workers: notice a resize (spec.workers changed under ``elasticPolicy``), say so
once (an Event and the Resizing condition), and clear the condition once the worker pods
match. ``children.py`` creates and deletes the pods and Services themselves.

A resize is told apart from a failure by the worker slots in use: the Services of workers
(created with the pod, deleted only when a resize removes the worker) and the live worker
pods. A scale up needs slots nobody holds; a scale down leaves live pods beyond
spec.workers. A worker pod lost and replaced changes neither.
"""

from __future__ import annotations

from .. import naming
from ..actions import NORMAL
from ..status import condition_is_true, observed_workers
from .context import PlanContext


def plan_resize(ctx: PlanContext) -> bool:
    """The Resizing condition and Event of an elastic job."""
    policy = ctx.spec.elastic_policy
    if policy is None or ctx.finished():
        return False
    want = ctx.spec.workers
    created = condition_is_true(ctx.inputs.status.get("conditions") or [], naming.CONDITION_CREATED)
    slots = worker_slots_in_use(ctx)
    leaving = any(
        p.replica_type == naming.WORKER and p.index >= want for p in ctx.live_pods()
    )
    # Before the job's replicas were all created, or while a resumed job comes back, the
    # pods being made are the job's, not a resize's.
    if created and not ctx.resumed and slots != want and (want > slots or leaving):
        reason = naming.REASON_SCALING_UP if want > slots else naming.REASON_SCALING_DOWN
        ctx.condition(naming.CONDITION_RESIZING, True, reason, resize_message(slots, want))
        bounds = f"elasticPolicy {policy.min_workers}..{policy.max_workers}"
        ctx.event(NORMAL, naming.REASON_RESIZING, f"{resize_message(slots, want)} ({bounds})")
    elif (
        condition_is_true(ctx.conditions, naming.CONDITION_RESIZING)
        and observed_workers(ctx.pods.values()) == want
    ):
        ctx.condition(naming.CONDITION_RESIZING, False, naming.REASON_RESIZED, f"workers {want}")
    return False


def worker_slots_in_use(ctx: PlanContext) -> int:
    """1 + the highest worker index that has a Service or a live pod (0: none)."""
    indices = [p.index for p in ctx.live_pods() if p.replica_type == naming.WORKER]
    for service in ctx.observed.services:
        parsed = naming.parse_replica_name(ctx.job.name, service)
        if parsed is not None and parsed[0] == naming.WORKER:
            indices.append(parsed[1])
    return 1 + max(indices, default=-1)


def resize_message(before: int, after: int) -> str:
    """``workers 2 -> 4``: the Resizing condition's message, the start of its Event's."""
    return f"workers {before} -> {after}"
