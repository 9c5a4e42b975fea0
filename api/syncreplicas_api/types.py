"""``SyncReplicasJob``'s spec as typed values: every field's default, bounds and meaning,
and every rule across fields, written once. ``crd`` turns these types into the CRD's
schema; ``problems`` validates a manifest with them in the project's words.

Python names are snake_case, the manifest's camelCase (aliases).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Protocol

from pydantic import Field, model_validator

from . import containers, optimizers, resource
from .enums import ChiefRestartPolicy, CleanPodPolicy, GangScheduler, Optimizer, RestartPolicy
from .export import Export
from .fields import (
    ApiModel,
    Bool,
    CelBounds,
    GoPattern,
    Immutable,
    Int32,
    Int64,
    Number,
    Rule,
    Str,
    TransitionRule,
    port_is_not,
)
from .schedules import LearningRateSchedule
from .templates import (
    MAX_IMAGE_LENGTH,
    RUNTIME_OR_IMAGE,
    PodTemplate,
    RoleSpec,
    as_dicts,
)
from .tensorboard import PORT as TENSORBOARD_PORT
from .tensorboard import TensorBoard as TensorBoard
from .warmstart import WarmStart

# Bounded strings keep the CEL rules' estimated cost small (the API server refuses rules
# whose estimated cost is too high).
MAX_ENTRYPOINT_LENGTH: Final = 253
MAX_PATH_LENGTH: Final = 1024
# A scheduler's name and a Volcano queue's name are object names (DNS subdomains).
MAX_NAME_LENGTH: Final = 253

ENTRYPOINT = GoPattern(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", "expected package.module:function")
# "" means no checkpoints; anything else must be an absolute path inside the container.
CHECKPOINT_DIR = GoPattern(r"^(/.*)?$", 'an absolute path, or "" for no checkpoints')
JOB_NAME = GoPattern(
    resource.JOB_NAME_PATTERN, "lower-case letters, digits and '-', starting with a letter"
)

# spec.managedBy: a domain-prefixed path, as batch/v1 Job's managedBy.
MAX_MANAGED_BY_LENGTH: Final = 63
MANAGED_BY = GoPattern(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]"
    r"([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    "a domain-prefixed path, such as kueue.x-k8s.io/multikueue",
)

Entrypoint = Annotated[
    Str,
    ENTRYPOINT,
    Immutable(),
    Field(
        max_length=MAX_ENTRYPOINT_LENGTH,
        description="package.module:function returning the model (see the runtime's "
        "model contract). Immutable.",
    ),
]
CheckpointDir = Annotated[
    Str,
    CHECKPOINT_DIR,
    Field(
        max_length=MAX_PATH_LENGTH,
        description='Absolute path where the chief writes checkpoints; "" for none. Mount '
        "a persistent volume here (template) to keep checkpoints when the chief pod is "
        "replaced; otherwise an emptyDir is mounted.",
    ),
]


class ModelSpec(ApiModel):
    """``spec.model``: the model every replica builds."""

    entrypoint: Entrypoint
    args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments passed to the entrypoint function."
    )


class TrainingSpec(ApiModel):
    """``spec.training``: optimizer, learning rate, batch, steps and checkpoints."""

    cel_rules = optimizers.RULES
    optimizer: Optimizer = Field(
        Optimizer.SGD, description="Optimizer wrapped by SyncReplicasOptimizer."
    )
    learning_rate: Annotated[Number, CelBounds()] = Field(
        0.1,
        gt=0,
        description="Learning rate, > 0; with learningRateSchedule, the rate after the "
        "warm-up, before any decay.",
    )
    learning_rate_schedule: LearningRateSchedule | None = Field(
        None,
        description="The learning rate as a function of the global step at which an update "
        "is applied (every gradient of one update has the same rate); absent: learningRate "
        "throughout.",
    )
    momentum: Annotated[Number, CelBounds()] | None = Field(
        None,
        ge=0,
        le=1,
        description="momentum and rmsprop: the momentum, in [0, 1] (default 0.9 for "
        "momentum, 0 for rmsprop).",
    )
    nesterov: Bool | None = Field(
        None, description="momentum: Nesterov's momentum (default false)."
    )
    beta1: Annotated[Number, CelBounds()] | None = Field(
        None, ge=0, le=1, description="adam: the first moment's decay, in [0, 1] (default 0.9)."
    )
    beta2: Annotated[Number, CelBounds()] | None = Field(
        None,
        ge=0,
        le=1,
        description="adam: the second moment's decay, in [0, 1] (default 0.999).",
    )
    epsilon: Annotated[Number, CelBounds()] | None = Field(
        None,
        gt=0,
        description="adam and rmsprop: the constant added for numerical stability, > 0 "
        "(default 1e-8 for adam, 1e-10 for rmsprop).",
    )
    clip_gradient_norm: Annotated[Number, CelBounds()] | None = Field(
        None,
        gt=0,
        description="Clip each replica's gradient to this global norm (over all its "
        "variables) before it is pushed, so one replica's outlier batch cannot dominate an "
        "update; absent: no clipping.",
    )
    warm_start: WarmStart | None = Field(
        None,
        description="Initialise the model's variables (all, or those a pattern names) from "
        "another run's checkpoint when the job starts for the first time (fine-tuning); "
        "its own checkpoints take over from then on.",
    )
    export: Export | None = Field(
        None,
        description="The SavedModels the chief exports (a model with a serving signature: "
        "at the end, under checkpointDir/export) and keeps; best adds one at each "
        "evaluation that beats the best so far, under export/best.",
    )
    batch_size: Int32 = Field(32, ge=1, description="Examples per replica per step.")
    max_steps: Int64 = Field(
        1000, ge=1, description="Global steps to train; the chief exits 0 when reached."
    )
    checkpoint_dir: CheckpointDir = "/var/lib/syncreplicas/checkpoints"
    checkpoint_every_steps: Int64 = Field(
        100, ge=1, description="Global steps between checkpoints."
    )
    snapshot_every_steps: Int64 = Field(
        10,
        ge=0,
        description="Global steps between the chief's in-memory snapshots of the variables; "
        "a parameter server that comes back empty is restored from the freshest one when it "
        "is newer than the last checkpoint. 0 = no snapshots (a lost parameter server rolls "
        "back to the checkpoint).",
    )
    log_every_steps: Int64 = Field(100, ge=1, description="Global steps between log lines.")
    summary_every_steps: Int64 | None = Field(
        None,
        ge=0,
        description="Global steps between the chief's TensorBoard summaries in checkpointDir "
        "(the loss, the learning rate, global steps/s, the chief's stale gradients and the "
        "model's own tf.compat.v1.summary ops; every evaluation's metrics under eval/); "
        "absent: logEverySteps; 0 = none.",
    )
    eval_every_steps: Int64 = Field(
        0,
        ge=0,
        description="Global steps between evaluations on the chief; 0 = only at the end.",
    )
    seed: Int64 = Field(
        0, ge=0, description="Random seed of the model and the input pipeline."
    )
    startup_timeout_seconds: Int32 = Field(
        300,
        ge=1,
        description="Bounded wait for peers at start before exiting UNREACHABLE (69).",
    )
    chief_lost_timeout_seconds: Int32 = Field(
        120,
        ge=1,
        description="A worker that cannot reach the chief's sync state this long exits "
        "RETRY (75).",
    )
    pack_variables: Bool = Field(
        True,
        description="Hold the trainable variables of each PS in one flat variable per dtype, "
        "so a step moves one tensor per PS each way instead of one per variable; checkpoints "
        "keep the model's own names. false keeps one PS variable per model variable.",
    )
    pack_min_bytes_per_ps: Int64 = Field(
        256 * 1024,
        ge=0,
        alias="packMinBytesPerPS",
        description="With packVariables, spread the packed variables over only as many "
        "parameter servers as give each at least this many bytes (like TensorFlow "
        "partitioners' min_slice_size); a smaller model stays on PS 0, where spreading would "
        "only add one more round trip per step. 0 spreads over every PS.",
    )


class MetricsSpec(ApiModel):
    """``spec.metrics``: the runtime's HTTP endpoint."""

    cel_rules = (port_is_not(resource.TF_PORT, "metrics", "the gRPC port"),)
    port: Int32 = Field(
        9090,
        ge=0,
        le=resource.MAX_PORT,
        description="Metrics port (container port 'metrics'); 0 disables the endpoint and "
        "with it the readiness probe.",
    )


# --- run policy --------------------------------------------------------------------------


def _gang_fields(policy: SchedulingPolicy) -> list[tuple[str, str]]:
    problems = []
    if policy.schedule_timeout_seconds is not None and (
        policy.gang_scheduler != GangScheduler.COSCHEDULING
    ):
        problems.append(
            (
                "scheduleTimeoutSeconds",
                "applies to Coscheduling only (Volcano's PodGroup has no timeout)",
            )
        )
    if policy.queue is not None and policy.gang_scheduler != GangScheduler.VOLCANO:
        problems.append(("queue", "applies to Volcano only"))
    return problems


class SchedulingPolicy(ApiModel):
    """``spec.runPolicy.schedulingPolicy``: gang scheduling through a PodGroup."""

    cel_rules = (
        Rule(
            "!has(self.scheduleTimeoutSeconds) || self.gangScheduler == 'Coscheduling'",
            "runPolicy.schedulingPolicy.scheduleTimeoutSeconds applies to Coscheduling only",
            lambda p: [x for x in _gang_fields(p) if x[0] == "scheduleTimeoutSeconds"],
        ),
        Rule(
            "!has(self.queue) || self.gangScheduler == 'Volcano'",
            "runPolicy.schedulingPolicy.queue applies to Volcano only",
            lambda p: [x for x in _gang_fields(p) if x[0] == "queue"],
        ),
    )
    gang_scheduler: GangScheduler = Field(
        description="Coscheduling: scheduler-plugins (scheduling.x-k8s.io/v1alpha1 PodGroup). "
        "Volcano: scheduling.volcano.sh/v1beta1 PodGroup."
    )
    # Filled in from gang_scheduler when absent, once validated.
    scheduler_name: Str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description="The pods' schedulerName. Default scheduler-plugins-scheduler "
        "(Coscheduling) or volcano (Volcano).",
    )
    schedule_timeout_seconds: Int32 | None = Field(
        None,
        ge=1,
        description="Coscheduling only: seconds the scheduler waits for the whole gang to fit "
        "before it gives up on this attempt (the plugin's default when unset).",
    )
    queue: Str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description="Volcano only, the queue the PodGroup is admitted through.",
    )

    @model_validator(mode="after")
    def _default_scheduler_name(self) -> SchedulingPolicy:
        if self.scheduler_name is None:
            return self.model_copy(update={"scheduler_name": self.gang_scheduler.scheduler_name})
        return self


class StragglerPolicy(ApiModel):
    """Evict (delete the pod of) a worker whose gradients are dropped as stale too often."""

    evict_after_seconds: Annotated[Int32, CelBounds()] = Field(
        ge=1, description="Seconds a worker stays a straggler before its pod is deleted."
    )
    min_drop_fraction: Annotated[Number, CelBounds()] = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of a worker's pushed gradients dropped as stale above which it is "
        "a straggler, in (0, 1].",
    )


class RunPolicy(ApiModel):
    """``spec.runPolicy``: what happens when replicas fail, and after the job ends."""

    restart_policy: RestartPolicy = Field(
        RestartPolicy.ON_FAILURE,
        description="OnFailure: restart failed replicas. Never: any failed replica fails the "
        "job. ExitCode: fail the job on the runtime's non-retryable codes (64, 65, 69), "
        "restart on any other non-zero code.",
    )
    backoff_limit: Int32 = Field(
        6, ge=0, description="Replica restarts allowed before the job fails."
    )
    warm_restarts: Bool = Field(
        True,
        description="true: a replica whose restartPolicy restarts it is started again inside "
        "its container, forked from a process that keeps TensorFlow imported (no container "
        "restart, so no crash-loop back-off; counted in replicaStatuses and against "
        "backoffLimit). Not for the chief under chiefRestartPolicy RestartJob or Fail. false: "
        "the container ends and the kubelet or the operator restarts it.",
    )
    spares: Int32 = Field(
        0,
        ge=0,
        le=resource.MAX_SPARES,
        description="Warm spare pods kept beside the replicas: built like a worker, "
        "TensorFlow imported, idle. When a replica's pod is lost (deleted, evicted, its node "
        "lost) a ready spare takes its identity (its Service, so its address; a new "
        "incarnation) and trains at once, and a new spare is started behind it. Only for "
        "roles whose pod would be built like a worker's (same template and restart policy); "
        "needs metrics.port. 0: none.",
    )
    active_deadline_seconds: Int64 | None = Field(
        None, ge=1, description="Seconds from start after which a running job fails."
    )
    ttl_seconds_after_finished: Int32 | None = Field(
        None,
        ge=0,
        description="Seconds after Succeeded/Failed after which the job is deleted.",
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING,
        description="Pods deleted when the job finishes. Running: those still running "
        "(parameter servers never outlive the job). All: every pod. None: none.",
    )
    suspend: Bool = Field(
        False, description="true deletes the pods and keeps the job; false resumes it."
    )
    scheduling_policy: SchedulingPolicy | None = Field(
        None,
        description="Gang scheduling: the operator creates a PodGroup owned by the job whose "
        "minMember is every PS, the chief and the workers needed for "
        "min(replicasToAggregate, 1 + workers) replicas to train (with elasticPolicy, "
        "1 + minWorkers: the job trains with that many, and the group stays the same through "
        "every resize), and gives every pod the "
        "scheduler's name and the group's label (Coscheduling) or annotation (Volcano). The "
        "job fails if the API server does not serve the gang scheduler's PodGroup API.",
    )
    # None: stragglers are reported (StragglerDetected), never evicted.
    straggler_policy: StragglerPolicy | None = Field(
        None,
        description="Opt-in eviction of stragglers: a worker whose share of gradients dropped "
        "as stale stays above minDropFraction for evictAfterSeconds has its pod deleted (the "
        "scheduler may place the new one elsewhere). It is cleared only below half of "
        "minDropFraction; one eviction at a time, never a parameter server or the chief. "
        "Without it stragglers are only reported (the StragglerDetected condition).",
    )


# --- the spec ----------------------------------------------------------------------------


ParameterServers = Annotated[
    Int32,
    CelBounds(),
    Immutable(),
    Field(
        ge=1,
        le=resource.MAX_PARAMETER_SERVERS,
        description="Parameter servers holding the variables. Immutable.",
    ),
]


def _min_within_max(policy: ElasticPolicy) -> list[tuple[str, str]]:
    if policy.min_workers <= policy.max_workers:
        return []
    high, low = policy.max_workers, policy.min_workers
    return [("minWorkers", f"must be <= maxWorkers ({high}), got {low}")]


class ElasticPolicy(ApiModel):
    """``spec.elasticPolicy``: the bounds within which ``workers`` may change while the job
    trains (``kubectl scale``, an HPA)."""

    cel_rules = (
        Rule(
            "self.minWorkers <= self.maxWorkers",
            "spec.elasticPolicy.minWorkers must be <= maxWorkers",
            _min_within_max,
            field_path=".minWorkers",
        ),
    )
    min_workers: Annotated[Int32, CelBounds(), Immutable()] = Field(
        0,
        ge=0,
        le=resource.MAX_WORKERS,
        description="Fewest workers the job may be scaled to (<= maxWorkers). The job must "
        "be able to train with this many: minReplicasToAggregate (default "
        "replicasToAggregate) <= 1 + minWorkers, and a gang scheduler's PodGroup counts "
        "these workers only. Immutable.",
    )
    max_workers: Annotated[Int32, CelBounds(), Immutable()] = Field(
        ge=1,
        le=resource.MAX_WORKERS,
        description="Most workers the job may be scaled to: every parameter server is told "
        "this many worker slots when the job starts. Immutable.",
    )


class ScalableShape(Protocol):
    """What the rules on ``workers`` read: the API's spec and the operator's parsed one."""

    @property
    def workers(self) -> int: ...

    @property
    def elastic_policy(self) -> ElasticPolicy | None: ...


def _workers_within_policy(shape: ScalableShape) -> list[tuple[str, str]]:
    policy, workers = shape.elastic_policy, shape.workers
    if policy is None or policy.min_workers <= workers <= policy.max_workers:
        return []
    if workers < policy.min_workers:
        return [("workers", f"must be >= elasticPolicy.minWorkers ({policy.min_workers}), "
                            f"got {workers}")]  # fmt: skip
    return [("workers", f"must be <= elasticPolicy.maxWorkers ({policy.max_workers}), "
                        f"got {workers}")]  # fmt: skip


def _min_workers_can_update(shape: ClusterShape) -> list[tuple[str, str]]:
    policy = shape.elastic_policy
    fewest = shape.min_replicas_to_aggregate
    value = shape.replicas_to_aggregate if fewest is None else fewest
    if policy is None or value <= 1 + policy.min_workers:
        return []
    said = "" if fewest is not None else " (the default, replicasToAggregate)"
    return [
        (
            "minReplicasToAggregate",
            f"must be <= 1 + elasticPolicy.minWorkers ({1 + policy.min_workers}): the chief "
            f"and minWorkers workers must be able to make an update; got {value}{said}",
        )
    ]


def _policy_kept(old: ScalableShape, new: ScalableShape) -> list[tuple[str, str]]:
    if (old.elastic_policy is None) == (new.elastic_policy is None):
        return []
    return [("elasticPolicy", "cannot be added or removed once the job exists")]


def _workers_fixed(old: ScalableShape, new: ScalableShape) -> list[tuple[str, str]]:
    if new.elastic_policy is not None or old.workers == new.workers:
        return []
    return [("workers", "can change only with spec.elasticPolicy (set it when the job is "
                        "created)")]  # fmt: skip


class ClusterShape(ApiModel):
    """What every replica is told and cannot change once the job runs: the TensorFlow
    cluster's shape and how it aggregates (shared by the spec and the runtime's contract)."""

    cel_rules: ClassVar[tuple[Rule[Any], ...]] = (
        Rule(
            "!has(self.minReplicasToAggregate) || "
            "self.minReplicasToAggregate <= self.replicasToAggregate",
            "minReplicasToAggregate must be <= replicasToAggregate",
            lambda s: (
                [
                    (
                        "minReplicasToAggregate",
                        f"must be <= replicasToAggregate ({s.replicas_to_aggregate}), "
                        f"got {s.min_replicas_to_aggregate}",
                    )
                ]
                if s.min_replicas_to_aggregate is not None
                and s.min_replicas_to_aggregate > s.replicas_to_aggregate
                else []
            ),
        ),
        Rule(
            "!has(self.elasticPolicy) || (self.elasticPolicy.minWorkers <= self.workers && "
            "self.workers <= self.elasticPolicy.maxWorkers)",
            "spec.workers must be within spec.elasticPolicy's minWorkers..maxWorkers",
            _workers_within_policy,
            field_path=".workers",
            message_expression="'spec.workers must be in [%d, %d] (spec.elasticPolicy."
            "minWorkers..maxWorkers), got %d'.format([self.elasticPolicy.minWorkers, "
            "self.elasticPolicy.maxWorkers, self.workers])",
        ),
        Rule(
            "!has(self.elasticPolicy) || (has(self.minReplicasToAggregate) ? "
            "self.minReplicasToAggregate : self.replicasToAggregate) <= "
            "1 + self.elasticPolicy.minWorkers",
            "spec.minReplicasToAggregate (default replicasToAggregate) must be <= 1 + "
            "spec.elasticPolicy.minWorkers: the chief and minWorkers workers must be able to "
            "make an update",
            _min_workers_can_update,
            field_path=".minReplicasToAggregate",
        ),
    )
    replicas_to_aggregate: Annotated[Int32, CelBounds(), Immutable()] = Field(
        ge=1,
        description="R: gradients aggregated into each update. Replicas are the chief plus "
        "the workers; 1 + workers - R of them are backups. R larger than the replica count "
        "is legal: replicas then compute several batches per update. Immutable.",
    )
    # None: replicas_to_aggregate.
    min_replicas_to_aggregate: Annotated[Int32, CelBounds(), Immutable()] | None = Field(
        None,
        ge=1,
        description="Fewest gradients an update may aggregate while replicas are lost (1..R; "
        "default R: every update waits for R gradients). Below R, each update aggregates the "
        "gradients of the live replicas, never fewer than this, and R comes back when they "
        "return; a smaller R averages fewer batches, so the update is noisier and the "
        "examples per step fewer. Immutable.",
    )
    parameter_servers: ParameterServers = 1
    # Immutable without elastic_policy: a transition rule on the spec (JobSpec), not a marker.
    workers: Annotated[Int32, CelBounds()] = Field(
        ge=0,
        le=resource.MAX_WORKERS,
        description="W: non-chief workers. Replicas = 1 (chief) + W. Immutable, unless "
        "elasticPolicy is set: then it may change within minWorkers..maxWorkers while the job "
        "trains (kubectl scale, an HPA: the scale subresource's replicas).",
    )
    elastic_policy: ElasticPolicy | None = Field(
        None,
        description="Lets workers change while the job trains, within these bounds; set it "
        "when the job is created (it cannot be added or removed later; without it, workers "
        "is immutable). The operator creates the new workers' Services and pods, which join "
        "the running job, and deletes the pods of workers beyond workers (highest index "
        "first), which leave it at SIGTERM; no step is lost and the updates go on.",
    )
    initial_tokens: Annotated[Int32, Immutable()] = Field(
        0,
        ge=0,
        description="Tokens enqueued at start on top of the normal ones (lets replicas run "
        "ahead by that many steps). Immutable.",
    )
    chief_restart_policy: ChiefRestartPolicy = Field(
        ChiefRestartPolicy.RESET_SYNC_STATE,
        description="What a chief restart triggers. ResetSyncState: the chief restarts alone "
        "and rejoins the running sync state (the sync loop runs on PS 0; a new one opens only "
        "after a PS loss). RestartJob: parameter servers and workers restart too and everyone "
        "restores from the checkpoint. Fail: the job fails.",
    )


def _role_sidecars_rule(role: str) -> Rule[JobSpec]:
    """A role template's sidecars need an image: a rule on the spec, not on the role,
    because a container named like one of spec.template's is merged with it, and a role's
    only container is the runtime's only when spec.template has none."""
    items = f"self.{role}.template.spec.containers"
    base = "self.template.spec.containers"
    runtime = (
        f"{RUNTIME_OR_IMAGE} || (has(self.template) && has(self.template.spec) && "
        f"has({base}) && size({base}) > 0 ? {base}.exists(b, b.name == c.name) : "
        f"size({items}) == 1)"
    )
    guard = (
        f"!has(self.{role}) || !has(self.{role}.template) || !has(self.{role}.template.spec) "
        f"|| !has({items})"
    )
    where = f"{role}.template.spec.containers"
    not_runtime = "not named syncreplicas, tensorflow or like a container of spec.template"

    def check(spec: JobSpec) -> list[tuple[str, str]]:
        role_spec: RoleSpec | None = getattr(spec, role)
        if role_spec is None or role_spec.template is None or role_spec.template.spec is None:
            return []
        items = role_spec.template.spec.containers or []
        template = spec.template
        base = template.spec.containers if template and template.spec else None
        return [
            (f"{where}[{i}].image",
             f"is required: container {items[i].name!r} is a sidecar ({not_runtime})")
            for i in containers.sidecars_without_image(as_dicts(items), as_dicts(base or []))
        ]  # fmt: skip

    return Rule(
        f"{guard} || {items}.all(c, {runtime})",
        f"spec.{where}: every sidecar needs an image (a container {not_runtime})",
        check,
        field_path=f".{where}",
        message_expression=f"'spec.{where}[%d].image is required: the container is a sidecar "
        f"({not_runtime}, nor the only container of both templates)'.format([{items}.map(c, "
        f"{runtime}).indexOf(false)])",
    )


def _spares_need_metrics(spec: JobSpec) -> list[tuple[str, str]]:
    if spec.run_policy.spares and not spec.metrics.port:
        return [("runPolicy.spares", "needs metrics.port: a spare is handed its replica "
                                     "through it (metrics.port is 0)")]  # fmt: skip
    return []


def _tensorboard_port_free(spec: JobSpec) -> list[tuple[str, str]]:
    board = spec.tensorboard
    if board is not None and board.port == spec.metrics.port:
        return [("tensorboard.port", f"must differ from metrics.port ({board.port})")]
    return []


def _tensorboard_needs_checkpoints(spec: JobSpec) -> list[tuple[str, str]]:
    if spec.tensorboard is not None and not spec.training.checkpoint_dir:
        return [("tensorboard", "needs training.checkpointDir: the chief writes its "
                                "summaries there (checkpointDir is \"\")")]  # fmt: skip
    return []


def _tensorboard_kept(old: JobSpec, new: JobSpec) -> list[tuple[str, str]]:
    if (old.tensorboard is None) == (new.tensorboard is None):
        return []
    return [("tensorboard", "cannot be added or removed once the job exists (it runs in "
                            "the chief's pod)")]  # fmt: skip


def _spares_not_added(old: JobSpec, new: JobSpec) -> list[tuple[str, str]]:
    if new.run_policy.spares == 0 or old.run_policy.spares > 0:
        return []
    return [("runPolicy.spares", "cannot be added to a job created without spares (its "
                                 "replicas are addressed through the job's Service)")]  # fmt: skip


class JobSpec(ClusterShape):
    """``spec`` of a SyncReplicasJob: the desired training job."""

    cel_rules = (
        *ClusterShape.cel_rules,
        *(_role_sidecars_rule(role) for role in resource.REPLICA_TYPES),
        Rule(
            "!has(self.runPolicy) || !has(self.runPolicy.spares) || self.runPolicy.spares == 0 "
            "|| !has(self.metrics) || !has(self.metrics.port) || self.metrics.port != 0",
            "spec.runPolicy.spares needs metrics.port: a spare is handed its replica through "
            "it",
            _spares_need_metrics,
            field_path=".runPolicy.spares",
        ),
        Rule(
            "!has(self.tensorboard) || (has(self.tensorboard.port) ? self.tensorboard.port : "
            f"{TENSORBOARD_PORT}) != (has(self.metrics) && has(self.metrics.port) ? "
            f"self.metrics.port : {MetricsSpec.model_fields['port'].default})",
            "spec.tensorboard.port must differ from metrics.port",
            _tensorboard_port_free,
            field_path=".tensorboard.port",
        ),
        Rule(
            "!has(self.tensorboard) || !has(self.training) || "
            "!has(self.training.checkpointDir) || self.training.checkpointDir != ''",
            "spec.tensorboard needs training.checkpointDir: the chief writes its summaries "
            "there",
            _tensorboard_needs_checkpoints,
            field_path=".tensorboard",
        ),
    )
    transition_rules = (
        TransitionRule(
            "has(self.elasticPolicy) == has(oldSelf.elasticPolicy)",
            "spec.elasticPolicy cannot be added or removed once the job exists",
            _policy_kept,
            field_path=".elasticPolicy",
        ),
        TransitionRule(
            "has(self.elasticPolicy) || self.workers == oldSelf.workers",
            "spec.workers can change only with spec.elasticPolicy (set it when the job is "
            "created)",
            _workers_fixed,
            field_path=".workers",
        ),
        TransitionRule(
            "!has(self.runPolicy) || !has(self.runPolicy.spares) || self.runPolicy.spares == 0 "
            "|| (has(oldSelf.runPolicy) && has(oldSelf.runPolicy.spares) "
            "&& oldSelf.runPolicy.spares > 0)",
            "spec.runPolicy.spares cannot be added to a job created without spares (its "
            "replicas are addressed through the job's Service)",
            _spares_not_added,
            field_path=".runPolicy.spares",
        ),
        TransitionRule(
            "has(self.tensorboard) == has(oldSelf.tensorboard)",
            "spec.tensorboard cannot be added or removed once the job exists (it runs in the "
            "chief's pod)",
            _tensorboard_kept,
            field_path=".tensorboard",
        ),
    )
    model: ModelSpec = Field(description="The model every replica builds.")
    managed_by: Annotated[Str, MANAGED_BY, Immutable()] | None = Field(
        None,
        max_length=MAX_MANAGED_BY_LENGTH,
        description="The controller that runs the job: unset or "
        f"{resource.OPERATOR_MANAGER} for this operator; {resource.MULTIKUEUE_MANAGER} "
        "for Kueue's MultiKueue, which runs it on a worker cluster (the operator here "
        "writes its Workload, nothing else); any other value: another controller's, left "
        "alone. Immutable.",
    )
    training: Annotated[TrainingSpec, Immutable()] = Field(
        default_factory=TrainingSpec,
        description="Optimizer, batch, steps and checkpoints. Immutable.",
    )
    metrics: Annotated[MetricsSpec, Immutable()] = Field(
        default_factory=MetricsSpec,
        description="The runtime's HTTP endpoint (/metrics, /healthz, /readyz). Immutable.",
    )
    tensorboard: TensorBoard | None = Field(
        None,
        description="TensorBoard in the chief's pod on the chief's summaries (a native "
        "sidecar reading checkpointDir read-only), behind the Service <job>-tensorboard; "
        "absent: none. Cannot be added or removed once the job exists.",
    )
    # None: the operator's default runtime image (unless a template's container names one).
    image: Str | None = Field(
        None,
        min_length=1,
        max_length=MAX_IMAGE_LENGTH,
        description="Image of the runtime's container, unless a template's runtime container "
        "sets one. Default: the operator's configured runtime image.",
    )
    template: PodTemplate | None = Field(
        None,
        description="PodTemplateSpec for every replica. The runtime's container (named "
        "syncreplicas or tensorflow, or the only one; added if absent) gets the command, "
        "ports, environment and probes; secure defaults apply where the template sets nothing. "
        "Other containers are sidecars.",
    )
    ps: RoleSpec | None = Field(None, description="Overrides for parameter server pods.")
    chief: RoleSpec | None = Field(None, description="Overrides for the chief pod.")
    worker: RoleSpec | None = Field(None, description="Overrides for worker pods.")
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy,
        description="What happens when replicas fail, and after the job ends.",
    )
    stall_timeout_seconds: Int32 = Field(
        300,
        ge=0,
        description="Seconds without global step progress, while pods run, before the "
        "Stalled condition is set; 0 disables it.",
    )


def _name_matches(name: str) -> list[tuple[str, str]]:
    if JOB_NAME.matches(name):
        return []
    return [("metadata.name", f"{name!r} does not match {JOB_NAME.pattern} ({JOB_NAME.hint})")]


def _name_fits(name: str) -> list[tuple[str, str]]:
    if len(name) <= resource.MAX_JOB_NAME_LENGTH:
        return []
    limit = resource.MAX_JOB_NAME_LENGTH
    return [("metadata.name", f"must be at most {limit} characters long, got {len(name)}")]


# The root's rules: the schema sees only metadata.name of metadata; ``check`` takes it.
NAME_RULES: Final[tuple[Rule[str], ...]] = (
    Rule(
        f"self.metadata.name.matches('{resource.JOB_NAME_PATTERN}')",
        "metadata.name must consist of lower-case letters, digits and '-', start with a "
        "letter and end with a letter or digit (it prefixes Service names)",
        _name_matches,
    ),
    Rule(
        f"size(self.metadata.name) <= {resource.MAX_JOB_NAME_LENGTH}",
        f"metadata.name must be at most {resource.MAX_JOB_NAME_LENGTH} characters long "
        "(Service names '<job>-worker-<index>' must fit in 63)",
        _name_fits,
    ),
)
