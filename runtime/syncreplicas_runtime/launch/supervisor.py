"""Warm restarts in a container: the container's first process supervises the replica,
TensorFlow imported once, the replica forked again when it dies.

``python -m syncreplicas_runtime`` runs this when the operator turned warm restarts on for
the pod (``restartrules.POLICY_ENV``). As the container's first process it imports what
every replica imports (about 5 s of one core, once), then forks the replica; when the
replica exits or is killed, ``restartrules.pause_before_restart`` decides: a new replica
process at once (forked from the imported state: its gRPC server is up in a fraction of a
second), or the container ends with the replica's code (done, fenced, non-retryable, budget
spent, or the pod is stopping). No container restart, so no kubelet crash-loop back-off; the
container's exit code and termination message stay the replica's.

The count of warm restarts belongs to the pod: kept in ``restartrules.STATE_ENV``'s file
(the pod's /tmp survives a container restart), told to every replica process
(``restartrules.COUNT_ENV``: its metrics export it, where the operator reads it) and left
as the last line of the container's termination message (``processRestarts=N``).

Signals: SIGTERM or SIGINT to this process (the kubelet stopping the pod) goes on to the
replica, whose exit then ends the container; one that comes before the replica is forked
(while this process imports) ends the container at once, 128 + the signal. They are held
across each fork, so that the child never runs this process's handler. The replica gets
SIGKILL if this process dies (so a replica never outlives its container's first process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from ..foundation.exitcodes import describe, termination_message
from ..process.termination import read_termination_message, write_termination_message
from . import restartrules
from .preloaded import (
    default_signals,
    die_with_parent,
    exit_child,
    preload,
    returncode,
    run_replica,
    say,
    stop_signals_held,
)


def status_code(status: int) -> int:
    """A wait status as a container reports it: the exit code, or 128 + the signal."""
    code = returncode(status)
    return 128 - code if code < 0 else code


def load_count(path: str) -> int:
    if not path:
        return 0
    try:
        return restartrules.parse_count(Path(path).read_text(encoding="utf-8"))
    except OSError:
        return 0


def save_count(path: str, count: int) -> None:
    if path:
        with contextlib.suppress(OSError):
            Path(path).write_text(f"{count}\n", encoding="utf-8")


def fork_replica(restarts: int) -> int:
    pid = os.fork()
    if pid:
        return pid

    def become() -> int:
        default_signals()
        die_with_parent(signal.SIGKILL)
        os.environ.pop(restartrules.POLICY_ENV, None)
        os.environ[restartrules.COUNT_ENV] = str(restarts)
        return run_replica()

    exit_child(become)


def wait_for(pid: int) -> int:
    """The replica's wait status; other children (none expected: as PID 1 this process
    inherits orphans) are reaped on the way."""
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1 << 8
        if done == pid:
            return status


def supervise(rule: restartrules.Rule) -> int:
    """Run the replica, warm-restarting it by ``rule``; the container's exit code."""
    stopping = 0  # the signal that stops the pod, once it came
    child = 0

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or signum
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    preload()
    restarts = load_count(rule.state_file)
    quick = 0
    while True:
        started = time.monotonic()
        with stop_signals_held():  # one that comes meanwhile is handled once ``child`` is set
            if stopping:  # the pod began stopping before this replica existed (the imports)
                return stopped_before_start(stopping, restarts)
            child = fork_replica(restarts)
        status = wait_for(child)
        child = 0
        code = status_code(status)
        lived = time.monotonic() - started
        quick = quick + 1 if lived < restartrules.STEADY_SECONDS else 0
        done = restartrules.Exit(code=code, lived_seconds=lived, stopping=bool(stopping))
        pause = restartrules.pause_before_restart(rule, done, restarts, max(quick, 1))
        if pause is None:
            break
        restarts += 1
        save_count(rule.state_file, restarts)
        write_termination_message("")  # the next replica's exit leaves its own
        say(f"the replica exited with {describe(code)} after {lived:.1f} s; warm restart "
            f"{restarts} of {rule.limit} in its container"
            + (f" in {pause:.1f} s" if pause else ""))
        deadline = time.monotonic() + pause
        while not stopping and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        if stopping:
            break
    leave_message(code, status, restarts)
    return code


def stopped_before_start(signum: int, restarts: int) -> int:
    """The container's code, and its termination message, when the pod was stopped before
    its replica was forked: nothing to hand on, nothing to save."""
    code = 128 + signum
    reason = f"stopped by {signal.Signals(signum).name} before the replica started"
    say(reason)
    write_termination_message(termination_message(code, reason)
                              + restartrules.count_fact(restarts))  # fmt: skip
    return code


def leave_message(code: int, status: int, restarts: int) -> None:
    """The container's termination message: the replica's own (a signal leaves none: say
    it), then the pod's warm restarts."""
    message = read_termination_message()
    if os.WIFSIGNALED(status) or not message.strip():
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        reason = f"killed by {signal.Signals(signum).name}" if signum else "exited"
        message = termination_message(code, reason)
    write_termination_message(message + restartrules.count_fact(restarts))
