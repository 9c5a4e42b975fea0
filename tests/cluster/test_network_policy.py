"""The door is closed: a job's gRPC ports admit only the job's own pods, on a cluster whose
network plugin enforces NetworkPolicy (kube-router's network-policy controller on every
node of `make cluster`).

TensorFlow's gRPC servers have no authentication: whoever opens a session on a parameter
server can run any graph there. While a job trains across several nodes, two pods that are
not the job's (one in another namespace, one in the job's namespace without the job's
labels) can neither open a TCP connection to any replica's gRPC port nor create a
TensorFlow session on a parameter server; both still read every replica's metrics port (so
the network itself is open to them: what stops them is the policy). The chief's TensorBoard
(spec.tensorboard) admits the pod of the job's namespace and not the other. Then the
protection is taken away on purpose (the policy patched to admit everyone): the same probes
get through, a TensorFlow session and TensorBoard included, which shows that the test can
fail. Restored, the door
closes again; a policy deleted under a running job is created again by the operator and
closes it too. The job trains to Succeeded through all of it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.slowjob import delayed, lift_delay, shared_dir
from tests.cluster.test_nodes import IMAGE, SLEEPER

JOB = "guarded"
SELECTOR = f"syncreplicas.io/job-name={JOB}"
POLICY = f"{JOB}-grpc"
GRPC, METRICS, BOARD = 2222, 9090, 6006
# How long kube-router may take to program a change of pods or policies (it resyncs on
# every change; a full resync every 30 s).
ENFORCED_WITHIN = 45

# Run inside a probing pod: a TCP connection to each "ip:port" (argv[1], JSON), at once.
TCP_PROBE = """
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
def probe(target):
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return "open"
    except socket.timeout:
        return "timeout"
    except OSError as err:
        return type(err).__name__
targets = json.loads(sys.argv[1])
with ThreadPoolExecutor(len(targets)) as pool:
    print(json.dumps(dict(zip(targets, pool.map(probe, targets)))))
"""
# Run inside a probing pod: a TensorFlow session on the PS (argv[1]) lists its devices.
# The verdict printed, the process ends at once: a session refused by the policy once held
# the interpreter's exit past the probe's 90 s (under load; its answer was already out).
TF_PROBE = """
import json, os, sys
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=8000)
try:
    with tf.compat.v1.Session("grpc://" + sys.argv[1], config=config) as session:
        print(json.dumps({"devices": [d.name for d in session.list_devices()]}))
except Exception as err:
    print(json.dumps({"error": type(err).__name__ + ": " + str(err)[:200]}))
sys.stdout.flush()
os._exit(0)
"""


def job_manifest(shared: Path) -> dict[str, Any]:
    """1 PS, a chief and a worker (R = 2), on three different nodes, every step slowed by a
    delay read from ``shared`` (lifted at the end to finish at once): at slowjob's fault
    pace at most about 1.25 updates/s, so its 750 steps take 10 minutes at least, and few
    are left for the end at full speed (3000 at 100 ms left minutes of them)."""
    job = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    job["metadata"]["name"] = JOB
    job["spec"].update({"workers": 1, "replicasToAggregate": 2, "parameterServers": 1})
    job["spec"]["training"].update({"maxSteps": 750, "checkpointEverySteps": 250,
                                    "logEverySteps": 500, "evalEverySteps": 0})  # fmt: skip
    container, volume = delayed({"name": "syncreplicas"}, shared)
    apart = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"syncreplicas.io/job-name": JOB}},
        "topologyKey": "kubernetes.io/hostname",
    }]}  # fmt: skip
    job["spec"]["template"] = {"spec": {"containers": [container], "volumes": [volume],
                                        "affinity": {"podAntiAffinity": apart}}}  # fmt: skip
    job["spec"]["tensorboard"] = {"port": BOARD}
    return dict(job)


def probe_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "probe"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": SLEEPER}],
        },
    }


def exec_json(namespace: str, pod: str, *argv: str, timeout: float = 60) -> dict[str, Any]:
    result = kube.kubectl("exec", "-n", namespace, pod, "--", *argv, timeout=timeout)
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def tcp(probe: tuple[str, str], targets: list[str]) -> dict[str, str]:
    namespace, pod = probe
    return exec_json(namespace, pod, "python", "-c", TCP_PROBE, json.dumps(targets))


def tf_session(probe: tuple[str, str], target: str) -> dict[str, Any]:
    namespace, pod = probe
    # TensorFlow's import alone took 27 s of the probe's 40 in a loaded CI run: room for it.
    return exec_json(namespace, pod, "timeout", "90", "python", "-c", TF_PROBE, target,
                     timeout=120)  # fmt: skip


def srj(namespace: str) -> dict[str, Any]:
    return dict(kube.kubectl_json("get", "srj", JOB, "-n", namespace))


@pytest.fixture(scope="module")
def guarded(cluster_up: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A training job and two probing pods that are not the job's."""
    stamp = f"{int(time.time()) % 100000}"
    namespace, other = f"np-job-{stamp}", f"np-other-{stamp}"
    shared = shared_dir(tmp_path_factory.mktemp("np"))
    for name in (namespace, other):
        kube.kubectl("create", "namespace", name)
    try:
        kube.kubectl("apply", "-n", other, "-f", "-", input=json.dumps(probe_pod("intruder")))
        kube.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(probe_pod("bystander")))
        kube.kubectl("apply", "-n", namespace, "-f", "-",
                     input=yaml.safe_dump(job_manifest(shared)))  # fmt: skip
        for ns, pod in ((other, "intruder"), (namespace, "bystander")):
            kube.kubectl("wait", "--for=condition=Ready", f"pod/{pod}", "-n", ns, "--timeout=120s")

        def training() -> dict[str, Any] | None:
            status = srj(namespace).get("status") or {}
            return status if int(status.get("globalStep") or 0) > 0 else None

        kube.eventually("the job training", training, 240)
        pods = {p["metadata"]["name"].removeprefix(f"{JOB}-"): p
                for p in kube.pods(namespace, SELECTOR)}  # fmt: skip
        yield {"namespace": namespace, "other": other, "shared": shared, "pods": pods,
               "probes": [(other, "intruder"), (namespace, "bystander")]}  # fmt: skip
    finally:
        lift_delay(shared)
        for name in (namespace, other):
            kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def targets(guarded: dict[str, Any], port: int) -> list[str]:
    return [f"{p['status']['podIP']}:{port}" for p in guarded["pods"].values()]


def all_refused(guarded: dict[str, Any]) -> dict[str, Any] | None:
    """Every probe's connection to every gRPC port refused (None while one gets through)."""
    with ThreadPoolExecutor(2) as pool:
        seen = list(pool.map(lambda p: tcp(p, targets(guarded, GRPC)), guarded["probes"]))
    return None if any(r == "open" for s in seen for r in s.values()) else {"seen": seen}


def board_seen(guarded: dict[str, Any]) -> dict[str, str]:
    """Each probe's connection to the chief's TensorBoard: {probe's namespace: result}."""
    target = f"{guarded['pods']['chief-0']['status']['podIP']}:{BOARD}"
    return {ns: tcp((ns, pod), [target])[target] for ns, pod in guarded["probes"]}


def board_for_the_namespace_only(guarded: dict[str, Any]) -> dict[str, str] | None:
    seen = board_seen(guarded)
    inside, outside = seen[guarded["namespace"]], seen[guarded["other"]]
    return seen if inside == "open" and outside != "open" else None


def intruder_gets_in(guarded: dict[str, Any]) -> dict[str, str] | None:
    seen = tcp(guarded["probes"][0], targets(guarded, GRPC))
    return seen if all(r == "open" for r in seen.values()) else None


@pytest.mark.timeout(900)
def test_only_the_jobs_own_pods_reach_its_grpc_ports(guarded: dict[str, Any]) -> None:
    namespace = guarded["namespace"]
    nodes = {p["spec"]["nodeName"] for p in guarded["pods"].values()}
    assert len(nodes) == 3, nodes  # the replicas reach each other across nodes

    # Closed: no TCP connection from either probe to any replica's gRPC port...
    kube.eventually("the policy enforced", lambda: all_refused(guarded), ENFORCED_WITHIN)
    # ... while the same pods read every replica's metrics port: the network is open to them.
    for probe in guarded["probes"]:
        assert set(tcp(probe, targets(guarded, METRICS)).values()) == {"open"}, probe
    # No TensorFlow session on the PS from either.
    ps = f"{guarded['pods']['ps-0']['status']['podIP']}:{GRPC}"
    with ThreadPoolExecutor(2) as pool:
        sessions = list(pool.map(lambda p: tf_session(p, ps), guarded["probes"]))
    assert all("devices" not in s for s in sessions), sessions
    # TensorBoard: the job's namespace reaches it (once it listens), the other does not.
    kube.eventually("TensorBoard open to the job's namespace only",
                    lambda: board_for_the_namespace_only(guarded), 90)  # fmt: skip

    # The protection taken away on purpose: the same intruder gets in, a session included.
    open_all = [{"op": "add", "path": "/spec/ingress/-", "value": {}}]
    kube.kubectl("patch", "networkpolicy", POLICY, "-n", namespace, "--type=json",
                 "-p", json.dumps(open_all))  # fmt: skip
    kube.eventually("the intruder in, the policy opened", lambda: intruder_gets_in(guarded),
                    ENFORCED_WITHIN)  # fmt: skip
    session = tf_session(guarded["probes"][0], ps)
    assert session.get("devices"), session
    assert set(board_seen(guarded).values()) == {"open"}

    # Restored: closed again.
    kube.kubectl("patch", "networkpolicy", POLICY, "-n", namespace, "--type=json",
                 "-p", json.dumps([{"op": "remove", "path": "/spec/ingress/3"}]))  # fmt: skip
    kube.eventually("closed again", lambda: all_refused(guarded), ENFORCED_WITHIN)
    kube.eventually("TensorBoard closed to the other namespace again",
                    lambda: board_for_the_namespace_only(guarded), ENFORCED_WITHIN)  # fmt: skip

    # Deleted under the running job: the operator creates it again, and it closes the door.
    uid = kube.kubectl_json("get", "networkpolicy", POLICY, "-n", namespace)["metadata"]["uid"]
    kube.kubectl("delete", "networkpolicy", POLICY, "-n", namespace)

    def recreated() -> str | None:
        got = kube.kubectl("get", "networkpolicy", POLICY, "-n", namespace, "-o",
                           "jsonpath={.metadata.uid}", check=False)  # fmt: skip
        return got.stdout if got.returncode == 0 and got.stdout not in ("", uid) else None

    kube.eventually("the policy created again", recreated, 30)
    kube.eventually("closed by the new policy", lambda: all_refused(guarded), ENFORCED_WITHIN)

    # The job's own replicas reached each other all along: it trains to the end (as long as
    # its step moves: the rest of 3000 steps at 100 ms took over 240 s in a loaded CI run).
    lift_delay(guarded["shared"])

    status = kube.finished_training(namespace, JOB, stalled=90, limit=480)
    assert status["phase"] == "Succeeded", status
