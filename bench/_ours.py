"""Running the syncreplicas runtime for the benchmarks, through the tests' cluster launcher.

Wraps ``tests.support.tfcluster`` (the launcher the runtime's own tests use) with what the
benchmarks need on top: the moment every gRPC port is up, step events from the logs, and
restarts of one task. The runtime logs ``syncreplicas <name>: global_step=N ...`` every
``logEverySteps`` steps (1 here) with a wall clock to the second only, so a line's time is
when the harness read it (polled every 50 ms: that is the resolution of these numbers),
except the first step, which the runtime logs with its exact unix time.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _cluster
import _observe as obs

from tests.support import tfcluster

LINEAR = "syncreplicas_runtime.models.linear:build"
# Lines may start with a wall-clock prefix ("00:06:08 syncreplicas chief-0: ...").
STEP_RE = re.compile(r"^(?:[\d:]+ )?syncreplicas (\S+): global_step=(\d+) ")
# The first step is also logged with its exact time.
FIRST_RE = re.compile(
    r"syncreplicas (\S+): first step done at unix time ([\d.]+) \(global step (\d+)\)"
)
DELAY_ENV = "SYNCREPLICAS_DEBUG_STEP_DELAY_MS"
# The chief's line when it joins a sync epoch it reset or found: how, and the global step.
EPOCH_RE = re.compile(r"syncreplicas chief-0: sync epoch [0-9a-f]+: variables (\w+)[^,]*, "
                      r"global step (\d+)")


@dataclass(frozen=True)
class EpochEvent:
    t: float  # when the harness read the line
    how: str  # kept | restored | initialized
    global_step: int


def job(
    replicas_to_aggregate: int,
    max_steps: int,
    *,
    metrics: bool = True,
    checkpoint_dir: str = "",
    checkpoint_every_steps: int = 100,
    batch_size: int = 32,
    chief_lost_timeout: int = 120,
    parameter_servers: int = 1,
    pack_variables: bool = True,
    model_args: Mapping[str, Any] | None = None,
    min_replicas_to_aggregate: int | None = None,
    snapshot_every_steps: int | None = None,
    pack_min_bytes_per_ps: int | None = None,
) -> dict[str, Any]:
    training: dict[str, Any] = {
        "optimizer": "sgd",
        "learningRate": 0.1,
        "batchSize": batch_size,
        "maxSteps": max_steps,
        "logEverySteps": 1,
        "checkpointEverySteps": checkpoint_every_steps,
        "chiefLostTimeoutSeconds": chief_lost_timeout,
        "packVariables": pack_variables,
    }
    if checkpoint_dir:
        training["checkpointDir"] = checkpoint_dir
    if snapshot_every_steps is not None:
        training["snapshotEverySteps"] = snapshot_every_steps
    if pack_min_bytes_per_ps is not None:
        training["packMinBytesPerPS"] = pack_min_bytes_per_ps
    extra = {} if min_replicas_to_aggregate is None else {
        "minReplicasToAggregate": min_replicas_to_aggregate}
    return {
        **extra,
        "replicasToAggregate": replicas_to_aggregate,
        "workers": 0,  # the launcher writes the shape
        "parameterServers": parameter_servers,
        "initialTokens": 0,
        "model": {"entrypoint": LINEAR, "args": dict(model_args or {})},
        "training": training,
        "metrics": {"port": 9090 if metrics else 0},
    }


def step_events(lines: list[str], t: float) -> list[obs.StepEvent]:
    out = []
    for line in lines:
        m = STEP_RE.match(line)
        if m:
            out.append(obs.StepEvent(t, m.group(1), int(m.group(2))))
            continue
        m = FIRST_RE.search(line)
        if m:
            out.append(obs.StepEvent(float(m.group(2)), m.group(1), int(m.group(3))))
    return out


@dataclass
class OursRun:
    cluster: tfcluster.LocalCluster
    t_launch: float
    tails: dict[tuple[str, int], obs.LogTail] = field(default_factory=dict)
    epochs: list[EpochEvent] = field(default_factory=list)  # the chief's, filled by events()

    def __enter__(self) -> OursRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop()

    def addresses(self) -> list[str]:
        return [r.grpc_address for r in self.cluster.replicas]

    def wait_servers_up(self, timeout: float, only: list[str] | None = None) -> float:
        return _cluster.wait_ports(set(only or self.addresses()), timeout, self.check_alive)

    def events(self) -> list[obs.StepEvent]:
        now = time.time()
        out: list[obs.StepEvent] = []
        for r in self.cluster.replicas:
            tail = self.tails.setdefault(r.key, obs.LogTail(r.log_path))
            lines = tail.new_lines()
            out.extend(step_events(lines, now))
            if r.role == "chief":
                self.epochs.extend(EpochEvent(now, m[1], int(m[2]))
                                   for m in map(EPOCH_RE.search, lines) if m)
        return out

    def gauge(self, role: str, index: int, name: str) -> float | None:
        """One metric of one replica now (None when it cannot be scraped or has no sample)."""
        text = self.cluster.try_metrics_text(role, index)
        return tfcluster.metric_value(text, name) if text else None

    def pids(self) -> list[int]:
        return [r.pid for r in self.cluster.replicas if r.pid is not None]

    def poll(self) -> dict[tuple[str, int], int | None]:
        return self.cluster.poll()

    def check_alive(self) -> None:
        for key, code in self.cluster.poll().items():
            if code is not None and code != 0:
                r = self.cluster.replica(*key)
                raise RuntimeError(f"{key[0]}-{key[1]} exited {code}: {r.log()[-1500:]}")

    def kill(self, task: tuple[str, int], sig: int = signal.SIGKILL) -> None:
        self.cluster.kill(task[0], task[1], sig)
        self.cluster.wait_one(task[0], task[1], timeout=10)

    def restart(self, task: tuple[str, int]) -> None:
        self.cluster.restart(task[0], task[1])


def start(
    *,
    workers: int,
    replicas_to_aggregate: int,
    max_steps: int,
    workdir: Path,
    metrics: bool = True,
    slow_ms: Mapping[tuple[str, int], float] | None = None,
    checkpoint_dir: str = "",
    checkpoint_every_steps: int = 100,
    ps: int = 1,
    pack_variables: bool = True,
    model_args: Mapping[str, Any] | None = None,
    min_replicas_to_aggregate: int | None = None,
    snapshot_every_steps: int | None = None,
    batch_size: int = 32,
    pack_min_bytes_per_ps: int | None = None,
) -> OursRun:
    spec = job(
        replicas_to_aggregate,
        max_steps,
        batch_size=batch_size,
        metrics=metrics,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=checkpoint_every_steps,
        parameter_servers=ps,
        pack_variables=pack_variables,
        model_args=model_args,
        min_replicas_to_aggregate=min_replicas_to_aggregate,
        snapshot_every_steps=snapshot_every_steps,
        pack_min_bytes_per_ps=pack_min_bytes_per_ps,
    )
    extra = {task: {DELAY_ENV: f"{ms:g}"} for task, ms in (slow_ms or {}).items()}
    t_launch = time.time()
    cluster = tfcluster.start_cluster(
        spec,
        workers=workers,
        ps=ps,
        workdir=workdir,
        env={"SYNCREPLICAS_METRICS_PORT": "0"} if not metrics else None,
        extra_env_per_replica=extra,
    )
    return OursRun(cluster, t_launch)
