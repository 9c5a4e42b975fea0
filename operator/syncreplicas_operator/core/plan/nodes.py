"""Replicas on a lost node (rules in ``core/nodes.py``): force-deleted at once and
re-created elsewhere by ``children.py``; one ``NodeLost`` Event per pass naming the nodes
and the replicas; a recovery each; never counted against backoffLimit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from .. import naming, recovery
from ..actions import WARNING, DeletePod
from .context import PlanContext


def replace_lost(ctx: PlanContext) -> bool:
    """Force-delete the job's pods on lost nodes (the node watch wakes every job when a
    node is found lost, so no pass waits for a Lease to go stale)."""
    health = ctx.observed.nodes
    if health is None or ctx.finished():
        return False
    by_node: dict[str, list[str]] = defaultdict(list)
    causes: dict[str, str] = {}
    failing = {f.replica for f in ctx.failures}
    for pod in sorted(ctx.observed.pods, key=lambda p: p.name):
        why = health.why_lost(pod.node_name)
        if not why:
            continue
        if pod.deleting and not pod.deletion_timestamp:
            continue  # this operator's own deletion, not yet seen by the watch
        ctx.actions.append(DeletePod(pod.name, grace_period_seconds=0))
        ctx.pods[pod.name] = replace(pod, deleting=True)
        by_node[pod.node_name].append(pod.name)
        causes[pod.node_name] = why
        replica = naming.replica_key(pod.replica_type, pod.index)
        if ctx.resized_away(pod.replica_type, pod.index) or pod.deleting:
            continue  # leaving anyway; or already going, its failure already seen
        # In-place restarts it had still count; its loss does not.
        if pod.restart_count:
            ctx.carry_restarts(pod.replica_type, pod.restart_count)
        if replica not in failing:
            detail = f"{pod.name} on lost node {pod.node_name} ({why})"
            ctx.failures.append(recovery.Failure(replica, recovery.CAUSE_NODE_LOST, detail))
    if not by_node:
        return False
    message = "; ".join(
        f"node {node} lost ({causes[node]}): {', '.join(pods)}"
        for node, pods in sorted(by_node.items())
    )
    message += " force-deleted, re-created on other nodes; not counted against backoffLimit"
    ctx.event(WARNING, naming.REASON_NODE_LOST, message)
    ctx.condition(naming.CONDITION_RESTARTING, True, naming.REASON_NODE_LOST, message)
    return False
