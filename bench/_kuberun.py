"""A job on the real cluster of `make cluster`, seen the way bench/recovery.py sees local
processes: step events, the chief's epoch lines, PS 0's gauges, and failures delivered as
Kubernetes delivers them.

- Step events and epoch lines come from the container logs each node's kubelet writes on
  this machine (``<node>/pod-logs/<namespace>_<pod>_<uid>/<container>/<restart>.log``
  under the cluster's run directory), each line stamped by the container runtime when it
  was written: no clock of the harness in between.
- Gauges are scraped from the pod's own address (every node's pod range is routed to it
  from this machine), found again after a pod is replaced.
- ``kill``: a chief or PS pod is deleted (``kubectl delete pod``: SIGTERM, the operator
  creates its successor with a new IP under the same name); a worker's container's process
  is SIGKILLed (the kubelet restarts it in place: restartPolicy OnFailure). With ``warm``
  (runPolicy.warmRestarts) any replica's process is SIGKILLed inside its container, and the
  container's first process forks a new one. With ``spares`` (runPolicy.spares) every
  kill is the replica's pod deleted, after a spare is ready: the spare takes it over, so a
  replica's pod is found by its labels, not its name.
  Kubernetes restarts everything: ``restart`` and ``poll`` have nothing to do.
"""

from __future__ import annotations

import datetime
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _observe as obs
import _ours
import yaml

from tests.cluster import kube
from tests.support import tfcluster

NODES = kube.node.RUN / "nodes"  # <node>/pod-logs: each kubelet's podLogsDir
METRICS_PORT = 9090


def manifest(name: str, spec: dict[str, Any], warm: bool = False,
             spares: int = 0) -> dict[str, Any]:  # fmt: skip
    """A SyncReplicasJob for ``spec`` (bench/_ours.py's job with the shape filled in): pods
    restarted in place on failure, with a budget no benchmark spends; replicas restarted
    warm inside their containers or not; ``spares`` warm spare pods."""
    run_policy = {"restartPolicy": "OnFailure", "backoffLimit": 1000,
                  "warmRestarts": warm or spares > 0, "spares": spares}  # fmt: skip
    return {
        "apiVersion": "syncreplicas.io/v1alpha1",
        "kind": "SyncReplicasJob",
        "metadata": {"name": name},
        "spec": {**spec, "runPolicy": run_policy},
    }


def cri_line(line: str) -> tuple[float, str] | None:
    """(unix time, message) of one complete line of a CRI container log."""
    stamp, _, rest = line.partition(" ")
    _stream, _, rest = rest.partition(" ")
    tag, _, message = rest.partition(" ")
    if tag != "F":
        return None  # a partial line: runtime lines are short, none are split
    try:
        head, _, frac = stamp.rstrip("Z").partition(".")
        t = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None
    return t + float(f"0.{frac or 0}"), message


@dataclass
class KubeRun:
    """One job in its own namespace, started by :meth:`start`, gone after :meth:`stop`."""

    namespace: str
    name: str
    warm: bool = False  # runPolicy.warmRestarts; kill() then kills the replica's process
    spares: int = 0  # runPolicy.spares; kill() then deletes the replica's pod
    tails: dict[Path, obs.LogTail] = field(default_factory=dict)
    epochs: list[_ours.EpochEvent] = field(default_factory=list)
    # (unix time, replica) of each process's first step ("first step done at unix time")
    firsts: list[tuple[float, str]] = field(default_factory=list)
    ips: dict[str, str] = field(default_factory=dict)
    # Every line read, kept here per container log: the kubelet removes a pod's logs with
    # the pod, and a replaced replica's last lines tell why it took long.
    keep: Path | None = None
    # False: the job's Services select its pods whether published or not, as before the
    # operator took a terminating pod's address out of DNS (``--terminating-published``).
    unpublish: bool = True
    # Extra environment of the job's runtime containers (e.g. TF_GRPC_DEFAULT_OPTIONS).
    env: dict[str, str] = field(default_factory=dict)

    def start(self, spec: dict[str, Any]) -> None:
        if self.env:
            spec = {**spec, "template": {"spec": {"containers": [{
                "name": "syncreplicas",
                "env": [{"name": k, "value": v} for k, v in sorted(self.env.items())]}]}}}
        kube.kubectl("delete", "namespace", self.namespace, "--ignore-not-found",
                     "--timeout=180s", timeout=200)  # fmt: skip
        kube.kubectl("create", "namespace", self.namespace)
        kube.kubectl("apply", "-n", self.namespace, "-f", "-",
                     input=yaml.safe_dump(manifest(self.name, spec, self.warm,
                                                   self.spares)))  # fmt: skip
        if not self.unpublish:
            self.select_terminating(1 + int(spec.get("parameterServers", 1))
                                    + int(spec.get("workers", 0)))  # fmt: skip

    def select_terminating(self, replicas: int, timeout: float = 120.0) -> None:
        """Drop the published label from every replica Service's selector (the operator
        creates Services only, it does not rewrite them)."""
        deadline = time.monotonic() + timeout
        while True:
            services = kube.kubectl_json("get", "services", "-n", self.namespace, "-l",
                                         f"syncreplicas.io/job-name={self.name}")["items"]
            if len(services) >= replicas:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(services)} of {replicas} Services within {timeout} s")
            time.sleep(0.5)
        for service in services:
            kube.kubectl("patch", "service", service["metadata"]["name"], "-n", self.namespace,
                         "--type=json", "-p", '[{"op": "remove", "path": '
                         '"/spec/selector/syncreplicas.io~1published"}]')  # fmt: skip

    def stop(self) -> None:
        kube.kubectl("delete", "namespace", self.namespace, "--timeout=180s", check=False,
                     timeout=200)  # fmt: skip

    def pod(self, task: tuple[str, int]) -> str:
        """The name of the pod that holds the replica now (a spare keeps its own name)."""
        if not self.spares:
            return f"{self.name}-{task[0]}-{task[1]}"
        selector = (f"syncreplicas.io/job-name={self.name},syncreplicas.io/replica-type="
                    f"{task[0]},syncreplicas.io/replica-index={task[1]}")
        live = [p["metadata"]["name"] for p in kube.pods(self.namespace, selector)
                if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        return live[0] if live else f"{self.name}-{task[0]}-{task[1]}"

    def wait_spare(self, sleep: Any, timeout: float) -> None:
        """Until a spare is ready to take a replica over (``sleep`` keeps the harness
        reading meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            srj = kube.kubectl_json("get", "srj", self.name, "-n", self.namespace)
            if (srj.get("status", {}).get("spares") or {}).get("ready", 0) >= 1:
                return
            sleep(0.5)
        raise TimeoutError(f"no spare ready within {timeout:.0f} s")

    # -- what bench/recovery.py's Supervisor reads ---------------------------------------

    def log_paths(self) -> list[Path]:
        """Every container log of the job's pods now (a kubelet may remove a pod's folder
        while it is listed: then list again)."""
        pattern = f"*/pod-logs/{self.namespace}_{self.name}-*/*/*.log"
        for _ in range(5):
            try:
                return sorted(NODES.glob(pattern))
            except FileNotFoundError:
                continue
        return []

    def events(self) -> list[obs.StepEvent]:
        out: list[obs.StepEvent] = []
        for path in self.log_paths():
            tail = self.tails.setdefault(path, obs.LogTail(path))
            lines = tail.new_lines()
            if self.keep is not None and lines:
                self.keep.mkdir(parents=True, exist_ok=True)
                name = f"{path.parent.parent.name}.{path.parent.name}.{path.stem}.log"
                with (self.keep / name).open("a") as kept:
                    kept.writelines(f"{line}\n" for line in lines)
            for line in lines:
                parsed = cri_line(line)
                if parsed is None:
                    continue
                t, message = parsed
                out.extend(obs.StepEvent(t, e.replica, e.global_step)
                           for e in _ours.step_events([message], t))  # fmt: skip
                first = _ours.FIRST_RE.search(message)
                if first:
                    self.firsts.append((float(first[2]), first[1]))
                m = _ours.EPOCH_RE.search(message)
                if m:
                    self.epochs.append(_ours.EpochEvent(t, m[1], int(m[2])))
        self.epochs.sort(key=lambda e: e.t)
        return out

    def ip(self, task: tuple[str, int], fresh: bool = False) -> str | None:
        key = f"{task[0]}-{task[1]}"
        if fresh or key not in self.ips:
            found = kube.kubectl("get", "pod", self.pod(task), "-n", self.namespace, "-o",
                                 "jsonpath={.status.podIP}", check=False, timeout=10)  # fmt: skip
            if found.returncode != 0 or not found.stdout.strip():
                self.ips.pop(key, None)
                return None
            self.ips[key] = found.stdout.strip()
        return self.ips[key]

    def gauge(self, role: str, index: int, name: str) -> float | None:
        """One metric of one replica now (None when it cannot be scraped)."""
        for fresh in (False, True):
            ip = self.ip((role, index), fresh)
            if ip is None:
                continue
            try:
                with urllib.request.urlopen(f"http://{ip}:{METRICS_PORT}/metrics",
                                            timeout=1) as response:  # fmt: skip
                    return tfcluster.metric_value(response.read().decode(), name)
            except OSError:
                continue
        return None

    def poll(self) -> dict[tuple[str, int], int | None]:
        return {}

    def kill(self, task: tuple[str, int], sig: int | None = None) -> None:
        """``sig`` is the local harness's; Kubernetes delivers its own (see above)."""
        if self.spares:
            kube.kubectl("delete", "pod", self.pod(task), "-n", self.namespace, "--wait=false")
        elif self.warm:
            kube.kill_replica(self.namespace, self.pod(task))
        elif task[0] == "worker":
            kube.kill_in_place(self.namespace, self.pod(task))
        else:
            kube.kubectl("delete", "pod", self.pod(task), "-n", self.namespace, "--wait=false")

    def restart(self, task: tuple[str, int]) -> None:
        """Kubernetes restarts it (the kubelet in place, or the operator a new pod)."""

    def is_up(self, task: tuple[str, int]) -> bool:
        """The replica's gRPC server is up at its pod's current address: its start-up phase
        (``syncreplicas_replica_phase``, read on the metrics port) is past importing. The
        gRPC port itself only answers the job's own pods (its NetworkPolicy)."""
        phase = self.gauge(task[0], task[1], "syncreplicas_replica_phase")
        return phase is not None and phase >= 2

    def restarts(self) -> dict[str, int]:
        """Container restarts and pod replacements so far, per replica type (the job's
        status)."""
        srj = kube.kubectl_json("get", "srj", self.name, "-n", self.namespace)
        return {kind: int(counts.get("restarts", 0)) for kind, counts in
                srj.get("status", {}).get("replicaStatuses", {}).items()}  # fmt: skip


def wait_cluster(timeout: float = 60) -> None:
    """Fail unless `make cluster` is up (with images loaded and the chart installed)."""
    deadline = time.monotonic() + timeout
    while not kube.is_up():
        if time.monotonic() > deadline:
            raise RuntimeError("no cluster: run `make cluster` first")
        time.sleep(1)
