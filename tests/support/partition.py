"""A replica replaced while its old process still runs (a partitioned node), on 127.0.0.1.

One job: stand in, locally, for a node that is cut off while the operator force-deletes its
pod and starts a replacement with the same identity elsewhere. Standard library only.

On a cluster the replica's name (its pod's hostname under the job's headless Service)
moves to the new pod's address and the old pod's address stops answering. Locally every
process is on 127.0.0.1, so the replica's address in every other process's TF_CONFIG is a
:class:`Forwarder` to the port of
the process that holds the name now; that process is told its own private port. Replacing
it (:meth:`Partition.replace`) stops the old process (SIGSTOP: it runs no code and answers
nothing, but keeps its sockets, as a partitioned process does), cuts every connection that
went to it, moves the name to a new private port and starts the replacement there with a
higher ``SYNCREPLICAS_INCARNATION``. :meth:`Partition.heal` lets the old process run again
(SIGCONT): it can reach the parameter servers again, and must stand down.

    with start_cluster(job, workers=2, ps=1, workdir=tmp, env=env, start=False) as cluster:
        with Partition(cluster, "worker", 0, incarnation=1000) as part:
            cluster.start_all()
            ...
            part.replace(incarnation=2000)   # the old process stopped, its replacement up
            part.heal()                      # the old process runs again
            assert part.wait_old(60) == 77
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

from tests.support.tfcluster import LocalCluster

INCARNATION_ENV = "SYNCREPLICAS_INCARNATION"


class Forwarder:
    """TCP on 127.0.0.1:``port`` forwarded to 127.0.0.1:``backend``; the backend can move."""

    def __init__(self, port: int, backend: int) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self._closed = False
        threading.Thread(target=self._accept, name="forwarder", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.backend), timeout=2.0)
                upstream.settimeout(None)
            except OSError:
                client.close()  # nobody holds the name yet: refused, as a missing pod is
                continue
            with self._lock:
                self._open += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def switch(self, backend: int) -> None:
        """The name now leads to ``backend``; every connection to the old one is cut."""
        with self._lock:
            self.backend = backend
            cut, self._open = self._open, []
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._closed = True
        self.switch(0)
        self._listener.close()


class Partition:
    """One replica of ``cluster`` behind a forwarder, replaceable while its process runs.

    Construct it before the replica starts (``start_cluster(..., start=False)``)."""

    def __init__(self, cluster: LocalCluster, role: str, index: int, incarnation: int) -> None:
        self.cluster, self.role, self.index = cluster, role, index
        self.replica = cluster.replica(role, index)
        self.public = int(self.replica.grpc_address.rsplit(":", 1)[1])
        self.old: subprocess.Popen[bytes] | None = None
        self.old_log: Path = self.replica.log_path
        private = cluster.unique_port()
        self._tell(private, incarnation)
        self.forwarder = Forwarder(self.public, private)

    def _tell(self, private: int, incarnation: int) -> None:
        """The replica's own TF_CONFIG names its private port; the others keep the public."""
        env = self.replica.env
        tf_config = json.loads(env["TF_CONFIG"])
        own = tf_config["cluster"][self.role]
        key = self.index if isinstance(own, list) else str(self.index)
        own[key] = f"127.0.0.1:{private}"
        env["TF_CONFIG"] = json.dumps(tf_config)
        env[INCARNATION_ENV] = str(incarnation)

    def replace(self, incarnation: int) -> None:
        """Stop the running process (it keeps its sockets), move the name, start the
        replacement with ``incarnation``, its own metrics port and log."""
        old = self.replica.popen
        assert old is not None and old.poll() is None, "the replica is not running"
        os.killpg(old.pid, signal.SIGSTOP)
        self.old = old
        private = self.cluster.unique_port()
        self._tell(private, incarnation)
        if self.replica.metrics_port:  # the old process still holds its metrics port
            self.replica.metrics_port = self.cluster.unique_port()
            self.replica.env["SYNCREPLICAS_METRICS_PORT"] = str(self.replica.metrics_port)
        self.replica.log_path = self.old_log.with_suffix(".replacement.log")
        self.forwarder.switch(private)
        self.cluster.start(self.role, self.index)

    def heal(self) -> None:
        """The old process runs again (the partition healed)."""
        assert self.old is not None
        os.killpg(self.old.pid, signal.SIGCONT)

    def wait_old(self, timeout: float) -> int | None:
        """The old process's exit code, None if it still runs after ``timeout`` s."""
        assert self.old is not None
        try:
            return self.old.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def old_log_text(self) -> str:
        return self.old_log.read_text(errors="replace")

    def __enter__(self) -> Partition:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.old is not None and self.old.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.old.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.old.wait(timeout=10)
        self.forwarder.close()
