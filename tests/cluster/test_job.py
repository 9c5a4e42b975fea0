"""A user's job on a real cluster: `kubectl apply -f`, watch, wait, clean up.

The operator (the chart's Deployment, under the chart's ServiceAccount and RBAC) creates
the PS, chief and worker pods, the job's Service and the NetworkPolicy; the pods run the
runtime image as the non-root user; every replica reaches its peers by the TF_CONFIG
service names through CoreDNS; training reaches maxSteps; the job is Succeeded; the PS
pods are gone; the chief's checkpoint is on its volume. Deleting a job removes every child
through ownerReferences (the real garbage collector).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from syncreplicas_api.schedules import LearningRateSchedule, rate_at

from tests.cluster import boardlib, kube
from tests.cluster.slowjob import delayed, lift_delay, paced_template, shared_dir
from tests.runtime.rtutil import logged_rates

JOB_NAME = "linear"
BOARD = f"{JOB_NAME}-tensorboard"
LABEL = "syncreplicas.io/job-name"
# What the operator must create for a job of 1 PS, a chief and 1 worker.
REPLICAS = ("ps-0", "chief-0", "worker-0")


def linear_job(max_steps: int = 200, delay_ms: int = 0) -> dict[str, Any]:
    """examples/linear.yaml made smaller: one PS, a chief and one worker (R=2); with
    ``delay_ms``, every replica sleeps that long before each step (a job that only has to
    be running trains slowly, and leaves the machine's cores to the others)."""
    job = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    job["spec"].update({"workers": 1, "replicasToAggregate": 2, "parameterServers": 1})
    job["spec"]["training"].update(
        {"maxSteps": max_steps, "checkpointEverySteps": 50, "logEverySteps": 50,
         "evalEverySteps": 100}
    )
    if delay_ms:
        job["spec"]["template"] = paced_template(delay_ms)
    return dict(job)


def users_job(namespace: str, max_steps: int, shared: Path) -> dict[str, Any]:
    """A job as a user coming from TFJob writes it: the main container named `tensorflow`
    with the model's code from a ConfigMap on PYTHONPATH, and the chief's checkpoints on a
    PersistentVolumeClaim (docs/jobs.md, the template example); every step slowed by the
    delay in ``shared`` (slowjob: it trains while the test looks, and lifting the delay
    ends it soon)."""
    job = linear_job(max_steps)
    job["spec"]["model"] = {"entrypoint": "user_model:build"}
    # What a model author tunes: a warm-up, a cosine decay, Nesterov's momentum, clipped
    # gradients; and a fine-tuning start from another run's checkpoint (the weights only).
    job["spec"]["training"].update({
        "learningRateSchedule": SCHEDULE, "clipGradientNorm": 10.0, "optimizer": "momentum",
        "momentum": 0.9, "nesterov": True, "summaryEverySteps": 10,
        "warmStart": {"checkpoint": f"{CHECKPOINT_DIR}/{PRETRAINED}", "variables": "user/w"},
        "export": {"keep": 2, "best": {"metric": "accuracy"}},
    })  # fmt: skip
    job["spec"]["tensorboard"] = {}
    container, paced = delayed({
        "name": "tensorflow",
        "env": [{"name": "PYTHONPATH", "value": "/opt/model"}],
        "volumeMounts": [{"name": "model", "mountPath": "/opt/model", "readOnly": True}],
    }, shared)  # fmt: skip
    job["spec"]["template"] = {"spec": {
        "containers": [container],
        "volumes": [{"name": "model", "configMap": {"name": "user-model"}}, paced],
    }}  # fmt: skip
    job["spec"]["chief"] = {"template": {"spec": {
        "containers": [{
            "name": "tensorflow",
            "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINT_DIR}],
        }],
        "volumes": [{"name": "checkpoints",
                     "persistentVolumeClaim": {"claimName": "checkpoints"}}],
    }}}  # fmt: skip
    return job


CHECKPOINT_DIR = "/var/lib/syncreplicas/checkpoints"
SCHEDULE = {"decay": "Cosine", "warmupSteps": 50, "decaySteps": 500, "alpha": 0.1}
PRETRAINED = "pretrained"  # on the chief's volume, beside the job's own checkpoints


def write_pretrained(directory: Path) -> None:
    """Another run's checkpoint of the user's model, as plain TF1 code writes one: its
    ``user/w`` ten times the points' true separating direction (seed 0, the job's), so the
    loss is near 0 from the first step, where a cold start (w = 0) has ln 2 on any batch."""
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    truth = np.random.RandomState(0).normal(size=(8, 1)).astype(np.float32)
    directory.mkdir()
    with tf.Graph().as_default():
        w = v1.get_variable("user/w", initializer=10.0 * truth)
        b = v1.get_variable("user/b", initializer=0.0)
        saver = v1.train.Saver([w, b], save_relative_paths=True)  # read in the pod
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            saver.save(sess, str(directory / "model.ckpt"), global_step=0)


def provide_storage(namespace: str) -> Path:
    """The user's model in a ConfigMap, and a PVC bound to a hostPath PersistentVolume on
    this node (the cluster has no provisioner: an admin's statically provisioned volume).
    Returns the volume's directory on the node."""
    model = Path(__file__).with_name("usermodel") / "user_model.py"
    kube.kubectl("create", "configmap", "user-model", "-n", namespace, f"--from-file={model}")
    volume = kube.node.RUN / "volumes" / namespace
    volume.mkdir(parents=True, exist_ok=True)
    os.chown(volume, 10001, 10001)  # the runtime image's user
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-checkpoints"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "manual",
            "hostPath": {"path": str(volume), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": "checkpoints"},
        },
    }  # fmt: skip
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "checkpoints", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pv, pvc]))
    return volume


def apply(namespace: str, job: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))


def srj(namespace: str, name: str = JOB_NAME) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", name, "-n", namespace))


@pytest.mark.timeout(900)
def test_a_users_job_trains_to_max_steps_in_real_pods(namespace: str, tmp_path: Path) -> None:
    volume = provide_storage(namespace)
    write_pretrained(volume / PRETRAINED)
    # Slow steps (at most about 4 updates/s) while the test looks into its pods, its
    # progress and its TensorBoard, however long a loaded machine makes that (TensorBoard
    # lives as long as the chief trains); then the delay is lifted and it ends soon.
    shared = shared_dir(tmp_path, delay_ms=250)
    try:
        apply(namespace, users_job(namespace, max_steps=600, shared=shared))
        _watch_training(namespace, volume, shared)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{kube.describe(namespace, 'srj', JOB_NAME)}") from error
    finally:
        lift_delay(shared)
        kube.kubectl("delete", "pv", f"{namespace}-checkpoints", "--wait=false", check=False)


def _watch_training(namespace: str, volume: Path, shared: Path) -> None:
    # The operator creates every child; the pods run and reach each other by name.
    def children() -> bool:
        names = {p["metadata"]["name"] for p in kube.pods(namespace, f"{LABEL}={JOB_NAME}")}
        return names == {f"{JOB_NAME}-{r}" for r in REPLICAS}

    kube.eventually("the operator creates a pod per replica", children, 60)
    services = kube.kubectl_json("get", "services", "-n", namespace, "-l", f"{LABEL}={JOB_NAME}")
    # One headless Service for the job: every pod is <pod>.<job>.<namespace>.svc under it;
    # and TensorBoard's (spec.tensorboard).
    by_name = {s["metadata"]["name"]: s for s in services["items"]}
    assert sorted(by_name) == [JOB_NAME, BOARD], sorted(by_name)
    assert by_name[JOB_NAME]["spec"]["clusterIP"] == "None"
    for pod in kube.pods(namespace, f"{LABEL}={JOB_NAME}"):
        assert pod["spec"]["subdomain"] == JOB_NAME
        assert pod["spec"]["hostname"] == pod["metadata"]["name"]
    policies = kube.kubectl_json("get", "networkpolicies", "-n", namespace)["items"]
    assert [p["metadata"]["name"] for p in policies] == [f"{JOB_NAME}-grpc"]

    # `kubectl get srj` shows the phase and the global step while it trains.
    seen: list[str] = []

    def training_shown() -> bool:
        line = kube.kubectl("get", "srj", JOB_NAME, "-n", namespace, "--no-headers").stdout
        seen.append(line.strip())
        fields = line.split()
        return (
            len(fields) >= 3 and fields[1] == "Running" and fields[2].isdigit()
            and int(fields[2]) > 0
        )

    kube.eventually("`kubectl get srj` shows Running and a global step", training_shown, 240, 0.5)

    # ... and, once the operator has seen the step move twice, its progress and an ETA.
    def eta_shown() -> bool:
        line = kube.kubectl("get", "srj", JOB_NAME, "-n", namespace, "--no-headers").stdout
        seen.append(line.strip())
        fields = line.split()
        # NAME PHASE STEP READY PROGRESS ETA AGE
        return (len(fields) >= 7 and fields[4].endswith("%")
                and re.fullmatch(r"(\d+[dhm])?\d+[hms]", fields[5]) is not None)

    kube.eventually("`kubectl get srj` shows the progress and an ETA", eta_shown, 120, 1.0)
    _look_at_tensorboard(namespace)

    # The pods run the runtime image as the non-root user of the image and the chart, in
    # one container (the template's `tensorflow` one, merged into the runtime's).
    ps = f"{JOB_NAME}-ps-0"
    assert kube.kubectl("exec", "-n", namespace, ps, "--", "id", "-u").stdout.strip() == "10001"
    pod = kube.kubectl_json("get", "pod", ps, "-n", namespace)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["syncreplicas"]
    status = pod["status"]["containerStatuses"][0]
    assert status["image"].endswith("syncreplicas-runtime:0.1.0"), status["image"]
    # Every address in TF_CONFIG is a service name that CoreDNS resolves to that pod.
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PYTHONPATH"] == "/opt/model"
    cluster_spec = json.loads(env["TF_CONFIG"])["cluster"]
    addresses = [a for role in cluster_spec.values() for a in role]
    assert addresses, cluster_spec
    pod_ips = {p["status"].get("podIP") for p in kube.pods(namespace, f"{LABEL}={JOB_NAME}")}
    for address in addresses:
        host = address.rsplit(":", 1)[0]
        resolved = kube.kubectl(
            "exec", "-n", namespace, ps, "--", "python", "-c",
            f"import socket; print(socket.gethostbyname({host!r}))",
        ).stdout.strip()  # fmt: skip
        assert resolved in pod_ips, (address, resolved, pod_ips)

    lift_delay(shared)  # everything that needs it training is seen: the rest at full speed
    kube.kubectl("wait", "-n", namespace, f"srj/{JOB_NAME}", "--for=condition=Succeeded",
                 "--timeout=300s", timeout=320)  # fmt: skip
    job = srj(namespace)
    assert job["status"]["phase"] == "Succeeded"
    assert job["status"]["globalStep"] >= job["spec"]["training"]["maxSteps"], job["status"]
    assert any(line.split()[1] == "Running" for line in seen if len(line.split()) > 1)

    # PS pods never outlive the job (cleanPodPolicy Running); the chief's checkpoints are on
    # its persistent volume, the last one at the final step.
    # (The PS ends itself a second after the chief says it is done: the operator deletes
    # it when it sees the chief's success first, else it has already Succeeded.)
    kube.eventually(
        "the PS pod is deleted or ended after success",
        lambda: all(p["status"].get("phase") in ("Succeeded", "Failed") for p in
                    kube.pods(namespace, f"{LABEL}={JOB_NAME},syncreplicas.io/replica-type=ps")),
        60,
    )
    index = volume / "checkpoint"
    assert index.exists(), sorted(p.name for p in volume.iterdir())
    assert f'model_checkpoint_path: "model.ckpt-{job["status"]["globalStep"]}"' in index.read_text()
    # The model that trained is the user's (its variables are in the checkpoint).
    chief_log = kube.kubectl("logs", "-n", namespace, f"{JOB_NAME}-chief-0").stdout
    assert "eval at global step" in chief_log and "accuracy=" in chief_log, chief_log[-2000:]
    # It started from the other run's weights: its first loss (the summaries on its volume,
    # as TensorBoard reads them) is the pretrained model's, far below a cold start's ln 2.
    assert (f"1 variables warm-started from {CHECKPOINT_DIR}/{PRETRAINED}/model.ckpt-0"
            in chief_log), chief_log[-2000:]  # fmt: skip
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(volume))
    board.Reload()
    losses = board.Scalars("loss")
    assert losses and losses[0].step <= 10 and losses[0].value < 0.2, losses[:3]
    # Its SavedModels are on its volume, and the job's status names them: the final one,
    # and the best by accuracy (the first evaluation's at least).
    step = job["status"]["globalStep"]
    assert job["status"]["export"] == {"path": f"{CHECKPOINT_DIR}/export/{step}",
                                       "globalStep": step}, job["status"]  # fmt: skip
    assert (volume / "export" / str(step) / "saved_model.pb").is_file()
    best = job["status"]["bestExport"]
    assert best["path"] == f"{CHECKPOINT_DIR}/export/best/{best['globalStep']}", best
    assert (volume / "export" / "best" / str(best["globalStep"]) / "saved_model.pb").is_file()
    # Nesterov's momentum trained it: the optimizer's slot is in its checkpoint.
    import tensorflow as tf

    names = {name for name, _ in tf.train.list_variables(str(volume))}
    assert "user/w/Momentum" in names, sorted(names)
    # Its rate at every logged step is the schedule's closed form at that step.
    rates = logged_rates(chief_log)
    assert len(rates) >= 3, chief_log[-2000:]
    schedule = LearningRateSchedule.model_validate(SCHEDULE)
    rate = job["spec"]["training"]["learningRate"]
    for step, logged in rates:
        assert logged == pytest.approx(rate_at(rate, schedule, step), rel=1e-5), (step, rates)
    # RBAC is enforced: the chart gave the operator every verb this job needed.
    assert not kube.operator_refusals()


def _look_at_tensorboard(namespace: str) -> None:
    """While it trains, TensorBoard in the chief's pod serves its loss, as its user opens
    it (port-forward to its Service), in a browser; and a pod of the job's namespace
    reaches it through the Service (the NetworkPolicy admits the namespace)."""
    chief = kube.kubectl_json("get", "pod", f"{JOB_NAME}-chief-0", "-n", namespace)
    assert [c["name"] for c in chief["spec"]["initContainers"]] == ["tensorboard"]
    with boardlib.port_forward(namespace, BOARD, 6006) as base:
        steps = boardlib.loss_steps(base, timeout=120)
        assert steps == sorted(set(steps)), steps  # one curve, steps increasing
        card = boardlib.loss_card(base, "tensorboard")
        shown = boardlib.shown_step(card)
        assert shown is not None and shown in boardlib.loss_steps(base, 30), card
    # Through the Service, as the nodes' kube-proxy and kube-router have programmed it: in
    # their time, not the pod's (the port-forward above goes to the pod itself). Under the
    # suite's load on a slow day the first try was refused (2026-12-05, REPEAT=5).
    served = kube.eventually(
        "a pod of the job's namespace reaches TensorBoard through its Service",
        lambda: kube.kubectl(
            "exec", "-n", namespace, f"{JOB_NAME}-ps-0", "--", "python", "-c",
            f"import urllib.request; print(urllib.request.urlopen('http://{BOARD}:6006/data/"
            "plugin/scalars/tags', timeout=10).read().decode())",
        ).stdout, 60, interval=2)  # fmt: skip
    assert '"loss"' in served, served


@pytest.mark.timeout(600)
def test_deleting_a_job_removes_every_child_through_owner_references(namespace: str) -> None:
    apply(namespace, linear_job(max_steps=100000, delay_ms=200))
    selector = f"{LABEL}={JOB_NAME}"
    kube.eventually("the job's processes run on the node",
                    lambda: len(kube.runtime_processes(namespace)) == len(REPLICAS), 120)
    kube.eventually("the job's pods run", lambda: len(
        [p for p in kube.pods(namespace, selector) if p["status"].get("phase") == "Running"]
    ) == len(REPLICAS), 120)  # fmt: skip
    for kind in ("pods", "services", "networkpolicies"):
        for item in kube.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]:
            owners = item["metadata"].get("ownerReferences", [])
            assert [(o["kind"], o["name"], o.get("controller")) for o in owners] == [
                ("SyncReplicasJob", JOB_NAME, True)
            ], (kind, item["metadata"]["name"])
    started = time.monotonic()
    kube.kubectl("delete", "srj", JOB_NAME, "-n", namespace, "--timeout=60s", timeout=90)
    deleted = time.monotonic() - started

    def nothing_left() -> bool:
        return all(
            not kube.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]
            for kind in ("pods", "services", "networkpolicies")
        )

    kube.eventually("every child of the deleted job is gone", nothing_left, 120)
    kube.eventually("no process of the job is left on the node",
                    lambda: not kube.runtime_processes(namespace), 60)
    # The finalizer, if any, never holds the deletion up for long.
    assert deleted < 30, f"kubectl delete srj took {deleted:.0f} s"
    assert not kube.operator_refusals()
