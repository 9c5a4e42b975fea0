"""Kueue (``kueue.x-k8s.io/v1beta2``): a job labelled ``kueue.x-k8s.io/queue-name`` runs
only while the Workload the operator writes for it is admitted. PURE.

The operator does for its jobs what Kueue's job framework does for the kinds built into
Kueue (docs/architecture.md, "Queues"): it writes one Workload per job, owned by the job,
whose pod sets are the job's roles (``ps``, ``chief``, ``worker``; spares count as workers)
with their pods' requests; it keeps the job's pods away until Kueue admits the Workload
(QuotaReserved and Admitted), then builds them with the admitted flavors' node labels and
tolerations; when Kueue evicts it (preemption, a stopped queue, deactivation) it stops
the job as a suspend does and, once no pod is left, gives the quota back (the admission
cleared, QuotaReserved false, Requeued true for a preemption), as Kueue leaves that to the
job's controller; a finished job's Workload is marked Finished.

The Workload's pod sets must match the job: a job whose pods would not fit what was
admitted (more workers after a resize, another template) is stopped and queued again with
a new Workload. Fewer workers than admitted run on within the admission.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Final

from . import kueuetas, manifests, naming, podtemplate
from .spec import Job
from .status import condition_is_true, find_condition

GROUP: Final = kueuetas.GROUP  # kueue.x-k8s.io: the one spelling, in kueuetas (imported here)
VERSION: Final = "v1beta2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
WORKLOAD_KIND: Final = "Workload"
WORKLOAD_PLURAL: Final = "workloads"
FLAVOR_PLURAL: Final = "resourceflavors"
PRIORITY_CLASS_KIND: Final = "WorkloadPriorityClass"
PRIORITY_CLASS_PLURAL: Final = "workloadpriorityclasses"

# On the job (set by its user), as on Kueue's built-in kinds.
QUEUE_NAME_LABEL: Final = f"{GROUP}/queue-name"
PRIORITY_CLASS_LABEL: Final = f"{GROUP}/priority-class"
# On a worker cluster's copy of a job that MultiKueue dispatched: its Workload's name.
PREBUILT_WORKLOAD_LABEL: Final = f"{GROUP}/prebuilt-workload-name"
# On the Workload, as Kueue's job framework sets it.
JOB_UID_LABEL: Final = f"{GROUP}/job-uid"
# On the Workload: a hash of its pod sets' templates (templates_hash).
ANNOTATION_TEMPLATES: Final = f"{naming.GROUP}/pod-templates"

# Workload conditions and reasons (Kueue's apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED: Final = "QuotaReserved"
ADMITTED: Final = "Admitted"
EVICTED: Final = "Evicted"
REQUEUED: Final = "Requeued"
FINISHED: Final = "Finished"
REASON_PREEMPTED: Final = "Preempted"
REASON_NODE_FAILURES: Final = "NodeFailures"
REASON_PENDING: Final = "Pending"
REASON_NO_RESERVATION: Final = "NoReservation"

# The job's Suspended condition while Kueue holds it.
REASON_QUEUED: Final = "Queued"
REASON_EVICTED: Final = "EvictedByKueue"
REASON_ADMITTED: Final = "AdmittedByKueue"


class State(Enum):
    PENDING = "pending"  # waiting for quota
    ADMITTED = "admitted"
    EVICTED = "evicted"  # Kueue wants the quota back
    FINISHED = "finished"


@dataclass(frozen=True)
class ObservedWorkload:
    """A job's Workload as last seen."""

    name: str
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    templates: str = ""  # its ANNOTATION_TEMPLATES
    counts: Mapping[str, int] = field(default_factory=dict)  # spec.podSets: name -> count
    active: bool = True
    deleting: bool = False
    conditions: tuple[Mapping[str, Any], ...] = ()
    # status.admission (None: no quota reserved).
    admission: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Flavor:
    """What a ResourceFlavor asks of the pods that use it."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def queue_name(job: Job) -> str | None:
    """The LocalQueue the job's user put it in (None: Kueue does not manage it)."""
    return job.labels.get(QUEUE_NAME_LABEL) or None


def waiting_in(job: Job, conditions: Sequence[Mapping[str, Any]]) -> str | None:
    """The queue the job waits in for admission (held by Kueue: Suspended True, reason
    Queued or EvictedByKueue), else None."""
    held = find_condition(conditions, naming.CONDITION_SUSPENDED)
    if held is None or held.get("status") != "True":
        return None
    return queue_name(job) if held.get("reason") in (REASON_QUEUED, REASON_EVICTED) else None


def priority_class(job: Job) -> str | None:
    return job.labels.get(PRIORITY_CLASS_LABEL) or None


def prebuilt_workload(job: Job) -> str | None:
    """The Workload MultiKueue made for the job on this (worker) cluster, named by its copy
    of the job (the label PREBUILT_WORKLOAD_LABEL): the job runs under it, none is made."""
    return job.labels.get(PREBUILT_WORKLOAD_LABEL) or None


def workload_name(job: Job) -> str:
    """Kueue's naming of a job's Workload: ``<kind>-<name>-<5 hex of the job's identity>``;
    a prebuilt one's name where MultiKueue made it."""
    prebuilt = prebuilt_workload(job)
    if prebuilt is not None:
        return prebuilt
    identity = f"{naming.KIND}\n{naming.GROUP}\n{job.name}\n{job.uid or ''}"
    digest = hashlib.sha1(identity.encode(), usedforsecurity=False).hexdigest()[:5]
    return f"{naming.KIND.lower()}-{job.name}"[:247] + f"-{digest}"


def counts(job: Job) -> dict[str, int]:
    """Pods per pod set: every role with replicas; workers plus spares (built alike)."""
    found = {role: n for role, n in job.spec.replica_counts().items() if n}
    if found.get(naming.WORKER):
        found[naming.WORKER] += job.spec.run_policy.spares
    return found


def pod_sets(job: Job, *, default_image: str = manifests.DEFAULT_IMAGE) -> list[dict[str, Any]]:
    """The Workload's pod sets: each role's pod (requests, node selector, affinity,
    tolerations) without what names one replica (its environment)."""
    sets = []
    for role, count in counts(job).items():
        pod = manifests.build_pod(job, role, 0, default_image=default_image)
        spec = copy.deepcopy(pod["spec"])
        for container in spec.get("containers") or []:
            container.pop("env", None)
        podset: dict[str, Any] = {"name": role, "count": count, "template": {"spec": spec}}
        request = kueuetas.topology_request(_role_annotations(job, role))
        if request is not None:
            podset["topologyRequest"] = request
        sets.append(podset)
    return sets


def _role_annotations(job: Job, role: str) -> Mapping[str, Any]:
    metadata = manifests.role_template(job.spec, role).get("metadata") or {}
    return metadata.get("annotations") or {}


def topology_conflict(job: Job) -> str | None:
    """Why a role's topology annotations make no request Kueue takes, or None."""
    for role in counts(job):
        said = kueuetas.conflict(role, _role_annotations(job, role))
        if said:
            return said
    return None


def workload_problem(job: Job, priority_problem: str = "") -> str:
    """Why the job's Workload cannot be written ("" if it can): its priority class label
    names none (``priority_problem``, as controller/queueing read it), or a role's
    topology annotations conflict. Both the operator's own jobs (plan/queue.py) and
    MultiKueue's (managed.py) are held on it."""
    return priority_problem or topology_conflict(job) or ""


def templates_hash(sets: Sequence[Mapping[str, Any]]) -> str:
    """A hash of the pod sets' names, templates and topology requests (not their counts)."""
    text = json.dumps(
        [(s["name"], s["template"], *((s["topologyRequest"],) if "topologyRequest" in s else ()))
         for s in sets],
        sort_keys=True, separators=(",", ":"),
    )  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_workload(
    job: Job,
    queue: str,
    *,
    priority: tuple[str, int] | None = None,
    default_image: str = manifests.DEFAULT_IMAGE,
) -> dict[str, Any]:
    """The job's Workload in ``queue``; ``priority`` is its WorkloadPriorityClass (name,
    value): Kueue's scheduler reads the value, its metrics the name."""
    sets = pod_sets(job, default_image=default_image)
    metadata: dict[str, Any] = {
        "name": workload_name(job),
        "namespace": job.namespace,
        "labels": {
            **naming.job_labels(job.name),
            naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
            **({JOB_UID_LABEL: job.uid} if job.uid else {}),
        },
        "annotations": {ANNOTATION_TEMPLATES: templates_hash(sets)},
    }
    owner = manifests.owner_reference(job)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"queueName": queue, "podSets": sets}
    if priority is not None:
        name, value = priority
        spec["priorityClassRef"] = {"group": GROUP, "kind": PRIORITY_CLASS_KIND, "name": name}
        spec["priority"] = value
    return {"apiVersion": API_VERSION, "kind": WORKLOAD_KIND, "metadata": metadata, "spec": spec}


def observe_workload(body: Mapping[str, Any]) -> ObservedWorkload:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    return ObservedWorkload(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        generation=int(meta.get("generation") or 0),
        templates=str((meta.get("annotations") or {}).get(ANNOTATION_TEMPLATES, "")),
        counts={
            str(p.get("name")): int(p.get("count") or 0)
            for p in spec.get("podSets") or []
            if isinstance(p, Mapping)
        },
        active=spec.get("active", True) is not False,
        deleting=bool(meta.get("deletionTimestamp")),
        conditions=tuple(c for c in status.get("conditions") or [] if isinstance(c, Mapping)),
        admission=status.get("admission") or None,
    )


def state(workload: ObservedWorkload) -> tuple[State, str]:
    """Where Kueue has the Workload, and why in Kueue's words."""
    if condition_is_true(workload.conditions, FINISHED):
        return State.FINISHED, _message(workload, FINISHED)
    if condition_is_true(workload.conditions, EVICTED):
        return State.EVICTED, _message(workload, EVICTED)
    if condition_is_true(workload.conditions, ADMITTED) and workload.admission is not None:
        return State.ADMITTED, _message(workload, ADMITTED)
    if workload.admission is not None:  # quota reserved, admission checks pending
        return State.PENDING, _message(workload, ADMITTED) or "waiting for admission checks"
    said = _message(workload, QUOTA_RESERVED)
    return State.PENDING, said or f"waiting for quota in its queue (Workload {workload.name})"


def _message(workload: ObservedWorkload, kind: str) -> str:
    found = find_condition(workload.conditions, kind)
    return str(found.get("message") or "") if found else ""


def eviction_reason(workload: ObservedWorkload) -> str:
    found = find_condition(workload.conditions, EVICTED)
    return str(found.get("reason") or "") if found else ""


def admitted_counts(workload: ObservedWorkload) -> dict[str, int]:
    """Pods per pod set that the admission holds quota for."""
    assignments = (workload.admission or {}).get("podSetAssignments") or []
    return {str(a.get("name")): int(a.get("count") or 0) for a in assignments}


def fits(workload: ObservedWorkload, job: Job, templates: str) -> bool:
    """Whether the job's pods may run under the Workload: the same pod templates, and the
    same counts or, once admitted, no more pods per set than were admitted."""
    if workload.templates != templates:
        return False
    wanted = counts(job)
    if wanted == dict(workload.counts):
        return True
    admitted = admitted_counts(workload)
    return workload.admission is not None and all(
        admitted.get(role, 0) >= n for role, n in wanted.items()
    )


def flavors_of(workload: ObservedWorkload) -> frozenset[str]:
    """The ResourceFlavors its admission assigned."""
    names: set[str] = set()
    for assignment in (workload.admission or {}).get("podSetAssignments") or []:
        names.update(str(f) for f in (assignment.get("flavors") or {}).values())
    return frozenset(names)


def admitted_job(job: Job, workload: ObservedWorkload, flavors: Mapping[str, Flavor]) -> Job:
    """The job with each role's template asking for its admitted flavors' node labels and
    tolerations (what Kueue's job framework injects on start), and gated for Kueue's
    topology ungater where the role was admitted by TAS (core/kueuetas.py). A flavor not
    in ``flavors`` adds nothing."""
    roles = dict(job.spec.role_templates)
    for assignment in (workload.admission or {}).get("podSetAssignments") or []:
        role = str(assignment.get("name"))
        if role not in naming.REPLICA_TYPES:
            continue
        if kueuetas.assigned_by_tas(assignment):
            asked = kueuetas.topology_request(_role_annotations(job, role)) is not None
            gated = kueuetas.gated_template(workload.name, role, asked)
            roles[role] = podtemplate.merge_templates(roles.get(role, {}), gated)
        selector: dict[str, str] = {}
        tolerations: list[Mapping[str, Any]] = []
        for name in sorted(set((assignment.get("flavors") or {}).values())):
            flavor = flavors.get(str(name))
            if flavor is not None:
                selector.update(flavor.node_labels)
                tolerations.extend(t for t in flavor.tolerations if t not in tolerations)
        if not selector and not tolerations:
            continue
        current = manifests.role_template(job.spec, role).get("spec") or {}
        extra: dict[str, Any] = {"nodeSelector": selector} if selector else {}
        if tolerations:
            have = list(current.get("tolerations") or [])
            extra["tolerations"] = have + [t for t in tolerations if t not in have]
        roles[role] = podtemplate.merge_templates(roles.get(role, {}), {"spec": extra})
    return replace(job, spec=replace(job.spec, role_templates=roles))


def _set(
    conditions: list[dict[str, Any]], kind: str, value: bool, reason: str, message: str,
    now: str, generation: int,
) -> None:  # fmt: skip
    status = "True" if value else "False"
    for existing in conditions:
        if existing.get("type") == kind:
            if existing.get("status") != status:
                existing["lastTransitionTime"] = now
            existing.update(status=status, reason=reason, message=message,
                            observedGeneration=generation)  # fmt: skip
            return
    conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                       "lastTransitionTime": now, "observedGeneration": generation})  # fmt: skip


def release_patch(workload: ObservedWorkload, now: str) -> dict[str, Any]:
    """The Workload's status once the evicted job has no pod left: the quota given back
    (what Kueue's job framework writes: Requeued for a preemption or node failures,
    QuotaReserved false, no admission, Admitted false). A JSON merge patch guarded by the
    resourceVersion it was computed from; it carries the whole conditions list."""
    conditions = [dict(c) for c in workload.conditions]
    reason = eviction_reason(workload)
    message = _message(workload, EVICTED)
    requeue = reason in (REASON_PREEMPTED, REASON_NODE_FAILURES)
    _set(conditions, REQUEUED, requeue, reason or REASON_PENDING, message, now,
         workload.generation)  # fmt: skip
    _set(conditions, QUOTA_RESERVED, False, REASON_PENDING, message, now, workload.generation)
    _set(conditions, ADMITTED, False, REASON_NO_RESERVATION,
         "The workload has no reservation", now, workload.generation)  # fmt: skip
    return {
        "metadata": {"resourceVersion": workload.resource_version},
        "status": {"admission": None, "conditions": conditions},
    }


def finish_patch(
    workload: ObservedWorkload, succeeded: bool, message: str, now: str
) -> dict[str, Any]:
    """The Workload marked Finished (Kueue frees its quota)."""
    conditions = [dict(c) for c in workload.conditions]
    _set(conditions, FINISHED, True, "Succeeded" if succeeded else "Failed", message, now,
         workload.generation)  # fmt: skip
    return {
        "metadata": {"resourceVersion": workload.resource_version},
        "status": {"conditions": conditions},
    }
