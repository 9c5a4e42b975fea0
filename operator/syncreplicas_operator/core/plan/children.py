"""The job's children: create what is missing (PodGroup, NetworkPolicy, the job's Service or
with spares one per replica, TensorBoard's Service, then pods),
delete what is out of range, force-delete pods stuck terminating on a lost node, keep the
addresses of pods being deleted out of DNS.
"""

from __future__ import annotations

from typing import Final

from .. import manifests, naming, tensorboard
from ..actions import (
    NORMAL,
    PODS_CREATED,
    WARNING,
    CountMetric,
    CreateChild,
    DeletePod,
    DeleteService,
    PublishPod,
)
from ..status import POD_RUNNING, ObservedPod, condition_is_true
from ..timefmt import parse_time
from . import spares
from .context import PlanContext

# A pod still terminating this long after its deletionTimestamp (the end of its grace
# period) has a kubelet that will never confirm: its node is lost. It is deleted at once,
# unless the operator watches the nodes and sees its node's kubelet alive (a busy kubelet
# confirms late, not never; a lost node's pods are plan/nodes.py's).
FORCE_DELETE_AFTER_SECONDS: Final = 60.0


def force_delete_stuck(ctx: PlanContext) -> bool:
    """Delete at once the pods whose kubelet never confirmed their deletion."""
    forced: list[str] = []
    nodes = ctx.observed.nodes
    for pod in sorted(ctx.observed.pods, key=lambda p: p.name):
        due = parse_time(pod.deletion_timestamp) if pod.deleting else None
        seen = nodes is not None and (
            bool(nodes.why_lost(pod.node_name)) or (nodes.complete and pod.node_name in nodes.known)
        )
        if due is None or seen:
            continue  # not going; on a lost node (plan/nodes.py); on one seen alive (it confirms)
        overdue = (ctx.now - due).total_seconds()
        if overdue < FORCE_DELETE_AFTER_SECONDS:
            ctx.requeue.append(FORCE_DELETE_AFTER_SECONDS - overdue)
            continue
        ctx.actions.append(DeletePod(pod.name, grace_period_seconds=0))
        forced.append(f"{pod.name} ({int(overdue)}s)")
    if forced:
        ctx.event(
            WARNING,
            naming.REASON_FORCE_DELETED,
            "deleted with gracePeriodSeconds 0, still terminating past the end of their "
            f"grace period (their node is likely lost): {', '.join(forced)}",
        )
    return False


def publish_addresses(ctx: PlanContext) -> bool:
    """A replica's pod is in its Service (naming.LABEL_PUBLISHED) until it is being deleted.

    Taken out then, a peer that resolves the name while the pod terminates, or just after
    it exited, finds no address or its successor's, never one about to go (a connection
    there waits seconds for a host that no longer answers). Only replicas the job keeps: a
    job that stops (finished, suspended, held by its queue) ends its pass before this step,
    and a pod out of range (scaled down) has no successor to be confused with. A pod
    without the label that is not going (one made by an older operator) is given it.
    """
    for pod in sorted(ctx.observed.pods, key=lambda p: p.name):
        if pod.index >= ctx.spec.replica_count(pod.replica_type):
            continue
        if pod.published == pod.deleting:
            ctx.actions.append(PublishPod(pod.name, published=not pod.deleting))
    return False


def reconcile_children(ctx: PlanContext) -> bool:
    """Create the missing children, delete those out of range, report Created."""
    counts = ctx.spec.replica_counts()
    ps_up = all(
        (p := ctx.holder(naming.PS, i)) is not None
        and not p.deleting
        and p.phase == POD_RUNNING
        for i in range(counts[naming.PS])
    )
    # The PodGroup first (the gang scheduler holds the pods until their group exists),
    # the NetworkPolicy next (no pod is ever reachable unprotected), then every Service
    # (peers resolve each other while starting), then pods: PS, chief, workers.
    _create_pod_group_and_policy(ctx)
    if ctx.observed.disruption_budget is not True:
        ctx.actions.append(CreateChild(manifests.build_disruption_budget(ctx.job)))
    per_replica = uses_replica_services(ctx)
    services = _create_services(ctx, per_replica)
    pods = _create_pods(ctx, ps_up, per_replica)
    _prune(ctx)
    _report_created(ctx, f"created {pods} pod(s) and {services} service(s)", pods + services)
    if ctx.status.get("restartJob") and ps_up and _all_there(ctx):
        ctx.status.pop("restartJob", None)
    if condition_is_true(ctx.conditions, naming.CONDITION_REPLICA_FAILURE) and _all_there(ctx):
        ctx.condition(naming.CONDITION_REPLICA_FAILURE, False, naming.REASON_PODS_CREATED,
                      "every replica has its pod")  # fmt: skip
    return False


def _create_pod_group_and_policy(ctx: PlanContext) -> None:
    """The PodGroup (under a gang scheduler) and the NetworkPolicy, unless observed."""
    gang = ctx.spec.run_policy.scheduling_policy is not None and ctx.observed.pod_group_api
    if gang and ctx.observed.pod_group is not True:
        ctx.actions.append(CreateChild(manifests.build_pod_group(ctx.job)))
    if not ctx.observed.network_policy:
        policy = manifests.build_network_policy(ctx.job, metrics_from=ctx.inputs.metrics_from)
        ctx.actions.append(CreateChild(policy))


def uses_replica_services(ctx: PlanContext) -> bool:
    """Whether the job's replicas each have a Service (manifests.uses_replica_services):
    with spares, or where one of a replica the spec has is seen (a job an earlier operator
    made keeps its addresses). An out-of-range one, left by an earlier job of the name,
    does not count: it is pruned."""
    counts = ctx.spec.replica_counts()
    parsed = (naming.parse_replica_name(ctx.job.name, s) for s in ctx.observed.services)
    seen = any(p is not None and p[1] < counts.get(p[0], 0) for p in parsed)
    return manifests.uses_replica_services(ctx.spec, observed=seen)


def _create_services(ctx: PlanContext, per_replica: bool) -> int:
    """The Services not observed: the job's, or with ``per_replica`` each replica's, then
    TensorBoard's (spec.tensorboard); how many."""
    job = ctx.job
    observed = ctx.observed.services
    created = len(ctx.actions)
    if not per_replica:
        if naming.job_service_name(job.name) not in observed:
            ctx.actions.append(CreateChild(manifests.build_job_service(job)))
    else:
        for replica_type, count in ctx.spec.replica_counts().items():
            for index in range(count):
                if naming.replica_name(job.name, replica_type, index) not in observed:
                    service = manifests.build_service(job, replica_type, index)
                    ctx.actions.append(CreateChild(service))
    if job.spec.tensorboard is not None and tensorboard.service_name(job.name) not in observed:
        ctx.actions.append(CreateChild(manifests.build_tensorboard_service(job)))
    return len(ctx.actions) - created


def _create_pods(ctx: PlanContext, ps_up: bool, per_replica: bool) -> int:
    """The pods not observed (under RestartJob, workers once every PS runs); how many."""
    job = ctx.job
    restarting_job = bool(ctx.status.get("restartJob"))
    # Pods of a job whose replicas all existed, gone without the operator restarting
    # them (no restart, resume or RestartJob round explains it): deleted by someone.
    was_created = condition_is_true(
        ctx.inputs.status.get("conditions") or [], naming.CONDITION_CREATED
    )
    unexplained = was_created and not (
        ctx.resumed
        or restarting_job
        or condition_is_true(ctx.conditions, naming.CONDITION_RESTARTING)
        or condition_is_true(ctx.conditions, naming.CONDITION_RESIZING)
    )
    created = 0
    replaced: list[str] = []
    cluster: dict[str, list[str]] | None = None
    incarnation = new_incarnation(ctx)
    nodes = ctx.observed.nodes
    avoid = sorted(nodes.lost) if nodes is not None else []
    for replica_type, count in ctx.spec.replica_counts().items():
        for index in range(count):
            name = naming.replica_name(job.name, replica_type, index)
            held = ctx.holder(replica_type, index)
            # A pod being deleted whose containers have stopped may hand its replica to a
            # spare at once (its address is out of DNS: publish_addresses); a new pod of
            # the same name waits until the kubelet has removed it.
            stopped = held is not None and held.deleting and held.finished
            if held is not None and not stopped:
                continue  # present, or still terminating: never create over it
            if restarting_job and replica_type == naming.WORKER and not ps_up:
                continue  # RestartJob: workers wait for the new parameter servers
            if cluster is None:
                cluster = manifests.job_cluster(job, replica_services=per_replica)
            if not restarting_job and spares.take_spare(
                ctx, replica_type, index, incarnation, cluster
            ):
                if unexplained and name in ctx.observed.services:
                    replaced.append(name)
                continue
            if stopped:
                continue  # no spare: a new pod once the old one is gone
            annotations = {}
            if restarting_job and replica_type != naming.CHIEF:
                restart_round = str(ctx.status["restartJob"].get("round", ""))
                annotations[naming.ANNOTATION_RESTART_ROUND] = restart_round
            pod = manifests.build_pod(
                job,
                replica_type,
                index,
                default_image=ctx.inputs.default_image,
                annotations=annotations,
                cluster=cluster,
                incarnation=incarnation,
                avoid_nodes=avoid,
                replica_services=per_replica,
            )
            ctx.actions.append(CreateChild(pod))
            ctx.pods[name] = ObservedPod(name=name, replica_type=replica_type, index=index)
            created += 1
            # With a Service per replica, a pod without one before this pass is a new slot
            # (a scale up), not one that went missing; with the job's Service, a scale up
            # is known by its Resizing condition (plan/resize.py), set before this step.
            if unexplained and (name in ctx.observed.services or not per_replica):
                replaced.append(name)
    if created:
        ctx.actions.append(CountMetric(PODS_CREATED, created))
    if replaced:
        message = f"replacing {', '.join(replaced)}: deleted while the job ran"
        ctx.condition(naming.CONDITION_RESTARTING, True, naming.REASON_REPLICA_RESTARTED, message)
        ctx.event(WARNING, naming.REASON_REPLICA_RESTARTED, message)
    return created


def new_incarnation(ctx: PlanContext) -> int:
    """The incarnation of the pods this pass creates: the clock in milliseconds, and above
    every incarnation the job's pods show, so that a replacement outranks its predecessor
    even if the clock stepped back a little."""
    now_ms = int(ctx.now.timestamp() * 1000)
    highest = max((p.incarnation for p in ctx.observed.pods), default=0)
    return max(now_ms, highest + 1)


def _prune(ctx: PlanContext) -> None:
    """Children beyond the spec's counts (or of unknown types) go: pods highest index first
    (an elastic job scaled down loses its last workers first). The Service of a worker a
    resize removes goes once its pod is gone: the parameter servers reach the leaving
    worker through it until it has left."""
    counts = ctx.spec.replica_counts()
    extra = sorted(
        (p for p in ctx.live_pods() if p.index >= counts.get(p.replica_type, 0)),
        key=lambda p: (p.replica_type, -p.index),
    )
    ctx.delete_pods(extra)
    for service in sorted(ctx.observed.services):
        parsed = naming.parse_replica_name(ctx.job.name, service)
        if parsed is None or parsed[1] < counts.get(parsed[0], 0):
            continue
        if ctx.resized_away(*parsed) and ctx.holder(*parsed) is not None:
            continue  # its pod is still there, or going
        ctx.actions.append(DeleteService(service))
    if extra:
        ctx.event(
            NORMAL,
            naming.REASON_CHILD_DELETED,
            "deleted out-of-range pod(s): " + ", ".join(sorted(p.name for p in extra)),
        )


def _all_there(ctx: PlanContext) -> bool:
    """Every replica has a pod (running, pending or still going)."""
    return all(
        ctx.holder(t, i) is not None
        for t, c in ctx.spec.replica_counts().items()
        for i in range(c)
    )


def _report_created(ctx: PlanContext, created: str, how_many: int) -> None:
    """Created once every replica has a pod; one Event per pass (the first pass's
    creations are the job's creation)."""
    counts = ctx.spec.replica_counts()
    flipped = _all_there(ctx) and ctx.condition(
        naming.CONDITION_CREATED,
        True,
        naming.REASON_CREATED,
        f"{sum(counts.values())} replicas created: {counts[naming.PS]} PS, 1 chief, "
        f"{counts[naming.WORKER]} worker(s)",
    )
    if flipped:
        ctx.event(NORMAL, naming.REASON_CREATED, f"all replicas created: {created}")
    elif how_many:
        ctx.event(NORMAL, naming.REASON_CHILD_CREATED, created)
