"""What each replica is told about the job: ``TF_CONFIG`` and ``SYNCREPLICAS_JOB``.

The formats are docs/contract.md's, exactly: the runtime's ``cluster.py`` parses them and
rejects unknown keys. Addresses come from an address function so the same code serves the
operator (``<job>-<type>-<index>.<job>.<namespace>.svc:2222``) and the local runner
(``127.0.0.1:<free port>``). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from syncreplicas_api.contract import JobSettings

from . import naming
from .spec import JobSpec

AddressFn = Callable[[str, int], str]
"""(replica type, index) -> "host:port"."""


def cluster_addresses(job: str, namespace: str, *, replica_services: bool = False) -> AddressFn:
    """Address function for a job on Kubernetes: the replica's name under the job's headless
    Service, or with ``replica_services`` its own Service (naming.replica_address)."""

    def address(replica_type: str, index: int) -> str:
        return naming.replica_address(
            job, namespace, replica_type, index, replica_services=replica_services
        )

    return address


def local_addresses(ports: Mapping[str, Sequence[int]], host: str = "127.0.0.1") -> AddressFn:
    """Address function for local processes: ``ports[type][index]`` on ``host``."""

    def address(replica_type: str, index: int) -> str:
        return f"{host}:{ports[replica_type][index]}"

    return address


def cluster_spec(spec: JobSpec, address: AddressFn) -> dict[str, list[str]]:
    """TF_CONFIG's ``cluster``: ps, chief and (unless ``workers: 0``) worker addresses.

    With ``elasticPolicy`` the workers are its ``maxWorkers`` slots, whether their pods exist
    or not: a PS calls every replica for its gradients, so it must know a worker's address
    before the worker joins (a slot nobody holds costs nothing, bench/RESULTS.md)."""
    cluster: dict[str, list[str]] = {}
    counts = {**spec.replica_counts(), naming.WORKER: spec.worker_slots}
    for replica_type, count in counts.items():
        if count:
            cluster[replica_type] = [address(replica_type, i) for i in range(count)]
    return cluster


def tf_config(
    cluster: Mapping[str, Sequence[str]], replica_type: str, index: int
) -> dict[str, Any]:
    """TF_CONFIG for one replica; refuses a task that is not in the cluster.

    A PS is told every task: it calls each replica for its gradients. The chief and the
    workers talk only to the parameter servers, so their ``worker`` entry is sparse (the
    runtime accepts TensorFlow's ``{index: address}`` form) and holds at most themselves:
    a pod's size does not grow with the number of workers.
    """
    if replica_type not in naming.REPLICA_TYPES:
        raise ValueError(f"unknown replica type {replica_type!r}")
    size = len(cluster.get(replica_type, ()))
    if not 0 <= index < size:
        raise ValueError(f"{replica_type} index {index} out of range (the cluster has {size})")
    sparse = replica_type != naming.PS
    # Copy only what is told: a chief's or worker's TF_CONFIG costs the same at any W.
    told: dict[str, Any] = {
        t: list(addresses)
        for t, addresses in cluster.items()
        if not (sparse and t == naming.WORKER)
    }
    if sparse and naming.WORKER in cluster:
        own = replica_type == naming.WORKER
        told[naming.WORKER] = {str(index): cluster[naming.WORKER][index]} if own else {}
    return {"cluster": told, "task": {"type": replica_type, "index": index}}


def job_settings(spec: JobSpec) -> dict[str, Any]:
    """``SYNCREPLICAS_JOB``: the training part of the spec, camelCase, every key present."""
    settings = JobSettings(
        replicas_to_aggregate=spec.replicas_to_aggregate,
        min_replicas_to_aggregate=spec.min_to_aggregate,
        workers=spec.workers,
        parameter_servers=spec.parameter_servers,
        initial_tokens=spec.initial_tokens,
        elastic_policy=spec.elastic_policy,
        chief_restart_policy=spec.chief_restart_policy,
        model=spec.model.model_dump(),
        training=spec.training.model_dump(),
        metrics=spec.metrics,
    )
    return settings.model_dump(mode="json")


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def replica_environment(
    job: str,
    namespace: str,
    spec: JobSpec,
    cluster: Mapping[str, Sequence[str]],
    replica_type: str,
    index: int,
) -> dict[str, str]:
    """Environment variables the contract gives one replica (local runner and pods alike)."""
    return {
        naming.ENV_TF_CONFIG: _compact(tf_config(cluster, replica_type, index)),
        naming.ENV_JOB: _compact(job_settings(spec)),
        naming.ENV_JOB_NAME: job,
        naming.ENV_NAMESPACE: namespace,
    }
