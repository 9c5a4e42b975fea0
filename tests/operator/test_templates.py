"""The operator against kmock: pod templates as users write them. kmock accepts a pod
without an image (a real API server refuses it), so these check what the operator sends."""

from __future__ import annotations

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

# A TFJob user's template: the main container named tensorflow, no image, the model's code
# from a ConfigMap on PYTHONPATH.
TFJOB_TEMPLATE = {
    "spec": {
        "containers": [
            {
                "name": "tensorflow",
                "env": [{"name": "PYTHONPATH", "value": "/opt/model"}],
                "volumeMounts": [{"name": "model", "mountPath": "/opt/model"}],
            }
        ],
        "volumes": [{"name": "model", "configMap": {"name": "user-model"}}],
    }
}


async def test_a_tfjob_template_becomes_the_runtime_container(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "tfjob-template"
    await cluster.create_job(job_manifest("iota", namespace, template=TFJOB_TEMPLATE))
    expected = {"iota-ps-0", "iota-chief-0", "iota-worker-0", "iota-worker-1"}
    await cluster.wait_for(lambda: cluster.pod_names(namespace, "iota") == expected, what="pods")
    for pod in cluster.objects("v1/pods", namespace, "iota"):
        [container] = pod["spec"]["containers"]
        assert container["name"] == naming.CONTAINER_NAME
        assert container["image"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PYTHONPATH"] == "/opt/model"
        assert naming.ENV_TF_CONFIG in env
        assert {"name": "model", "mountPath": "/opt/model"} in container["volumeMounts"]


async def test_a_sidecar_without_an_image_fails_the_job(shared_cluster: Cluster) -> None:
    cluster, namespace = shared_cluster, "sidecar-image"
    template = {"spec": {"containers": [*TFJOB_TEMPLATE["spec"]["containers"], {"name": "log"}]}}
    await cluster.create_job(job_manifest("kappa", namespace, template=template))
    await cluster.wait_for(lambda: cluster.status(namespace, "kappa").get("phase") == "Failed")
    failed = cluster.condition(namespace, "kappa", naming.CONDITION_FAILED)
    assert failed is not None and failed["reason"] == naming.REASON_INVALID_SPEC
    assert "spec.template.spec.containers[1].image: is required" in failed["message"]
    assert not cluster.pod_names(namespace, "kappa")
