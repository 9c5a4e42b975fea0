"""The Kubernetes objects a SyncReplicasJob consists of, as plain dicts: one Pod per
replica, one headless Service per job (per replica for a job with spares: see
:func:`uses_replica_services`), a NetworkPolicy and a PodDisruptionBudget per job.

Pure builders: templates are deep-copied, inputs never mutated, names deterministic.

Pod template: ``spec.template`` for every role, with ``spec.<role>.template`` merged on
top (``core/podtemplate.py``: the merge, and which container carries the runtime: one
named ``syncreplicas`` or ``tensorflow``, or a template's only container; it is named
``syncreplicas`` in the pod, and added if the template has none; every other container
is a sidecar, kept as it is). The operator always sets its
contract environment (``TF_CONFIG``, ``SYNCREPLICAS_JOB``, ...), the ports ``tf`` and
``metrics``, the labels, the owner reference and the pod's restartPolicy (below); the
command, image and ``terminationMessagePolicy: FallbackToLogsOnError`` only where the
template sets none. Security settings are defaults: each
applies only where the template sets nothing (non-root uid 10001 as in the runtime image,
no privilege escalation, read-only root filesystem with writable emptyDirs at /tmp and,
on the chief, at the checkpoint directory unless a mount covers it, all capabilities
dropped, seccomp RuntimeDefault, no service-account token, no service links:
with a Service per replica, service-link variables would grow with the job).

Pod restartPolicy (see :func:`pod_restart_policy`): the job's run policy is the operator's
to implement, so the kubelet restarts a container in place only where that cannot bypass
a decision the operator must take first:

* ``runPolicy.restartPolicy: OnFailure`` -> pods ``OnFailure``. An in-place restart is the
  fastest recovery and keeps the pod's emptyDir (the chief's checkpoints) and its address;
  the operator counts restarts (``restartCount``) against ``backoffLimit`` and sees a chief
  restart as a restart count that moved. The chief under ``chiefRestartPolicy: Fail`` is
  the exception (``Never``): a restarted chief would train again before the job is failed.
* ``Never`` and ``ExitCode`` -> pods ``Never``: the operator must see the exit code before
  anything restarts (ExitCode fails the job on the runtime's non-retryable codes), so it
  replaces failed pods itself. A replaced chief pod loses an emptyDir: mount a persistent
  volume at ``training.checkpointDir`` to restore after a chief replacement.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from . import naming, placement, podsecurity, podtemplate, policy, tensorboard, tfconfig
from .enums import ChiefRestartPolicy, GangScheduler, RestartPolicy
from .spec import Job, JobSpec

# The image the chart publishes; the operator passes its configured one (default_image=).
DEFAULT_IMAGE: Final = "ghcr.io/syncreplicas/syncreplicas-runtime:0.1.0"
RUNTIME_COMMAND: Final = ("python", "-m", "syncreplicas_runtime")
TMP_VOLUME: Final = "syncreplicas-tmp"
CHECKPOINT_VOLUME: Final = "syncreplicas-checkpoints"
TMP_PATH: Final = "/tmp"
WARM_RESTART_STATE: Final = f"{TMP_PATH}/syncreplicas-warm-restarts"
DEFAULT_UID: Final = podsecurity.DEFAULT_UID

# core/v1 Container.terminationMessagePolicy: the termination message file, else the
# log's tail when the container failed without writing one.
TERMINATION_MESSAGE_POLICY: Final = "FallbackToLogsOnError"

# A Pod's own restartPolicy (core/v1), not the job's runPolicy.restartPolicy.
POD_RESTART_NEVER: Final = "Never"
POD_RESTART_ON_FAILURE: Final = "OnFailure"

Manifest = dict[str, Any]


def role_template(spec: JobSpec, replica_type: str) -> Manifest:
    """The PodTemplateSpec of one role: base template with the role's override merged."""
    return podtemplate.role_template(spec.template, spec.role_templates.get(replica_type, {}))


def pod_restart_policy(spec: JobSpec, replica_type: str) -> str:
    """The pods' restartPolicy for this run policy and role (module docstring: why)."""
    if spec.run_policy.restart_policy != RestartPolicy.ON_FAILURE:
        return POD_RESTART_NEVER
    if replica_type == naming.CHIEF and spec.chief_restart_policy == ChiefRestartPolicy.FAIL:
        return POD_RESTART_NEVER
    return POD_RESTART_ON_FAILURE


def warm_restart_env(spec: JobSpec, replica_type: str) -> list[Manifest]:
    """The variables that turn the runtime's warm restarts on (policy.restarts_warm): the
    job's restartPolicy, backoffLimit as the pod's budget, and a file in the pod's /tmp
    (an emptyDir: it outlives a container restart) for the pod's count."""
    run = spec.run_policy
    if not policy.restarts_warm(run, replica_type, spec.chief_restart_policy):
        return []
    return [
        {"name": naming.ENV_WARM_RESTARTS, "value": str(run.restart_policy)},
        {"name": naming.ENV_WARM_RESTART_LIMIT, "value": str(run.backoff_limit)},
        {"name": naming.ENV_WARM_RESTART_STATE, "value": WARM_RESTART_STATE},
    ]


def owner_reference(job: Job) -> dict[str, Any] | None:
    """The job as controller owner of its children; None before it has a uid (render)."""
    if not job.uid:
        return None
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(job: Job, name: str, labels: Mapping[str, str]) -> Manifest:
    metadata: Manifest = {
        "name": name,
        "namespace": job.namespace,
        "labels": {**labels, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
    }
    owner = owner_reference(job)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return metadata


def _ports(spec: JobSpec) -> list[Manifest]:
    ports: list[Manifest] = [
        {"name": naming.TF_PORT_NAME, "containerPort": naming.TF_PORT, "protocol": "TCP"}
    ]
    if spec.metrics.port:
        ports.append(
            {
                "name": naming.METRICS_PORT_NAME,
                "containerPort": spec.metrics.port,
                "protocol": "TCP",
            }
        )
    return ports


def uses_replica_services(spec: JobSpec, *, observed: bool = False) -> bool:
    """Whether the job's replicas are addressed through a headless Service each, not through
    their pods' hostnames under one Service for the job. A spare takes a replica over by
    taking its Service (a pod's hostname cannot change), so a job with spares has one per
    replica; so does a job whose per-replica Services are ``observed`` (made so, or by an
    earlier operator): its running pods were told those addresses. One Service per job
    halves the writes that create it, and the EndpointSlices behind them."""
    return observed or spec.run_policy.spares > 0


def job_cluster(job: Job, *, replica_services: bool | None = None) -> dict[str, list[str]]:
    """The job's TF cluster spec on Kubernetes (every replica's address; ``None``: as
    :func:`uses_replica_services` says for a new job). Built once per job and passed to
    :func:`build_pod`: rebuilding it per pod makes a job's pods cost O(workers^2)."""
    if replica_services is None:
        replica_services = uses_replica_services(job.spec)
    address = tfconfig.cluster_addresses(
        job.name, job.namespace, replica_services=replica_services
    )
    return tfconfig.cluster_spec(job.spec, address)


def _environment(
    job: Job, replica_type: str, index: int, cluster: Mapping[str, list[str]]
) -> list[Manifest]:
    values = tfconfig.replica_environment(
        job.name, job.namespace, job.spec, cluster, replica_type, index
    )
    return [{"name": name, "value": value} for name, value in values.items()]


def build_pod(
    job: Job,
    replica_type: str,
    index: int,
    *,
    default_image: str = DEFAULT_IMAGE,
    annotations: Mapping[str, str] | None = None,
    cluster: Mapping[str, list[str]] | None = None,
    incarnation: int | None = None,
    avoid_nodes: Collection[str] = (),
    replica_services: bool | None = None,
) -> Manifest:
    """The Pod of one replica. ``annotations`` are added (e.g. a restart round);
    ``cluster`` is :func:`job_cluster`'s result, when the caller builds many pods (with the
    same ``replica_services``: without them the pod's hostname and subdomain make its
    address under the job's Service);
    ``incarnation`` (the operator's clock in ms) goes into an annotation and
    ``SYNCREPLICAS_INCARNATION``; ``avoid_nodes`` are nodes the pod must not run on
    (lost ones). Tolerations and spreading: ``core/placement.py``."""
    spec = job.spec
    if not 0 <= index < spec.replica_count(replica_type):
        raise ValueError(f"{replica_type} index {index} out of range for job {job.name}")
    if replica_services is None:
        replica_services = uses_replica_services(spec)
    template = role_template(spec, replica_type)
    pod_spec: Manifest = copy.deepcopy(template.get("spec") or {})
    labels = naming.published_labels(job.name, replica_type, index)
    metadata = _metadata(job, naming.replica_name(job.name, replica_type, index), labels)
    template_meta = template.get("metadata") or {}
    metadata["labels"] = {**(template_meta.get("labels") or {}), **metadata["labels"]}
    pod_annotations = dict(template_meta.get("annotations") or {})
    if job.generation is not None:
        pod_annotations[naming.ANNOTATION_JOB_GENERATION] = str(job.generation)
    pod_annotations.update(annotations or {})
    if incarnation is not None:
        pod_annotations[naming.ANNOTATION_INCARNATION] = str(incarnation)
    if pod_annotations:
        metadata["annotations"] = pod_annotations

    containers: list[Manifest] = [copy.deepcopy(c) for c in pod_spec.get("containers") or []]
    position = next(
        (i for i, c in enumerate(containers) if c.get("name") == naming.CONTAINER_NAME), None
    )
    container: Manifest = (
        containers[position] if position is not None else {"name": naming.CONTAINER_NAME}
    )
    if position is None:
        containers.insert(0, container)
    pod_spec["containers"] = containers

    container["image"] = container.get("image") or spec.image or default_image
    container.setdefault("command", list(RUNTIME_COMMAND))
    own_ports = _ports(spec)
    own_port_names = {p["name"] for p in own_ports}
    own_port_numbers = {p["containerPort"] for p in own_ports}
    container["ports"] = own_ports + [
        p
        for p in container.get("ports") or []
        if p.get("name") not in own_port_names and p.get("containerPort") not in own_port_numbers
    ]
    if cluster is None:
        cluster = job_cluster(job, replica_services=replica_services)
    own_env = _environment(job, replica_type, index, cluster)
    if incarnation is not None:
        own_env.append({"name": naming.ENV_INCARNATION, "value": str(incarnation)})
    own_env += warm_restart_env(spec, replica_type)
    own_env_names = {e["name"] for e in own_env}
    user_env = [e for e in container.get("env") or [] if e.get("name") not in own_env_names]
    container["env"] = user_env + own_env
    if spec.metrics.port:
        container.setdefault(
            "readinessProbe",
            {
                "httpGet": {"path": naming.READINESS_PATH, "port": naming.METRICS_PORT_NAME},
                "periodSeconds": 5,
                "failureThreshold": 3,
            },
        )
    # The runtime writes its exit line (and the chief its final step) to the default
    # terminationMessagePath; a crash that wrote nothing still explains itself with the
    # log's tail (docs/contract.md, "Termination message").
    container.setdefault("terminationMessagePolicy", TERMINATION_MESSAGE_POLICY)
    podsecurity.secure_container(container)
    writable = {TMP_VOLUME: TMP_PATH}
    if replica_type == naming.CHIEF and spec.training.checkpoint_dir:
        writable[CHECKPOINT_VOLUME] = spec.training.checkpoint_dir
    podsecurity.writable_dirs(pod_spec, container, writable)
    if replica_type == naming.CHIEF:
        tensorboard.add_sidecar(spec, pod_spec, container, TMP_PATH)
    podsecurity.secure_pod(pod_spec)
    placement.add_tolerations(pod_spec)
    placement.add_spreading(pod_spec, job.name, replica_type)
    placement.avoid_nodes(pod_spec, avoid_nodes)
    pod_spec["restartPolicy"] = pod_restart_policy(spec, replica_type)
    if not replica_services:
        pod_spec["hostname"] = metadata["name"]
        pod_spec["subdomain"] = naming.job_service_name(job.name)
    _join_pod_group(job, metadata, pod_spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _join_pod_group(job: Job, metadata: Manifest, pod_spec: Manifest) -> None:
    """Hand the pod to the gang scheduler and put it in the job's PodGroup."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is None:
        return
    # The policy is explicit about its scheduler: it wins over a template's schedulerName.
    pod_spec["schedulerName"] = policy.scheduler_name
    group = naming.pod_group_name(job.name)
    if policy.gang_scheduler == GangScheduler.COSCHEDULING:
        metadata["labels"][naming.COSCHEDULING_POD_GROUP_LABEL] = group
    else:
        metadata.setdefault("annotations", {})[naming.VOLCANO_GROUP_ANNOTATION] = group


def pod_group_api_version(spec: JobSpec) -> str | None:
    """The PodGroup API the job's gang scheduler reads; None without a scheduling policy."""
    policy = spec.run_policy.scheduling_policy
    if policy is None:
        return None
    if policy.gang_scheduler == GangScheduler.COSCHEDULING:
        return naming.COSCHEDULING_API_VERSION
    return naming.VOLCANO_API_VERSION


def pod_group_min_member(spec: JobSpec) -> int:
    """Pods that must be placed together for the job to train at all: every PS, the chief
    and the workers that make up min(replicasToAggregate, replicas) gradient replicas. A
    replica beyond that is a backup: it may wait for room without holding the others.

    An elastic job trains with elasticPolicy.minWorkers workers (its rules make
    minReplicasToAggregate fit them), so those are the workers counted: the group stays
    the same through every resize and never asks for more pods than a scaled-down job has."""
    policy = spec.elastic_policy
    replicas = 1 + policy.min_workers if policy is not None else spec.total_replicas
    return spec.parameter_servers + min(spec.replicas_to_aggregate, replicas)


def build_pod_group(job: Job) -> Manifest:
    """The job's PodGroup for its gang scheduler (the job must have a scheduling policy)."""
    policy = job.spec.run_policy.scheduling_policy
    api_version = pod_group_api_version(job.spec)
    if policy is None or api_version is None:
        raise ValueError(f"job {job.name} has no runPolicy.schedulingPolicy")
    group_spec: Manifest = {"minMember": pod_group_min_member(job.spec)}
    if policy.schedule_timeout_seconds is not None:
        group_spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    if policy.queue is not None:
        group_spec["queue"] = policy.queue
    return {
        "apiVersion": api_version,
        "kind": naming.POD_GROUP_KIND,
        "metadata": _metadata(job, naming.pod_group_name(job.name), naming.job_labels(job.name)),
        "spec": group_spec,
    }


def build_service(job: Job, replica_type: str, index: int) -> Manifest:
    """The headless Service of one replica (a job with spares), named like its pod: as
    :func:`build_job_service`, for one replica."""
    if not 0 <= index < job.spec.replica_count(replica_type):
        raise ValueError(f"{replica_type} index {index} out of range for job {job.name}")
    return _headless_service(
        job,
        naming.replica_name(job.name, replica_type, index),
        naming.replica_labels(job.name, replica_type, index),
        naming.published_labels(job.name, replica_type, index),
    )


def build_job_service(job: Job) -> Manifest:
    """The job's headless Service, named like the job: the subdomain under which each
    replica's pod hostname resolves to it. Addresses are published before a pod is ready:
    gRPC peers must resolve each other while starting up; and no longer once the pod is
    being deleted (it selects naming.LABEL_PUBLISHED, which the operator then removes:
    plan/children.py)."""
    selector = {**naming.job_labels(job.name), naming.LABEL_PUBLISHED: naming.PUBLISHED}
    name = naming.job_service_name(job.name)
    return _headless_service(job, name, naming.job_labels(job.name), selector)


def build_tensorboard_service(job: Job) -> Manifest:
    """The Service of the chief's TensorBoard (spec.tensorboard: core/tensorboard.py)."""
    name = tensorboard.service_name(job.name)
    return tensorboard.build_service(job, _metadata(job, name, naming.job_labels(job.name)))


def _headless_service(
    job: Job, name: str, labels: Mapping[str, str], selector: Mapping[str, str]
) -> Manifest:
    ports: list[Manifest] = [
        {
            "name": naming.TF_PORT_NAME,
            "port": naming.TF_PORT,
            "targetPort": naming.TF_PORT,
            "protocol": "TCP",
        }
    ]
    if job.spec.metrics.port:
        ports.append(
            {
                "name": naming.METRICS_PORT_NAME,
                "port": job.spec.metrics.port,
                "targetPort": job.spec.metrics.port,
                "protocol": "TCP",
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": dict(selector),
            "ports": ports,
        },
    }


def build_disruption_budget(job: Job) -> Manifest:
    """The job's PodDisruptionBudget: at most one of its pods evicted at a time (a drain
    moves one replica, never two parameter servers at once). A pod that is not ready may
    always be evicted, so a pending or crashing replica never blocks a drain."""
    return {
        "apiVersion": "policy/v1",
        "kind": naming.DISRUPTION_BUDGET_KIND,
        "metadata": _metadata(
            job, naming.disruption_budget_name(job.name), naming.job_labels(job.name)
        ),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": naming.job_labels(job.name)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_network_policy(job: Job, *, metrics_from: Sequence[str] = ()) -> Manifest:
    """Ingress to the job's pods: gRPC only from the job's own pods (TensorFlow's gRPC has
    no authentication); metrics from anywhere (scrapers), or with ``metrics_from`` only
    from pods in those namespaces; TensorBoard (spec.tensorboard) from pods in the job's
    namespace. Other ingress is denied."""
    selector = {"matchLabels": naming.job_labels(job.name)}
    ingress: list[Manifest] = [
        {
            "from": [{"podSelector": copy.deepcopy(selector)}],
            "ports": [{"protocol": "TCP", "port": naming.TF_PORT}],
        }
    ]
    if job.spec.metrics.port:
        metrics: Manifest = {"ports": [{"protocol": "TCP", "port": job.spec.metrics.port}]}
        if metrics_from:
            # Every namespace carries its name in this label (set by the API server).
            names = sorted(set(metrics_from))
            metrics["from"] = [{"namespaceSelector": {"matchExpressions": [
                {"key": naming.NAMESPACE_NAME_LABEL, "operator": "In", "values": names}
            ]}}]  # fmt: skip
        ingress.append(metrics)
    board = tensorboard.network_policy_rule(job)
    if board is not None:
        ingress.append(board)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(
            job, naming.network_policy_name(job.name), naming.job_labels(job.name)
        ),
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def build_children(
    job: Job, *, default_image: str = DEFAULT_IMAGE, metrics_from: Sequence[str] = ()
) -> list[Manifest]:
    """Everything a new job consists of, in creation order: its PodGroup (with a scheduling
    policy), the NetworkPolicy, the PodDisruptionBudget, then the job's Service and its
    replicas' Pods (PS, chief, workers); with spares each replica's Service before its
    Pod (the spares themselves: plan/spares.py); with spec.tensorboard its Service after
    the job's."""
    children: list[Manifest] = []
    if job.spec.run_policy.scheduling_policy is not None:
        children.append(build_pod_group(job))
    children.append(build_network_policy(job, metrics_from=metrics_from))
    children.append(build_disruption_budget(job))
    per_replica = uses_replica_services(job.spec)
    cluster = job_cluster(job, replica_services=per_replica)
    if not per_replica:
        children.append(build_job_service(job))
    if job.spec.tensorboard is not None:
        children.append(build_tensorboard_service(job))
    for replica_type, count in job.spec.replica_counts().items():
        for index in range(count):
            if per_replica:
                children.append(build_service(job, replica_type, index))
            children.append(
                build_pod(
                    job,
                    replica_type,
                    index,
                    default_image=default_image,
                    cluster=cluster,
                    replica_services=per_replica,
                )
            )
    return children
