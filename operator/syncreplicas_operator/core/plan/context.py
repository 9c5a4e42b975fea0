"""One planning pass's context: the inputs every step reads, the plan the steps write.

The inputs (job, observed children, the status as read, now) never change during a pass;
the steps append actions and requeue delays, edit a private copy of the status, and keep
``pods`` (observed pods, plus those created or deleted this pass) up to date.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .. import naming, recovery
from ..actions import Action, DeletePod, EmitEvent
from ..kueue import Flavor, ObservedWorkload
from ..nodes import NodeHealth
from ..recovery import Failure, SeenPod
from ..spares import ObservedSpare
from ..spec import Job, JobSpec
from ..status import (
    POD_RUNNING,
    ObservedPod,
    condition_is_true,
    find_condition,
    replica_statuses,
    set_condition,
    total_restarts,
)
from ..timefmt import format_time


@dataclass(frozen=True)
class Observed:
    """The job's children as last seen (plus what the caller knows is in flight)."""

    pods: tuple[ObservedPod, ...] = ()
    services: frozenset[str] = frozenset()
    network_policy: bool = False
    # The chief's syncreplicas_global_step from its /metrics, None when not read this time.
    global_step: int | None = None
    # --- recovery and stragglers (each None when not read this pass) ---
    # The chief's syncreplicas_restored_step (read with the global step).
    restored_step: int | None = None
    # The coordinator's (PS 0) syncreplicas_replicas_to_aggregate and _live_replicas.
    replicas_to_aggregate: int | None = None
    live_replicas: int | None = None
    # Replica key -> share of its gradients dropped as stale over the last window.
    drop_fractions: Mapping[str, float] | None = None
    # Pod name -> (uid, warm restarts) as its replica said (core/warm.py); None: not read.
    warm_reads: Mapping[str, tuple[str, int]] | None = None
    # Plan.seen_pods of the last pass (None: this operator process has planned no pass yet).
    seen_pods: Mapping[str, SeenPod] | None = None
    # Whether the job's PodGroup exists (None: not known, e.g. after an operator restart;
    # creating or deleting it again is harmless).
    pod_group: bool | None = None
    # Whether the API server serves the PodGroup API the job's gang scheduler reads.
    pod_group_api: bool = True
    # Whether the job's PodDisruptionBudget exists (None: not known, its list refused or
    # failed: it is created, and a budget that exists answers with a harmless 409).
    disruption_budget: bool | None = None
    # The nodes' verdicts (core/nodes.py); None when node-loss handling is off or the
    # nodes have not been read yet: no pod is then held to be on a lost node.
    nodes: NodeHealth | None = None
    # The job's spare pods still waiting for a replica (runPolicy.spares; core/spares.py).
    spares: tuple[ObservedSpare, ...] = ()
    # --- Kueue (core/kueue.py): only for a job labelled with a queue name ---
    # The operator's Kueue integration is on (--kueue), and whether the API serves Workloads.
    kueue: bool = False
    kueue_served: bool = False
    # The job's Workload as last seen (None: none).
    workload: ObservedWorkload | None = None
    # Its WorkloadPriorityClass (name, value) when the job names one and it exists; else
    # why it cannot be used ("" when the job names none).
    priority: tuple[str, int] | None = None
    priority_problem: str = ""
    # The ResourceFlavors its admission assigned, as read.
    flavors: Mapping[str, Flavor] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """What one pass decided: the actions in order, the new status, when to plan again."""

    actions: tuple[Action, ...]
    status: dict[str, Any]
    # Plan again after this many seconds even if nothing changes (deadlines, TTL, stall).
    requeue_after: float | None = None
    # The pods as this pass leaves them, for the next pass's Observed.seen_pods.
    seen_pods: Mapping[str, SeenPod] = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    """What a pass plans from; ``status`` is the job's ``.status`` as read, ``now`` aware."""

    job: Job
    observed: Observed
    status: Mapping[str, Any]
    now: datetime
    default_image: str
    # Namespaces whose pods may read the replicas' metrics port; empty: any.
    metrics_from: tuple[str, ...] = ()
    # Random text from the operator (per pass): the secrets of the spares this pass creates.
    entropy: str = ""
    # Seconds after a spare took a replica over before a new spare is started behind it.
    spare_refill_delay: float = 0.0


class PlanContext:
    """The inputs of one pass and the plan its steps build."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.timestamp = format_time(inputs.now)
        self.status: dict[str, Any] = copy.deepcopy(dict(inputs.status))
        self.actions: list[Action] = []
        self.requeue: list[float] = []
        self.pods = {p.name: p for p in inputs.observed.pods}
        # Replica key -> name of a pod holding it under another name (a spare that took it
        # over keeps its own name).
        self.moved: dict[str, str] = {
            naming.replica_key(p.replica_type, p.index): p.name
            for p in sorted(inputs.observed.pods, key=lambda p: p.deleting, reverse=True)
            if p.name != naming.replica_name(inputs.job.name, p.replica_type, p.index)
        }
        # The spares still waiting; one that takes a replica over this pass leaves it.
        self.spares: dict[str, ObservedSpare] = {s.name: s for s in inputs.observed.spares}
        # Set when this pass resumed a suspended job (its pods come back on purpose).
        self.resumed = False
        self.recreations: dict[str, int] = {
            replica_type: int(count)
            for replica_type, count in (self.status.get("recreations") or {}).items()
        }
        # Failures seen this pass, each the start of a recovery (status.lastRecovery). A
        # worker a resize removes is going on purpose: whatever its pod does is none.
        self.failures: list[Failure] = [
            failure
            for failure in recovery.detect_failures(inputs.observed.seen_pods, inputs.observed.pods)
            if not self.resized_away_key(failure.replica)
        ]

    @property
    def job(self) -> Job:
        return self.inputs.job

    @property
    def spec(self) -> JobSpec:
        return self.inputs.job.spec

    @property
    def observed(self) -> Observed:
        return self.inputs.observed

    @property
    def now(self) -> datetime:
        return self.inputs.now

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list(self.status.get("conditions") or [])

    def condition(self, condition_type: str, value: bool, reason: str, message: str) -> bool:
        """Set a condition; True when its status flipped (worth an Event)."""
        before = condition_is_true(self.conditions, condition_type)
        existed = find_condition(self.conditions, condition_type) is not None
        self.status["conditions"] = set_condition(
            self.conditions, condition_type, value, reason, message, self.timestamp
        )
        return before != value and (value or existed)

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.actions.append(EmitEvent(event_type, reason, message))

    def finished(self) -> bool:
        return condition_is_true(self.conditions, naming.CONDITION_SUCCEEDED) or (
            condition_is_true(self.conditions, naming.CONDITION_FAILED)
        )

    def resized_away(self, replica_type: str, index: int) -> bool:
        """A worker beyond spec.workers of an elastic job: scaled down, its pod leaves the
        job and goes (never restarted, never a failure, a recovery or a straggler)."""
        return (
            self.spec.elastic_policy is not None
            and replica_type == naming.WORKER
            and index >= self.spec.workers
        )

    def resized_away_key(self, replica: str) -> bool:
        """:meth:`resized_away` of a replica key (``worker-3``)."""
        parsed = naming.parse_replica_key(replica)
        return parsed is not None and self.resized_away(*parsed)

    def holder(self, replica_type: str, index: int) -> ObservedPod | None:
        """The pod that holds replica (type, index): by its name, or a spare that took it
        over (a live one before one still going)."""
        pod = self.pods.get(naming.replica_name(self.job.name, replica_type, index))
        if pod is not None and (pod.replica_type, pod.index) != (replica_type, index):
            pod = None
        if pod is not None and not pod.deleting:
            return pod
        moved = self.moved.get(naming.replica_key(replica_type, index))
        other = self.pods.get(moved) if moved else None
        if other is None or (other.replica_type, other.index) != (replica_type, index):
            return pod
        return other if pod is None or not other.deleting else pod

    def live_pods(self) -> list[ObservedPod]:
        return [p for p in self.pods.values() if not p.deleting]

    def ready_replicas(self) -> frozenset[str]:
        """Replica keys whose pod is running and ready."""
        return frozenset(
            naming.replica_key(p.replica_type, p.index)
            for p in self.live_pods()
            if p.ready and p.phase == POD_RUNNING
        )

    def restarts_so_far(self) -> int:
        return total_restarts(replica_statuses(self.live_pods(), self.recreations))

    def delete_pods(self, pods: Iterable[ObservedPod]) -> int:
        """Delete the pods not already going; how many that was."""
        deleted = 0
        for pod in pods:
            if not pod.deleting:
                self.actions.append(DeletePod(pod.name))
                self.pods[pod.name] = replace(pod, deleting=True)
                # Its in-place restarts still count against backoffLimit once it is gone.
                if pod.restart_count:
                    self.carry_restarts(pod.replica_type, pod.restart_count)
                deleted += 1
        return deleted

    def carry_restarts(self, replica_type: str, count: int) -> None:
        """Keep restarts in status (``recreations``) that no live pod's count shows."""
        self.recreations[replica_type] = self.recreations.get(replica_type, 0) + count
