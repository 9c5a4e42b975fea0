"""The actions a plan holds: what the controller carries out, in order.

Plain frozen values, so a plan can be compared, logged and tested without an API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# Counter names the planner reports through CountMetric (resources.metrics maps them).
PODS_CREATED: Final = "pods_created"
CHIEF_CLEANUPS: Final = "chief_cleanups"
JOB_RESTARTS: Final = "job_restarts"
RECOVERIES: Final = "recoveries"  # labelled by cause (recovery.CAUSES)
STRAGGLER_EVICTIONS: Final = "straggler_evictions"
# Histogram names the planner reports through ObserveMetric.
QUEUE_WAIT: Final = "queue_wait"  # labelled by job_namespace, local_queue

# Event types (core/v1 Event.type).
NORMAL: Final = "Normal"
WARNING: Final = "Warning"


@dataclass(frozen=True)
class CreateChild:
    """Create a Pod, Service or NetworkPolicy (``body['kind']`` says which)."""

    body: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))


@dataclass(frozen=True)
class DeletePod:
    name: str
    # 0: remove the pod from the API at once (its kubelet is gone and will never confirm).
    grace_period_seconds: int | None = None


@dataclass(frozen=True)
class PublishPod:
    """Set (``published``) or remove the label a replica's Service selects on
    (naming.LABEL_PUBLISHED): removed from a pod being deleted, its address leaves the
    replica's DNS name at once, not when the pod object is gone."""

    name: str
    published: bool


@dataclass(frozen=True)
class DeleteService:
    name: str


@dataclass(frozen=True)
class DeletePodGroup:
    """Delete the job's PodGroup (gang scheduling) of the API ``api_version``."""

    name: str
    api_version: str


@dataclass(frozen=True)
class PatchStatus:
    """A JSON merge patch of ``status`` (``None`` removes a key)."""

    patch: Mapping[str, Any]


@dataclass(frozen=True)
class EmitEvent:
    type: str  # NORMAL | WARNING
    reason: str
    message: str


@dataclass(frozen=True)
class CountMetric:
    """Add ``amount`` to an operator counter (PODS_CREATED, CHIEF_CLEANUPS, JOB_RESTARTS,
    RECOVERIES, STRAGGLER_EVICTIONS), with the counter's labels if it has any."""

    name: str
    amount: int = 1
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ObserveMetric:
    """Observe ``value`` in an operator histogram (QUEUE_WAIT), with its labels."""

    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AssignSpare:
    """Hand a spare pod a replica (docs/contract.md, "Spare pods"): post ``env`` to the
    spare at ``address``:``port`` with its ``token``, then merge-patch the pod's metadata
    with ``patch`` (the replica's labels: its Service selects the spare). If either fails,
    the spare pod is deleted (the next pass creates the replica's pod instead)."""

    spare: str
    replica: str
    address: str
    port: int
    token: str
    env: tuple[tuple[str, str], ...]
    patch: Mapping[str, Any]


@dataclass(frozen=True)
class PatchWorkload:
    """A JSON merge patch of the job's Kueue Workload (``status``: of its status
    subresource). A patch guarded by a resourceVersion that is no longer current is
    dropped: the Workload's watch event brings the next pass."""

    name: str
    patch: Mapping[str, Any]
    status: bool = False


@dataclass(frozen=True)
class DeleteWorkload:
    """Delete the job's Kueue Workload (its pod sets no longer match the job)."""

    name: str


@dataclass(frozen=True)
class DeleteJob:
    """Delete the SyncReplicasJob itself (ttlSecondsAfterFinished expired)."""

    reason: str


Action = (
    CreateChild
    | DeletePod
    | PublishPod
    | DeleteService
    | DeletePodGroup
    | PatchStatus
    | EmitEvent
    | CountMetric
    | ObserveMetric
    | DeleteJob
    | AssignSpare
    | PatchWorkload
    | DeleteWorkload
)
