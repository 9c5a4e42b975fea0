"""Parse TF_CONFIG and SYNCREPLICAS_JOB into one frozen ClusterConfig (pure: no I/O, no TF).

Every bad field raises ``ConfigError`` naming the field, so a replica can exit with
``CONFIG (64)`` and a one-line reason. The format is the contract in docs/contract.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from syncreplicas_api import resource
from syncreplicas_api.contract import JobSettings, SettingsModel, SettingsTraining
from syncreplicas_api.problems import validate

# The model and training settings of SYNCREPLICAS_JOB, as the API types define them.
ModelSpec = SettingsModel
TrainingSpec = SettingsTraining

ROLES = resource.REPLICA_TYPES
ADDRESS_RE = re.compile(r"^[^\s:/]+:\d{1,5}$")
# A test and benchmark hook, not for production: sleep this many ms before every step, or
# ("@/path") as many ms as that file says, re-read while training (a straggler that can be
# turned on and off).
STEP_DELAY_ENV = "SYNCREPLICAS_DEBUG_STEP_DELAY_MS"
# A benchmark hook, not for production: PS 0 appends "global_step unix_time R" to this file
# after every update (bench/elastic.py measures the gaps between updates with it).
UPDATES_FILE_ENV = "SYNCREPLICAS_DEBUG_UPDATES_FILE"
# A test hook, not for production: PS 0's sync loop stops iterating (it sleeps, as a run
# that never returns would block it) once the global step reaches this value, in its first
# sync epoch only: the loop's watchdog must notice and open a new epoch (ps/coordinator.py).
STALL_AT_ENV = "SYNCREPLICAS_DEBUG_STALL_LOOP_AT_STEP"
# This process's incarnation (docs/contract.md): a positive int64, higher for every newer
# process of the same replica (the operator sets its clock in ms when it creates the pod).
# Unset, the process's own start time in ms. The highest incarnation that joined a replica
# slot owns it; an older process still running is fenced off (exit FENCED).
INCARNATION_ENV = "SYNCREPLICAS_INCARNATION"
INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A bad field in TF_CONFIG or SYNCREPLICAS_JOB; ``field`` is its dotted path."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class ClusterConfig:
    """Who this process is, the cluster around it, and the job's settings."""

    role: str
    index: int
    cluster: Mapping[str, Mapping[int, str]]  # job -> task index -> address (may be sparse)
    replicas_to_aggregate: int
    workers: int
    parameter_servers: int
    initial_tokens: int
    chief_restart_policy: str
    model: ModelSpec
    training: TrainingSpec
    metrics_port: int
    # Fewest gradients an update aggregates while replicas are lost (1..R).
    min_replicas_to_aggregate: int
    # spec.elasticPolicy.maxWorkers: workers may join and leave the running job (None: the
    # job has exactly ``workers``).
    max_workers: int | None = None
    # SYNCREPLICAS_INCARNATION, or the process's start time in ms (0: not told, in tests).
    incarnation: int = 0

    @property
    def address(self) -> str:
        return self.cluster[self.role][self.index]

    @property
    def ps_addresses(self) -> tuple[str, ...]:
        """Every parameter server, by task index."""
        return tuple(self.cluster["ps"][i] for i in range(self.parameter_servers))

    @property
    def is_chief(self) -> bool:
        return self.role == "chief"

    @property
    def elastic(self) -> bool:
        return self.max_workers is not None

    @property
    def worker_slots(self) -> int:
        """Workers the job can have: maxWorkers when elastic, else ``workers``."""
        return self.workers if self.max_workers is None else self.max_workers

    @property
    def total_replicas(self) -> int:
        """Replica slots, chief plus workers: what the protocol state, the token queues and
        the data shards are sized by. An elastic job has 1 + maxWorkers slots, of which
        only the replicas that joined (``ready``) are members."""
        return 1 + self.worker_slots

    @property
    def initial_replicas(self) -> int:
        """The chief plus the workers the job was started (or this process told) with."""
        return 1 + self.workers

    @property
    def replica_id(self) -> int:
        """0 for the chief, 1 + index for worker ``index``; PS has none (-1)."""
        if self.role == "chief":
            return 0
        if self.role == "worker":
            return 1 + self.index
        return -1

    @property
    def device(self) -> str:
        return f"/job:{self.role}/task:{self.index}"


# -- small typed readers, each naming the field on error ------------------------------
def _obj(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(name, f"must be an object, got {type(value).__name__}")
    return value


def _int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(name, f"must be <= {maximum}, got {value}")
    return value


def _json(text: str | None, name: str) -> Mapping[str, Any]:
    if text is None or not text.strip():
        raise ConfigError(name, "is not set")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(name, f"is not valid JSON ({err.msg} at char {err.pos})") from err
    return _obj(value, name)


# -- the two parts ------------------------------------------------------------------
def _addresses(value: Any, where: str) -> dict[int, str]:
    """One job's addresses: a list (dense: every task) or an object (sparse: some tasks).

    The sparse form is TensorFlow's own ``ClusterSpec`` form ``{"3": "host:port"}``: a
    replica is told only the tasks it talks to, so its TF_CONFIG does not grow with W. An
    empty object is a sparse job of which this replica needs no task.
    """
    if isinstance(value, Mapping):
        items: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list) and value:
        items = list(enumerate(value))
    else:
        raise ConfigError(where, "must be a non-empty list of host:port, or an object of "
                          "task index -> host:port")
    out: dict[int, str] = {}
    for key, addr in items:
        if isinstance(key, int):
            index = key
        elif isinstance(key, str) and key.isdigit():
            index = int(key)
        else:
            raise ConfigError(where, f"task index {key!r} is not a non-negative integer")
        if not isinstance(addr, str) or not ADDRESS_RE.match(addr):
            raise ConfigError(f"{where}[{index}]", f"must be host:port, got {addr!r}")
        out[index] = addr
    return out


def parse_tf_config(text: str | None) -> tuple[str, int, dict[str, dict[int, str]], bool]:
    """TF_CONFIG -> (role, index, cluster, sparse). Raises ConfigError naming the field.

    ``ps`` and ``chief`` are always complete lists (every replica talks to every PS);
    ``worker`` may be sparse (an object), and then ``sparse`` is True.
    """
    doc = _json(text, "TF_CONFIG")
    cluster_raw = _obj(doc.get("cluster"), "TF_CONFIG.cluster")
    task = _obj(doc.get("task"), "TF_CONFIG.task")
    cluster: dict[str, dict[int, str]] = {}
    for job, addrs in cluster_raw.items():
        where = f"TF_CONFIG.cluster.{job}"
        if job not in ROLES:
            raise ConfigError(where, f"unknown role (known: {', '.join(ROLES)})")
        if job != "worker" and not isinstance(addrs, list):
            raise ConfigError(where, "must be a list of host:port (every task)")
        cluster[job] = _addresses(addrs, where)
    if "ps" not in cluster:
        raise ConfigError("TF_CONFIG.cluster.ps", "is missing (at least one PS is required)")
    if "chief" not in cluster:
        raise ConfigError("TF_CONFIG.cluster.chief", "is missing (exactly one chief)")
    if len(cluster["chief"]) != 1:
        raise ConfigError("TF_CONFIG.cluster.chief", "must hold exactly one address")
    role = task.get("type")
    if role not in ROLES:
        raise ConfigError("TF_CONFIG.task.type",
                          f"unknown role {role!r} (known: ps, chief, worker)")
    index = _int(task.get("index", 0), "TF_CONFIG.task.index", minimum=0)
    if index not in cluster.get(role, {}):
        size = len(cluster.get(role, ()))
        raise ConfigError("TF_CONFIG.task.index", f"{index} is out of range for {size} {role}")
    sparse = isinstance(cluster_raw.get("worker"), Mapping)
    return role, index, cluster, sparse


def parse_job(text: str | None) -> dict[str, Any]:
    """SYNCREPLICAS_JOB -> keyword arguments of ClusterConfig (without role and cluster).

    The contract's type (``syncreplicas_api.contract.JobSettings``) checks it; the first
    problem becomes the ConfigError."""
    doc = _json(text, "SYNCREPLICAS_JOB")
    job, problems = validate(JobSettings, doc, "")
    if job is None:
        raise ConfigError(problems[0].path, problems[0].message)
    return {
        "replicas_to_aggregate": job.replicas_to_aggregate,
        "min_replicas_to_aggregate": (
            job.replicas_to_aggregate
            if job.min_replicas_to_aggregate is None
            else job.min_replicas_to_aggregate
        ),
        "workers": job.workers,
        "max_workers": job.elastic_policy.max_workers if job.elastic_policy else None,
        "parameter_servers": job.parameter_servers,
        "initial_tokens": job.initial_tokens,
        "chief_restart_policy": str(job.chief_restart_policy),
        "model": job.model,
        "training": job.training,
        "metrics_port": job.metrics.port,
    }


def parse_incarnation(text: str | None, started_ms: int) -> int:
    """SYNCREPLICAS_INCARNATION -> a positive int64; unset or empty: ``started_ms`` (the
    process's start time in ms, which the caller reads: this module reads no clock)."""
    if text is None or not text.strip():
        return started_ms
    raw = text.strip()
    if not raw.isascii() or not raw.isdigit():
        raise ConfigError(INCARNATION_ENV, f"must be a positive integer (milliseconds), "
                          f"got {text!r}")
    return _int(int(raw), INCARNATION_ENV, minimum=1, maximum=INT64_MAX)


def parse_config(env: Mapping[str, str], started_ms: int = 0) -> ClusterConfig:
    """The whole configuration of one replica from its environment (a mapping, no I/O).

    ``started_ms`` is the incarnation of a process that was given none (its start time)."""
    role, index, cluster, sparse = parse_tf_config(env.get("TF_CONFIG"))
    job = parse_job(env.get("SYNCREPLICAS_JOB"))
    job["incarnation"] = parse_incarnation(env.get(INCARNATION_ENV), started_ms)
    port_override = env.get("SYNCREPLICAS_METRICS_PORT")
    if port_override is not None and port_override.strip() != "":
        try:
            port = int(port_override)
        except ValueError as err:
            raise ConfigError("SYNCREPLICAS_METRICS_PORT",
                              f"must be an integer, got {port_override!r}") from err
        job["metrics_port"] = _int(port, "SYNCREPLICAS_METRICS_PORT", minimum=0,
                                   maximum=resource.MAX_PORT)
    # The cluster spec and the job must describe the same shape.
    if len(cluster["ps"]) != job["parameter_servers"]:
        raise ConfigError("parameterServers", f"is {job['parameter_servers']} but "
                          f"TF_CONFIG.cluster.ps lists {len(cluster['ps'])}")
    workers = cluster.get("worker", {})
    # An elastic job's cluster has a worker slot for each of maxWorkers.
    slots, field = ((job["max_workers"], "elasticPolicy.maxWorkers")
                    if job["max_workers"] is not None else (job["workers"], "workers"))
    if not sparse and len(workers) != slots:
        raise ConfigError(field, f"is {slots} but TF_CONFIG.cluster.worker "
                          f"lists {len(workers)}")
    if sparse and workers and max(workers) >= slots:
        raise ConfigError(field, f"is {slots} but TF_CONFIG.cluster.worker "
                          f"names task {max(workers)}")
    if sparse and role == "ps" and len(workers) != slots:
        # A tensor moves by the receiver calling the sender: the PS calls every replica.
        raise ConfigError("TF_CONFIG.cluster.worker", "a PS needs every worker's address "
                          "(it fetches their gradients)")
    return ClusterConfig(role=role, index=index, cluster=cluster, **job)
