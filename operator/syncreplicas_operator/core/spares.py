"""Warm spare pods (``spec.runPolicy.spares``): how one is built, seen, and handed a replica.

A spare is a pod built like a worker's (same template, image, resources, restart policy and
volumes) whose container runs the runtime in spare mode: TensorFlow imported, nothing else,
until the operator posts it a replica's environment (docs/contract.md, "Spare pods"). Then
it trains as that replica at once, and the operator relabels it with the replica's labels,
so the replica's headless Service (its address in every TF_CONFIG) selects it. The spare
keeps its own name; the replica's key is in its labels and the ``spare-of`` annotation.

A spare only takes over a role whose pod would be built the same way: the *shape* below
hashes a role's pod without what makes it that replica (name, labels, the operator's
variables, placement), and a spare carries the shape it was built with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from . import manifests, naming, placement
from .spec import Job
from .status import POD_FAILED, POD_PENDING, POD_RUNNING, POD_SUCCEEDED

Manifest = dict[str, Any]

# The file in the pod's /tmp emptyDir where the spare keeps its assignment (a container
# restart of a spare that became a replica comes back as that replica).
SPARE_STATE: Final = f"{manifests.TMP_PATH}/syncreplicas-spare-assignment.json"
# The variables the operator gives a replica (core/tfconfig.py, manifests.py): a spare has
# none of them until it is handed a replica's (all TF_CONFIG or SYNCREPLICAS_*, the only
# names the runtime accepts in an assignment).
OWN_ENV: Final = (
    naming.ENV_TF_CONFIG,
    naming.ENV_JOB,
    naming.ENV_JOB_NAME,
    naming.ENV_NAMESPACE,
    naming.ENV_INCARNATION,
    naming.ENV_WARM_RESTARTS,
    naming.ENV_WARM_RESTART_LIMIT,
    naming.ENV_WARM_RESTART_STATE,
)


@dataclass(frozen=True)
class ObservedSpare:
    """What the planner needs to know about one spare pod not yet holding a replica."""

    name: str
    uid: str = ""
    phase: str = POD_PENDING
    ready: bool = False
    deleting: bool = False
    pod_ip: str = ""
    node_name: str = ""
    token: str = ""
    shape: str = ""

    @property
    def ended(self) -> bool:
        return self.phase in (POD_SUCCEEDED, POD_FAILED)


def shape(job: Job, replica_type: str, *, default_image: str = manifests.DEFAULT_IMAGE) -> str:
    """A short hash of the role's pod without its identity: equal for two roles when a spare
    built for one may become the other."""
    pod = manifests.build_pod(job, replica_type, 0, default_image=default_image)
    template_meta = manifests.role_template(job.spec, replica_type).get("metadata") or {}
    spec = pod["spec"]
    for key in ("affinity", "topologySpreadConstraints"):
        spec.pop(key, None)
    # The chief's checkpoint emptyDir is the operator's, the same for any role: every spare
    # has it (build_spare), so that a spare may become the chief.
    spec["volumes"] = [
        v for v in spec.get("volumes") or [] if v.get("name") != manifests.CHECKPOINT_VOLUME
    ]
    for container in spec.get("containers") or []:
        if container.get("name") == naming.CONTAINER_NAME:
            container["env"] = [
                e for e in container.get("env") or [] if e.get("name") not in OWN_ENV
            ]
            container["volumeMounts"] = [
                m
                for m in container.get("volumeMounts") or []
                if m.get("name") != manifests.CHECKPOINT_VOLUME
            ]
    body = {"metadata": template_meta, "spec": spec}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runtime_container(pod: Manifest) -> Manifest:
    for container in pod["spec"].get("containers") or []:
        if container.get("name") == naming.CONTAINER_NAME:
            return dict(container)
    raise ValueError("the pod has no runtime container")


def token_for(entropy: str, name: str) -> str:
    """The secret of spare ``name``: the pass's entropy (from the operator's random source)
    hashed with the name, so spares created in one pass get different secrets."""
    return hashlib.sha256(f"{entropy}/{name}".encode()).hexdigest()


def build_spare(
    job: Job,
    number: int,
    token: str,
    *,
    default_image: str = manifests.DEFAULT_IMAGE,
    avoid_nodes: Collection[str] = (),
) -> Manifest:
    """Spare pod ``number``: a worker's pod without a replica's identity, in spare mode."""
    pod = manifests.build_pod(
        job, naming.WORKER, 0, default_image=default_image, avoid_nodes=avoid_nodes
    )
    meta = pod["metadata"]
    meta["name"] = naming.spare_name(job.name, number)
    labels = {
        k: v
        for k, v in meta["labels"].items()
        if k not in (naming.LABEL_REPLICA_TYPE, naming.LABEL_REPLICA_INDEX, naming.LABEL_PUBLISHED)
    }
    meta["labels"] = {**labels, **naming.spare_labels(job.name)}
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(naming.ANNOTATION_INCARNATION, None)
    annotations[naming.ANNOTATION_SPARE_SHAPE] = shape(job, naming.WORKER,
                                                       default_image=default_image)  # fmt: skip
    meta["annotations"] = annotations
    for container in pod["spec"]["containers"]:
        if container.get("name") != naming.CONTAINER_NAME:
            continue
        env = [e for e in container.get("env") or [] if e.get("name") not in OWN_ENV]
        container["env"] = [
            *env,
            {"name": naming.ENV_JOB_NAME, "value": job.name},
            {"name": naming.ENV_NAMESPACE, "value": job.namespace},
            {"name": naming.ENV_METRICS_PORT, "value": str(job.spec.metrics.port)},
            {"name": naming.ENV_SPARE_TOKEN, "value": token},
            {"name": naming.ENV_SPARE_STATE, "value": SPARE_STATE},
        ]
    _add_checkpoint_volume(job, pod, default_image)
    # Spread like the job's pods, not like worker 0 in particular.
    spec = pod["spec"]
    spec.pop("topologySpreadConstraints", None)
    placement.add_spreading(spec, job.name, naming.WORKER)
    return pod


def _add_checkpoint_volume(job: Job, pod: Manifest, default_image: str) -> None:
    """The chief's checkpoint emptyDir (when the operator gives it one) on the spare too."""
    chief = manifests.build_pod(job, naming.CHIEF, 0, default_image=default_image)
    own = manifests.CHECKPOINT_VOLUME
    volumes = [v for v in chief["spec"].get("volumes") or [] if v.get("name") == own]
    if not volumes:
        return
    mounts = [
        m
        for m in _runtime_container(chief).get("volumeMounts") or []
        if m.get("name") == own
    ]
    spec = pod["spec"]
    spec["volumes"] = [*(spec.get("volumes") or []), *volumes]
    for container in spec["containers"]:
        if container.get("name") == naming.CONTAINER_NAME:
            container["volumeMounts"] = [*(container.get("volumeMounts") or []), *mounts]


def assignment_env(
    job: Job,
    replica_type: str,
    index: int,
    incarnation: int,
    *,
    cluster: Mapping[str, list[str]] | None = None,
) -> dict[str, str]:
    """What a spare is handed to become replica (type, index) of this incarnation: the
    operator's variables of that replica's pod (TF_CONFIG, SYNCREPLICAS_*)."""
    pod = manifests.build_pod(job, replica_type, index, cluster=cluster, incarnation=incarnation)
    return {
        str(e["name"]): str(e["value"])
        for e in _runtime_container(pod).get("env") or []
        if e.get("name") in OWN_ENV and "value" in e
    }


def takeover_patch(job: Job, replica_type: str, index: int, incarnation: int) -> Manifest:
    """The metadata merge patch that makes a spare that replica's pod: its labels (the
    replica's Service selects it), a new incarnation, and no spare label."""
    return {
        "metadata": {
            "labels": {
                **naming.published_labels(job.name, replica_type, index),
                naming.LABEL_SPARE: None,
            },
            "annotations": {
                naming.ANNOTATION_INCARNATION: str(incarnation),
                naming.ANNOTATION_SPARE_OF: naming.replica_key(replica_type, index),
            },
        }
    }


def observe_spare(pod: Mapping[str, Any]) -> ObservedSpare | None:
    """Facts about a spare pod still waiting, or None when the pod is no such spare (a
    replica's pod, or a spare that took a replica over)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(naming.LABEL_SPARE) != "true" or not labels.get(naming.LABEL_JOB_NAME):
        return None
    if labels.get(naming.LABEL_REPLICA_TYPE):
        return None
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    token = ""
    for container in spec.get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == naming.ENV_SPARE_TOKEN:
                token = str(env.get("value") or "")
    ready = any(
        c.get("ready") for c in status.get("containerStatuses") or []
        if c.get("name") == naming.CONTAINER_NAME
    )  # fmt: skip
    phase = str(status.get("phase") or POD_PENDING)
    return ObservedSpare(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        phase=phase,
        ready=ready and phase == POD_RUNNING,
        deleting=bool(meta.get("deletionTimestamp")),
        pod_ip=str(status.get("podIP") or ""),
        node_name=str(spec.get("nodeName") or ""),
        token=token,
        shape=str((meta.get("annotations") or {}).get(naming.ANNOTATION_SPARE_SHAPE) or ""),
    )


def free_numbers(job: str, taken: Iterable[str], count: int) -> list[int]:
    """The ``count`` lowest spare numbers whose names no pod of the job has."""
    names = set(taken)
    out: list[int] = []
    number = 0
    while len(out) < count:
        if naming.spare_name(job, number) not in names:
            out.append(number)
        number += 1
    return out
