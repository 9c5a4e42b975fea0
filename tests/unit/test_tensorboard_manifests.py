"""spec.tensorboard's objects: the chief's TensorBoard sidecar, its Service, its
NetworkPolicy rule, and the planner creating the Service (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from syncreplicas_operator.core import manifests, naming, tensorboard
from syncreplicas_operator.core.actions import CreateChild
from syncreplicas_operator.core.plan.context import Observed
from syncreplicas_operator.core.plan.pipeline import plan_job

from tests.support.plans import T0
from tests.unit.test_manifests import CHECKPOINTS, job

PVC_TEMPLATE = {
    "spec": {
        "containers": [{"name": "syncreplicas", "volumeMounts": [
            {"name": "ckpt", "mountPath": "/data"}]}],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "runs"}}],
    }
}  # fmt: skip


def chief(**spec_fields: Any) -> dict[str, Any]:
    return manifests.build_pod(job(**spec_fields), naming.CHIEF, 0)


def sidecar(pod: dict[str, Any]) -> dict[str, Any] | None:
    init = pod["spec"].get("initContainers") or []
    return next((c for c in init if c["name"] == tensorboard.CONTAINER), None)


def test_the_chief_runs_tensorboard_on_its_checkpoint_directory_read_only() -> None:
    pod = chief(tensorboard={})
    board = sidecar(pod)
    assert board is not None
    runtime = next(c for c in pod["spec"]["containers"] if c["name"] == naming.CONTAINER_NAME)
    assert board["image"] == runtime["image"]
    assert board["restartPolicy"] == "Always"  # a native sidecar: the pod still completes
    assert board["command"][:3] == ["python", "-m", "tensorboard.main"]
    assert board["command"][board["command"].index("--logdir") + 1] == CHECKPOINTS
    assert board["command"][board["command"].index("--port") + 1] == "6006"
    assert "--bind_all" in board["command"]
    assert board["ports"] == [{"name": "tensorboard", "containerPort": 6006, "protocol": "TCP"}]
    assert "readinessProbe" not in board  # the chief's readiness stays the runtime's
    by_path = {m["mountPath"]: m for m in board["volumeMounts"]}
    assert by_path[CHECKPOINTS] == {
        "name": manifests.CHECKPOINT_VOLUME, "mountPath": CHECKPOINTS, "readOnly": True
    }
    assert by_path[manifests.TMP_PATH] == {"name": manifests.TMP_VOLUME,
                                            "mountPath": manifests.TMP_PATH}  # fmt: skip
    security = board["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not security["allowPrivilegeEscalation"]


def test_a_persistent_volume_at_the_checkpoints_is_the_one_tensorboard_reads() -> None:
    pod = chief(tensorboard={"port": 8008}, template=PVC_TEMPLATE,
                training={"checkpointDir": "/data/run1"})  # fmt: skip
    board = sidecar(pod)
    assert board is not None
    assert {"name": "ckpt", "mountPath": "/data", "readOnly": True} in board["volumeMounts"]
    assert board["command"][board["command"].index("--logdir") + 1] == "/data/run1"
    assert board["ports"][0]["containerPort"] == 8008


@pytest.mark.parametrize("replica_type", [naming.PS, naming.WORKER])
def test_only_the_chief_has_it(replica_type: str) -> None:
    pod = manifests.build_pod(job(tensorboard={}), replica_type, 0)
    assert sidecar(pod) is None


def test_no_tensorboard_without_the_field() -> None:
    assert sidecar(chief()) is None
    kinds = [(c["kind"], c["metadata"]["name"]) for c in manifests.build_children(job())]
    assert ("Service", "job-tensorboard") not in kinds
    policy = manifests.build_network_policy(job())
    assert all(r["ports"][0]["port"] != 6006 for r in policy["spec"]["ingress"])


def test_a_template_container_named_tensorboard_is_kept() -> None:
    own = {"name": "tensorboard", "image": "example.org/board:1"}
    template = {"spec": {"initContainers": [own]}}
    pod = chief(tensorboard={}, chief={"template": template})
    assert pod["spec"]["initContainers"] == [own]


def test_the_service_selects_the_chief_and_the_policy_admits_the_namespace() -> None:
    j = job(tensorboard={"port": 7007})
    service = manifests.build_tensorboard_service(j)
    assert service["metadata"]["name"] == "job-tensorboard"
    assert service["metadata"]["labels"][naming.LABEL_JOB_NAME] == "job"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert service["spec"]["selector"] == naming.replica_labels("job", naming.CHIEF, 0)
    assert service["spec"]["ports"] == [
        {"name": "tensorboard", "port": 7007, "targetPort": "tensorboard", "protocol": "TCP"}
    ]
    assert "clusterIP" not in service["spec"]  # a ClusterIP Service, for port-forward
    ingress = manifests.build_network_policy(j)["spec"]["ingress"]
    assert {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 7007}]} in ingress
    # the pod's own label set matches the selector
    pod = manifests.build_pod(j, naming.CHIEF, 0)
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_the_planner_creates_the_service_once() -> None:
    j = job(tensorboard={})
    plan = plan_job(j, Observed((), frozenset(), False), {}, T0)
    created = [a.body["metadata"]["name"] for a in plan.actions
               if isinstance(a, CreateChild) and a.kind == "Service"]  # fmt: skip
    assert created == ["job", "job-tensorboard"]
    observed = Observed((), frozenset({"job", "job-tensorboard"}), True)
    again = plan_job(j, observed, {}, T0)
    assert not [a for a in again.actions if isinstance(a, CreateChild) and a.kind == "Service"]


@pytest.mark.parametrize(
    ("asked", "board", "port"),
    [(None, None, None), (None, {}, 6006), (None, {"port": 7007}, 7007), (0, {}, 0),
     (8123, None, 8123)],
)  # fmt: skip
def test_syncreplicas_run_serves_it_on_the_jobs_port_unless_told_another(
    asked: int | None, board: dict[str, Any] | None, port: int | None
) -> None:
    from syncreplicas_operator.local.cli import _board_port

    j = job(tensorboard=board) if board is not None else job()
    assert _board_port(asked, j) == port


def test_no_spare_takes_over_a_chief_with_tensorboard() -> None:
    from syncreplicas_operator.core import spares

    # The sidecar is part of the chief's shape (a spare, built like a worker, has none);
    # the other roles' shapes are those of a job without TensorBoard.
    plain, board = job(), job(tensorboard={})
    assert spares.shape(board, naming.CHIEF) != spares.shape(plain, naming.CHIEF)
    assert spares.shape(board, naming.CHIEF) != spares.shape(board, naming.WORKER)
    assert spares.shape(board, naming.WORKER) == spares.shape(plain, naming.WORKER)
    assert spares.shape(board, naming.PS) == spares.shape(plain, naming.PS)
