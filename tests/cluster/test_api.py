"""The real API server compiles the CRD (schema and CEL) and judges every manifest of the
one table of tests/unit/test_crd.py as our checkers do.

tests/unit/test_crd.py holds the table: bad manifests (each with the field its problem
must name), good ones, and updates of a full manifest. There, each goes through an
API-server-like checker (OpenAPI v3 schema + cel-python) and `syncreplicas validate`. Here
the same rows go through `kubectl apply` to a real kube-apiserver: every bad manifest is
refused with a message naming the field, every good one is accepted, every update is
allowed or refused alike. The unit table is the spec; this is its proof on the real thing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.unit import test_crd as table

CRD = "syncreplicasjobs.syncreplicas.io"
# The API server's verdicts only: every job here is suspended (no pod, no node) or refused.
# make test runs this file beside the paired two (a crashed real node, 200 pods on hollow
# nodes), whose waits on the cluster's timers leave the cores a third idle, and not among
# the shared tests, which the cores' time bounds.
pytestmark = pytest.mark.api_only


def kubectl_apply(namespace: str, manifest: dict[str, Any]) -> tuple[int, str]:
    manifest = json.loads(json.dumps(manifest))
    manifest.get("metadata", {}).pop("namespace", None)  # each test's own namespace
    result = kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest),
                          check=False)  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def test_the_api_server_established_the_crd_with_its_printer_columns(cluster_up: None) -> None:
    crd = kube.kubectl_json("get", "crd", CRD)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions.get("Established") == "True", crd["status"]
    assert conditions.get("NamesAccepted") == "True", crd["status"]
    assert "srj" in crd["spec"]["names"]["shortNames"]
    # The schema the server stores is the one we ship (the chart installed the CRD).
    shipped = yaml.safe_load((kube.REPO / "crds" / "syncreplicasjobs.yaml").read_text())
    served = crd["spec"]["versions"][0]
    assert served["schema"] == shipped["spec"]["versions"][0]["schema"]
    assert [c["name"] for c in served["additionalPrinterColumns"]] == [
        c["name"] for c in shipped["spec"]["versions"][0]["additionalPrinterColumns"]
    ]


@pytest.fixture(scope="module")
def api_namespace(cluster_up: None) -> Any:
    # A name of its own each time: when the fixture is made again in a run (pytest-xdist may
    # run another file's test in between), the one before may still be terminating.
    name = f"t-api-table-{uuid.uuid4().hex[:5]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize(("manifest", "named"), table.BAD_MANIFESTS)
def test_the_api_server_refuses_each_bad_manifest_naming_the_field(
    api_namespace: str, manifest: dict[str, Any], named: str
) -> None:
    code, output = kubectl_apply(api_namespace, manifest)
    if code == 0:
        kube.kubectl("delete", "srj", "--all", "-n", api_namespace, check=False)
    assert code != 0, f"the API server accepted a manifest that names {named}:\n{output}"
    relative = named.removeprefix("spec.")
    assert named in output or relative in output, output


@pytest.mark.parametrize("manifest", table.GOOD)
def test_the_api_server_accepts_each_good_manifest(
    api_namespace: str, manifest: dict[str, Any]
) -> None:
    # Suspended, so that no pod starts: only the API server's verdict is under test.
    manifest = json.loads(json.dumps(manifest))
    manifest["spec"].setdefault("runPolicy", {})["suspend"] = True
    code, output = kubectl_apply(api_namespace, manifest)
    assert code == 0, output
    kube.kubectl("delete", "srj", "--all", "-n", api_namespace, check=False)


def judge_update(namespace: str, manifest: dict[str, Any], field: str, value: Any,
                 refused: str | None) -> None:
    """Create ``manifest`` (suspended: only its updates are under test), set ``field`` to
    ``value``: allowed, or refused with ``refused`` in the API server's answer."""
    manifest["spec"].setdefault("runPolicy", {})["suspend"] = True
    code, output = kubectl_apply(namespace, manifest)
    assert code == 0, output
    try:
        updated = table.with_value(lambda: json.loads(json.dumps(manifest)), field, value)
        code, output = kubectl_apply(namespace, updated)
        if refused is None:
            assert code == 0, output
        else:
            assert code != 0, f"the update of {field} was allowed"
            assert refused in output or refused.removeprefix("spec.") in output, output
    finally:
        kube.kubectl("delete", "srj", manifest["metadata"]["name"], "-n", namespace,
                     "--ignore-not-found", check=False)  # fmt: skip


@pytest.mark.parametrize(("field", "value", "refused"), table.TRANSITIONS)
def test_the_api_server_judges_each_update_alike(
    api_namespace: str, field: str, value: Any, refused: str | None
) -> None:
    manifest = table.full()
    manifest["metadata"]["name"] = "update-" + field.rsplit(".", 1)[-1].lower()[:30]
    judge_update(api_namespace, manifest, field, value, refused)


@pytest.mark.parametrize(("field", "value", "refused"), table.ELASTIC_TRANSITIONS)
def test_the_api_server_judges_each_update_of_an_elastic_job_alike(
    api_namespace: str, field: str, value: Any, refused: str | None
) -> None:
    manifest = table.elastic(minReplicasToAggregate=1)
    suffix = f"-{value}" if isinstance(value, int) else ""  # spec.workers is there thrice
    manifest["metadata"]["name"] = "elastic-" + field.rsplit(".", 1)[-1].lower()[:30] + suffix
    judge_update(api_namespace, manifest, field, value, refused)
