"""The pass's result: the status's replica counts (and the worker pods, for the scale
subresource), readiness and phase, the merge patch that writes it, and the ``Plan`` the
caller applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import naming, recovery
from ..actions import DeleteJob, PatchStatus
from ..status import observed_workers, phase_of, ready_replicas, replica_statuses
from .context import Plan, PlanContext


def build_plan(ctx: PlanContext) -> Plan:
    """Complete the status, then the actions in order with the status patch last."""
    live = ctx.live_pods()
    ctx.status["replicaStatuses"] = replica_statuses(live, ctx.recreations)
    # The scale subresource's status (kubectl scale, an HPA): the worker pods as this pass
    # leaves them (those it created count, those it deleted do not), so that the next pass,
    # which observes them, has nothing new to write.
    ctx.status["workers"] = observed_workers(ctx.pods.values())
    ctx.status["workerSelector"] = naming.worker_selector(ctx.job.name)
    ctx.status["ready"] = ready_replicas(live, sum(ctx.spec.replica_counts().values()))
    if ctx.recreations:
        ctx.status["recreations"] = dict(ctx.recreations)
    ctx.status["phase"] = phase_of(ctx.conditions)
    if ctx.job.generation is not None:
        ctx.status["observedGeneration"] = ctx.job.generation
    patch = status_patch(ctx.inputs.status, ctx.status)
    actions = list(ctx.actions)
    if patch and not any(isinstance(a, DeleteJob) for a in actions):
        # Children first, status after: a crash in between repeats the same plan.
        actions.append(PatchStatus(patch))
    return Plan(
        actions=tuple(actions),
        status=ctx.status,
        requeue_after=min(ctx.requeue) if ctx.requeue else None,
        seen_pods=recovery.remember(ctx.pods.values()),
    )


# Keys a pod's phase or readiness moves one by one: a change of these alone may wait for the
# next status write (the daemon batches them, as Kubernetes' Job controller does).
COUNTS = frozenset({"replicaStatuses", "workers", "ready", "conditions"})


def counts_only(patch: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether ``patch`` (of ``old``) only recounts replicas: replica counts, the scale
    subresource's workers, readiness, and condition messages (no condition's type, status
    or reason changes)."""
    if not patch or not set(patch) <= COUNTS:
        return False
    if "conditions" not in patch:
        return True
    def kinds(conditions: Any) -> list[tuple[Any, Any, Any]]:
        return [(c.get("type"), c.get("status"), c.get("reason")) for c in conditions or []]

    return kinds(old.get("conditions")) == kinds(patch["conditions"])


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386) turning ``old`` into ``new``.

    The API server merges nested objects key by key, so a key that ``new`` drops from a
    nested object (``lastRecovery.recoveredAt`` when a new recovery starts) is set to null
    at its own level; sending the nested object whole would keep the old keys. Lists
    replace wholesale.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = status_patch(before, value)
        else:
            patch[key] = value
    patch.update({k: None for k in old if k not in new})
    return patch
