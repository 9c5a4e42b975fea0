"""Start a local syncreplicas cluster (PS, chief, workers) as real processes on 127.0.0.1.

One job: process management for tests and benchmarks. Standard library only (and, with
``SYNCREPLICAS_WARM_START=1``, the operator's standard-library warm-start client).

    from tests.support.tfcluster import start_cluster

    job = {"replicasToAggregate": 2, "workers": 1, "parameterServers": 1,
           "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
           "training": {"maxSteps": 50, "batchSize": 8}}
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path) as cluster:
        codes = cluster.wait(timeout=120)        # {("ps", 0): 0, ("chief", 0): 0, ...}
        text = cluster.metrics_text("chief", 0)  # Prometheus text while it runs

Every process runs ``python -m syncreplicas_runtime`` in its own process group, with its
stdout and stderr in ``workdir/<role>-<index>.log`` (restarts append to the same file).
With ``SYNCREPLICAS_WARM_START=1`` each is forked from one warm-start server per test
session instead (syncreplicas_runtime.launch.warmstart: TensorFlow imported once, not by every
process), where its environment allows (syncreplicas_operator.local.warmstart).
gRPC and metrics ports are free ports picked here; ``job["workers"]`` and
``job["parameterServers"]`` are overwritten with the shape given. ``metrics.port: 0`` in
``job`` (or ``SYNCREPLICAS_METRICS_PORT=0`` in ``env``) runs without metrics servers.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES_ORDER = ("ps", "chief", "worker")
_WARM: list[Any] = []  # the session's warm-start server, once started


def warm_server() -> Any:
    """The warm-start server of this test session (started on first use) when
    ``SYNCREPLICAS_WARM_START=1``, else None."""
    if os.environ.get("SYNCREPLICAS_WARM_START", "0") != "1":
        return None
    if not _WARM:
        from syncreplicas_operator.local.warmstart import WarmServer

        home = Path(tempfile.mkdtemp(prefix="syncreplicas-warm-"))
        _WARM.append(WarmServer(home / "warm.sock", home / "server.log"))
        # At exit, last registered first: the server stops, then its directory goes.
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        atexit.register(_WARM[0].stop)
    return _WARM[0]


# Ports are picked below the kernel's ephemeral range (and Kubernetes' node ports,
# 30000-32767): a port of that range, free when picked, may be taken before the replica
# binds it as the local end of any process's outgoing connection (the test cluster's daemons
# open many), and the replica's gRPC server then cannot start (a make test run: "Failed to
# add port to server", worker-1 exited 75). Each pytest-xdist worker picks in a slice of its
# own, so that two never pick the same port at once.
PORTS_FROM, PORTS_BELOW = 15000, 30000
_PICKS = random.Random()  # its own: a test seeding or patching `random` changes no pick


def port_slice() -> range:
    """The ports this process picks from: its pytest-xdist worker's slice of PORTS_FROM up
    to the ephemeral range (empty where that range starts too low)."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = max(0, min(PORTS_BELOW, ephemeral) - PORTS_FROM) // workers
    return range(PORTS_FROM + worker * size, PORTS_FROM + (worker + 1) * size)


def free_port() -> int:
    """A port free at this moment on every address (as the replicas' servers bind), from
    port_slice() (else one the kernel gives: bind to port 0, read it back, release it)."""
    span = port_slice()
    for _ in range(200 if len(span) >= 100 else 0):
        port = _PICKS.randrange(span.start, span.stop)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique_port(given: set[int]) -> int:
    """A free port not in ``given``, added to it. A port given out is released until its
    replica binds it, and the kernel may hand it out again meanwhile (a replica not yet
    started, a worker slot not yet scaled up); gRPC servers bind with SO_REUSEPORT, so both
    would start, or the later one fail."""
    while (port := free_port()) in given:
        pass
    given.add(port)
    return port


@dataclass
class Replica:
    """One process of the cluster. ``metrics_url`` is None when metrics are disabled."""

    role: str
    index: int
    grpc_address: str
    metrics_port: int
    env: dict[str, str]
    log_path: Path
    popen: Any = None  # subprocess.Popen, or a warmstart.WarmProcess
    starts: int = 0
    exit_codes: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def metrics_url(self) -> str | None:
        if not self.metrics_port:
            return None
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def key(self) -> tuple[str, int]:
        return (self.role, self.index)

    def log(self) -> str:
        """The whole log of this replica (every incarnation)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class LocalCluster:
    """Handles to the processes of one local job. Use as a context manager."""

    def __init__(self, replicas: list[Replica], workdir: Path,
                 ports: set[int] | None = None) -> None:  # fmt: skip
        self.replicas = replicas
        self.workdir = workdir
        self._by_key = {r.key: r for r in replicas}
        # Started by start_all (an elastic job's other worker slots start when scaled up).
        self.initial = {r.key for r in replicas}
        self._ports = ports if ports is not None else set()

    def unique_port(self) -> int:
        """A free port not yet given to this cluster (unique_port())."""
        return unique_port(self._ports)

    # -- lookup -----------------------------------------------------------------
    def replica(self, role: str, index: int = 0) -> Replica:
        return self._by_key[(role, index)]

    # -- process control --------------------------------------------------------
    def _spawn(self, r: Replica) -> None:
        r.starts += 1
        with open(r.log_path, "ab") as log:
            log.write(f"--- tfcluster: start #{r.starts} of {r.role}-{r.index} ---\n".encode())
            log.flush()
            server = warm_server()
            if server is not None and server.accepts(r.env):
                devnull = os.open(os.devnull, os.O_RDONLY)
                try:
                    r.popen = server.spawn(r.env, os.getcwd(), devnull, log.fileno(),
                                           log.fileno())  # fmt: skip
                finally:
                    os.close(devnull)
                return
            r.popen = subprocess.Popen(
                [sys.executable, "-m", "syncreplicas_runtime"],
                env=r.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: kill() reaches every child
            )

    def start_all(self) -> None:
        for r in self.replicas:
            if r.key in self.initial:
                self._spawn(r)

    def start(self, role: str, index: int = 0) -> None:
        """Start one replica (after ``start_cluster(..., start=False)``)."""
        self._spawn(self.replica(role, index))

    def poll(self) -> dict[tuple[str, int], int | None]:
        """Exit code per replica that was ever started, None while running."""
        out: dict[tuple[str, int], int | None] = {}
        for r in self.replicas:
            if r.popen is not None or r.key in self.initial:
                out[r.key] = r.popen.poll() if r.popen else None
        return out

    def wait(self, timeout: float) -> dict[tuple[str, int], int | None]:
        """Wait until every process has exited or ``timeout`` seconds pass.

        Returns the exit code per (role, index); None for a process still running at the
        deadline (the caller decides; ``stop()`` kills it).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            codes = self.poll()
            if all(c is not None for c in codes.values()):
                return codes
            time.sleep(0.2)
        return self.poll()

    def wait_one(self, role: str, index: int, timeout: float) -> int | None:
        r = self.replica(role, index)
        assert r.popen is not None
        try:
            return r.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, role: str, index: int = 0, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the replica's process group (no-op if it has exited)."""
        r = self.replica(role, index)
        if r.popen is None or r.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(r.popen.pid, sig)

    def restart(self, role: str, index: int = 0, *, wait_exit: float = 30.0) -> None:
        """Kill (SIGKILL) the replica if still running, then start it again, same env."""
        r = self.replica(role, index)
        if r.popen is not None and r.popen.poll() is None:
            self.kill(role, index, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.popen.wait(timeout=wait_exit)
        if r.popen is not None and r.popen.returncode is not None:
            r.exit_codes.append(r.popen.returncode)
        self._spawn(r)

    def stop(self) -> None:
        """Kill every process group still running and reap them."""
        for r in self.replicas:
            if r.popen is not None and r.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(r.popen.pid, signal.SIGKILL)
        for r in self.replicas:
            if r.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    r.popen.wait(timeout=10)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None:
            self.print_stacks()
        self.stop()

    def print_stacks(self) -> None:
        """Every running replica's Python stacks (SIGUSR1: the runtime's faulthandler), printed
        where pytest shows a failed test's output: where each one waited."""
        running = [r for r in self.replicas if r.popen is not None and r.popen.poll() is None]
        sizes = {r.key: r.log_path.stat().st_size if r.log_path.exists() else 0 for r in running}
        for r in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.popen.pid, signal.SIGUSR1)
        time.sleep(1.0)
        for r in running:
            with open(r.log_path, "rb") as log:
                log.seek(sizes[r.key])
                print(f"===== {r.role}-{r.index}: stacks at the failure\n"
                      f"{log.read().decode(errors='replace')[-6000:]}")

    # -- observation ------------------------------------------------------------
    def metrics_text(self, role: str, index: int = 0, timeout: float = 2.0) -> str:
        """The replica's /metrics body; raises OSError when it cannot be scraped."""
        url = self.replica(role, index).metrics_url
        if url is None:
            raise OSError(f"{role}-{index} runs without a metrics server")
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())

    def try_metrics_text(self, role: str, index: int = 0) -> str | None:
        """Like metrics_text, None instead of an error (process starting or gone, or
        ending while it answers: an incomplete body)."""
        try:
            return self.metrics_text(role, index)
        except (OSError, urllib.error.URLError, http.client.HTTPException):
            return None

    def log(self, role: str, index: int = 0) -> str:
        return self.replica(role, index).log()

    def logs(self) -> str:
        """Every log, headed by its file name: handy in assertion messages."""
        return "\n".join(f"===== {r.log_path.name}\n{r.log()[-4000:]}" for r in self.replicas)


def metric_value(text: str, name: str, labels: str = "") -> float | None:
    """The value of one sample in Prometheus text, e.g. ``metric_value(t, "x_total")``.

    ``labels`` is the exact label text between braces (``'le="1.0"'``), empty for none.
    """
    want = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head == want:
            return float(value)
    return None


def start_cluster(
    job: dict[str, Any],
    *,
    workers: int,
    ps: int,
    workdir: Path,
    env: dict[str, str] | None = None,
    extra_env_per_replica: dict[tuple[str, int], dict[str, str]] | None = None,
    start: bool = True,
    sparse: bool = False,
) -> LocalCluster:
    """Write TF_CONFIG and SYNCREPLICAS_JOB per replica and start them all.

    ``env`` is added to every process's environment (on top of ``os.environ``);
    ``extra_env_per_replica`` maps ``(role, index)`` to variables for that one process,
    e.g. ``{("worker", 0): {"SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "50"}}``.
    With ``start=False`` nothing is started (call ``start_all()``). With ``sparse=True``
    the chief's and each worker's TF_CONFIG list the PS, the chief and only their own
    worker address (a PS still gets every worker: it calls them for their gradients).
    A job with ``elasticPolicy`` gets its ``maxWorkers`` worker slots (addresses, logs);
    ``start_all`` starts the first ``workers`` of them, ``start("worker", i)`` any other.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    job = copy.deepcopy(job)
    job["workers"] = workers
    job["parameterServers"] = ps
    metrics_on = job.get("metrics", {}).get("port", 9090) != 0
    if env and env.get("SYNCREPLICAS_METRICS_PORT") == "0":
        metrics_on = False

    slots = job["elasticPolicy"]["maxWorkers"] if job.get("elasticPolicy") else workers
    shape = {"ps": ps, "chief": 1, "worker": slots}
    picked: set[int] = set()

    cluster_spec: dict[str, list[str]] = {}
    for role in ROLES_ORDER:
        if shape[role]:
            cluster_spec[role] = [f"127.0.0.1:{unique_port(picked)}" for _ in range(shape[role])]

    base_env = dict(os.environ)
    base_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    base_env["PYTHONUNBUFFERED"] = "1"
    base_env.update(env or {})

    replicas: list[Replica] = []
    for role in ROLES_ORDER:
        for i in range(shape[role]):
            mport = unique_port(picked) if metrics_on else 0
            renv = dict(base_env)
            told: dict[str, Any] = dict(cluster_spec)
            if sparse and slots and role != "ps":
                told["worker"] = {str(i): cluster_spec["worker"][i]} if role == "worker" else {}
            renv["TF_CONFIG"] = json.dumps({"cluster": told, "task": {"type": role, "index": i}})
            renv["SYNCREPLICAS_JOB"] = json.dumps(job)
            renv["SYNCREPLICAS_METRICS_PORT"] = str(mport)
            renv.update((extra_env_per_replica or {}).get((role, i), {}))
            replicas.append(
                Replica(
                    role=role,
                    index=i,
                    grpc_address=cluster_spec[role][i],
                    metrics_port=mport,
                    env=renv,
                    log_path=workdir / f"{role}-{i}.log",
                )
            )
    cluster = LocalCluster(replicas, workdir, picked)
    cluster.initial = {r.key for r in replicas if r.role != "worker" or r.index < workers}
    if start:
        try:
            cluster.start_all()
        except BaseException:
            cluster.stop()
            raise
    return cluster
