"""Talk to the local cluster of `make cluster` the way a user does: kubectl and helm.

One job: run the real client binaries against the cluster's kubeconfig and hand back
parsed output. The tests assert; nothing here decides what is right.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.cluster import reads
from tests.support.groups import children_of, parent_of

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PY = REPO / "hack" / "cluster" / "cluster.py"
CHART = REPO / "charts" / "syncreplicas"
RELEASE = "syncreplicas"
RELEASE_NAMESPACE = "syncreplicas-system"
T = TypeVar("T")
# The cluster's own module (hack/cluster is not a package): its paths and pinned versions,
# so that the tests look where `cluster.py up` put things.
_spec = importlib.util.spec_from_file_location("syncreplicas_cluster", CLUSTER_PY)
assert _spec is not None and _spec.loader is not None
node = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(node)
KUBECONFIG = node.KUBECONFIG_LINK


def tool(name: str) -> str:
    local = REPO / ".tools" / "bin" / name
    return str(local) if local.exists() else name


def env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(KUBECONFIG)}


def run(
    *argv: str, check: bool = True, input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(argv), capture_output=True, text=True, env=env(), input=input, timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def kubectl(*args: str, check: bool = True, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return run(tool("kubectl"), *args, check=check, input=input, timeout=timeout)


def kubectl_json(*args: str) -> Any:
    """``kubectl ARGS -o json``, parsed. A plain `get KIND [NAME] [-n NS] [-l SELECTOR]` of
    the kinds reads.KINDS knows is read from the API server directly (the JSON kubectl
    would print; what the tests poll, without a kubectl process each time); not found or
    refused raises AssertionError as kubectl's exit would."""
    path = reads.object_path(*args)
    if path is not None:
        return reads.get_json(KUBECONFIG, path)
    return json.loads(kubectl(*args, "-o", "json").stdout)


def raw(path: str, timeout: float = 10, check: bool = True) -> str:
    """``kubectl get --raw PATH`` (a pod's /metrics through the API server's proxy, say),
    read directly; with ``check=False`` a failure is "" instead of an AssertionError."""
    try:
        return reads.get_text(KUBECONFIG, path, timeout)
    except AssertionError:
        if check:
            raise
        return ""


def helm(*args: str, check: bool = True, timeout: float = 360) -> subprocess.CompletedProcess[str]:
    return run(tool("helm"), *args, check=check, timeout=timeout)


def cluster(
    *command: str, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return run("python3", str(CLUSTER_PY), *command, check=check, timeout=timeout)


def node_fault(name: str, fault: str, *extra: str,
               check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """A node fault of hack/cluster (crash, partition, heal, start, drain, uncordon,
    preempt), as a user reproducing one would run it."""
    return cluster("node", name, fault, *extra, check=check)


def is_up() -> bool:
    return KUBECONFIG.exists() and cluster("is-up", check=False).returncode == 0


# (what, seconds) of every wait of `eventually` in the running test: conftest.py writes
# them to reports/cluster-waits.tsv after each test, where `make test`'s summary reads
# what its slowest tests waited for.
WAITS: list[tuple[str, float]] = []


def eventually(what: str, probe: Callable[[], T | None], timeout: float,
               interval: float = 1.0) -> T:  # fmt: skip
    """The first truthy value of ``probe`` within ``timeout`` seconds, or fail saying what
    did not happen (the probe's last exception included)."""
    started = time.monotonic()
    deadline = started + timeout
    last: BaseException | None = None
    while True:
        try:
            value = probe()
            if value:
                WAITS.append((what, time.monotonic() - started))
                return value
        except (AssertionError, subprocess.SubprocessError, ValueError, KeyError) as error:
            last = error
        if time.monotonic() > deadline:
            WAITS.append((f"{what} (not within {timeout:.0f} s)", time.monotonic() - started))
            raise AssertionError(f"{what}: not within {timeout:.0f} s (last error: {last})")
        time.sleep(interval)


# Nodes without a kubelet of this machine's: kubemark's hollow nodes (test_hollow.py) and
# the RBAC tests' Node objects (rbaclib.fake_node). Tests that pick nodes to fault, label
# or reach never get these: other tests may have them on the cluster at the same time.
RBAC_TEST_LABEL = "syncreplicas.io/rbac-test"
NOT_REAL_NODES = (node.hollow.LABEL, RBAC_TEST_LABEL)


def real_nodes() -> list[dict[str, Any]]:
    """The cluster's nodes that a kubelet of `make cluster` runs, by name."""
    found = kubectl_json("get", "nodes")["items"]
    real = [n for n in found if not set(n["metadata"].get("labels", {})) & set(NOT_REAL_NODES)]
    return sorted(real, key=lambda n: n["metadata"]["name"])


def pods(namespace: str, selector: str) -> list[dict[str, Any]]:
    found = kubectl_json("get", "pods", "-n", namespace, "-l", selector)
    return list(found["items"])


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in obj.get("status", {}).get("conditions", []):
        if item.get("type") == kind:
            return dict(item)
    return None


# The operator's replicas, and the Lease that names the one acting (kubectl get lease).
OPERATOR_PODS = "app.kubernetes.io/component=operator"
LEADER_LEASE = "syncreplicas-operator"
# The API server's audit log (every request of the operator's ServiceAccount), and that user.
AUDIT_LOG = node.RUN / "logs" / "audit.log"
OPERATOR_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:syncreplicas-operator"


def rollout(*args: str) -> float:
    """A helm upgrade (or rollback) of the release, waited for until the operator's
    Deployment has rolled out; its seconds."""
    at = time.monotonic()
    helm(*args, "--wait", "--timeout", "5m")
    kubectl("rollout", "status", "deployment/syncreplicas-operator", "-n", RELEASE_NAMESPACE,
            "--timeout=180s", timeout=200)  # fmt: skip
    return time.monotonic() - at


def finished(namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """The job's status once it is Succeeded or Failed (whichever: the caller asserts)."""

    def done() -> dict[str, Any] | None:
        status = kubectl_json("get", "srj", name, "-n", namespace).get("status") or {}
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    return eventually(f"{namespace}/{name} finished", done, timeout)


def finished_training(namespace: str, name: str, stalled: float, limit: float) -> dict[str, Any]:
    """The job's status once it is Succeeded or Failed, waited for as long as its global
    step keeps moving (a loaded machine only trains slower): an AssertionError when the
    step stood still for ``stalled`` seconds, or after ``limit``."""
    began = moved_at = time.monotonic()
    last, status = -1, {}
    while True:
        try:
            status = kubectl_json("get", "srj", name, "-n", namespace).get("status") or {}
        except AssertionError:  # a read the API server did not answer: read again
            status = status or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            return dict(status)
        now, step = time.monotonic(), int(status.get("globalStep") or 0)
        if step != last:
            last, moved_at = step, now
        if now - moved_at > stalled or now - began > limit:
            raise AssertionError(
                f"{namespace}/{name} not finished: global step {step}, unchanged for "
                f"{now - moved_at:.0f} s, {now - began:.0f} s after the wait began: {status}"
            )
        time.sleep(2)


def leader_pod() -> str:
    """The operator pod holding the leader Lease ("" when none does): its identity there
    is ``<pod>_<suffix>``. A holder that names no operator pod, or one being deleted, is
    none: after a helm upgrade or rollback the Lease still names a replica of the old
    release until a new one takes it (a test that asked right after a rollout got a pod
    that no longer existed, and found both replicas following)."""
    try:
        lease = kubectl_json("get", "lease", LEADER_LEASE, "-n", RELEASE_NAMESPACE)
    except AssertionError:
        return ""
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    name = holder.strip().rsplit("_", 1)[0]
    return name if name in {p["metadata"]["name"] for p in operator_replicas()} else ""


def operator_replicas() -> list[dict[str, Any]]:
    """The operator's pods that are not being deleted."""
    return [p for p in pods(RELEASE_NAMESPACE, OPERATOR_PODS)
            if "deletionTimestamp" not in p["metadata"]]  # fmt: skip


def operator_restarts() -> dict[str, int]:
    """Each operator pod's name and restart count: the same at both ends of a span when no
    replica restarted or was replaced meanwhile (a leader that cannot renew its Lease in
    time exits, and its counters start again at zero)."""
    return {
        p["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
        )
        for p in pods(RELEASE_NAMESPACE, OPERATOR_PODS)
    }


def operator_replicas_ready(within: float = 120) -> None:
    """Wait until the operator's Deployment has both its replicas Ready."""
    eventually("both operator replicas Ready", lambda: kubectl_json(
        "get", "deployment", "syncreplicas-operator", "-n", RELEASE_NAMESPACE,
    )["status"].get("readyReplicas") == 2, within)  # fmt: skip


def operator_logs(tail: int = -1) -> str:
    """Every operator replica's log (each under a line naming its pod)."""
    out, leader = [], leader_pod()
    for item in pods(RELEASE_NAMESPACE, OPERATOR_PODS):
        name = item["metadata"]["name"]
        log = kubectl("logs", "-n", RELEASE_NAMESPACE, name, f"--tail={tail}", check=False)
        out.append(f"--- {name}{' (leader)' if name == leader else ''}\n{log.stdout}")
    return "\n".join(out)


# A runtime's own log lines ("12:00:01 syncreplicas chief-0: ..."), not TensorFlow's.
RUNTIME_LINE = re.compile(r"^\d\d:\d\d:\d\d syncreplicas ")


def replica_logs(namespace: str, tail: int = 8) -> str:
    """The last ``tail`` lines the runtime wrote in each of the namespace's job pods (a
    line each, cut at 240 characters): which replica waited for what, in a few lines."""
    out = []
    for item in kubectl_json("get", "pods", "-n", namespace, "-l",
                             "syncreplicas.io/replica-type")["items"]:  # fmt: skip
        name = item["metadata"]["name"]
        log = kubectl("logs", "-n", namespace, name, check=False).stdout
        lines = [line[:240] for line in log.splitlines() if RUNTIME_LINE.match(line)]
        out.append(f"--- {name} ({item['status'].get('phase')})")
        out += lines[-tail:]
    return "\n".join(out)


def describe(namespace: str, *what: str) -> str:
    """What a user looks at when a test fails: the replicas' last log lines (first: a
    failure's output is often cut after its first hundred lines), describe, events, the
    operator's log."""
    out = [replica_logs(namespace)]
    out.append(kubectl("describe", *what, "-n", namespace, check=False).stdout)
    out.append(kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp",
                       check=False).stdout)  # fmt: skip
    out.append(operator_logs(tail=60))
    return "\n".join(out)


def operator_refusals() -> list[str]:
    """Lines of the operators' logs where RBAC refused them (403: 'User
    "system:serviceaccount:..." cannot <verb> resource ...'): what a verb the chart forgot
    looks like. Admission's refusals (Pod Security, a namespace being deleted) are the
    API server judging a job's pods, not the operator's rights, and are not counted."""
    return [line for line in operator_logs().splitlines()
            if "403" in line and 'User "system:serviceaccount:' in line and " cannot " in line]


def all_runtime_processes(namespace: str) -> list[int]:
    """Every runtime process on the machine that belongs to ``namespace`` (its name is in
    their TF_CONFIG), a warm-restarting container's replicas beside their first process."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if b"syncreplicas_runtime" not in (proc / "cmdline").read_bytes():
                continue
            if namespace.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def runtime_processes(namespace: str) -> list[int]:
    """Each container's first runtime process on the machine that belongs to ``namespace``:
    one per running replica (a warm-restarting container's replica is a child of that
    process, not counted again)."""
    found = all_runtime_processes(namespace)
    tops = []
    for pid in found:
        try:
            if parent_of(pid) not in found:
                tops.append(pid)
        except OSError:
            continue
    return tops


def container_process(namespace: str, pod_name: str) -> int:
    """The host pid of the first process of a pod's first container (from its node's
    containerd)."""
    item = kubectl_json("get", "pod", pod_name, "-n", namespace)
    container = item["status"]["containerStatuses"][0]["containerID"]
    task = container.split("://", 1)[1]
    sock = node.node_named(item["spec"]["nodeName"]).containerd_sock
    out = run("ctr", "--address", str(sock), "-n", "k8s.io", "tasks", "ls").stdout
    (pid,) = [int(line.split()[1]) for line in out.splitlines() if line.startswith(task)]
    return pid


def replica_process(namespace: str, pod_name: str) -> int:
    """The host pid of the replica in a warm-restarting container: the child of its first
    process."""
    children = children_of(container_process(namespace, pod_name))
    if len(children) != 1:
        raise AssertionError(f"{pod_name}: {len(children)} children of its first process")
    return children[0]


def kill_replica(namespace: str, pod_name: str, sig: int = signal.SIGKILL) -> int:
    """Signal the replica process inside a warm-restarting container (SIGKILL: as the OOM
    killer would pick it, the largest); its container's first process starts a new one.
    Returns the pid signalled."""
    pid = replica_process(namespace, pod_name)
    os.kill(pid, sig)
    return pid


def kill_in_place(namespace: str, pod_name: str, sig: int = signal.SIGKILL) -> None:
    """Signal the first process of a pod's first container from the node (SIGKILL: the
    container crashes with it); the pod stays, so the kubelet restarts the container in
    place or the pod fails, by its restartPolicy."""
    os.kill(container_process(namespace, pod_name), sig)
