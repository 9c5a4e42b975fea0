"""Warm starts, the client side: replicas forked by a warm-start server of this machine
(``python -m syncreplicas_runtime.launch.warmstart SOCKET``, which imports TensorFlow once)
instead of each started as a new ``python -m syncreplicas_runtime`` that imports it again
(about 5 s of one core each).

The protocol (the server's docstring has it whole): one Unix-socket connection per replica;
a JSON line ``{"env", "cwd"}`` with stdin, stdout and stderr attached; ``{"pid"}`` back once
forked, ``{"returncode"}`` once exited. Standard library only: the operator never imports
the runtime, it starts the server as a process.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER_MODULE = "syncreplicas_runtime.launch.warmstart"
# Variables that Python, NumPy or TensorFlow read while importing: a replica whose
# environment sets any of them otherwise than the server's would not see its own values in
# a forked process, so it is started cold. (PYTHONPATH is applied after the fork; TF_CONFIG
# and gRPC's options are read later, by the runtime.)
IMPORT_TIME_PREFIXES = ("PYTHON", "TF_", "CUDA_", "XLA_", "OMP_", "KMP_", "MKL_", "OPENBLAS_")
READ_AFTER_IMPORT = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "TF_CONFIG",
                               "TF_GRPC_DEFAULT_OPTIONS"})  # fmt: skip
# Variables that make `python -m syncreplicas_runtime` something other than the replica:
# the process that forks it again (the runtime's launch/restartrules.POLICY_ENV, when not
# empty) or a spare waiting for a replica's identity (launch/sparerules.TOKEN_ENV, when set
# at all). The server's child runs the replica alone, so such a process is started cold.
WARM_RESTARTS_ENV = "SYNCREPLICAS_WARM_RESTARTS"
SPARE_TOKEN_ENV = "SYNCREPLICAS_SPARE_TOKEN"


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_TIME_PREFIXES) and k not in READ_AFTER_IMPORT}  # fmt: skip


class WarmProcess:
    """A replica forked by the server, with the parts of ``subprocess.Popen`` that process
    supervisors use: ``pid`` (also its process group), ``returncode``, ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._buffer = b""
        self.returncode: int | None = None
        message = self._next(block=True)
        if message is None or "pid" not in message:
            raise OSError(f"warm start refused: {message}")
        self.pid = int(message["pid"])

    def _next(self, block: bool, timeout: float | None = None) -> dict[str, object] | None:
        while b"\n" not in self._buffer:
            if not block:
                ready, _, _ = select.select([self._conn], [], [], 0)
                if not ready:
                    return None
            elif timeout is not None:
                ready, _, _ = select.select([self._conn], [], [], timeout)
                if not ready:
                    return None
            chunk = self._conn.recv(4096)
            if not chunk:  # the server is gone, and with it the child (SIGKILL)
                return {"returncode": -signal.SIGKILL, "eof": True}
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return dict(json.loads(line.decode()))

    def _settle(self, message: dict[str, object] | None) -> None:
        if message is not None and "returncode" in message:
            self.returncode = int(message["returncode"])  # type: ignore[call-overload]
            self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(self._next(block=False))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._settle(self._next(block=True, timeout=timeout))
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"warm replica {self.pid}", timeout or 0.0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmServer:
    """A warm-start server of this machine: started, asked for replicas, stopped."""

    def __init__(self, path: Path, log: Path, python: str = sys.executable,
                 env: dict[str, str] | None = None, timeout: float = 180.0) -> None:  # fmt: skip
        self.path = path
        self.env = dict(os.environ if env is None else env)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [python, "-m", SERVER_MODULE, str(path)], env=self.env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"the warm-start server did not start (log: {log})")
            time.sleep(0.1)

    def ready(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(str(self.path))
                probe.sendall(b"")
            return True
        except OSError:
            return False

    def accepts(self, env: dict[str, str]) -> bool:
        """Whether a replica with this environment can be forked from this server (it
        imported what it imports under the same settings, and the process is the replica
        itself)."""
        if env.get(WARM_RESTARTS_ENV) or SPARE_TOKEN_ENV in env:
            return False
        return import_time_env(env) == import_time_env(self.env)

    def spawn(self, env: dict[str, str], cwd: str, stdin: int, stdout: int,
              stderr: int) -> WarmProcess:  # fmt: skip
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(self.path))
        request = json.dumps({"env": env, "cwd": cwd}).encode() + b"\n"
        socket.send_fds(conn, [request], [stdin, stdout, stderr])
        return WarmProcess(conn)

    def stop(self) -> None:
        self.path.unlink(missing_ok=True)  # the server exits when its socket is gone
        if self.process.poll() is None:
            self.process.terminate()  # it passes SIGTERM on, SIGKILL after 30 s
            try:
                self.process.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
