"""`syncreplicas render` output is valid Kubernetes: every Pod, Service and NetworkPolicy
passes kubernetes-validate --strict (unknown fields are errors) for Kubernetes 1.35 and
the newest version kubernetes-validate knows."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from jsonschema import Draft202012Validator
from kubernetes_validate.utils import all_versions, latest_version, schema_contents
from referencing import Registry, Resource
from syncreplicas_operator import cli
from syncreplicas_operator.core import manifests, spec

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "manifests"
# The newest schema kubernetes-validate ships for 1.35, and its newest overall.
VERSIONS = sorted(
    {
        max(
            (v for v in all_versions() if v.startswith("1.35.")), key=lambda v: int(v.split(".")[2])
        ),
        latest_version(),
    }
)
MANIFEST_FILES = sorted(FIXTURES.glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


def render(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    assert cli.main(["render", str(path), *extra]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


@cache
def strict_validator(version: str, kind: str, api_version: str) -> Any:
    """kubernetes-validate's strict schema for one kind, loaded once (its ``validate``
    re-reads the large definitions file on every call)."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    schema = schema_contents(f"{directory}/{kind.lower()}-{group_version}.json", version)
    definitions = schema_contents(f"{directory}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return Draft202012Validator(schema, registry=registry)


def check(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        validator = strict_validator(version, obj["kind"], obj["apiVersion"])
        for err in validator.iter_errors(obj):
            where = ".".join(str(p) for p in err.absolute_path)
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} ({version}) {where}: "
                        f"{err.message}")  # fmt: skip


def test_cached_check_agrees_with_kubernetes_validate() -> None:
    document = yaml.safe_load((FIXTURES / "minimal.yaml").read_text())
    pod = manifests.build_pod(spec.parse_job(document), "chief", 0)
    for version in VERSIONS:
        assert kubernetes_validate.validate(pod, version, strict=True)
    check(pod)
    pod["spec"]["containers"][0]["securityContxt"] = {}
    for version in VERSIONS:
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(pod, version, strict=True)
    with pytest.raises(pytest.fail.Exception, match="securityContxt"):
        check(pod)


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=[p.name for p in MANIFEST_FILES])
def test_rendered_objects_are_valid_kubernetes(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = render(path, capsys)
    job = spec.parse_job(yaml.safe_load(path.read_text()))
    replicas = sum(job.spec.replica_counts().values())
    kinds = [o["kind"] for o in objects]
    assert kinds.count("Pod") == replicas
    # One Service for the job; one per replica for a job with spares (they take Services).
    assert kinds.count("Service") == (replicas if job.spec.run_policy.spares else 1)
    assert kinds.count("NetworkPolicy") == 1
    for obj in objects:
        check(obj)
        # The API server requires an image of every container; its OpenAPI schema does not.
        for container in obj["spec"].get("containers", []):
            assert container.get("image"), (obj["metadata"]["name"], container["name"])


@pytest.mark.parametrize(
    "fields",
    [
        {"workers": 0, "replicasToAggregate": 1},
        {"metrics": {"port": 0}, "training": {"checkpointDir": ""}},
        {"runPolicy": {"restartPolicy": "OnFailure"}, "chiefRestartPolicy": "Fail"},
    ],
    ids=["no-workers", "no-metrics-no-checkpoints", "fail-on-chief-restart"],
)
def test_variants_are_valid_kubernetes(fields: dict[str, Any]) -> None:
    document = yaml.safe_load((FIXTURES / "minimal.yaml").read_text())
    document["spec"].update(fields)
    document["metadata"]["uid"] = "0b4f8a52-5d0c-4c3e-9a51-6f0e1a2b3c4d"
    for obj in manifests.build_children(spec.parse_job(document)):
        assert obj["metadata"].get("ownerReferences")
        check(obj)


def test_render_namespace_and_image(capsys: pytest.CaptureFixture[str]) -> None:
    objects = render(FIXTURES / "minimal.yaml", capsys, "--namespace", "ml", "--image", "x/y:1")
    assert {o["metadata"]["namespace"] for o in objects} == {"ml"}
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"x/y:1"}
    variables = {e["name"]: e["value"] for e in pods[0]["spec"]["containers"][0]["env"]}
    assert "minimal-ps-0.minimal.ml.svc:2222" in variables["TF_CONFIG"]


def test_render_refuses_invalid_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    document = yaml.safe_load((FIXTURES / "minimal.yaml").read_text())
    document["spec"]["workers"] = -1
    path.write_text(yaml.safe_dump(document))
    assert cli.main(["render", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}: spec.workers: must be >= 0, got -1" in captured.err


def test_render_a_tfjob_style_template(capsys: pytest.CaptureFixture[str]) -> None:
    """The template of a TFJob user (a container named tensorflow, no image, model code from
    a ConfigMap, a PVC for checkpoints): one container per pod, the runtime's, with them."""
    objects = render(FIXTURES / "tfjob-style.yaml", capsys)
    pods = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    for name, pod in pods.items():
        [container] = pod["spec"]["containers"]
        assert container["name"] == "syncreplicas"
        assert container["image"] == manifests.DEFAULT_IMAGE
        variables = {e["name"]: e.get("value") for e in container["env"]}
        assert variables["PYTHONPATH"] == "/opt/model"
        assert "TF_CONFIG" in variables
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/opt/model"] == "model", name
        assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["model"] == {"name": "model", "configMap": {"name": "user-model"}}
    chief = pods["tfjob-style-chief-0"]
    [container] = chief["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[spec.DEFAULT_CHECKPOINT_DIR] == "checkpoints"
    assert {v["name"]: v for v in chief["spec"]["volumes"]}["checkpoints"] == {
        "name": "checkpoints",
        "persistentVolumeClaim": {"claimName": "tfjob-style-checkpoints"},
    }


def test_render_refuses_a_sidecar_without_an_image(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "tests" / "fixtures" / "invalid" / "sidecar-without-image.yaml"
    assert cli.main(["render", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}: spec.template.spec.containers[1].image: is required: " in captured.err


def test_the_docs_template_example_renders() -> None:
    """docs/jobs.md's example template (model code from a ConfigMap, a PVC for
    checkpoints), on top of the smallest job, is valid and gives the runtime's container
    both mounts."""
    page = (ROOT / "docs" / "jobs.md").read_text()
    block = re.search(r"model's code from a ConfigMap.*?```yaml\n(.*?)```", page, re.S)
    assert block, "docs/jobs.md: the template example is gone"
    document = yaml.safe_load((FIXTURES / "minimal.yaml").read_text())
    example = yaml.safe_load(block.group(1))["spec"]
    document["spec"].update(example)
    job = spec.parse_job(document)
    chief = manifests.build_pod(job, "chief", 0)
    [container] = chief["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/opt/model"] == "model"
    assert mounts[job.spec.training.checkpoint_dir] == "checkpoints"
    check(chief)
