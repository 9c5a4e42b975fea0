"""Elastic workers: notice a resize (spec.workers changed under ``elasticPolicy``), say so
once (an Event and the Resizing condition), and clear the condition once the worker pods
match, the new ones are ready (training) and the removed ones are gone. ``children.py``
creates and deletes the pods and Services themselves.

A resize is told apart from a failure by the worker slots in use: the live worker pods,
and the Services of workers (with a Service per replica: created with the pod, deleted only
when a resize removes the worker) or else the workers the status last counted. A scale up
needs slots nobody holds; a scale down leaves live pods beyond spec.workers. A worker pod
lost and replaced changes neither. While a resize is under way
its target is the one its condition names: spec.workers changed again is a new resize.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .. import naming
from ..actions import NORMAL
from ..status import condition_is_true, find_condition, observed_workers
from .context import PlanContext

# resize_message's words, read back from the Resizing condition: the target under way.
RESIZE_MESSAGE: Final = re.compile(r"workers (\d+) -> (\d+)")


def plan_resize(ctx: PlanContext) -> bool:
    """The Resizing condition and Event of an elastic job."""
    policy = ctx.spec.elastic_policy
    if policy is None or ctx.finished():
        return False
    want = ctx.spec.workers
    target = target_under_way(find_condition(ctx.conditions, naming.CONDITION_RESIZING))
    have = observed_workers(ctx.pods.values())
    if target is not None:
        # spec.workers changed again: a new resize, from the worker pods there now.
        before = have if want not in (target, have) else None
    else:
        slots = worker_slots_in_use(ctx)
        leaving = any(
            p.replica_type == naming.WORKER and p.index >= want for p in ctx.live_pods()
        )
        before = slots if slots != want and (want > slots or leaving) else None
    # Before the job's replicas were all created, or while a resumed job comes back, the
    # pods being made are the job's, not a resize's.
    created = condition_is_true(ctx.inputs.status.get("conditions") or [], naming.CONDITION_CREATED)
    started = created and not ctx.resumed
    if started and before is not None:
        reason = naming.REASON_SCALING_UP if want > before else naming.REASON_SCALING_DOWN
        ctx.condition(naming.CONDITION_RESIZING, True, reason, resize_message(before, want))
        bounds = f"elasticPolicy {policy.min_workers}..{policy.max_workers}"
        ctx.event(NORMAL, naming.REASON_RESIZING, f"{resize_message(before, want)} ({bounds})")
    elif target is not None and have == want and resized(ctx, want):
        ctx.condition(naming.CONDITION_RESIZING, False, naming.REASON_RESIZED, f"workers {want}")
    return False


def resized(ctx: PlanContext, want: int) -> bool:
    """The resize took effect: every worker below ``want`` is ready (its runtime is
    training: /readyz) and no pod of a removed worker is left, not even terminating."""
    workers = [p for p in ctx.pods.values() if p.replica_type == naming.WORKER]
    return all(p.index < want and p.ready for p in workers)


def target_under_way(condition: Mapping[str, Any] | None) -> int | None:
    """The workers a resize under way (its Resizing condition True) is going to."""
    if condition is None or condition.get("status") != "True":
        return None
    found = RESIZE_MESSAGE.fullmatch(str(condition.get("message", "")))
    return int(found.group(2)) if found else None


def worker_slots_in_use(ctx: PlanContext) -> int:
    """1 + the highest worker index that has a Service or a live pod (0: none). Without
    Services per replica, at least the workers the status counted last (status.workers):
    the highest worker's pod lost is not a scale down."""
    indices = [p.index for p in ctx.live_pods() if p.replica_type == naming.WORKER]
    per_replica = False
    for service in ctx.observed.services:
        parsed = naming.parse_replica_name(ctx.job.name, service)
        per_replica = per_replica or parsed is not None
        if parsed is not None and parsed[0] == naming.WORKER:
            indices.append(parsed[1])
    slots = 1 + max(indices, default=-1)
    counted = ctx.inputs.status.get("workers")
    if per_replica or not isinstance(counted, int):
        return slots
    return max(slots, counted)


def resize_message(before: int, after: int) -> str:
    """``workers 2 -> 4``: the Resizing condition's message, the start of its Event's."""
    return f"workers {before} -> {after}"
