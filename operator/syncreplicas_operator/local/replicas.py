"""The job's replica processes: start one, signal it, wait for it, stop some or all.

Each start is a new incarnation of its replica: it gets the wall clock in milliseconds as
``SYNCREPLICAS_INCARNATION``, never lower than one above the replica's last (PS 0 fences
an older process of the same replica). Each process runs in its own process group, so a
terminal's Ctrl-C reaches the runner only, and stopping a replica stops its children too.

With ``runPolicy.warmRestarts`` (the default) the runtime's replicas are forked by one
warm-start server (``warmstart.py``: TensorFlow imported once for the run), as on a cluster
each container forks its replica again: a start or a restart costs a fork, not an import.
A replica whose command or import-time environment differs from the server's starts cold.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..core import exitcodes, manifests, naming
from .errors import RUN_FAILED, RunError
from .processes import LocalProcess, next_incarnation, spawn_env
from .warmstart import WarmProcess, WarmServer

CHIEF_STOP_GRACE_SECONDS: Final = 60.0
STOP_GRACE_SECONDS: Final = 15.0


def exit_code_of(returncode: int) -> int:
    """Popen's -N for "killed by signal N" as a container runtime reports it (128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(code: int) -> str:
    """``exitcodes.describe`` plus the signal behind 128 + N codes, e.g. ``SIGKILL (137)``."""
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"{signal.Signals(code - 128).name} ({code})"
    return exitcodes.describe(code)


def state_after_exit(code: int) -> str:
    return f"exited {code}" if code == 0 else f"failed {describe_exit(code)}"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _set_parent_death_signal() -> None:
    """In the child: receive SIGTERM if the runner dies, so no replica outlives it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Replica:
    """One replica's process across its incarnations."""

    spec: LocalProcess
    log_path: Path
    popen: subprocess.Popen[bytes] | WarmProcess | None = None
    restarts: int = 0
    state: str = "pending"
    restart_at: float | None = None  # monotonic time of a scheduled restart
    reaped: bool = True  # the current incarnation's exit code is in exit_codes
    exit_codes: list[int] = field(default_factory=list)
    injected: bool = False  # the current incarnation was killed by --chaos
    incarnations: list[int] = field(default_factory=list)  # SYNCREPLICAS_INCARNATION of each

    @property
    def name(self) -> str:
        return self.spec.name

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def reap(self) -> int | None:
        """Record the exit code of an incarnation that ended (once); return it."""
        if self.popen is None or self.popen.poll() is None:
            return None
        code = exit_code_of(self.popen.returncode)
        if not self.reaped:
            self.exit_codes.append(code)
            self.reaped = True
        return code


class Replicas:
    """Every replica of the job (PS first, as the operator creates them) and the worker
    count the job has now; ``lock`` guards the replicas' state for readers in threads."""

    def __init__(
        self,
        processes: Sequence[LocalProcess],
        log_path: Callable[[str], Path],
        *,
        workers: int,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.all = [Replica(spec=p, log_path=log_path(p.name)) for p in processes]
        self.by_name = {r.name: r for r in self.all}
        # The workers the job has now: an elastic job's other slots wait (``standby``).
        self.workers = workers
        self.lock = threading.Lock()
        self.clock_ms = clock_ms  # the wall clock in ms, for incarnations
        self.warm: WarmServer | None = None

    def start_warm(self, log: Path) -> None:
        """Start the warm-start server (its import takes a few seconds) with the first
        runtime replica's environment; a server that fails to start leaves cold starts.
        Its socket lives in a short temporary directory (a socket's path is at most 107
        bytes)."""
        first = next((r for r in self.all if self.forkable(r.spec)), None)
        if first is None:
            return
        env = spawn_env(first.spec, os.environ, 1)
        home = Path(tempfile.mkdtemp(prefix="syncreplicas-warm-"))
        try:
            self.warm = WarmServer(home / "warm.sock", log, python=first.spec.argv[0], env=env)
        except OSError:
            shutil.rmtree(home, ignore_errors=True)
            self.warm = None

    def stop_warm(self) -> None:
        if self.warm is not None:
            self.warm.stop()
            shutil.rmtree(self.warm.path.parent, ignore_errors=True)
            self.warm = None

    @staticmethod
    def forkable(spec: LocalProcess) -> bool:
        """The runtime's own command under this interpreter: what the server forks."""
        return tuple(spec.argv[1:]) == manifests.RUNTIME_COMMAND[1:]

    def __iter__(self) -> Iterator[Replica]:
        return iter(self.all)

    def active(self, replica: Replica) -> bool:
        """A replica the job has now (not a worker slot beyond the current workers)."""
        return replica.spec.replica_type != naming.WORKER or replica.spec.index < self.workers

    def of_type(self, replica_type: str) -> list[Replica]:
        return [r for r in self.all if r.spec.replica_type == replica_type]

    def spawn(self, replica: Replica) -> None:
        """Start the replica's next incarnation, its output appended to its log."""
        last = replica.incarnations[-1] if replica.incarnations else None
        incarnation = next_incarnation(self.clock_ms(), last)
        env = spawn_env(replica.spec, os.environ, incarnation)
        with open(replica.log_path, "ab") as log:
            log.write(f"--- syncreplicas run: start of {replica.name} "
                      f"(restart {replica.restarts}, incarnation {incarnation}) ---\n".encode())
            log.flush()
            try:
                replica.popen = self._fork(replica, env, log.fileno()) or subprocess.Popen(
                    list(replica.spec.argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Own session: a terminal's Ctrl-C reaches the runner only, which then
                    # stops the replicas in order (chief first) instead of all at once.
                    start_new_session=True,
                    preexec_fn=_set_parent_death_signal,
                )
            except OSError as err:
                raise RunError(
                    f"{replica.name}: cannot start {replica.spec.argv[0]!r} (the container "
                    f"command of its Pod): {err.strerror or err}", code=RUN_FAILED,
                ) from err
        with self.lock:
            replica.incarnations.append(incarnation)
            replica.state = "running"
            replica.restart_at = None
            replica.injected = False
            replica.reaped = False

    def _fork(self, replica: Replica, env: dict[str, str], log: int) -> WarmProcess | None:
        """The replica forked by the warm-start server; None where it cannot be."""
        if self.warm is None or not self.forkable(replica.spec) or not self.warm.accepts(env):
            return None
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            return self.warm.spawn(env, os.getcwd(), devnull, log, log)
        except OSError:
            return None
        finally:
            os.close(devnull)

    def signal(self, replica: Replica, signum: int) -> None:
        if replica.running() and replica.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(replica.popen.pid, signum)

    def wait(self, replicas: Sequence[Replica], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(r.running() for r in replicas) and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self, replicas: Sequence[Replica], grace: float) -> None:
        """SIGTERM, ``grace`` seconds, then SIGKILL; every exit code recorded."""
        # Only groups of processes alive now: an older incarnation's PID may belong to
        # an unrelated process by the time we stop.
        live = [r for r in replicas if r.running()]
        for replica in live:
            self.signal(replica, signal.SIGTERM)
        self.wait(live, grace)
        for replica in live:
            self.signal(replica, signal.SIGKILL)
        for replica in live:
            if replica.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    replica.popen.wait(timeout=10)
                # The whole group: a replica's own children must not outlive it. The group
                # outlives its leader only while such children exist, so its id is still ours.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(replica.popen.pid, signal.SIGKILL)
        with self.lock:
            for replica in replicas:
                replica.reap()

    def stop_all(self, note: Callable[[str], None]) -> None:
        """The chief first (SIGTERM: it writes a checkpoint), then workers, then PS."""
        chief = self.of_type(naming.CHIEF)
        if any(r.running() for r in chief):
            note("stopping: chief first, so it writes a checkpoint")
        self.stop(chief, CHIEF_STOP_GRACE_SECONDS)
        self.stop(self.of_type(naming.WORKER), STOP_GRACE_SECONDS)
        self.stop(self.of_type(naming.PS), STOP_GRACE_SECONDS)
        with self.lock:
            for replica in self.all:
                replica.reap()
                if replica.state == "running":
                    replica.state = "stopped"

    def kill_all(self) -> None:
        """SIGKILL every replica now (a second Ctrl-C: no more waiting)."""
        for replica in self.all:
            self.signal(replica, signal.SIGKILL)
