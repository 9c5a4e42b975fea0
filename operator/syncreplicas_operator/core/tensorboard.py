"""``spec.tensorboard``: TensorBoard in the chief's pod, on the summaries the chief writes.

Pure builders. The chief's pod gets a native sidecar (an init container with
``restartPolicy: Always``: it starts before the runtime without delaying it, and the pod
still completes when training ends), named ``tensorboard``, running ``tensorboard.main``
from the runtime's image (which carries TensorBoard) on ``training.checkpointDir``,
through the same volume as the runtime's, read-only. It has no readiness probe, so the
chief's readiness stays the runtime's. The Service ``<job>-tensorboard`` selects the
chief's pod on the port; the job's NetworkPolicy admits the port from pods in the job's
namespace (``kubectl port-forward`` reaches it through the kubelet, not the pod network).
A template that already has a container named ``tensorboard`` keeps its own.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from . import naming, podsecurity
from .spec import Job, JobSpec

CONTAINER: Final = "tensorboard"
PORT_NAME: Final = "tensorboard"
# TensorBoard looks for new event files this often (its default is 5 s too; said here so
# that a change of TensorBoard's default does not change what the docs promise).
RELOAD_SECONDS: Final = 5

Manifest = dict[str, Any]


def service_name(job: str) -> str:
    """Name of the job's TensorBoard Service."""
    return f"{job}-tensorboard"


def command(spec: JobSpec, port: int) -> list[str]:
    return [
        "python", "-m", "tensorboard.main",
        "--logdir", spec.training.checkpoint_dir,
        "--bind_all", "--port", str(port),
        "--reload_interval", str(RELOAD_SECONDS),
    ]  # fmt: skip


def _shared_mount(runtime: Manifest, path: str, *, read_only: bool) -> Manifest | None:
    """The runtime container's mount that holds ``path`` (the deepest), as the sidecar
    mounts it."""
    holding = [
        m for m in runtime.get("volumeMounts") or []
        if podsecurity.covers(str(m.get("mountPath", "")), path)
    ]  # fmt: skip
    if not holding:
        return None
    mount = copy.deepcopy(max(holding, key=lambda m: len(str(m.get("mountPath", "")))))
    if read_only:
        mount["readOnly"] = True
    return dict(mount)


def add_sidecar(spec: JobSpec, pod_spec: Manifest, runtime: Manifest, tmp_path: str) -> None:
    """The TensorBoard sidecar in the chief's ``pod_spec``, beside its ``runtime``
    container (whose mounts are complete: the checkpoint directory's and ``tmp_path``'s,
    where TensorBoard writes its instance file)."""
    board = spec.tensorboard
    if board is None:
        return
    init = pod_spec.setdefault("initContainers", [])
    named = {c.get("name") for c in init} | {c.get("name") for c in pod_spec["containers"]}
    if CONTAINER in named:
        return
    mounts = [
        m for m in (
            _shared_mount(runtime, spec.training.checkpoint_dir, read_only=True),
            _shared_mount(runtime, tmp_path, read_only=False),
        ) if m is not None
    ]  # fmt: skip
    if len(mounts) == 2 and mounts[0]["mountPath"] == mounts[1]["mountPath"]:
        mounts = mounts[1:]  # one volume holds both: writable, as the runtime has it
    container: Manifest = {
        "name": CONTAINER,
        "image": runtime["image"],
        "command": command(spec, board.port),
        "restartPolicy": "Always",
        "ports": [{"name": PORT_NAME, "containerPort": board.port, "protocol": "TCP"}],
        "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": ""}],
        "volumeMounts": mounts,
    }
    if "imagePullPolicy" in runtime:
        container["imagePullPolicy"] = runtime["imagePullPolicy"]
    podsecurity.secure_container(container)
    init.append(container)


def build_service(job: Job, metadata: Manifest) -> Manifest:
    """The Service in front of the chief's TensorBoard (``metadata``: the job's child
    metadata with this name)."""
    assert job.spec.tensorboard is not None
    port = job.spec.tensorboard.port
    selector = naming.replica_labels(job.name, naming.CHIEF, 0)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": selector,
            "ports": [
                {"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def network_policy_rule(job: Job) -> Manifest | None:
    """The NetworkPolicy's ingress rule for TensorBoard: its port from the job's
    namespace's pods (None without TensorBoard)."""
    if job.spec.tensorboard is None:
        return None
    return {
        "from": [{"podSelector": {}}],
        "ports": [{"protocol": "TCP", "port": job.spec.tensorboard.port}],
    }
