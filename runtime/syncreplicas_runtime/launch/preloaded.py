"""What the modes that import TensorFlow ahead of the replica share (the supervisor, the
warm-start server, a spare): the imports themselves, a replica run in a forked child and
that child's end, the stop signals held across the fork, its wait status, and the line
such a process says on stderr.

Nothing here starts a Python thread (a lock held by a thread at a fork stays held in the
child, where that thread does not exist).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

PR_SET_PDEATHSIG = 1
# What stops a replica (the kubelet's SIGTERM, a user's Ctrl-C); the forking process has a
# handler of its own for each.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def preload() -> None:
    """Import what every replica imports (TensorFlow first), creating no thread."""
    import numpy  # noqa: F401

    from ..process.tfimport import import_tensorflow

    tf = import_tensorflow()
    tf.compat.v1.disable_eager_execution()
    from ..graph import training  # noqa: F401
    from ..process import sessions  # noqa: F401
    from ..ps import serving  # noqa: F401
    from ..replica import chief, worker  # noqa: F401
    from . import plain  # noqa: F401


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT held (blocked, not lost) while a replica is forked. One that came
    in between would otherwise reach the child while it still had the parent's handler,
    which only tells the parent's copy of the state: the child would run on as if never
    stopped (a pod deleted while its replica starts then waits out its grace period). Held,
    it reaches the parent once the fork has returned, when the parent knows its child; the
    child unblocks them itself (:func:`default_signals`)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def default_signals() -> None:
    """In a child forked under :func:`stop_signals_held`: SIGTERM, SIGINT and SIGCHLD back
    to their defaults, then SIGTERM and SIGINT let through: one sent to the child
    meanwhile ends it as it would a replica started cold, until the replica's own handlers
    are in place."""
    for signum in (*STOP_SIGNALS, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def die_with_parent(signum: int) -> None:
    """Get ``signum`` when the parent dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


def run_replica() -> int:
    """In a forked child: what ``python -m syncreplicas_runtime`` runs as a plain start
    (``plain.main``); its exit code."""
    import numpy as np

    np.random.seed()  # a fresh process would not share its parent's NumPy generator
    from . import plain

    # As `python -m syncreplicas_runtime` has it: the path of the package's __main__.py.
    sys.argv = [str(Path(__file__).parent.parent / "__main__.py")]
    try:
        code = plain.main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except Exception:
        code = plain.unexpected()
    return int(code)


def exit_child(body: Callable[[], int]) -> NoReturn:
    """In a forked child: run ``body`` and end the process with its code (1 if it raised),
    at once: daemon threads may sit in TensorFlow calls, and none is waited for."""
    code = 1
    try:
        code = body()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def returncode(status: int) -> int:
    """A wait status as ``subprocess.Popen`` says it: the exit code, or minus the signal."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def say(message: str) -> None:
    """A line of the process that is not (yet) the replica, on stderr."""
    print(f"syncreplicas: {message}", file=sys.stderr, flush=True)
