"""Warm starts: Python, NumPy and TensorFlow imported once, each replica forked from there.

    python -m syncreplicas_runtime.launch.warmstart SOCKET

A replica's process spends about 5 s of one core importing before it does anything. This
server pays that once: it imports what every replica imports, listens on the Unix socket
SOCKET and forks one replica per request. The child runs the replica as a plain start of
``python -m syncreplicas_runtime`` does (``plain.main``), with the request's environment,
working directory and standard streams, in a process group of its own (its pid is the
group's), and exits with that code. Nothing here starts a Python thread or a TensorFlow
session before a fork (a lock held by a thread at the fork stays held in the child, where
that thread does not exist); the native pools that NumPy's BLAS and TensorFlow start while
importing are idle then, and TensorFlow builds its own pools in the child, when the
replica's session starts.

One connection per replica. The client sends one JSON line ``{"env": {...}, "cwd": "..."}``
with three file descriptors attached (stdin, stdout, stderr; SCM_RIGHTS). The server
answers ``{"pid": N}`` once forked and ``{"returncode": RC}`` when the child has exited
(negative: killed by that signal, as ``subprocess.Popen`` says), then closes. The server
exits when SOCKET is removed or on SIGTERM or SIGINT, after passing SIGTERM on to every
replica (SIGKILL to those still there 30 s later); a replica gets SIGKILL if its server dies
(so none outlives it unnoticed).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from .preloaded import (
    default_signals,
    die_with_parent,
    exit_child,
    preload,
    returncode,
    run_replica,
    stop_signals_held,
)

POLL_SECONDS = 0.05
STOP_GRACE_SECONDS = 30.0  # as a pod's default termination grace period
MAX_REQUEST = 1 << 20


def run_request(request: dict[str, object], fds: list[int]) -> int:
    """In the forked child: become the replica the request describes and run it."""
    with contextlib.suppress(OSError):  # the parent may have done it first
        os.setpgid(0, 0)
    die_with_parent(signal.SIGKILL)
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}  # type: ignore[call-overload]
    os.environ.clear()
    os.environ.update(env)
    cwd = str(request.get("cwd") or os.getcwd())
    os.chdir(cwd)
    # As `python -m` in that directory with that PYTHONPATH would have it.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [cwd, *extra, *(p for p in sys.path[1:] if p not in extra)]
    return run_replica()


def fork_replica(request: dict[str, object], fds: list[int], selector: selectors.BaseSelector,
                 listener: socket.socket, others: list[socket.socket]) -> int:  # fmt: skip
    pid = os.fork()
    if pid:
        # Its own process group before its pid is handed out (the child does the same:
        # whichever runs first), so that killpg(pid) reaches it at once.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        return pid

    def become() -> int:
        selector.close()
        listener.close()
        for sock in others:
            sock.close()
        # SIGPIPE stays ignored, as in every Python process (a replica started cold): a peer
        # that closes a socket while the replica writes to it (a metrics reader that gave
        # up) is a BrokenPipeError to handle there, not the replica's death (exit 141).
        default_signals()
        return run_request(request, fds)

    exit_child(become)


def send(conn: socket.socket, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the client went away; the child runs on
        conn.sendall((json.dumps(message) + "\n").encode())


def receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """One request: its JSON line and the three descriptors sent with it."""
    data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
    while data and not data.endswith(b"\n") and len(data) < MAX_REQUEST:
        more = conn.recv(MAX_REQUEST)
        if not more:
            break
        data += more
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError(f"3 file descriptors expected, {len(fds)} received")
    return dict(json.loads(data.decode())), fds


def reap(children: dict[int, socket.socket]) -> None:
    """Tell each exited child's client its return code."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if (conn := children.pop(pid, None)) is not None:
            send(conn, {"returncode": returncode(status)})
            conn.close()


def stop_children(children: dict[int, socket.socket], grace: float) -> None:
    """SIGTERM to every child's group (a chief checkpoints), SIGKILL after ``grace``."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signum)
        deadline = time.monotonic() + grace
        while children and time.monotonic() < deadline:
            reap(children)
            time.sleep(POLL_SECONDS)


def serve(path: Path) -> int:
    """Fork a replica per request until SIGTERM or SIGINT, or until ``path`` is removed."""
    preload()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    listener.bind(str(path))
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    print(f"warmstart: ready on {path} (pid {os.getpid()})", flush=True)
    while not stopping and path.exists():
        if selector.select(POLL_SECONDS):
            conn, _ = listener.accept()
            try:
                request, fds = receive(conn)
            except (OSError, ValueError) as err:
                send(conn, {"error": str(err)})
                conn.close()
                continue
            with stop_signals_held():  # the child's own, once it has let go of this handler
                pid = fork_replica(request, fds, selector, listener, [conn, *children.values()])
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            send(conn, {"pid": pid})
        reap(children)
    listener.close()
    path.unlink(missing_ok=True)
    stop_children(children, STOP_GRACE_SECONDS)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m syncreplicas_runtime.launch.warmstart SOCKET", file=sys.stderr)
        sys.exit(2)
    die_with_parent(signal.SIGTERM)  # then it stops its replicas as a pod's end would
    sys.exit(serve(Path(sys.argv[1])))
