"""``status`` of a SyncReplicasJob as the operator writes it: the CRD's status schema.

Every field the operator writes must be here: a real API server prunes unknown status
fields silently (the status subresource has no strict mode).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

from pydantic import Field

from .fields import ApiModel, DateTime, Int32, Int64, ListMap, Number, Str

Phase = Literal["Pending", "Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]
RecoveryCause = Literal[
    "Exited", "Evicted", "Deleted", "ContainerRestarted", "StragglerEvicted", "NodeLost"
]
PHASES: Final[tuple[str, ...]] = get_args(Phase)
RECOVERY_CAUSES: Final[tuple[str, ...]] = get_args(RecoveryCause)


class Condition(ApiModel):
    type: Str = Field(
        description="Created, Running, Restarting, Succeeded, Failed, Suspended, Stalled, "
        "Degraded, StragglerDetected, Resizing, ReplicaFailure (the API server refused "
        "a pod, with its message) or TopologyGated (pods still at Kueue's topology gate)."
    )
    status: Literal["True", "False", "Unknown"]
    reason: Str | None = Field(None, description="CamelCase reason for the last transition.")
    message: Str | None = Field(None, description="Human-readable details.")
    last_transition_time: DateTime | None = None
    last_update_time: DateTime | None = None


class ReplicaCounts(ApiModel):
    active: Int32 | None = Field(None, description="Pods pending or running.")
    ready: Int32 | None = Field(None, description="Pods passing their readiness probe.")
    succeeded: Int32 | None = Field(None, description="Pods that exited 0.")
    failed: Int32 | None = Field(
        None, description="Failures seen (counted against backoffLimit)."
    )
    restarts: Int32 | None = Field(
        None, description="Restarts (container restarts and replaced pods)."
    )


class ReplicaStatuses(ApiModel):
    ps: ReplicaCounts | None = None
    chief: ReplicaCounts | None = None
    worker: ReplicaCounts | None = None


class LastRecovery(ApiModel):
    replica: Str | None = Field(None, description="The failed replica, e.g. worker-1.")
    cause: RecoveryCause | None = Field(None, description="What happened to its pod.")
    message: Str | None = Field(None, description="Details (exit code, pod name).")
    started_at: DateTime | None = Field(None, description="When the operator saw the failure.")
    recovered_at: DateTime | None = Field(
        None, description="When the replica was back and training; absent while recovering."
    )
    global_step_before: Int64 | None = Field(
        None, description="Global step known before the failure."
    )
    resumed_from: Int64 | None = Field(
        None, description="Lowest global step training resumed from, when it went back."
    )
    steps_lost: Int64 | None = Field(
        None, description="globalStepBefore minus resumedFrom (0 when the step never went back)."
    )


class Straggler(ApiModel):
    replica: Str | None = Field(None, description="The straggling replica, e.g. worker-2.")
    drop_fraction: Number | None = Field(
        None, description="Share of its pushed gradients dropped over the last window."
    )
    since: DateTime | None = Field(None, description="When it was first seen above the threshold.")


class ChiefPod(ApiModel):
    uid: Str | None = Field(None, description="uid of the chief pod.")
    restart_count: Int32 | None = Field(None, description="Container restarts of that pod.")


class RestartJobRound(ApiModel):
    round: Int32 | None = Field(
        None, description="The round (the chief restart count that started it)."
    )
    since: DateTime | None = Field(None, description="When the round started.")


class Recreations(ApiModel):
    ps: Int32 | None = Field(None, description="Parameter server pods recreated.")
    chief: Int32 | None = Field(None, description="Chief pods recreated.")
    worker: Int32 | None = Field(None, description="Worker pods recreated.")


class WarmRestarts(ApiModel):
    pod: Str = Field(description="The pod's name.")
    uid: Str = Field(description="The pod's uid (a new pod of that name starts from zero).")
    count: Int32 = Field(
        ge=0,
        description="Restarts of the replica's process inside the pod's container "
        "(runPolicy.warmRestarts), as the replica last said.",
    )


class Spares(ApiModel):
    active: Int32 = Field(ge=0, description="Spare pods not yet holding a replica.")
    ready: Int32 = Field(ge=0, description="Of those, the ones ready to take a replica over.")
    assigned: Int64 | None = Field(
        None, ge=0, description="Replicas a spare has taken over since the job started."
    )


class LastCleanup(ApiModel):
    time: DateTime | None = None
    policy: Str | None = Field(None, description="The chiefRestartPolicy applied.")
    reason: Str | None = None
    message: Str | None = None
    global_step: Int64 | None = Field(
        None, description="Global step known when the restart was detected."
    )


class Exported(ApiModel):
    path: Str = Field(description="The SavedModel's directory, as the chief's pod sees it.")
    global_step: Int64 = Field(description="The global step of the checkpoint it was made of.")


class JobStatus(ApiModel):
    """Observed state, written by the operator."""

    phase: Phase | None = Field(None, description="Lifecycle phase.")
    ready: Str | None = Field(
        None, description='Ready replicas out of all, e.g. "3/5" (printer column).'
    )
    conditions: Annotated[list[Condition], ListMap(("type",))] | None = Field(
        None, description="Latest observations of the job's state."
    )
    replica_statuses: ReplicaStatuses | None = Field(None, description="Counts per replica type.")
    workers: Int32 | None = Field(
        None,
        description="Worker pods that exist and are not being deleted (the scale "
        "subresource's status replicas; spec.workers once a resize is done).",
    )
    worker_selector: Str | None = Field(
        None,
        description="Label selector of the job's worker pods (the scale subresource's "
        "selector, for an HPA).",
    )
    global_step: Int64 | None = Field(
        None, description="Global step, read from the chief's metrics."
    )
    replicas_to_aggregate: Int32 | None = Field(
        None,
        description="Gradients each update aggregates now, as last read from the coordinator "
        "(PS 0); below spec.replicasToAggregate while the job is Degraded.",
    )
    live_replicas: Int32 | None = Field(
        None, description="Replicas pushing gradients, as last read from the coordinator."
    )
    restored_step: Int64 | None = Field(
        None, description="Global step the chief last resumed from, read from its metrics."
    )
    last_recovery: LastRecovery | None = Field(
        None,
        description="The last replica failure and how training recovered from it: it ends "
        "when the replica's pod is running and ready and the global step moves.",
    )
    straggler: Straggler | None = Field(
        None,
        description="The replica whose gradients are dropped as stale most, while its share "
        "is above the threshold (present with the StragglerDetected condition).",
    )
    progress: Str | None = Field(
        None, description="globalStep as a share of spec.training.maxSteps, e.g. 42%."
    )
    steps_per_second: Number | None = Field(
        None,
        description="Global steps per second: a moving average over the operator's reads of "
        "the global step.",
    )
    eta: Str | None = Field(
        None,
        description="Time left to maxSteps at stepsPerSecond, when last computed (e.g. 3m20s); "
        "absent once maxSteps is reached.",
    )
    estimated_completion_time: DateTime | None = Field(
        None, description="When the job should reach maxSteps at stepsPerSecond."
    )
    last_progress_time: DateTime | None = Field(
        None,
        description="When globalStep last advanced (or the job started running): the Stalled "
        "condition's clock.",
    )
    export: Exported | None = Field(
        None,
        description="The SavedModel the chief exported at the end of training (a model "
        "with a serving signature), as its exit said.",
    )
    best_export: Exported | None = Field(
        None,
        description="The best SavedModel the chief exported (spec.training.export.best): "
        "the one of the latest evaluation that beat every one before it.",
    )
    chief_restarts: Int32 | None = Field(
        None, description="Chief restarts handled by chiefRestartPolicy."
    )
    chief: ChiefPod | None = Field(
        None,
        description="The chief pod last seen, to notice a container restart or a replaced pod "
        "across operator restarts.",
    )
    restart_job: RestartJobRound | None = Field(
        None, description="Present while a RestartJob round brings the replicas back."
    )
    recreations: Recreations | None = Field(
        None,
        description="Pods the operator deleted and created again, per replica type (a new pod "
        "restarts its restart count from zero; these count against backoffLimit).",
    )
    warm_restarts: Annotated[list[WarmRestarts], ListMap(("pod",))] | None = Field(
        None,
        description="Per live pod, restarts of its replica's process inside its container "
        "(no container restart shows them; they count in replicaStatuses and against "
        "backoffLimit).",
    )
    spares: Spares | None = Field(
        None, description="The job's warm spare pods (runPolicy.spares)."
    )
    last_cleanup: LastCleanup | None = Field(
        None, description="The last chief-restart clean-up."
    )
    start_time: DateTime | None = Field(
        None, description="When the job's first replicas were created."
    )
    completion_time: DateTime | None = Field(
        None, description="When the job Succeeded or Failed."
    )
    observed_generation: Int64 | None = Field(
        None, description="metadata.generation the status was computed from."
    )
    message: Str | None = Field(
        None, description="Human-readable summary of the phase (e.g. the invalid field)."
    )
    kopf: dict[str, Any] | None = Field(None, description="Operator framework bookkeeping.")
