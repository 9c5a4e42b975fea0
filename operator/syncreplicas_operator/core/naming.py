"""Every name the operator puts on the cluster: API coordinates, label and annotation keys,
replica types, child object names, selectors, condition types and event reasons.

One place, so the planner, the handlers, the local runner and the tests cannot drift apart.
Child names are deterministic (``<job>-<type>-<index>``): re-creating after an operator
restart hits 409 Conflict instead of producing a duplicate.
"""

from __future__ import annotations

from typing import Final

from syncreplicas_api import containers, resource
from syncreplicas_api.enums import GangScheduler
from syncreplicas_api.types import MetricsSpec

# --- the resource -------------------------------------------------------------------------

# Defined with the API types (syncreplicas_api.resource), which the CRD is generated from.
GROUP: Final = resource.GROUP
VERSION: Final = resource.VERSION
API_VERSION: Final = resource.API_VERSION
KIND: Final = resource.KIND
PLURAL: Final = resource.PLURAL
SINGULAR: Final = resource.SINGULAR
SHORT_NAME: Final = resource.SHORT_NAME
CRD_NAME: Final = resource.CRD_NAME

# --- replica types (TF_CONFIG task types) -------------------------------------------------

PS: Final = resource.PS
CHIEF: Final = resource.CHIEF
WORKER: Final = resource.WORKER
# The order children are created in: parameter servers first, so the chief and workers
# find their variables' devices reachable as early as possible.
REPLICA_TYPES: Final = resource.REPLICA_TYPES

# --- labels and annotations ---------------------------------------------------------------

LABEL_JOB_NAME: Final = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE: Final = f"{GROUP}/replica-type"
LABEL_REPLICA_INDEX: Final = f"{GROUP}/replica-index"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "syncreplicas-operator"

# "true" on a replica's pod while its address is published: its headless Service selects on
# it. The operator removes it as soon as the pod is being deleted, so that a peer resolving
# the replica's name is never sent to an address that is about to go (a terminating pod
# stays in its EndpointSlice, ready, under publishNotReadyAddresses); the replica's next
# pod, or the spare taking it over, carries it.
LABEL_PUBLISHED: Final = f"{GROUP}/published"
PUBLISHED: Final = "true"

# The job generation a child was built from: lets the planner tell children made from an
# older spec apart without diffing pod templates.
ANNOTATION_JOB_GENERATION: Final = f"{GROUP}/job-generation"
# How many times the chief had been restarted when a child was created (RestartJob rounds).
ANNOTATION_RESTART_ROUND: Final = f"{GROUP}/restart-round"
# A replica process's incarnation (docs/contract.md): the operator's clock in milliseconds
# when it created the pod, strictly increasing for one replica identity. The runtime fences
# an older incarnation still running (a pod of a lost node force-deleted and re-created).
ANNOTATION_INCARNATION: Final = f"{GROUP}/incarnation"
# A warm spare pod (runPolicy.spares) carries this label ("true") until it takes a replica
# over: then the replica's labels replace it. The annotation: the shape of pod it was built
# as (core/spares.py), so a spare never takes over a role built otherwise.
LABEL_SPARE: Final = f"{GROUP}/spare"
ANNOTATION_SPARE_SHAPE: Final = f"{GROUP}/spare-shape"
# On a spare that took a replica over: the replica it became (kubectl shows it by name).
ANNOTATION_SPARE_OF: Final = f"{GROUP}/spare-of"

# Every namespace's own name, as a label the API server sets (a NetworkPolicy selects
# namespaces by it).
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

# --- nodes: what the operator reads to tell a lost node ----------------------------------

# The kubelets' heartbeats: one Lease per node, named like the node, in this namespace.
NODE_LEASE_NAMESPACE: Final = "kube-node-lease"
NODE_CONDITION_READY: Final = "Ready"
# Kubernetes' taints of a node that stopped answering / is not ready (the node lifecycle
# controller's), and the taint an administrator puts on a node that is really gone.
TAINT_UNREACHABLE: Final = "node.kubernetes.io/unreachable"
TAINT_NOT_READY: Final = "node.kubernetes.io/not-ready"
TAINT_OUT_OF_SERVICE: Final = "node.kubernetes.io/out-of-service"
# The node label the default spreading constraints use (one topology domain per node).
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"

# One PodDisruptionBudget per job (policy/v1): a drain moves one replica at a time.
DISRUPTION_BUDGET_KIND: Final = "PodDisruptionBudget"

# --- gang scheduling: the PodGroup APIs of the schedulers the operator supports ---------

POD_GROUP_KIND: Final = "PodGroup"
POD_GROUP_PLURAL: Final = "podgroups"
# scheduler-plugins' coscheduling plugin: a pod joins its group by label.
COSCHEDULING_API_VERSION: Final = "scheduling.x-k8s.io/v1alpha1"
COSCHEDULING_POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_SCHEDULER_NAME: Final = GangScheduler.COSCHEDULING.scheduler_name
# Volcano: a pod joins its group by annotation.
VOLCANO_API_VERSION: Final = "scheduling.volcano.sh/v1beta1"
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_SCHEDULER_NAME: Final = GangScheduler.VOLCANO.scheduler_name

# --- ports and container ------------------------------------------------------------------

CONTAINER_NAME: Final = containers.CONTAINER_NAME
# Kubeflow's TFJob requires this name for its main container; templates written for it
# carry the runtime's settings there (core/podtemplate.py).
TFJOB_CONTAINER_NAME: Final = containers.TFJOB_CONTAINER_NAME
TF_PORT: Final = resource.TF_PORT
TF_PORT_NAME: Final = "tf"
METRICS_PORT_NAME: Final = "metrics"
DEFAULT_METRICS_PORT: Final = MetricsSpec().port
READINESS_PATH: Final = "/readyz"

# --- environment (docs/contract.md) -------------------------------------------------------

ENV_TF_CONFIG: Final = "TF_CONFIG"
ENV_JOB: Final = "SYNCREPLICAS_JOB"
ENV_JOB_NAME: Final = "SYNCREPLICAS_JOB_NAME"
ENV_NAMESPACE: Final = "SYNCREPLICAS_NAMESPACE"
ENV_METRICS_PORT: Final = "SYNCREPLICAS_METRICS_PORT"
ENV_INCARNATION: Final = "SYNCREPLICAS_INCARNATION"
# Warm restarts (the runtime's launch/restartrules.py): the policy, the pod's budget, the
# file of its count.
ENV_WARM_RESTARTS: Final = "SYNCREPLICAS_WARM_RESTARTS"
ENV_WARM_RESTART_LIMIT: Final = "SYNCREPLICAS_WARM_RESTART_LIMIT"
ENV_WARM_RESTART_STATE: Final = "SYNCREPLICAS_WARM_RESTART_STATE"
# Spares (the runtime's launch/spare.py): the spare's secret (its presence: spare mode) and the file
# that keeps its assignment across a container restart; the endpoint it is handed one on.
ENV_SPARE_TOKEN: Final = "SYNCREPLICAS_SPARE_TOKEN"
ENV_SPARE_STATE: Final = "SYNCREPLICAS_SPARE_STATE"
SPARE_ASSIGN_PATH: Final = "/spare/assign"

# --- phases, condition types, event reasons -----------------------------------------------

PHASE_PENDING: Final = "Pending"
PHASE_CREATED: Final = "Created"
PHASE_RUNNING: Final = "Running"
PHASE_RESTARTING: Final = "Restarting"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
PHASE_SUSPENDED: Final = "Suspended"
PHASES: Final = (
    PHASE_PENDING,
    PHASE_CREATED,
    PHASE_RUNNING,
    PHASE_RESTARTING,
    PHASE_SUCCEEDED,
    PHASE_FAILED,
    PHASE_SUSPENDED,
)

CONDITION_CREATED: Final = "Created"
CONDITION_RUNNING: Final = "Running"
CONDITION_RESTARTING: Final = "Restarting"
CONDITION_SUCCEEDED: Final = "Succeeded"
CONDITION_FAILED: Final = "Failed"
CONDITION_SUSPENDED: Final = "Suspended"
CONDITION_STALLED: Final = "Stalled"
CONDITION_DEGRADED: Final = "Degraded"
CONDITION_STRAGGLER_DETECTED: Final = "StragglerDetected"
# An elastic job's worker pods are being created or deleted to match spec.workers.
CONDITION_RESIZING: Final = "Resizing"
# A child the API server refused to create (admission such as Pod Security, quota, a
# template it finds invalid), as a ReplicaSet reports it; False again once every replica
# has its pod.
CONDITION_REPLICA_FAILURE: Final = "ReplicaFailure"
# Pods of the job held by Kueue's topology gate (TAS) well past their creation: no node of
# their pod set's topology assignment has room for them yet.
CONDITION_TOPOLOGY_GATED: Final = "TopologyGated"
CONDITION_TYPES: Final = (
    CONDITION_CREATED,
    CONDITION_RUNNING,
    CONDITION_RESTARTING,
    CONDITION_SUCCEEDED,
    CONDITION_FAILED,
    CONDITION_SUSPENDED,
    CONDITION_STALLED,
    CONDITION_DEGRADED,
    CONDITION_STRAGGLER_DETECTED,
    CONDITION_RESIZING,
    CONDITION_REPLICA_FAILURE,
    CONDITION_TOPOLOGY_GATED,
)

REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_CREATED: Final = "JobCreated"
REASON_RUNNING: Final = "JobRunning"
REASON_SUCCEEDED: Final = "JobSucceeded"
REASON_SUSPENDED: Final = "JobSuspended"
REASON_RESUMED: Final = "JobResumed"
REASON_BACKOFF_LIMIT_EXCEEDED: Final = "BackoffLimitExceeded"
REASON_DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
REASON_NON_RETRYABLE_EXIT: Final = "NonRetryableExitCode"
REASON_REPLICA_FAILED: Final = "ReplicaFailed"
REASON_REPLICA_RESTARTED: Final = "ReplicaRestarted"
REASON_CHIEF_RESTARTED: Final = "ChiefRestarted"
REASON_CHIEF_CLEANUP: Final = "ChiefCleanup"
REASON_JOB_RESTART: Final = "JobRestart"
REASON_CHILD_CREATED: Final = "ChildCreated"
REASON_CHILD_DELETED: Final = "ChildDeleted"
REASON_STALLED: Final = "Stalled"
REASON_PROGRESSING: Final = "Progressing"
REASON_DEGRADED: Final = "BelowReplicaCount"
REASON_TTL_EXPIRED: Final = "TTLExpired"
# Recovery and stragglers: the coordinator aggregates fewer than R gradients per update,
# training is whole again, a replica is back after a failure, straggler found / gone / evicted.
REASON_AGGREGATING_FEWER: Final = "AggregatingFewerGradients"
REASON_JOB_DEGRADED: Final = "Degraded"
REASON_RECOVERED: Final = "Recovered"
REASON_REPLICA_RECOVERED: Final = "ReplicaRecovered"
REASON_STRAGGLER_DETECTED: Final = "StragglerDetected"
REASON_STRAGGLER_CLEARED: Final = "StragglerCleared"
REASON_STRAGGLER_EVICTED: Final = "StragglerEvicted"
REASON_CLEANED_UP: Final = "CleanedUp"
REASON_WRITE_FAILED: Final = "WriteFailed"
# The API server refused to create a child; the message is the server's own.
REASON_FAILED_CREATE: Final = "FailedCreate"
REASON_PODS_CREATED: Final = "PodsCreated"
REASON_GANG_SCHEDULER_MISSING: Final = "GangSchedulerMissing"
REASON_FORCE_DELETED: Final = "ForceDeleted"
# Replicas on a node that is lost (gone, not ready, its kubelet silent, out of service):
# force-deleted and re-created elsewhere.
REASON_NODE_LOST: Final = "NodeLost"
# Elastic workers: the Event of a resize, the Resizing condition's reasons, and an update
# the operator does not apply (the stored spec's immutable fields, or an invalid update of
# a job that runs: what the API server's rules refuse, when they were not there to).
REASON_RESIZING: Final = "Resizing"
REASON_SCALING_UP: Final = "ScalingUp"
REASON_SCALING_DOWN: Final = "ScalingDown"
REASON_RESIZED: Final = "Resized"
REASON_SPEC_CHANGE_REFUSED: Final = "SpecChangeRefused"
REASON_SPARE_ASSIGNED: Final = "SpareAssigned"
REASON_SPARE_FAILED: Final = "SpareFailed"
# TopologyGated: pods waiting at Kueue's topology gate; every pod past it again.
REASON_WAITING_FOR_TOPOLOGY: Final = "WaitingForTopology"
REASON_UNGATED: Final = "Ungated"

# --- names --------------------------------------------------------------------------------


def replica_key(replica_type: str, index: int) -> str:
    """A replica's name within its job, ``<type>-<index>``: local process, log file and
    report keys, and the tail of its pod's name."""
    return f"{replica_type}-{index}"


# The one chief, as local runs, logs and reports name it.
CHIEF_KEY: Final = replica_key(CHIEF, 0)
# The replica that runs the sync loop and exports its gauges (token queue depth, R, ...).
COORDINATOR_KEY: Final = replica_key(PS, 0)


def replica_name(job: str, replica_type: str, index: int) -> str:
    """Name of the pod, its hostname and (with spares) its headless Service:
    ``<job>-<type>-<index>``."""
    return f"{job}-{replica_key(replica_type, index)}"


def disruption_budget_name(job: str) -> str:
    """Name of the job's PodDisruptionBudget (one per job): the job's own name."""
    return job


def network_policy_name(job: str) -> str:
    """Name of the job's NetworkPolicy (one per job)."""
    return f"{job}-grpc"


def pod_group_name(job: str) -> str:
    """Name of the job's PodGroup (gang scheduling): the job's own name."""
    return job


def job_service_name(job: str) -> str:
    """Name of the job's one headless Service (a job without spares): the job's own name,
    the ``subdomain`` of its replicas' pods."""
    return job


def replica_address(
    job: str, namespace: str, replica_type: str, index: int, *, replica_services: bool
) -> str:
    """gRPC address of one replica in the cluster: with ``replica_services`` its own
    headless Service's name (a spare can take that over), else its pod's hostname under the
    job's Service (``<job>-worker-3.<job>.<namespace>.svc``)."""
    host = replica_name(job, replica_type, index)
    if not replica_services:
        host = f"{host}.{job_service_name(job)}"
    return f"{host}.{namespace}.svc:{TF_PORT}"


def spare_name(job: str, number: int) -> str:
    """A spare pod's name; it keeps it when it takes a replica over."""
    return f"{job}-spare-{number}"


def spare_labels(job: str) -> dict[str, str]:
    """Labels of a spare pod waiting for a replica (no replica type: no Service selects it)."""
    return {LABEL_JOB_NAME: job, LABEL_SPARE: "true"}


def job_labels(job: str) -> dict[str, str]:
    """Labels every child of the job carries; also the selector of all its children."""
    return {LABEL_JOB_NAME: job}


def replica_labels(job: str, replica_type: str, index: int) -> dict[str, str]:
    """Labels of one replica's pod and Service; also the Service's pod selector."""
    return {
        LABEL_JOB_NAME: job,
        LABEL_REPLICA_TYPE: replica_type,
        LABEL_REPLICA_INDEX: str(index),
    }


def published_labels(job: str, replica_type: str, index: int) -> dict[str, str]:
    """What a replica's Service selects on: its labels and LABEL_PUBLISHED (a pod of the
    replica that is not being deleted carries them all)."""
    return {**replica_labels(job, replica_type, index), LABEL_PUBLISHED: PUBLISHED}


def job_selector(job: str) -> str:
    """Label selector string for list/watch calls: all children of one job."""
    return f"{LABEL_JOB_NAME}={job}"


def worker_selector(job: str) -> str:
    """Label selector of the job's worker pods (status.workerSelector: the scale
    subresource's selector, which an HPA reads)."""
    return f"{LABEL_JOB_NAME}={job},{LABEL_REPLICA_TYPE}={WORKER}"


def parse_replica_name(job: str, name: str) -> tuple[str, int] | None:
    """(type, index) of a child named by :func:`replica_name`, or None if it is not one.

    Used to index observed children by name when labels were edited or are missing.
    """
    prefix = f"{job}-"
    if not name.startswith(prefix):
        return None
    return parse_replica_key(name[len(prefix) :])


def parse_replica_key(key: str) -> tuple[str, int] | None:
    """(type, index) of a :func:`replica_key` (``worker-3``), or None if it is not one."""
    for replica_type in REPLICA_TYPES:
        head = f"{replica_type}-"
        if key.startswith(head):
            digits = key[len(head) :]
            if digits.isdigit() and str(int(digits)) == digits:
                return replica_type, int(digits)
    return None


# Service names are DNS-1035 labels (<= 63 characters, starting with a letter). The longest
# child name is "<job>-worker-<MAX_WORKERS - 1>", so the job name is bounded accordingly.
MAX_WORKERS: Final = resource.MAX_WORKERS
MAX_PARAMETER_SERVERS: Final = resource.MAX_PARAMETER_SERVERS
MAX_JOB_NAME_LENGTH: Final = resource.MAX_JOB_NAME_LENGTH
JOB_NAME_PATTERN: Final = resource.JOB_NAME_PATTERN
