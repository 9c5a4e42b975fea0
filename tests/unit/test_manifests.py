"""Pods, headless Services and the NetworkPolicy built from a job: tables of cases."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from syncreplicas_operator.core import manifests, naming, spec

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = spec.DEFAULT_CHECKPOINT_DIR


def document(**spec_fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicasToAggregate": 2,
        "workers": 2,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
    }
    body.update(spec_fields)
    return {
        "apiVersion": "syncreplicas.io/v1alpha1",
        "kind": "SyncReplicasJob",
        "metadata": {"name": "job", "namespace": "team", "uid": "uid-1", "generation": 3},
        "spec": body,
    }


def job(**spec_fields: Any) -> spec.Job:
    return spec.parse_job(document(**spec_fields))


def runtime(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == naming.CONTAINER_NAME)


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in runtime(pod)["env"]}


def mounts(pod: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in runtime(pod).get("volumeMounts", [])}


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"].get("volumes", [])}


# --- names, labels, owner ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("replica_type", "index"), [("ps", 0), ("chief", 0), ("worker", 0), ("worker", 1)]
)
def test_pod_and_service_identity(replica_type: str, index: int) -> None:
    j = job()
    pod = manifests.build_pod(j, replica_type, index)
    service = manifests.build_service(j, replica_type, index)
    name = f"job-{replica_type}-{index}"
    labels = naming.replica_labels("job", replica_type, index)
    for obj in (pod, service):
        assert obj["metadata"]["name"] == name
        assert obj["metadata"]["namespace"] == "team"
        assert labels.items() <= obj["metadata"]["labels"].items()
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "syncreplicas.io/v1alpha1",
                "kind": "SyncReplicasJob",
                "name": "job",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    # The Service selects the pod while it carries the published label (not once going).
    published = {**labels, naming.LABEL_PUBLISHED: "true"}
    assert service["spec"]["selector"] == published
    assert published.items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["annotations"][naming.ANNOTATION_JOB_GENERATION] == "3"
    tf_config = json.loads(env(pod)["TF_CONFIG"])
    assert tf_config["task"] == {"type": replica_type, "index": index}


def test_no_owner_reference_without_uid() -> None:
    d = document()
    del d["metadata"]["uid"]
    j = spec.parse_job(d)
    for child in manifests.build_children(j):
        assert "ownerReferences" not in child["metadata"]


@pytest.mark.parametrize(
    ("replica_type", "index"), [("ps", 1), ("chief", 1), ("worker", 2), ("worker", -1)]
)
def test_out_of_range_replicas_are_refused(replica_type: str, index: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        manifests.build_pod(job(), replica_type, index)
    with pytest.raises(ValueError, match="out of range"):
        manifests.build_service(job(), replica_type, index)


@pytest.mark.parametrize(("workers", "ps"), [(0, 1), (2, 1), (3, 2)])
def test_children_in_creation_order(workers: int, ps: int) -> None:
    """The job's one Service, then every replica's pod (PS first)."""
    children = manifests.build_children(job(workers=workers, parameterServers=ps))
    assert children[0]["kind"] == "NetworkPolicy"
    assert children[1]["kind"] == "PodDisruptionBudget"
    expected: list[tuple[str, str]] = [("Service", "job")]
    for replica_type, count in (("ps", ps), ("chief", 1), ("worker", workers)):
        expected += [("Pod", f"job-{replica_type}-{i}") for i in range(count)]
    assert [(c["kind"], c["metadata"]["name"]) for c in children[2:]] == expected


def test_children_of_a_job_with_spares_have_a_service_each() -> None:
    """A spare takes a replica over by its Service: each replica's before its pod."""
    spec_fields = {"workers": 1, "metrics": {"port": 9100}, "runPolicy": {"spares": 1}}
    children = manifests.build_children(job(**spec_fields))
    expected: list[tuple[str, str]] = []
    for name in ("job-ps-0", "job-chief-0", "job-worker-0"):
        expected += [("Service", name), ("Pod", name)]
    assert [(c["kind"], c["metadata"]["name"]) for c in children[2:]] == expected
    pod = children[3]
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]
    assert (
        env(pod)["TF_CONFIG"].count(".team.svc:2222") == 3
        and ".job.team" not in env(pod)["TF_CONFIG"]
    )


def test_pods_resolve_under_the_job_service() -> None:
    """Hostname and subdomain make ``<pod>.<job>.<namespace>.svc``: TF_CONFIG's addresses."""
    pod = manifests.build_pod(job(workers=2), "worker", 1)
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("job-worker-1", "job")
    cluster = json.loads(env(pod)["TF_CONFIG"])["cluster"]
    assert cluster["chief"] == ["job-chief-0.job.team.svc:2222"]


def test_extra_annotations() -> None:
    pod = manifests.build_pod(job(), "chief", 0, annotations={naming.ANNOTATION_RESTART_ROUND: "2"})
    assert pod["metadata"]["annotations"][naming.ANNOTATION_RESTART_ROUND] == "2"


# --- restart policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_policy", "chief_policy", "ps", "chief", "worker"),
    [
        ("OnFailure", "ResetSyncState", "OnFailure", "OnFailure", "OnFailure"),
        ("OnFailure", "RestartJob", "OnFailure", "OnFailure", "OnFailure"),
        ("OnFailure", "Fail", "OnFailure", "Never", "OnFailure"),
        ("Never", "ResetSyncState", "Never", "Never", "Never"),
        ("ExitCode", "ResetSyncState", "Never", "Never", "Never"),
        ("ExitCode", "Fail", "Never", "Never", "Never"),
    ],
)
def test_pod_restart_policy(
    run_policy: str, chief_policy: str, ps: str, chief: str, worker: str
) -> None:
    j = job(runPolicy={"restartPolicy": run_policy}, chiefRestartPolicy=chief_policy)
    for replica_type, policy in {"ps": ps, "chief": chief, "worker": worker}.items():
        assert manifests.pod_restart_policy(j.spec, replica_type) == policy
        assert manifests.build_pod(j, replica_type, 0)["spec"]["restartPolicy"] == policy


# Which pods restart their replica warm, in the container (policy.restarts_warm): "-" off.
@pytest.mark.parametrize(
    ("run_policy", "chief_policy", "warm", "ps", "chief", "worker"),
    [
        ("OnFailure", "ResetSyncState", True, "OnFailure", "OnFailure", "OnFailure"),
        ("OnFailure", "RestartJob", True, "OnFailure", "-", "OnFailure"),
        ("OnFailure", "Fail", True, "OnFailure", "-", "OnFailure"),
        ("ExitCode", "ResetSyncState", True, "ExitCode", "ExitCode", "ExitCode"),
        ("ExitCode", "Fail", True, "ExitCode", "-", "ExitCode"),
        ("Never", "ResetSyncState", True, "-", "-", "-"),
        ("OnFailure", "ResetSyncState", False, "-", "-", "-"),
        ("ExitCode", "ResetSyncState", False, "-", "-", "-"),
    ],
)
def test_warm_restarts(
    run_policy: str, chief_policy: str, warm: bool, ps: str, chief: str, worker: str
) -> None:
    j = job(runPolicy={"restartPolicy": run_policy, "backoffLimit": 4, "warmRestarts": warm},
            chiefRestartPolicy=chief_policy)  # fmt: skip
    for replica_type, policy in {"ps": ps, "chief": chief, "worker": worker}.items():
        variables = env(manifests.build_pod(j, replica_type, 0))
        expected = (
            {}
            if policy == "-"
            else {
                "SYNCREPLICAS_WARM_RESTARTS": policy,
                "SYNCREPLICAS_WARM_RESTART_LIMIT": "4",
                "SYNCREPLICAS_WARM_RESTART_STATE": "/tmp/syncreplicas-warm-restarts",
            }
        )
        assert {k: v for k, v in variables.items() if "WARM" in k} == expected, replica_type


def test_template_cannot_change_the_restart_policy() -> None:
    j = job(template={"spec": {"restartPolicy": "Always"}})
    assert manifests.build_pod(j, "worker", 0)["spec"]["restartPolicy"] == "OnFailure"


# --- container -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_image", "template_image", "role_image", "default", "expected"),
    [
        (None, None, None, "d:1", "d:1"),
        ("s:1", None, None, "d:1", "s:1"),
        ("s:1", "t:1", None, "d:1", "t:1"),
        ("s:1", "t:1", "r:1", "d:1", "r:1"),
        (None, None, "r:1", "d:1", "r:1"),
    ],
)
def test_image_precedence(
    spec_image: str | None,
    template_image: str | None,
    role_image: str | None,
    default: str,
    expected: str,
) -> None:
    fields: dict[str, Any] = {}
    if spec_image:
        fields["image"] = spec_image
    if template_image:
        fields["template"] = {
            "spec": {"containers": [{"name": "syncreplicas", "image": template_image}]}
        }
    if role_image:
        fields["worker"] = {
            "template": {"spec": {"containers": [{"name": "syncreplicas", "image": role_image}]}}
        }
    pod = manifests.build_pod(job(**fields), "worker", 0, default_image=default)
    assert runtime(pod)["image"] == expected
    chief = manifests.build_pod(job(**fields), "chief", 0, default_image=default)
    assert runtime(chief)["image"] == (template_image or spec_image or default)


def test_default_image_is_the_charts() -> None:
    values = yaml.safe_load((ROOT / "charts/syncreplicas/values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "charts/syncreplicas/Chart.yaml").read_text())
    image = values["runtimeImage"]
    published = f"{image['repository']}:{chart['appVersion']}"
    assert published == manifests.DEFAULT_IMAGE


def test_default_user_is_the_runtime_images() -> None:
    dockerfile = (ROOT / "runtime" / "Dockerfile").read_text()
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users[-1] == f"{manifests.DEFAULT_UID}:{manifests.DEFAULT_UID}"


def test_runtime_container_defaults() -> None:
    pod = manifests.build_pod(job(), "worker", 1)
    container = runtime(pod)
    assert pod["spec"]["containers"][0] is container
    assert container["command"] == ["python", "-m", "syncreplicas_runtime"]
    assert container["ports"] == [
        {"name": "tf", "containerPort": 2222, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert set(env(pod)) == {
        "TF_CONFIG",
        "SYNCREPLICAS_JOB",
        "SYNCREPLICAS_JOB_NAME",
        "SYNCREPLICAS_NAMESPACE",
        "SYNCREPLICAS_WARM_RESTARTS",
        "SYNCREPLICAS_WARM_RESTART_LIMIT",
        "SYNCREPLICAS_WARM_RESTART_STATE",
    }
    assert env(pod)["SYNCREPLICAS_JOB_NAME"] == "job"
    assert env(pod)["SYNCREPLICAS_NAMESPACE"] == "team"


def test_template_container_is_kept_and_completed() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "sidecar", "image": "side:1"},
                {
                    "name": "syncreplicas",
                    "command": ["/entry.sh"],
                    "args": ["--verbose"],
                    "env": [
                        {"name": "HOME", "value": "/home/me"},
                        {"name": "OMP_NUM_THREADS", "value": "2"},
                        {"name": "TF_CONFIG", "value": "stale"},
                    ],
                    "ports": [
                        {"name": "debug", "containerPort": 5678},
                        {"name": "tf", "containerPort": 1234},
                        {"name": "http", "containerPort": 9090},
                    ],
                    "readinessProbe": {"tcpSocket": {"port": "tf"}},
                },
            ]
        }
    }
    pod = manifests.build_pod(job(template=template), "worker", 0)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["sidecar", "syncreplicas"]
    container = runtime(pod)
    assert container["command"] == ["/entry.sh"]
    assert container["args"] == ["--verbose"]
    assert container["readinessProbe"] == {"tcpSocket": {"port": "tf"}}
    assert env(pod)["OMP_NUM_THREADS"] == "2"
    assert env(pod)["HOME"] == "/home/me"
    assert json.loads(env(pod)["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}
    assert [e["name"] for e in container["env"]].count("TF_CONFIG") == 1
    # Ours win on name and number clashes; the user's other ports stay.
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("tf", 2222),
        ("metrics", 9090),
        ("debug", 5678),
    ]
    sidecar = pod["spec"]["containers"][0]
    assert sidecar == {"name": "sidecar", "image": "side:1"}


@pytest.mark.parametrize(
    ("template_container", "policy"),
    [
        ({}, "FallbackToLogsOnError"),  # no message written: the log's tail explains a crash
        ({"terminationMessagePolicy": "File"}, "File"),  # the template's choice stands
    ],
)
def test_termination_message_policy(template_container: dict[str, Any], policy: str) -> None:
    container = {"name": "syncreplicas", **template_container}
    pod = manifests.build_pod(job(template={"spec": {"containers": [container]}}), "chief", 0)
    assert runtime(pod)["terminationMessagePolicy"] == policy
    assert "terminationMessagePath" not in runtime(pod)  # the kubelet's default path


def test_metrics_disabled() -> None:
    j = job(metrics={"port": 0})
    pod = manifests.build_pod(j, "chief", 0)
    assert [p["name"] for p in runtime(pod)["ports"]] == ["tf"]
    assert "readinessProbe" not in runtime(pod)
    for service in (manifests.build_service(j, "chief", 0), manifests.build_job_service(j)):
        assert [p["name"] for p in service["spec"]["ports"]] == ["tf"]
    policy = manifests.build_network_policy(j)
    assert len(policy["spec"]["ingress"]) == 1


# --- security defaults ---------------------------------------------------------------------


def test_secure_defaults() -> None:
    pod = manifests.build_pod(job(), "ps", 0)
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert runtime(pod)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["enableServiceLinks"] is False


def test_template_overrides_security_defaults() -> None:
    template = {
        "spec": {
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "automountServiceAccountToken": True,
            "containers": [
                {
                    "name": "syncreplicas",
                    "securityContext": {
                        "readOnlyRootFilesystem": False,
                        "capabilities": {"add": ["NET_ADMIN"]},
                    },
                }
            ],
        }
    }
    pod = manifests.build_pod(job(template=template), "ps", 0)
    pod_context = pod["spec"]["securityContext"]
    assert pod_context["runAsUser"] == 0
    assert pod_context["runAsNonRoot"] is False
    assert "runAsGroup" not in pod_context  # the template chose the user
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["automountServiceAccountToken"] is True
    context = runtime(pod)["securityContext"]
    assert context["readOnlyRootFilesystem"] is False
    assert context["capabilities"] == {"add": ["NET_ADMIN"], "drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(
    ("replica_type", "fields", "expected_mounts", "expected_volume"),
    [
        ("ps", {}, {"/tmp": "syncreplicas-tmp"}, None),
        ("worker", {}, {"/tmp": "syncreplicas-tmp"}, None),
        (
            "chief",
            {},
            {"/tmp": "syncreplicas-tmp", CHECKPOINTS: "syncreplicas-checkpoints"},
            {"name": "syncreplicas-checkpoints", "emptyDir": {}},
        ),
        ("chief", {"training": {"checkpointDir": ""}}, {"/tmp": "syncreplicas-tmp"}, None),
        (
            "chief",
            {"chief": {"template": {"spec": {
                "containers": [{"name": "syncreplicas",
                                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}]}}}},
            {"/tmp": "syncreplicas-tmp", "/var/lib/": "data"},
            None,
        ),
        (
            "chief",
            {"template": {"spec": {
                "volumes": [{"name": "syncreplicas-checkpoints",
                             "persistentVolumeClaim": {"claimName": "ckpt"}}]}}},
            {"/tmp": "syncreplicas-tmp", CHECKPOINTS: "syncreplicas-checkpoints"},
            {"name": "syncreplicas-checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}},
        ),
        (
            "worker",
            {"template": {"spec": {"containers": [{"name": "syncreplicas",
                "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]}],
                "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]}}},
            {"/tmp": "scratch"},
            None,
        ),
    ],
    ids=["ps", "worker", "chief", "no-checkpoints", "pvc-covers-dir", "named-volume", "own-tmp"],
)  # fmt: skip
def test_writable_directories(
    replica_type: str,
    fields: dict[str, Any],
    expected_mounts: dict[str, str],
    expected_volume: dict[str, Any] | None,
) -> None:
    pod = manifests.build_pod(job(**fields), replica_type, 0)
    assert mounts(pod) == expected_mounts
    for name in expected_mounts.values():
        assert name in volumes(pod), name
    if expected_volume is not None:
        assert volumes(pod)[expected_volume["name"]] == expected_volume
    else:
        assert "syncreplicas-checkpoints" not in volumes(pod)


# --- templates -----------------------------------------------------------------------------


# What a user's runtime container brings: every field must reach the runtime's container.
USER_CONTAINER: dict[str, Any] = {
    "env": [{"name": "PYTHONPATH", "value": "/opt/model"}],
    "volumeMounts": [{"name": "model", "mountPath": "/opt/model", "readOnly": True}],
    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
    "securityContext": {"runAsUser": 2000},
}
MODEL_VOLUME = {"name": "model", "configMap": {"name": "user-model"}}
SIDECAR = {"name": "log-shipper", "image": "registry.example.org/shipper:1"}


@pytest.mark.parametrize(
    ("containers", "names"),
    [
        ([{"name": "syncreplicas", **USER_CONTAINER}], ["syncreplicas"]),
        ([{"name": "tensorflow", **USER_CONTAINER}], ["syncreplicas"]),
        ([{"name": "trainer", **USER_CONTAINER}], ["syncreplicas"]),
        ([{"name": "tensorflow", **USER_CONTAINER}, SIDECAR], ["syncreplicas", "log-shipper"]),
        ([SIDECAR, {"name": "tensorflow", **USER_CONTAINER}], ["log-shipper", "syncreplicas"]),
    ],
    ids=["named-syncreplicas", "named-tensorflow", "only-container", "sidecar-with-image",
         "sidecar-first"],
)  # fmt: skip
@pytest.mark.parametrize("replica_type", ["ps", "chief", "worker"])
def test_the_runtime_container_is_found_as_users_name_it(
    containers: list[dict[str, Any]], names: list[str], replica_type: str
) -> None:
    template = {"spec": {"containers": containers, "volumes": [MODEL_VOLUME]}}
    pod = manifests.build_pod(job(template=template), replica_type, 0, default_image="d:1")
    assert [c["name"] for c in pod["spec"]["containers"]] == names
    container = runtime(pod)
    assert container["image"] == "d:1"
    assert container["command"] == list(manifests.RUNTIME_COMMAND)
    assert env(pod)["PYTHONPATH"] == "/opt/model"
    assert "TF_CONFIG" in env(pod)
    assert mounts(pod)["/opt/model"] == "model"
    assert volumes(pod)["model"] == MODEL_VOLUME
    assert container["resources"] == USER_CONTAINER["resources"]
    assert container["securityContext"]["runAsUser"] == 2000
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert all(c.get("image") for c in pod["spec"]["containers"])
    if SIDECAR in containers:
        assert SIDECAR in pod["spec"]["containers"]


def test_a_sidecar_without_an_image_is_refused() -> None:
    template = {"spec": {"containers": [{"name": "tensorflow", **USER_CONTAINER},
                                        {"name": "log-shipper"}]}}  # fmt: skip
    with pytest.raises(spec.SpecError) as caught:
        job(template=template)
    assert [p.path for p in caught.value.problems] == ["spec.template.spec.containers[1].image"]
    assert "'log-shipper' is a sidecar" in str(caught.value)


# Role templates: (spec.template's containers, the role's, the role's pod's container names,
# env of its runtime container, its mounts; the other roles keep spec.template's).
ROLE_CASES = [
    pytest.param(
        [{"name": "tensorflow", "env": USER_CONTAINER["env"]}],
        [{"name": "tensorflow", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
        ["syncreplicas"], {"PYTHONPATH"}, {"/ckpt"}, id="both-tensorflow",
    ),
    pytest.param(
        [{"name": "tensorflow", "env": USER_CONTAINER["env"]}],
        [{"name": "syncreplicas", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
        ["syncreplicas"], {"PYTHONPATH"}, {"/ckpt"}, id="tensorflow-then-syncreplicas",
    ),
    pytest.param(
        [{"name": "trainer", "env": USER_CONTAINER["env"]}],
        [{"name": "trainer", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
        ["syncreplicas"], {"PYTHONPATH"}, {"/ckpt"}, id="named-like-the-base",
    ),
    pytest.param(
        [],
        [{"name": "main", "env": USER_CONTAINER["env"],
          "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
        ["syncreplicas"], {"PYTHONPATH"}, {"/ckpt"}, id="role-only-container",
    ),
    pytest.param(
        [{"name": "tensorflow", "env": USER_CONTAINER["env"]}, SIDECAR],
        [{"name": "log-shipper", "resources": {"limits": {"memory": "64Mi"}}}],
        ["syncreplicas", "log-shipper"], {"PYTHONPATH"}, set(), id="role-overrides-a-sidecar",
    ),
    pytest.param(
        [{"name": "tensorflow", "env": USER_CONTAINER["env"]}],
        [{"name": "profiler", "image": "p:1"}],
        ["syncreplicas", "profiler"], {"PYTHONPATH"}, set(), id="role-adds-a-sidecar",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("base", "role", "names", "env_names", "role_mounts"), ROLE_CASES)
def test_role_templates_follow_the_same_rules(
    base: list[dict[str, Any]],
    role: list[dict[str, Any]],
    names: list[str],
    env_names: set[str],
    role_mounts: set[str],
) -> None:
    fields: dict[str, Any] = {"chief": {"template": {"spec": {"containers": role}}}}
    if base:
        fields["template"] = {"spec": {"containers": base}}
    j = job(**fields)
    chief = manifests.build_pod(j, "chief", 0)
    assert [c["name"] for c in chief["spec"]["containers"]] == names
    assert env_names <= set(env(chief))
    assert role_mounts <= set(mounts(chief))
    assert all(c.get("image") for c in chief["spec"]["containers"])
    if SIDECAR in base:
        sidecar = chief["spec"]["containers"][1]
        assert sidecar["image"] == SIDECAR["image"]
        assert sidecar["resources"] == {"limits": {"memory": "64Mi"}}
    worker = manifests.build_pod(j, "worker", 0)
    assert [c["name"] for c in worker["spec"]["containers"]] == [
        "syncreplicas",
        *(["log-shipper"] if SIDECAR in base else []),
    ]
    assert not role_mounts & set(mounts(worker))


def test_role_templates_apply_to_their_role_only() -> None:
    j = spec.parse_job(yaml.safe_load((ROOT / "tests/fixtures/manifests/full.yaml").read_text()))
    pods = {c["metadata"]["name"]: c for c in manifests.build_children(j) if c["kind"] == "Pod"}
    ps, chief, worker = pods["full-ps-0"], pods["full-chief-0"], pods["full-worker-0"]
    assert runtime(ps)["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert runtime(worker)["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert worker["metadata"]["labels"]["role"] == "worker"
    assert "role" not in ps["metadata"]["labels"]
    assert ps["metadata"]["labels"]["team"] == "ml"
    assert "checkpoints" in volumes(chief) and "checkpoints" not in volumes(worker)
    for pod in pods.values():
        assert [c["name"] for c in pod["spec"]["containers"]] == ["syncreplicas", "log-shipper"]
        assert env(pod)["OMP_NUM_THREADS"] == "1"
        assert pod["spec"]["priorityClassName"] == "training"


def test_our_labels_win_over_the_template() -> None:
    j = job(template={"metadata": {"labels": {naming.LABEL_JOB_NAME: "other", "x": "y"}}})
    pod = manifests.build_pod(j, "worker", 0)
    assert pod["metadata"]["labels"][naming.LABEL_JOB_NAME] == "job"
    assert pod["metadata"]["labels"]["x"] == "y"


def test_inputs_are_never_mutated_and_outputs_never_shared() -> None:
    d = yaml.safe_load((ROOT / "tests/fixtures/manifests/full.yaml").read_text())
    j = spec.parse_job(d)
    before = copy.deepcopy(j)
    children = manifests.build_children(j)
    assert j == before
    pods = [c for c in children if c["kind"] == "Pod"]
    runtime(pods[0])["env"].append({"name": "X", "value": "1"})
    pods[0]["spec"]["volumes"].clear()
    pods[0]["metadata"]["labels"]["z"] = "1"
    assert j == before
    assert manifests.build_children(j)[1:] != children[1:]  # only the one we edited differs
    fresh = [c for c in manifests.build_children(j) if c["kind"] == "Pod"]
    assert fresh[1:] == pods[1:]


def test_builders_are_deterministic() -> None:
    assert manifests.build_children(job()) == manifests.build_children(job())


# --- Service and NetworkPolicy -----------------------------------------------------------


def test_headless_service() -> None:
    service = manifests.build_service(job(metrics={"port": 9100}), "worker", 1)
    assert service["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {**naming.replica_labels("job", "worker", 1), naming.LABEL_PUBLISHED: "true"},
        "ports": [
            {"name": "tf", "port": 2222, "targetPort": 2222, "protocol": "TCP"},
            {"name": "metrics", "port": 9100, "targetPort": 9100, "protocol": "TCP"},
        ],
    }


def test_job_service_selects_every_published_pod_of_the_job() -> None:
    service = manifests.build_job_service(job())
    assert service["metadata"]["name"] == "job"
    assert service["metadata"]["labels"][naming.LABEL_JOB_NAME] == "job"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {
        naming.LABEL_JOB_NAME: "job",
        naming.LABEL_PUBLISHED: "true",
    }
    assert [p["name"] for p in service["spec"]["ports"]] == ["tf", "metrics"]


def test_network_policy() -> None:
    policy = manifests.build_network_policy(job(metrics={"port": 9100}))
    assert policy["metadata"]["name"] == "job-grpc"
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {naming.LABEL_JOB_NAME: "job"}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {naming.LABEL_JOB_NAME: "job"}}}],
                "ports": [{"protocol": "TCP", "port": 2222}],
            },
            {"ports": [{"protocol": "TCP", "port": 9100}]},
        ],
    }


@pytest.mark.parametrize("metrics_from", [("monitoring",), ("monitoring", "ops", "monitoring")])
def test_network_policy_admits_metrics_from_the_namespaces_named(
    metrics_from: tuple[str, ...],
) -> None:
    policy = manifests.build_network_policy(job(metrics={"port": 9100}), metrics_from=metrics_from)
    grpc, metrics = policy["spec"]["ingress"]
    assert grpc["from"] == [{"podSelector": {"matchLabels": {naming.LABEL_JOB_NAME: "job"}}}]
    assert metrics == {
        "ports": [{"protocol": "TCP", "port": 9100}],
        "from": [{"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": sorted(set(metrics_from)),
        }]}}],
    }  # fmt: skip


def test_network_policy_without_a_metrics_port_has_only_the_grpc_rule() -> None:
    policy = manifests.build_network_policy(job(metrics={"port": 0}), metrics_from=("monitoring",))
    assert [rule["ports"][0]["port"] for rule in policy["spec"]["ingress"]] == [2222]


# --- gang scheduling --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ps", "workers", "r", "min_member"),
    [
        (1, 3, 4, 1 + 4),  # every replica needed
        (2, 5, 3, 2 + 3),  # two workers are backups: they may wait
        (1, 0, 1, 1 + 1),  # the chief alone
        (3, 2, 7, 3 + 3),  # R above the replicas: all of them
    ],
)
def test_pod_group_min_member(ps: int, workers: int, r: int, min_member: int) -> None:
    j = job(parameterServers=ps, workers=workers, replicasToAggregate=r)
    assert manifests.pod_group_min_member(j.spec) == min_member


def test_volcano_pod_group_and_pods() -> None:
    policy = {"gangScheduler": "Volcano", "queue": "research", "schedulerName": "vc"}
    j = job(workers=2, replicasToAggregate=2, runPolicy={"schedulingPolicy": policy})
    children = manifests.build_children(j)
    group = children[0]
    assert (group["apiVersion"], group["kind"]) == (naming.VOLCANO_API_VERSION, "PodGroup")
    assert group["spec"] == {"minMember": 1 + 2, "queue": "research"}
    assert group["metadata"]["ownerReferences"][0]["kind"] == naming.KIND
    for pod in (c for c in children if c["kind"] == "Pod"):
        assert pod["spec"]["schedulerName"] == "vc"
        assert pod["metadata"]["annotations"][naming.VOLCANO_GROUP_ANNOTATION] == j.name
        assert naming.COSCHEDULING_POD_GROUP_LABEL not in pod["metadata"]["labels"]


def test_no_scheduling_policy_no_pod_group() -> None:
    children = manifests.build_children(job())
    assert "PodGroup" not in {c["kind"] for c in children}
    assert all("schedulerName" not in c["spec"] for c in children if c["kind"] == "Pod")
