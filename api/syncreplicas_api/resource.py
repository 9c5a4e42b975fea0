"""The resource's coordinates and the bounds its names and sizes must keep.

Child objects are named ``<job>-<type>-<index>`` and are DNS labels (at most 63
characters): the longest child name, ``<job>-worker-<MAX_WORKERS - 1>``, bounds the job's
name.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "syncreplicas.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SyncReplicasJob"
PLURAL: Final = "syncreplicasjobs"
SINGULAR: Final = "syncreplicasjob"
SHORT_NAME: Final = "srj"
CATEGORY: Final = "syncreplicas"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"
# spec.managedBy: this operator's own name, and Kueue's MultiKueue's (Kueue's
# apis/kueue/v1beta2 MultiKueueControllerName).
OPERATOR_MANAGER: Final = f"{GROUP}/operator"
MULTIKUEUE_MANAGER: Final = "kueue.x-k8s.io/multikueue"

PS: Final = "ps"
CHIEF: Final = "chief"
WORKER: Final = "worker"
# The order children are created in: parameter servers first, so the chief and workers
# find their variables' devices reachable as early as possible.
REPLICA_TYPES: Final = (PS, CHIEF, WORKER)

MAX_WORKERS: Final = 10000
MAX_PARAMETER_SERVERS: Final = 1000
MAX_JOB_NAME_LENGTH: Final = 63 - len(f"-{WORKER}-") - len(str(MAX_WORKERS - 1))
JOB_NAME_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# The runtime's gRPC port (TF_CONFIG addresses); the metrics port must differ from it.
TF_PORT: Final = 2222
MAX_PORT: Final = 65535
# runPolicy.spares: warm pods kept per job.
MAX_SPARES: Final = 16
