"""Warm spare pods on a real cluster (runPolicy.spares): a replica's pod deleted is replaced
by a spare that had TensorFlow imported, under the replica's own address.

One job (1 PS, a chief, 2 workers, R = 2) with one spare and a model whose every replica
reads the same batch at a step (so the final weights equal plain SGD over those batches
whatever the recoveries did, as long as no restore was torn). The PS pod is deleted (the
kubelet's SIGTERM: it hands its state over) while the job trains: the spare takes the PS's
identity (its labels, so the PS's Service and DNS name point to it; a new incarnation), the
job trains on with 0 steps lost, a new spare starts behind it, and the final weights equal
plain SGD. The old PS's address leaves its Service while its pod still terminates. (Which
spare may become which role, and what the operator does with one that
refuses: tests/unit/test_plan_spares.py; the spare's endpoint: tests/runtime/test_spare.py.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.cluster import kube
from tests.cluster.objectstream import ObjectStream
from tests.cluster.slowjob import SHARED, lift_delay, shared_dir
from tests.cluster.test_failures import (
    JOB,
    SELECTOR,
    SNAPSHOT_EVERY,
    job,
    now_rfc3339,
    recovered,
    status,
    step_of,
)
from tests.runtime.test_training import reference_sgd

# At slowjob's fault pace: 200 s at least for the spare's take-over and the new spare behind
# it (1500 at 100 ms: 100 s), and half the steps left for the end.
STEPS, LR, BATCH, DIM = 750, 0.05, 32, 16
MODEL = '''"""Every replica trains on replica 0's batch of the step (tests/runtime/samebatch.py)."""
from syncreplicas_runtime.models import linear


def build(**kwargs):
    return linear.build(**{**kwargs, "replica": 0})
'''


def spare_job(shared: Path) -> dict[str, Any]:
    manifest = job(shared)
    spec = manifest["spec"]
    spec["model"] = {"entrypoint": "same_batch:build"}
    spec["training"].update({"maxSteps": STEPS, "learningRate": LR, "batchSize": BATCH,
                             "checkpointDir": f"{SHARED}/checkpoints",
                             "checkpointEverySteps": 1000})  # fmt: skip
    spec["runPolicy"]["spares"] = 1
    pod_spec = spec["template"]["spec"]
    container = pod_spec["containers"][0]
    container["env"] = [*container["env"], {"name": "PYTHONPATH", "value": "/opt/model"}]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": "model", "mountPath": "/opt/model", "readOnly": True}]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []),
                           {"name": "model", "configMap": {"name": "same-batch"}}]
    return manifest


def holder(namespace: str, replica_type: str) -> dict[str, Any] | None:
    found = kube.pods(namespace, f"{SELECTOR},syncreplicas.io/replica-type={replica_type}")
    live = [p for p in found if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 else None


def is_ready(item: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in item["status"].get("conditions", []))  # fmt: skip


class Seen:
    """Every version of one pod (by uid) and of its replica's EndpointSlice, as the watches
    deliver them: when the pod went without the published label while terminating, when
    the slice stopped holding its address, when the pod object was gone."""

    def __init__(self, namespace: str, uid: str, address: str) -> None:
        self.namespace, self.uid, self.address = namespace, uid, address
        self.events: list[tuple[float, str, str]] = []
        self.unpublished_while_terminating = False
        self.address_left_at: float | None = None
        self.gone_at: float | None = None
        self.pods = ObjectStream("pods", self.saw_pod)
        self.slices = ObjectStream("endpointslices", self.saw_slice)

    def saw_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if meta.get("uid") != self.uid:
            return
        at = time.monotonic()
        labels = meta.get("labels") or {}
        self.events.append((at, "pod " + kind, str(sorted(labels))))
        if kind == "DELETED":
            self.gone_at = self.gone_at or at
        elif meta.get("deletionTimestamp") and "syncreplicas.io/published" not in labels:
            self.unpublished_while_terminating = True

    def saw_slice(self, kind: str, item: dict[str, Any]) -> None:
        meta = item.get("metadata") or {}
        service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        if meta.get("namespace") != self.namespace or service != f"{JOB}-ps-0":
            return
        addresses = {a for e in item.get("endpoints") or [] for a in e.get("addresses") or []}
        at = time.monotonic()
        self.events.append((at, "slice " + kind, str(sorted(addresses))))
        if self.address not in addresses and self.address_left_at is None:
            self.address_left_at = at

    def stop(self) -> None:
        self.pods.stop()
        self.slices.stop()


def spares_ready(namespace: str) -> int:
    return int((status(namespace).get("spares") or {}).get("ready") or 0)


@pytest.mark.timeout(900)
def test_a_spare_takes_over_a_deleted_ps_and_the_weights_equal_sgd(
        namespace: str, tmp_path: Path) -> None:  # fmt: skip
    model = tmp_path / "same_batch.py"
    model.write_text(MODEL)
    kube.kubectl("create", "configmap", "same-batch", "-n", namespace, f"--from-file={model}")
    shared = shared_dir(tmp_path)
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(spare_job(shared)))
    figures: dict[str, str] = {}
    try:
        kube.eventually("the spare is ready", lambda: spares_ready(namespace) == 1, 240)
        spare = kube.pods(namespace, f"{SELECTOR},syncreplicas.io/spare=true")
        assert [p["metadata"]["name"] for p in spare] == [f"{JOB}-spare-0"]
        kube.eventually("training passes step 25",
                        lambda: step_of(namespace, f"{JOB}-worker-0") >= 25, 180)
        old = holder(namespace, "ps")
        assert old is not None and old["metadata"]["name"] == f"{JOB}-ps-0"
        since = now_rfc3339()
        before = step_of(namespace, f"{JOB}-worker-0")
        seen = Seen(namespace, old["metadata"]["uid"], old["status"]["podIP"])
        deleted_at = time.monotonic()
        kube.kubectl("delete", "pod", f"{JOB}-ps-0", "-n", namespace, "--wait=false")

        def taken_over() -> dict[str, Any] | None:
            item = holder(namespace, "ps")
            return item if item and item["metadata"]["name"] == f"{JOB}-spare-0" else None

        new = kube.eventually("the spare holds ps-0", taken_over, 120, interval=0.2)
        figures["PS deleted: spare holds it after, s"] = f"{time.monotonic() - deleted_at:.1f}"
        meta = new["metadata"]
        assert meta["annotations"]["syncreplicas.io/spare-of"] == "ps-0"
        assert int(meta["annotations"]["syncreplicas.io/incarnation"]) > int(
            old["metadata"]["annotations"]["syncreplicas.io/incarnation"])
        assert "syncreplicas.io/spare" not in meta["labels"]
        kube.eventually("the global step moves again", lambda: step_of(
            namespace, f"{JOB}-worker-0") > before + 20, 120, interval=0.2)  # fmt: skip
        seen.stop()
        # The old PS's address left its Service while the pod was still terminating (the
        # operator removed the label the Service selects on), not when its object went:
        # a peer resolving ps-0 after the deletion never dials an address about to go.
        assert seen.unpublished_while_terminating, seen.events[-20:]
        assert seen.gone_at is not None and seen.address_left_at is not None, seen.events
        assert seen.address_left_at < seen.gone_at, seen.events
        figures["PS deleted: training again after, s"] = f"{time.monotonic() - deleted_at:.1f}"
        # The PS's Service now selects the spare: its DNS name resolves to the spare's IP.
        endpoints = kube.kubectl_json("get", "endpointslices", "-n", namespace, "-l",
                                      f"kubernetes.io/service-name={JOB}-ps-0")  # fmt: skip
        addresses = {a for s in endpoints["items"] for e in s.get("endpoints") or []
                     for a in e["addresses"]}  # fmt: skip
        assert addresses == {new["status"]["podIP"]}, (addresses, new["status"])
        # The spare's container was not restarted: it became the PS in its first process.
        assert new["status"]["containerStatuses"][0]["restartCount"] == 0
        log = kube.kubectl("logs", "-n", namespace, meta["name"]).stdout
        assert "spare assigned: ps-0" in log, log[-2000:]
        last = kube.eventually("the PS's recovery is recorded",
                               lambda: recovered(namespace, "ps-0", since), 120)
        assert last["cause"] == "Deleted" and last.get("stepsLost", 0) <= SNAPSHOT_EVERY, last
        figures["PS deleted: steps lost"] = str(last.get("stepsLost"))
        kube.eventually("a new spare starts behind it", lambda: spares_ready(namespace) == 1
                        and kube.pods(namespace, f"{SELECTOR},syncreplicas.io/spare=true"),
                        240)  # fmt: skip
        assert (status(namespace).get("spares") or {}).get("assigned") == 1

        lift_delay(shared)
        kube.kubectl("wait", "-n", namespace, f"srj/{JOB}", "--for=condition=Succeeded",
                     "--timeout=300s", timeout=320)  # fmt: skip
        assert status(namespace)["globalStep"] == STEPS
        kube.eventually("no spare outlives the job", lambda: not kube.pods(
            namespace, f"{SELECTOR},syncreplicas.io/spare=true"), 60)  # fmt: skip
        print("figures:", figures)
    except AssertionError as error:
        described = kube.describe(namespace, "srj", JOB)
        raise AssertionError(f"{error}\n{figures}\n{described}") from error

    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(shared / "checkpoints"))
    assert int(reader.get_tensor("global_step")) == STEPS
    w_ref, b_ref, _ = reference_sgd(0, 1, STEPS, BATCH, DIM, LR)
    np.testing.assert_allclose(reader.get_tensor("linear/w"), w_ref, rtol=1e-4, atol=1e-5)
    assert float(reader.get_tensor("linear/b")) == pytest.approx(b_ref, rel=1e-4, abs=1e-5)
