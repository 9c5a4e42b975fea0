"""The SyncReplicasJob manifest as typed, validated, defaulted values.

``parse_job`` / ``parse_spec`` turn a manifest (a dict, as read from YAML or the API) into
a frozen :class:`Job` with every default filled in, or raise one :class:`SpecError` that
lists every problem with its field path (``spec.training.batchSize``). The types, their
defaults, bounds and rules are the API's (``syncreplicas_api.types``), the same the CRD is
generated from, so ``syncreplicas validate``, ``syncreplicas run`` and the operator reject
exactly what the API server would. ``immutable_changes`` follows the types' ``Immutable``
fields (the CRD's ``self == oldSelf`` rules) and the spec's transition rules (``workers``
changes only with ``elasticPolicy``, which is never added or removed).

Pure: no I/O, no Kubernetes client. Free-form parts (``model.args``, pod templates) are
deep-copied so that callers can never mutate the manifest they came from through a spec.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel
from syncreplicas_api import types as api
from syncreplicas_api.fields import Immutable
from syncreplicas_api.fields_walk import fields
from syncreplicas_api.problems import Problem, join, type_name, validate
from syncreplicas_api.types import (
    MetricsSpec,
    ModelSpec,
    RunPolicy,
    SchedulingPolicy,
    StragglerPolicy,
    TrainingSpec,
)

from . import naming
from .enums import ChiefRestartPolicy

__all__ = [
    "DEFAULT_CHECKPOINT_DIR",
    "IMMUTABLE_FIELDS",
    "Job",
    "JobSpec",
    "MetricsSpec",
    "ModelSpec",
    "Problem",
    "RunPolicy",
    "SchedulingPolicy",
    "SpecError",
    "StragglerPolicy",
    "TrainingSpec",
    "immutable_changes",
    "parse_job",
    "parse_spec",
]

DEFAULT_CHECKPOINT_DIR: Final = TrainingSpec().checkpoint_dir


class SpecError(ValueError):
    """A manifest that cannot run; ``problems`` lists every reason, not just the first."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class JobSpec:
    """``spec`` of a SyncReplicasJob with every default applied. The parts are the API's
    types; the pod templates are the manifest's own dicts (deep copies)."""

    replicas_to_aggregate: int
    workers: int
    model: ModelSpec
    parameter_servers: int
    initial_tokens: int
    # Fewest gradients per update while replicas are lost; None: replicas_to_aggregate.
    min_replicas_to_aggregate: int | None
    training: TrainingSpec
    metrics: MetricsSpec
    # None: the operator's default runtime image (unless a template's container names one).
    image: str | None
    # PodTemplateSpec for every role, then optional per-role overrides merged on top.
    template: dict[str, Any]
    role_templates: dict[str, dict[str, Any]]
    run_policy: RunPolicy
    chief_restart_policy: ChiefRestartPolicy
    # 0 disables the Stalled condition.
    stall_timeout_seconds: int
    # None: workers is fixed; else the bounds it may be scaled within while the job runs.
    elastic_policy: api.ElasticPolicy | None = None
    # None: no TensorBoard beside the chief.
    tensorboard: api.TensorBoard | None = None
    # None: this operator runs the job (core/managed.py).
    managed_by: str | None = None

    @classmethod
    def from_api(cls, spec: api.JobSpec, manifest: Mapping[str, Any]) -> JobSpec:
        """The validated ``spec`` and the manifest's ``spec`` it came from (templates)."""
        roles = {
            role: copy.deepcopy(manifest[role].get("template") or {})
            for role in naming.REPLICA_TYPES
            if manifest.get(role) is not None
        }
        return cls(
            replicas_to_aggregate=spec.replicas_to_aggregate,
            workers=spec.workers,
            model=spec.model,
            parameter_servers=spec.parameter_servers,
            initial_tokens=spec.initial_tokens,
            min_replicas_to_aggregate=spec.min_replicas_to_aggregate,
            training=spec.training,
            metrics=spec.metrics,
            image=spec.image,
            template=copy.deepcopy(manifest.get("template") or {}),
            role_templates=roles,
            run_policy=spec.run_policy,
            chief_restart_policy=spec.chief_restart_policy,
            stall_timeout_seconds=spec.stall_timeout_seconds,
            elastic_policy=spec.elastic_policy,
            tensorboard=spec.tensorboard,
            managed_by=spec.managed_by,
        )

    @property
    def total_replicas(self) -> int:
        """Replicas that push gradients: the chief plus the workers."""
        return 1 + self.workers

    @property
    def worker_slots(self) -> int:
        """Worker addresses every PS is told: elasticPolicy.maxWorkers, else workers."""
        return self.elastic_policy.max_workers if self.elastic_policy else self.workers

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
    # metadata.labels (kueue.x-k8s.io/queue-name puts the job in a queue: core/kueue.py).
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_spec(spec: object, path: str = "spec") -> JobSpec:
    """``spec`` of a SyncReplicasJob -> :class:`JobSpec`, or :class:`SpecError` listing
    every problem. ``path`` prefixes the field paths in the messages."""
    problems: list[Problem] = []
    result = _parse_spec(spec, path, problems)
    if result is None:
        raise SpecError(problems)
    return result


def _parse_spec(spec: object, path: str, problems: list[Problem]) -> JobSpec | None:
    if not isinstance(spec, Mapping):
        # Nothing below can be checked; listing every missing field would bury the cause.
        reason = "is required" if spec is None else f"must be an object, got {type_name(spec)}"
        problems.append(Problem(path, reason))
        return None
    manifest = copy.deepcopy(dict(spec))
    parsed, found = validate(api.JobSpec, manifest, path)
    problems.extend(found)
    return None if parsed is None else JobSpec.from_api(parsed, manifest)


def _metadata(metadata: Mapping[str, Any], key: str, kind: type, problems: list[Problem]) -> Any:
    """``metadata.<key>`` if absent or of ``kind`` (None and a problem otherwise)."""
    value = metadata.get(key)
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    expected = {str: "a string", int: "an integer", dict: "an object"}[kind]
    problems.append(Problem(f"metadata.{key}", f"must be {expected}, got {type_name(value)}"))
    return None


def parse_job(manifest: object, *, default_namespace: str = "default") -> Job:
    """A whole SyncReplicasJob manifest -> :class:`Job`, or :class:`SpecError` listing every
    problem (apiVersion, kind, metadata.name and everything under spec)."""
    if not isinstance(manifest, Mapping):
        got = type_name(manifest)
        raise SpecError([Problem("(document)", f"must be a {naming.KIND} object, got {got}")])
    problems = [
        Problem(str(key), "unknown field (check the spelling)")
        for key in manifest
        if key not in ("apiVersion", "kind", "metadata", "spec", "status")
    ]
    if manifest.get("apiVersion") != naming.API_VERSION:
        version = manifest.get("apiVersion")
        problems.append(Problem("apiVersion", f"must be {naming.API_VERSION}, got {version!r}"))
    if manifest.get("kind") != naming.KIND:
        problems.append(Problem("kind", f"must be {naming.KIND}, got {manifest.get('kind')!r}"))
    metadata = manifest.get("metadata")
    if not isinstance(metadata, Mapping):
        got = type_name(metadata)
        reason = "is required" if metadata is None else f"must be an object, got {got}"
        problems.append(Problem("metadata", reason))
        metadata = {}
    name = _metadata(metadata, "name", str, problems)
    if "name" not in metadata or metadata["name"] is None:
        problems.append(Problem("metadata.name", "is required"))
    elif name is not None:
        for rule in api.NAME_RULES:
            problems.extend(Problem(*found) for found in rule.check(name))
    namespace = _metadata(metadata, "namespace", str, problems)
    uid = _metadata(metadata, "uid", str, problems)
    generation = _metadata(metadata, "generation", int, problems)
    labels = _metadata(metadata, "labels", dict, problems) or {}
    spec = _parse_spec(manifest.get("spec"), "spec", problems)
    if problems or spec is None:
        raise SpecError(problems)
    return Job(
        name=name,
        namespace=namespace or default_namespace,
        spec=spec,
        uid=uid,
        generation=generation,
        labels={str(k): str(v) for k, v in labels.items()},
    )


def _immutable(model: type[BaseModel], prefix: str = "", names: str = "") -> dict[str, str]:
    """{manifest path: attribute path} of the ``Immutable`` fields of ``model``."""
    found: dict[str, str] = {}
    for field in fields(model):
        key, attribute = f"{prefix}{field.key}", f"{names}{field.name}"
        if field.markers(Immutable):
            found[key] = attribute
        elif isinstance(field.base, type) and issubclass(field.base, BaseModel):
            found.update(_immutable(field.base, f"{key}.", f"{attribute}."))
    return found


# An immutable field inside an optional object the spec does not have (elasticPolicy).
_ABSENT: Final = object()


def _reader(attribute: str) -> Callable[[JobSpec], object]:
    """Read a dotted attribute path; ``_ABSENT`` when an object on the way is None."""

    def read(spec: JobSpec) -> object:
        value: object = spec
        for name in attribute.split("."):
            if value is None:
                return _ABSENT
            value = getattr(value, name)
        return value

    return read


# Fields that cannot change once the job exists: they shape the TensorFlow cluster and the
# training every replica already runs. Everything else (run policy, chief restart policy,
# stall timeout, image, templates, model.args) may change and applies to replicas created
# afterwards. model.args and the templates are free-form (x-kubernetes-preserve-unknown-
# fields), whose contents CEL rules cannot see, so the API server could not enforce their
# immutability and neither does this module. ``workers`` is not here: it may change when
# the job has an elasticPolicy (the spec's transition rules, api.JobSpec.transition_rules).
IMMUTABLE_FIELDS: Final[dict[str, Callable[[JobSpec], object]]] = {
    key: _reader(attribute) for key, attribute in _immutable(api.JobSpec).items()
}


def immutable_changes(old: JobSpec, new: JobSpec, path: str = "spec") -> list[Problem]:
    """One problem per field that may not change between the stored and the new spec: an
    immutable field that differs, and every transition rule of the spec that fails.

    Parsed specs compare with defaults applied, as the API server's transition rules see
    the stored (defaulted) object; a field inside an object only one side has is not
    compared (the API server runs a field's transition rule only when both have it)."""
    problems = []
    for name, read in IMMUTABLE_FIELDS.items():
        before, after = read(old), read(new)
        if before is not _ABSENT and after is not _ABSENT and before != after:
            problems.append(Problem(f"{path}.{name}", "is immutable once the job exists"))
    for rule in api.JobSpec.transition_rules:
        problems.extend(Problem(join(path, where), why) for where, why in rule.check(old, new))
    return problems
