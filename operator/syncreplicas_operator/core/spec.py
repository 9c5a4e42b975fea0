"""The SyncReplicasJob manifest as typed, validated, defaulted values.

``parse_job`` / ``parse_spec`` turn a manifest (a dict, as read from YAML or the API) into
frozen dataclasses with every default filled in, or raise one :class:`SpecError` that lists
every problem with its field path (``spec.training.batchSize``). The checks are the same
as the CRD's OpenAPI schema and ``x-kubernetes-validations`` rules in
``crds/syncreplicasjobs.yaml``, so ``syncreplicas validate``, ``syncreplicas run`` and the
operator reject exactly what the API server would. ``immutable_changes`` mirrors the CRD's
transition rules (``self == oldSelf``).

Pure: no I/O, no Kubernetes client. Free-form parts (``model.args``, pod templates) are
deep-copied so that callers can never mutate the manifest they came from through a spec.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, NamedTuple, TypeVar

from . import naming, podtemplate
from .enums import ChiefRestartPolicy, CleanPodPolicy, GangScheduler, RestartPolicy

# --- allowed values and defaults (the CRD carries the same numbers) -----------------------

OPTIMIZERS: Final = ("sgd", "momentum", "adagrad", "adam", "rmsprop")

DEFAULT_PARAMETER_SERVERS: Final = 1
DEFAULT_INITIAL_TOKENS: Final = 0
DEFAULT_OPTIMIZER: Final = "sgd"
DEFAULT_LEARNING_RATE: Final = 0.1
DEFAULT_BATCH_SIZE: Final = 32
DEFAULT_MAX_STEPS: Final = 1000
DEFAULT_CHECKPOINT_DIR: Final = "/var/lib/syncreplicas/checkpoints"
DEFAULT_CHECKPOINT_EVERY_STEPS: Final = 100
DEFAULT_SNAPSHOT_EVERY_STEPS: Final = 10
DEFAULT_LOG_EVERY_STEPS: Final = 100
DEFAULT_EVAL_EVERY_STEPS: Final = 0
DEFAULT_SEED: Final = 0
DEFAULT_STARTUP_TIMEOUT_SECONDS: Final = 300
DEFAULT_CHIEF_LOST_TIMEOUT_SECONDS: Final = 120
# A packed model is spread over more PS only when each gets at least this many bytes.
DEFAULT_PACK_MIN_BYTES_PER_PS: Final = 256 * 1024
DEFAULT_BACKOFF_LIMIT: Final = 6
DEFAULT_STALL_TIMEOUT_SECONDS: Final = 300
# The share of a replica's gradients dropped as stale above which it is a straggler.
DEFAULT_MIN_DROP_FRACTION: Final = 0.5

ENTRYPOINT_PATTERN: Final = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
# "" means no checkpoints; anything else must be an absolute path inside the container.
CHECKPOINT_DIR_PATTERN: Final = r"^(/.*)?$"
MAX_PORT: Final = 65535
# Bounded strings keep the CRD's CEL cost estimates small (the API server refuses rules
# whose estimated cost is too high).
MAX_ENTRYPOINT_LENGTH: Final = 253
MAX_PATH_LENGTH: Final = 1024
MAX_IMAGE_LENGTH: Final = 1024
# A scheduler's name and a Volcano queue's name are object names (DNS subdomains).
MAX_NAME_LENGTH: Final = 253
DEFAULT_SCHEDULER_NAMES: Final = {
    GangScheduler.COSCHEDULING: naming.COSCHEDULING_SCHEDULER_NAME,
    GangScheduler.VOLCANO: naming.VOLCANO_SCHEDULER_NAME,
}


class Problem(NamedTuple):
    """One thing wrong with a manifest: where (a dotted field path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(ValueError):
    """A manifest that cannot run; ``problems`` lists every reason, not just the first."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# --- the values ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    entrypoint: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingSpec:
    optimizer: str = DEFAULT_OPTIMIZER
    learning_rate: float = DEFAULT_LEARNING_RATE
    batch_size: int = DEFAULT_BATCH_SIZE
    max_steps: int = DEFAULT_MAX_STEPS
    checkpoint_dir: str = DEFAULT_CHECKPOINT_DIR
    checkpoint_every_steps: int = DEFAULT_CHECKPOINT_EVERY_STEPS
    snapshot_every_steps: int = DEFAULT_SNAPSHOT_EVERY_STEPS
    log_every_steps: int = DEFAULT_LOG_EVERY_STEPS
    eval_every_steps: int = DEFAULT_EVAL_EVERY_STEPS
    seed: int = DEFAULT_SEED
    startup_timeout_seconds: int = DEFAULT_STARTUP_TIMEOUT_SECONDS
    chief_lost_timeout_seconds: int = DEFAULT_CHIEF_LOST_TIMEOUT_SECONDS
    # One flat PS variable per PS and dtype instead of one per model variable.
    pack_variables: bool = True
    # Use only as many PS for the packed variables as give each this many bytes (0: all).
    pack_min_bytes_per_ps: int = DEFAULT_PACK_MIN_BYTES_PER_PS


@dataclass(frozen=True)
class MetricsSpec:
    # 0 disables the runtime's HTTP server (and with it the readiness probe).
    port: int = naming.DEFAULT_METRICS_PORT


@dataclass(frozen=True)
class StragglerPolicy:
    """Evict (delete the pod of) a worker whose gradients are dropped as stale too often."""

    evict_after_seconds: int
    min_drop_fraction: float = DEFAULT_MIN_DROP_FRACTION


@dataclass(frozen=True)
class SchedulingPolicy:
    """``runPolicy.schedulingPolicy``: gang scheduling through a PodGroup."""

    gang_scheduler: GangScheduler
    # The pods' schedulerName (default: the gang scheduler's usual name).
    scheduler_name: str
    # Coscheduling only: how long the scheduler waits for the whole gang.
    schedule_timeout_seconds: int | None = None
    # Volcano only: the queue the PodGroup is admitted through.
    queue: str | None = None


@dataclass(frozen=True)
class RunPolicy:
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING
    suspend: bool = False
    scheduling_policy: SchedulingPolicy | None = None
    # None: stragglers are reported (StragglerDetected), never evicted.
    straggler_policy: StragglerPolicy | None = None


@dataclass(frozen=True)
class JobSpec:
    """``spec`` of a SyncReplicasJob with every default applied."""

    replicas_to_aggregate: int
    workers: int
    model: ModelSpec
    parameter_servers: int = DEFAULT_PARAMETER_SERVERS
    initial_tokens: int = DEFAULT_INITIAL_TOKENS
    # Fewest gradients per update while replicas are lost; None: replicas_to_aggregate.
    min_replicas_to_aggregate: int | None = None
    training: TrainingSpec = field(default_factory=TrainingSpec)
    metrics: MetricsSpec = field(default_factory=MetricsSpec)
    # None: the operator's default runtime image (unless a template's container names one).
    image: str | None = None
    # PodTemplateSpec for every role, then optional per-role overrides merged on top.
    template: dict[str, Any] = field(default_factory=dict)
    role_templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    chief_restart_policy: ChiefRestartPolicy = ChiefRestartPolicy.RESET_SYNC_STATE
    # 0 disables the Stalled condition.
    stall_timeout_seconds: int = DEFAULT_STALL_TIMEOUT_SECONDS

    @property
    def total_replicas(self) -> int:
        """Replicas that push gradients: the chief plus the workers."""
        return 1 + self.workers

    @property
    def min_to_aggregate(self) -> int:
        """minReplicasToAggregate with its default (R) applied."""
        if self.min_replicas_to_aggregate is None:
            return self.replicas_to_aggregate
        return self.min_replicas_to_aggregate

    @property
    def backup_replicas(self) -> int:
        """Replicas beyond R: losing this many still lets every step complete."""
        return max(0, self.total_replicas - self.replicas_to_aggregate)

    def replica_count(self, replica_type: str) -> int:
        """How many replicas of ``replica_type`` the job has."""
        counts = {
            naming.PS: self.parameter_servers,
            naming.CHIEF: 1,
            naming.WORKER: self.workers,
        }
        if replica_type not in counts:
            raise ValueError(f"unknown replica type {replica_type!r}")
        return counts[replica_type]

    def replica_counts(self) -> dict[str, int]:
        """{type: count} in creation order (PS, chief, workers); types with 0 included."""
        return {t: self.replica_count(t) for t in naming.REPLICA_TYPES}


@dataclass(frozen=True)
class Job:
    """A whole SyncReplicasJob: identity from ``metadata`` plus the parsed spec."""

    name: str
    namespace: str
    spec: JobSpec
    uid: str | None = None
    generation: int | None = None


# --- parsing ------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_int(value):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _matches(pattern: str, value: str) -> bool:
    """Match as the API server's Go regexp does: ASCII classes, ``$`` only at the very end
    (Python's ``$`` also matches before a trailing newline)."""
    anchored = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
    return re.search(anchored, value, re.ASCII) is not None


_Choice = TypeVar("_Choice", bound=StrEnum)


class _Checker:
    """Collects problems while reading fields; every reader returns a usable fallback."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def mapping(
        self, parent: Mapping[str, Any], key: str, path: str, *, required: bool = False
    ) -> Mapping[str, Any] | None:
        if key not in parent or parent[key] is None:
            if required:
                self.add(path, "is required")
            return None
        value = parent[key]
        if not isinstance(value, Mapping):
            self.add(path, f"must be an object, got {_type_name(value)}")
            return None
        return value

    def unknown(self, value: Mapping[str, Any], allowed: Iterable[str], path: str) -> None:
        known = set(allowed)
        for key in value:
            if key not in known:
                where = f"{path}.{key}" if path else str(key)
                self.add(where, "unknown field (check the spelling)")

    def integer(
        self,
        parent: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = parent.get(key)
        if value is None:
            if default is None:
                return None
            return default
        if not _is_int(value):
            self.add(path, f"must be an integer, got {_type_name(value)}")
            return default
        if minimum is not None and value < minimum:
            self.add(path, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.add(path, f"must be <= {maximum}, got {value}")
        return int(value)

    def required_integer(
        self,
        parent: Mapping[str, Any],
        key: str,
        path: str,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        if parent.get(key) is None:
            self.add(path, "is required")
            return minimum if minimum is not None else 0
        value = self.integer(parent, key, path, minimum=minimum, maximum=maximum)
        return value if value is not None else (minimum if minimum is not None else 0)

    def positive_number(
        self, parent: Mapping[str, Any], key: str, path: str, *, default: float
    ) -> float:
        value = parent.get(key)
        if value is None:
            return default
        if not _is_number(value):
            self.add(path, f"must be a number, got {_type_name(value)}")
            return default
        if value <= 0:
            self.add(path, f"must be > 0, got {value}")
        return float(value)

    def string(
        self,
        parent: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: str | None = None,
        required: bool = False,
        enum: tuple[str, ...] | None = None,
        pattern: str | None = None,
        pattern_hint: str = "",
        min_length: int | None = None,
        max_length: int | None = None,
    ) -> str | None:
        value = parent.get(key)
        if value is None:
            if required:
                self.add(path, "is required")
            return default
        if not isinstance(value, str):
            self.add(path, f"must be a string, got {_type_name(value)}")
            return default
        if enum is not None and value not in enum:
            self.add(path, f"must be one of {', '.join(enum)}; got {value!r}")
            return default
        if min_length is not None and len(value) < min_length:
            self.add(path, f"must be at least {min_length} character(s) long")
        if max_length is not None and len(value) > max_length:
            self.add(path, f"must be at most {max_length} characters long, got {len(value)}")
        if pattern is not None and not _matches(pattern, value):
            hint = f" ({pattern_hint})" if pattern_hint else ""
            self.add(path, f"{value!r} does not match {pattern}{hint}")
        return value

    def choice(self, parent: Mapping[str, Any], key: str, path: str, default: _Choice) -> _Choice:
        """A field whose values are the members of ``default``'s StrEnum."""
        members = tuple(type(default))
        value = self.string(parent, key, path, default=default, enum=members)
        return type(default)(value) if value is not None else default

    def boolean(self, parent: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
        value = parent.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.add(path, f"must be a boolean, got {_type_name(value)}")
            return default
        return value


_SPEC_FIELDS: Final = (
    "replicasToAggregate",
    "minReplicasToAggregate",
    "workers",
    "parameterServers",
    "initialTokens",
    "model",
    "training",
    "metrics",
    "image",
    "template",
    "ps",
    "chief",
    "worker",
    "runPolicy",
    "chiefRestartPolicy",
    "stallTimeoutSeconds",
)
_MODEL_FIELDS: Final = ("entrypoint", "args")
_TRAINING_FIELDS: Final = (
    "optimizer",
    "learningRate",
    "batchSize",
    "maxSteps",
    "checkpointDir",
    "checkpointEverySteps",
    "snapshotEverySteps",
    "logEverySteps",
    "evalEverySteps",
    "seed",
    "startupTimeoutSeconds",
    "chiefLostTimeoutSeconds",
    "packVariables",
    "packMinBytesPerPS",
)
_METRICS_FIELDS: Final = ("port",)
_RUN_POLICY_FIELDS: Final = (
    "restartPolicy",
    "backoffLimit",
    "activeDeadlineSeconds",
    "ttlSecondsAfterFinished",
    "cleanPodPolicy",
    "suspend",
    "schedulingPolicy",
    "stragglerPolicy",
)
_SCHEDULING_POLICY_FIELDS: Final = (
    "gangScheduler",
    "schedulerName",
    "scheduleTimeoutSeconds",
    "queue",
)
_STRAGGLER_POLICY_FIELDS: Final = ("evictAfterSeconds", "minDropFraction")
_ROLE_FIELDS: Final = ("template",)


def _model(c: _Checker, spec: Mapping[str, Any], path: str) -> ModelSpec:
    raw = c.mapping(spec, "model", path, required=True)
    if raw is None:
        return ModelSpec(entrypoint="")
    c.unknown(raw, _MODEL_FIELDS, path)
    entrypoint = c.string(
        raw,
        "entrypoint",
        f"{path}.entrypoint",
        required=True,
        pattern=ENTRYPOINT_PATTERN,
        pattern_hint="expected package.module:function",
        max_length=MAX_ENTRYPOINT_LENGTH,
    )
    args = c.mapping(raw, "args", f"{path}.args")
    return ModelSpec(entrypoint=entrypoint or "", args=copy.deepcopy(dict(args or {})))


def _training(c: _Checker, spec: Mapping[str, Any], path: str) -> TrainingSpec:
    raw = c.mapping(spec, "training", path)
    if raw is None:
        return TrainingSpec()
    c.unknown(raw, _TRAINING_FIELDS, path)

    def count(key: str, default: int, minimum: int) -> int:
        value = c.integer(raw, key, f"{path}.{key}", default=default, minimum=minimum)
        return default if value is None else value

    return TrainingSpec(
        optimizer=c.string(
            raw, "optimizer", f"{path}.optimizer", default=DEFAULT_OPTIMIZER, enum=OPTIMIZERS
        )
        or DEFAULT_OPTIMIZER,
        learning_rate=c.positive_number(
            raw, "learningRate", f"{path}.learningRate", default=DEFAULT_LEARNING_RATE
        ),
        batch_size=count("batchSize", DEFAULT_BATCH_SIZE, 1),
        max_steps=count("maxSteps", DEFAULT_MAX_STEPS, 1),
        checkpoint_dir=c.string(
            raw,
            "checkpointDir",
            f"{path}.checkpointDir",
            default=DEFAULT_CHECKPOINT_DIR,
            pattern=CHECKPOINT_DIR_PATTERN,
            pattern_hint='an absolute path, or "" for no checkpoints',
            max_length=MAX_PATH_LENGTH,
        )
        or "",
        checkpoint_every_steps=count("checkpointEverySteps", DEFAULT_CHECKPOINT_EVERY_STEPS, 1),
        snapshot_every_steps=count("snapshotEverySteps", DEFAULT_SNAPSHOT_EVERY_STEPS, 0),
        log_every_steps=count("logEverySteps", DEFAULT_LOG_EVERY_STEPS, 1),
        eval_every_steps=count("evalEverySteps", DEFAULT_EVAL_EVERY_STEPS, 0),
        seed=count("seed", DEFAULT_SEED, 0),
        startup_timeout_seconds=count("startupTimeoutSeconds", DEFAULT_STARTUP_TIMEOUT_SECONDS, 1),
        chief_lost_timeout_seconds=count(
            "chiefLostTimeoutSeconds", DEFAULT_CHIEF_LOST_TIMEOUT_SECONDS, 1
        ),
        pack_variables=c.boolean(raw, "packVariables", f"{path}.packVariables", default=True),
        pack_min_bytes_per_ps=count("packMinBytesPerPS", DEFAULT_PACK_MIN_BYTES_PER_PS, 0),
    )


def _metrics(c: _Checker, spec: Mapping[str, Any], path: str) -> MetricsSpec:
    raw = c.mapping(spec, "metrics", path)
    if raw is None:
        return MetricsSpec()
    c.unknown(raw, _METRICS_FIELDS, path)
    port = c.integer(
        raw,
        "port",
        f"{path}.port",
        default=naming.DEFAULT_METRICS_PORT,
        minimum=0,
        maximum=MAX_PORT,
    )
    if port == naming.TF_PORT:
        c.add(f"{path}.port", f"must differ from the gRPC port {naming.TF_PORT}")
    return MetricsSpec(port=naming.DEFAULT_METRICS_PORT if port is None else port)


def _run_policy(c: _Checker, spec: Mapping[str, Any], path: str) -> RunPolicy:
    raw = c.mapping(spec, "runPolicy", path)
    if raw is None:
        return RunPolicy()
    c.unknown(raw, _RUN_POLICY_FIELDS, path)
    backoff = c.integer(
        raw, "backoffLimit", f"{path}.backoffLimit", default=DEFAULT_BACKOFF_LIMIT, minimum=0
    )
    return RunPolicy(
        restart_policy=c.choice(
            raw, "restartPolicy", f"{path}.restartPolicy", RestartPolicy.ON_FAILURE
        ),
        backoff_limit=DEFAULT_BACKOFF_LIMIT if backoff is None else backoff,
        active_deadline_seconds=c.integer(
            raw, "activeDeadlineSeconds", f"{path}.activeDeadlineSeconds", minimum=1
        ),
        ttl_seconds_after_finished=c.integer(
            raw, "ttlSecondsAfterFinished", f"{path}.ttlSecondsAfterFinished", minimum=0
        ),
        clean_pod_policy=c.choice(
            raw, "cleanPodPolicy", f"{path}.cleanPodPolicy", CleanPodPolicy.RUNNING
        ),
        suspend=c.boolean(raw, "suspend", f"{path}.suspend", default=False),
        scheduling_policy=_scheduling_policy(c, raw, f"{path}.schedulingPolicy"),
        straggler_policy=_straggler_policy(c, raw, f"{path}.stragglerPolicy"),
    )


def _scheduling_policy(
    c: _Checker, run_policy: Mapping[str, Any], path: str
) -> SchedulingPolicy | None:
    raw = c.mapping(run_policy, "schedulingPolicy", path)
    if raw is None:
        return None
    c.unknown(raw, _SCHEDULING_POLICY_FIELDS, path)
    name = c.string(raw, "gangScheduler", f"{path}.gangScheduler", required=True,
                    enum=tuple(GangScheduler))  # fmt: skip
    gang = GangScheduler(name) if name is not None else GangScheduler.COSCHEDULING
    timeout = c.integer(
        raw, "scheduleTimeoutSeconds", f"{path}.scheduleTimeoutSeconds", minimum=1
    )
    if timeout is not None and gang != GangScheduler.COSCHEDULING:
        c.add(
            f"{path}.scheduleTimeoutSeconds",
            "applies to Coscheduling only (Volcano's PodGroup has no timeout)",
        )
    queue = c.string(
        raw, "queue", f"{path}.queue", min_length=1, max_length=MAX_NAME_LENGTH
    )
    if queue is not None and gang != GangScheduler.VOLCANO:
        c.add(f"{path}.queue", "applies to Volcano only")
    scheduler_name = c.string(
        raw,
        "schedulerName",
        f"{path}.schedulerName",
        default=DEFAULT_SCHEDULER_NAMES[gang],
        min_length=1,
        max_length=MAX_NAME_LENGTH,
    )
    return SchedulingPolicy(
        gang_scheduler=gang,
        scheduler_name=scheduler_name or DEFAULT_SCHEDULER_NAMES[gang],
        schedule_timeout_seconds=timeout,
        queue=queue,
    )


def _straggler_policy(
    c: _Checker, run_policy: Mapping[str, Any], path: str
) -> StragglerPolicy | None:
    raw = c.mapping(run_policy, "stragglerPolicy", path)
    if raw is None:
        return None
    c.unknown(raw, _STRAGGLER_POLICY_FIELDS, path)
    evict_after = c.required_integer(
        raw, "evictAfterSeconds", f"{path}.evictAfterSeconds", minimum=1
    )
    fraction = c.positive_number(
        raw, "minDropFraction", f"{path}.minDropFraction", default=DEFAULT_MIN_DROP_FRACTION
    )
    if fraction > 1:
        c.add(f"{path}.minDropFraction", f"must be <= 1, got {raw['minDropFraction']}")
    return StragglerPolicy(evict_after_seconds=evict_after, min_drop_fraction=fraction)


def _template(
    c: _Checker,
    parent: Mapping[str, Any],
    path: str,
    base: list[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A PodTemplateSpec; ``base`` is spec.template's containers when it is a role's."""
    raw = c.mapping(parent, "template", path)
    if raw is None:
        return {}
    pod_spec = c.mapping(raw, "spec", f"{path}.spec")
    if pod_spec is not None:
        _containers(c, pod_spec, f"{path}.spec.containers", base)
    return copy.deepcopy(dict(raw))


def _containers(
    c: _Checker, pod_spec: Mapping[str, Any], path: str, base: list[Mapping[str, Any]] | None
) -> None:
    """What the CRD's schema and CEL rules check of a template's containers: a name each,
    and an image for every sidecar (core/podtemplate.py says which containers are)."""
    items = pod_spec.get("containers")
    if items is None:
        return
    if not isinstance(items, list):
        c.add(path, f"must be an array, got {_type_name(items)}")
        return
    if len(items) > podtemplate.MAX_CONTAINERS:
        c.add(path, f"must have at most {podtemplate.MAX_CONTAINERS} items, got {len(items)}")
    well_formed = True
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            c.add(f"{path}[{i}]", f"must be an object, got {_type_name(item)}")
            well_formed = False
            continue
        name = c.string(item, "name", f"{path}[{i}].name", required=True,
                        max_length=podtemplate.MAX_CONTAINER_NAME_LENGTH)  # fmt: skip
        well_formed = well_formed and name is not None
        c.string(item, "image", f"{path}[{i}].image", min_length=1, max_length=MAX_IMAGE_LENGTH)
    if not well_formed:
        return  # which container is which cannot be told (the CRD's CEL rules do not run)
    if base:
        not_runtime = "not named syncreplicas, tensorflow or like a container of spec.template"
    else:
        not_runtime = "not named syncreplicas or tensorflow, nor the template's only container"
    for i in podtemplate.sidecars_without_image(items, base):
        c.add(
            f"{path}[{i}].image",
            f"is required: container {items[i]['name']!r} is a sidecar ({not_runtime})",
        )


def parse_spec(spec: object, path: str = "spec") -> JobSpec:
    """``spec`` of a SyncReplicasJob -> :class:`JobSpec`, or :class:`SpecError` listing
    every problem. ``path`` prefixes the field paths in the messages."""
    c = _Checker()
    result = _parse_spec(c, spec, path)
    if c.problems:
        raise SpecError(c.problems)
    return result


def _parse_spec(c: _Checker, spec: object, path: str) -> JobSpec:
    if not isinstance(spec, Mapping):
        if spec is None:
            c.add(path, "is required")
        else:
            c.add(path, f"must be an object, got {_type_name(spec)}")
        # Nothing below can be checked; listing every missing field would bury the cause.
        return JobSpec(replicas_to_aggregate=1, workers=0, model=ModelSpec(entrypoint=""))
    c.unknown(spec, _SPEC_FIELDS, path)
    template = _template(c, spec, f"{path}.template")
    roles: dict[str, dict[str, Any]] = {}
    for role in naming.REPLICA_TYPES:
        raw = c.mapping(spec, role, f"{path}.{role}")
        if raw is not None:
            c.unknown(raw, _ROLE_FIELDS, f"{path}.{role}")
            roles[role] = _template(
                c, raw, f"{path}.{role}.template", podtemplate.containers(template)
            )
    stall = c.integer(
        spec,
        "stallTimeoutSeconds",
        f"{path}.stallTimeoutSeconds",
        default=DEFAULT_STALL_TIMEOUT_SECONDS,
        minimum=0,
    )
    parameter_servers = c.integer(
        spec,
        "parameterServers",
        f"{path}.parameterServers",
        default=DEFAULT_PARAMETER_SERVERS,
        minimum=1,
        maximum=naming.MAX_PARAMETER_SERVERS,
    )
    initial_tokens = c.integer(
        spec, "initialTokens", f"{path}.initialTokens", default=DEFAULT_INITIAL_TOKENS, minimum=0
    )
    replicas_to_aggregate = c.required_integer(
        spec, "replicasToAggregate", f"{path}.replicasToAggregate", minimum=1
    )
    min_to_aggregate = c.integer(
        spec, "minReplicasToAggregate", f"{path}.minReplicasToAggregate", minimum=1
    )
    if min_to_aggregate is not None and replicas_to_aggregate is not None and (
        min_to_aggregate > replicas_to_aggregate
    ):
        c.add(
            f"{path}.minReplicasToAggregate",
            f"must be <= replicasToAggregate ({replicas_to_aggregate}), got {min_to_aggregate}",
        )
    return JobSpec(
        replicas_to_aggregate=replicas_to_aggregate,
        min_replicas_to_aggregate=min_to_aggregate,
        workers=c.required_integer(
            spec, "workers", f"{path}.workers", minimum=0, maximum=naming.MAX_WORKERS
        ),
        parameter_servers=(
            DEFAULT_PARAMETER_SERVERS if parameter_servers is None else parameter_servers
        ),
        initial_tokens=DEFAULT_INITIAL_TOKENS if initial_tokens is None else initial_tokens,
        model=_model(c, spec, f"{path}.model"),
        training=_training(c, spec, f"{path}.training"),
        metrics=_metrics(c, spec, f"{path}.metrics"),
        image=c.string(spec, "image", f"{path}.image", min_length=1, max_length=MAX_IMAGE_LENGTH),
        template=template,
        role_templates=roles,
        run_policy=_run_policy(c, spec, f"{path}.runPolicy"),
        chief_restart_policy=c.choice(
            spec,
            "chiefRestartPolicy",
            f"{path}.chiefRestartPolicy",
            ChiefRestartPolicy.RESET_SYNC_STATE,
        ),
        stall_timeout_seconds=DEFAULT_STALL_TIMEOUT_SECONDS if stall is None else stall,
    )


def parse_job(manifest: object, *, default_namespace: str = "default") -> Job:
    """A whole SyncReplicasJob manifest -> :class:`Job`, or :class:`SpecError` listing every
    problem (apiVersion, kind, metadata.name and everything under spec)."""
    c = _Checker()
    if not isinstance(manifest, Mapping):
        c.add("(document)", f"must be a {naming.KIND} object, got {_type_name(manifest)}")
        raise SpecError(c.problems)
    c.unknown(manifest, ("apiVersion", "kind", "metadata", "spec", "status"), "")
    if manifest.get("apiVersion") != naming.API_VERSION:
        c.add("apiVersion", f"must be {naming.API_VERSION}, got {manifest.get('apiVersion')!r}")
    if manifest.get("kind") != naming.KIND:
        c.add("kind", f"must be {naming.KIND}, got {manifest.get('kind')!r}")
    metadata = c.mapping(manifest, "metadata", "metadata", required=True) or {}
    name = c.string(
        metadata,
        "name",
        "metadata.name",
        required=True,
        pattern=naming.JOB_NAME_PATTERN,
        pattern_hint="lower-case letters, digits and '-', starting with a letter",
        max_length=naming.MAX_JOB_NAME_LENGTH,
    )
    namespace = c.string(metadata, "namespace", "metadata.namespace", default=default_namespace)
    uid = c.string(metadata, "uid", "metadata.uid")
    generation = c.integer(metadata, "generation", "metadata.generation")
    spec = _parse_spec(c, manifest.get("spec"), "spec")
    if c.problems:
        raise SpecError(c.problems)
    return Job(
        name=name or "",
        namespace=namespace or default_namespace,
        spec=spec,
        uid=uid,
        generation=generation,
    )


# Fields that cannot change once the job exists: they shape the TensorFlow cluster and the
# training every replica already runs (the CRD's ``self == oldSelf`` rules). Everything
# else (run policy, chief restart policy, stall timeout, image, templates, model.args)
# may change and applies to replicas created afterwards. model.args and the templates are
# free-form (x-kubernetes-preserve-unknown-fields), whose contents CEL rules cannot see, so
# the API server could not enforce their immutability and neither does this module.
IMMUTABLE_FIELDS: Final[dict[str, Callable[[JobSpec], object]]] = {
    "replicasToAggregate": lambda s: s.replicas_to_aggregate,
    "minReplicasToAggregate": lambda s: s.min_replicas_to_aggregate,
    "workers": lambda s: s.workers,
    "parameterServers": lambda s: s.parameter_servers,
    "initialTokens": lambda s: s.initial_tokens,
    "model.entrypoint": lambda s: s.model.entrypoint,
    "training": lambda s: s.training,
    "metrics": lambda s: s.metrics,
}


def immutable_changes(old: JobSpec, new: JobSpec, path: str = "spec") -> list[Problem]:
    """One problem per immutable field that differs between the stored and the new spec.

    Parsed specs compare with defaults applied, as the API server's transition rules see
    the stored (defaulted) object."""
    return [
        Problem(f"{path}.{name}", "is immutable once the job exists")
        for name, read in IMMUTABLE_FIELDS.items()
        if read(old) != read(new)
    ]
