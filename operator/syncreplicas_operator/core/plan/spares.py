"""Warm spare pods (``runPolicy.spares``, rules in ``core/spares.py``): a replica whose pod
is gone is handed to a ready spare instead of a new pod (``take_spare``, from
``children.py``); the job keeps ``spares`` of them once every replica's pod runs
(``keep_spares``), the one behind a takeover ``spare_refill_delay`` seconds after it (a
spare's start, a new pod and TensorFlow's import, would otherwise take CPU from the
recovery it follows: ``refill_wait``); a finished or suspended job has none
(``drop_spares``).
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import naming, spares
from ..actions import NORMAL, WARNING, AssignSpare, CreateChild, DeletePod
from ..status import POD_RUNNING, ObservedPod
from .context import PlanContext


def take_spare(
    ctx: PlanContext,
    replica_type: str,
    index: int,
    incarnation: int,
    cluster: Mapping[str, list[str]] | None,
) -> bool:
    """Hand replica (type, index) to a ready spare built like its pod; True if one took it."""
    if not ctx.spares:
        return False
    wanted = spares.shape(ctx.job, replica_type, default_image=ctx.inputs.default_image)
    nodes = ctx.observed.nodes
    for spare in sorted(ctx.spares.values(), key=lambda s: s.name):
        usable = spare.ready and not spare.deleting and spare.pod_ip and spare.token
        if not usable or spare.shape != wanted:
            continue
        if nodes is not None and nodes.why_lost(spare.node_name):
            continue
        env = spares.assignment_env(ctx.job, replica_type, index, incarnation, cluster=cluster)
        key = naming.replica_key(replica_type, index)
        ctx.actions.append(
            AssignSpare(
                spare=spare.name,
                replica=key,
                address=spare.pod_ip,
                port=ctx.spec.metrics.port,
                token=spare.token,
                env=tuple(sorted(env.items())),
                patch=spares.takeover_patch(ctx.job, replica_type, index, incarnation),
            )
        )
        del ctx.spares[spare.name]
        ctx.pods[spare.name] = ObservedPod(
            name=spare.name,
            replica_type=replica_type,
            index=index,
            uid=spare.uid,
            phase=POD_RUNNING,
            pod_ip=spare.pod_ip,
            node_name=spare.node_name,
            incarnation=incarnation,
        )
        ctx.moved[key] = spare.name
        taken = dict(ctx.status.get("spares") or {})
        taken["assigned"] = int(taken.get("assigned") or 0) + 1
        ctx.status["spares"] = taken
        return True
    return False


def keep_spares(ctx: PlanContext) -> bool:
    """Delete the spares that cannot serve (ended, on a lost node, built for an older spec);
    once every replica has its pod, start new ones up to ``runPolicy.spares``."""
    wanted = ctx.spec.run_policy.spares if ctx.spec.workers else 0  # built like a worker
    if not (wanted or ctx.spares or ctx.status.get("spares")):
        return False
    nodes = ctx.observed.nodes
    current = (
        spares.shape(ctx.job, naming.WORKER, default_image=ctx.inputs.default_image)
        if ctx.spec.workers
        else ""
    )
    keep = []
    gone = []
    for spare in sorted(ctx.spares.values(), key=lambda s: s.name):
        if spare.deleting:
            continue
        lost = nodes is not None and bool(nodes.why_lost(spare.node_name))
        if spare.ended or lost or spare.shape != current:
            ctx.actions.append(DeletePod(spare.name, grace_period_seconds=0 if lost else None))
            gone.append(spare.name)
        else:
            keep.append(spare)
    extra = keep[wanted:] if len(keep) > wanted else []
    for spare in extra:
        ctx.actions.append(DeletePod(spare.name))
        gone.append(spare.name)
    if gone:
        ctx.event(NORMAL, naming.REASON_CHILD_DELETED, "deleted spare pod(s): " + ", ".join(gone))
    missing = wanted - len(keep) + len(extra)
    # Replicas first: spares start once every replica's pod runs (a job's start is not
    # slowed by its spares importing TensorFlow beside it).
    all_running = all(
        (held := ctx.holder(t, i)) is not None and held.phase == POD_RUNNING
        for t, c in ctx.spec.replica_counts().items()
        for i in range(c)
    )
    due = missing > 0 and all_running
    if due and (wait := refill_wait(ctx)) > 0:
        ctx.requeue.append(wait)
    elif due:
        taken = [*ctx.pods, *(s.name for s in ctx.observed.spares)]
        avoid = sorted(nodes.lost) if nodes is not None else []
        for number in spares.free_numbers(ctx.job.name, taken, missing):
            name = naming.spare_name(ctx.job.name, number)
            token = spares.token_for(ctx.inputs.entropy, name)
            image = ctx.inputs.default_image
            pod = spares.build_spare(ctx.job, number, token, default_image=image, avoid_nodes=avoid)
            ctx.actions.append(CreateChild(pod))
    kept = keep[:wanted]
    if not wanted and not ctx.status.get("spares"):
        return False
    ctx.status["spares"] = {
        **(ctx.status.get("spares") or {}),
        "active": len(kept),
        "ready": sum(1 for s in kept if s.ready),
    }
    return False


def refill_wait(ctx: PlanContext) -> float:
    """Seconds until new spares may start: ``spare_refill_delay`` after the latest takeover
    of a replica by a spare (its incarnation is the operator's clock when it took over), 0
    when none is that recent or the delay is 0."""
    delay = ctx.inputs.spare_refill_delay
    if delay <= 0:
        return 0.0
    latest = max(
        (ctx.pods[name].incarnation for name in ctx.moved.values() if name in ctx.pods),
        default=0,
    )
    if not latest:
        return 0.0
    since = ctx.now.timestamp() - latest / 1000.0
    return max(0.0, delay - since)


def drop_spares(ctx: PlanContext, why: str) -> None:
    """Delete every spare: the job needs none (finished or suspended)."""
    going = [s.name for s in sorted(ctx.spares.values(), key=lambda s: s.name) if not s.deleting]
    for name in going:
        ctx.actions.append(DeletePod(name))
    if going:
        ctx.event(NORMAL, naming.REASON_CHILD_DELETED, f"deleted spare pod(s) ({why}): "
                  + ", ".join(going))  # fmt: skip
    if ctx.status.get("spares"):
        ctx.status["spares"] = {**ctx.status["spares"], "active": 0, "ready": 0}


def failed_assignment(spare: str, replica: str, why: str) -> tuple[str, str, str]:
    """The Warning Event of a spare that could not take ``replica`` over (apply.py)."""
    return (
        WARNING,
        naming.REASON_SPARE_FAILED,
        f"spare {spare} could not take over {replica} ({why}): deleted it; the replica gets "
        "a new pod",
    )
