"""How a replica leaves: its exit line on stderr and its termination message (docs/contract.md),
written as it exits, never failing.

Kubernetes copies the file into the container's status (``state.terminated.message``):
the operator reads the reason of a failure and the chief's final global step there. The
default path is the one the kubelet mounts in every container; it is written only when it
exists, so a local run (or a root shell with a writable /dev) leaves nothing behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import NoReturn

from ..foundation.exitcodes import (
    DEFAULT_TERMINATION_LOG,
    OK,
    TERMINATION_LOG_ENV,
    exit_line,
    termination_message,
)


def termination_log(environ: Mapping[str, str] = os.environ) -> tuple[str, bool]:
    """The termination-message file ("": off) and whether to create it when missing:
    ``$SYNCREPLICAS_TERMINATION_LOG`` (created), else the kubelet's ``/dev/termination-log``
    (only if it exists)."""
    path = environ.get(TERMINATION_LOG_ENV)
    return (DEFAULT_TERMINATION_LOG, False) if path is None else (path, True)


def read_termination_message(environ: Mapping[str, str] = os.environ) -> str:
    """What the termination-message file holds now ("" when off, missing or unreadable)."""
    path, _ = termination_log(environ)
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as text:
            return text.read()
    except OSError:
        return ""


def write_termination_message(text: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Write ``text`` to the termination-message file; False when there is none to write.

    ``$SYNCREPLICAS_TERMINATION_LOG`` names the file (created if missing; "" turns the
    message off); without it the kubelet's ``/dev/termination-log`` is written if it exists.
    Any error is swallowed: the exit code and the stderr line still tell the story.
    """
    path, create = termination_log(environ)
    if not path:
        return False
    flags = os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError:
        return False
    return True


def report_exit(code: int, reason: str, global_step: int | None = None,
                environ: Mapping[str, str] = os.environ,
                more: Mapping[str, str] | None = None) -> int:  # fmt: skip
    """Say why the replica exits with ``code``: the contract's one exit line on stderr (none
    for exit 0) and the termination message (that line, then ``globalStep=N`` when the
    replica saw a step, then ``more``'s facts). Returns ``code`` for the caller to exit
    with."""
    if code != OK:
        print(exit_line(code, reason), file=sys.stderr, flush=True)
    write_termination_message(termination_message(code, reason, global_step, more), environ)
    return code


def exit_now(code: int, reason: str, global_step: int | None = None) -> NoReturn:
    """:func:`report_exit`, then end the process at once, from any thread (a watchdog, PS 0's
    sync loop, the chief's SIGTERM checkpoint): no clean-up, no waiting for other threads."""
    report_exit(code, reason, global_step)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
