"""Turn the Pods the operator would create into local processes (``syncreplicas run``).

Pure: Pod dicts in, process specs out. The runner never builds a replica's command or
environment itself: it takes the container of each rendered Pod and changes only what
differs on one machine, so a job runs the same locally and on a cluster:

- service addresses in TF_CONFIG become ``127.0.0.1:<port>`` (one free port per replica);
- every process gets its own metrics port (``SYNCREPLICAS_METRICS_PORT``);
- ``training.checkpointDir`` in SYNCREPLICAS_JOB becomes a local directory (when set), and
  its ``workers`` the count the job starts with (an elastic job's Pods are rendered for
  every worker slot);
- the termination message is off (``SYNCREPLICAS_TERMINATION_LOG=""``): the replicas share
  the runner's environment and machine, and must not write a path a template or the
  caller's environment names, nor the runner's own ``/dev/termination-log`` in a pod;
- a ``python``/``python3`` command runs under the runner's own interpreter;
- warm restarts in the container are off: the runner restarts each process itself.

Each start of a process gets its environment from :func:`spawn_env`: the runner's own
environment under the Pod's, and the incarnation of that start (``SYNCREPLICAS_INCARNATION``,
from :func:`next_incarnation`), as the operator gives each pod it creates.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..core import naming

LOOPBACK = "127.0.0.1"
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
# syncreplicas_runtime.foundation.exitcodes.TERMINATION_LOG_ENV (the operator does not
# import the runtime; tests/unit/test_local_processes.py checks they agree). "" turns the
# file off.
ENV_TERMINATION_LOG = "SYNCREPLICAS_TERMINATION_LOG"
WARM_RESTART_ENV = (
    naming.ENV_WARM_RESTARTS,
    naming.ENV_WARM_RESTART_LIMIT,
    naming.ENV_WARM_RESTART_STATE,
)
# The runtime's default, unless the caller's environment or the Pod says otherwise.
TF_LOG_LEVEL: Final = ("TF_CPP_MIN_LOG_LEVEL", "2")


class LocalPlanError(ValueError):
    """A rendered Pod cannot run as a local process; the message names pod and field."""


@dataclass(frozen=True)
class LocalProcess:
    """One replica as a local process: what to exec and with which environment."""

    name: str  # "<type>-<index>", e.g. "chief-0"
    replica_type: str
    index: int
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the Pod's env after rewriting; the runner adds os.environ
    tf_port: int
    metrics_port: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "replicaType": self.replica_type,
            "index": self.index,
            "argv": list(self.argv),
            "env": dict(self.env),
            "tfPort": self.tf_port,
            "metricsPort": self.metrics_port,
        }


def next_incarnation(now_ms: int, last: int | None) -> int:
    """The incarnation of a replica's next process: the wall clock in milliseconds, and
    never lower than one above the last this replica was given, so the runtime (PS 0)
    fences the older process even if the clock stepped back. (A positive int64, as the
    runtime requires, for the next 292 million years.)"""
    return max(now_ms, 1 if last is None else last + 1)


def spawn_env(
    process: LocalProcess, inherited: Mapping[str, str], incarnation: int
) -> dict[str, str]:
    """The environment of one start of ``process``: ``inherited`` (the runner's own)
    under the Pod's, unbuffered output, and this start's incarnation over both."""
    env = {**inherited, "PYTHONUNBUFFERED": "1", **process.env}
    env.setdefault(*TF_LOG_LEVEL)
    env[naming.ENV_INCARNATION] = str(incarnation)
    return env


def replica_of(pod: Mapping[str, Any]) -> tuple[str, int]:
    """(type, index) from the Pod's labels."""
    meta = pod.get("metadata", {})
    labels = meta.get("labels", {})
    name = meta.get("name", "?")
    try:
        replica_type = str(labels[naming.LABEL_REPLICA_TYPE])
        index = int(labels[naming.LABEL_REPLICA_INDEX])
    except (KeyError, ValueError):
        raise LocalPlanError(
            f"pod {name}: labels {naming.LABEL_REPLICA_TYPE} and "
            f"{naming.LABEL_REPLICA_INDEX} are required"
        ) from None
    if replica_type not in naming.REPLICA_TYPES:
        raise LocalPlanError(f"pod {name}: unknown replica type {replica_type!r}")
    return replica_type, index


def plan_local_processes(
    pods: Sequence[Mapping[str, Any]],
    *,
    tf_ports: Mapping[str, int],
    metrics_ports: Mapping[str, int],
    checkpoint_dir: str,
    python: str,
    workers: int | None = None,
) -> tuple[LocalProcess, ...]:
    """One LocalProcess per Pod, in the Pods' order.

    ``tf_ports`` and ``metrics_ports`` map ``naming.replica_key(type, index)`` to a port;
    ``workers`` (when given) replaces SYNCREPLICAS_JOB's ``workers``.
    """
    processes = []
    for pod in pods:
        replica_type, index = replica_of(pod)
        key = naming.replica_key(replica_type, index)
        if key not in tf_ports or key not in metrics_ports:
            raise LocalPlanError(f"pod {pod['metadata'].get('name')}: no local port for {key}")
        container = _container(pod)
        env = _resolve_env(pod, container)
        pod_name = pod["metadata"].get("name", key)
        if naming.ENV_TF_CONFIG not in env or naming.ENV_JOB not in env:
            raise LocalPlanError(
                f"pod {pod_name}: container env must set {naming.ENV_TF_CONFIG} and "
                f"{naming.ENV_JOB}"
            )
        env[naming.ENV_TF_CONFIG] = _local_tf_config(pod_name, env[naming.ENV_TF_CONFIG], tf_ports)
        env[naming.ENV_JOB] = _local_job(pod_name, env[naming.ENV_JOB], checkpoint_dir, workers)
        env[naming.ENV_METRICS_PORT] = str(metrics_ports[key])
        env[ENV_TERMINATION_LOG] = ""
        # The runner restarts its processes itself (supervisor.py), by the same rule.
        for name in WARM_RESTART_ENV:
            env.pop(name, None)
        command = [_expand(str(c), env) for c in container.get("command") or ()]
        args = [_expand(str(a), env) for a in container.get("args") or ()]
        if not command:
            raise LocalPlanError(
                f"pod {pod_name}: container {container.get('name')} has no command; "
                "a local run cannot use an image's entrypoint"
            )
        if _PYTHON.match(posixpath.basename(command[0])):
            command[0] = python
        processes.append(
            LocalProcess(
                name=key,
                replica_type=replica_type,
                index=index,
                argv=(*command, *args),
                env=env,
                tf_port=tf_ports[key],
                metrics_port=metrics_ports[key],
            )
        )
    return tuple(processes)


def _container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = pod.get("spec", {}).get("containers") or []
    if not containers:
        raise LocalPlanError(f"pod {pod['metadata'].get('name')}: spec.containers is empty")
    for container in containers:
        if container.get("name") == naming.CONTAINER_NAME:
            return dict(container)
    return dict(containers[0])


def _resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as plain strings, resolving the downward API fields a replica uses."""
    meta = pod.get("metadata", {})
    env: dict[str, str] = {}
    for item in container.get("env") or ():
        name = str(item["name"])
        if "value" in item:
            env[name] = _expand(str(item["value"]), env)
            continue
        source = item.get("valueFrom") or {}
        field = (source.get("fieldRef") or {}).get("fieldPath")
        if field is None:
            kind = next(iter(source), "valueFrom")
            raise LocalPlanError(
                f"pod {meta.get('name')}: env {name} comes from {kind}, which a local run "
                "cannot resolve; set a plain value"
            )
        env[name] = _field(meta, str(field))
    return env


def _field(meta: Mapping[str, Any], path: str) -> str:
    if path == "metadata.name":
        return str(meta.get("name", ""))
    if path == "metadata.namespace":
        return str(meta.get("namespace", "default"))
    if path in ("status.podIP", "status.hostIP"):
        return LOOPBACK
    if path == "spec.nodeName":
        return "localhost"
    match = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    return ""


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined variables are replaced, $$ escapes a dollar."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(sub, text)


def _local_tf_config(pod: str, text: str, tf_ports: Mapping[str, int]) -> str:
    try:
        tf_config = json.loads(text)
        cluster = tf_config["cluster"]
    except (ValueError, KeyError, TypeError):
        raise LocalPlanError(f"pod {pod}: {naming.ENV_TF_CONFIG} is not a cluster spec") from None
    local: dict[str, Any] = {}
    for replica_type, addresses in cluster.items():
        # A dense job is a list; a sparse one maps task indices to addresses.
        sparse = isinstance(addresses, dict)
        indices = [int(i) for i in addresses] if sparse else list(range(len(addresses)))
        ports = {}
        for index in indices:
            key = naming.replica_key(replica_type, index)
            if key not in tf_ports:
                raise LocalPlanError(
                    f"pod {pod}: {naming.ENV_TF_CONFIG} lists {key}, which has no Pod"
                )
            ports[index] = f"{LOOPBACK}:{tf_ports[key]}"
        local[replica_type] = ({str(i): a for i, a in ports.items()} if sparse
                               else [ports[i] for i in indices])
    return json.dumps({**tf_config, "cluster": local}, sort_keys=True)


def _local_job(pod: str, text: str, checkpoint_dir: str, workers: int | None) -> str:
    try:
        job = json.loads(text)
    except ValueError:
        raise LocalPlanError(f"pod {pod}: {naming.ENV_JOB} is not JSON") from None
    if workers is not None:
        job = {**job, "workers": workers}
    training = job.get("training")
    if isinstance(training, dict) and training.get("checkpointDir"):
        job = {**job, "training": {**training, "checkpointDir": checkpoint_dir}}
    return json.dumps(job, sort_keys=True)
