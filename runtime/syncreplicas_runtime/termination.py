"""Write the replica's termination message (docs/contract.md) as it exits, never failing.

Kubernetes copies the file into the container's status (``state.terminated.message``):
the operator reads the reason of a failure and the chief's final global step there. The
default path is the one the kubelet mounts in every container; it is written only when it
exists, so a local run (or a root shell with a writable /dev) leaves nothing behind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .exitcodes import DEFAULT_TERMINATION_LOG, TERMINATION_LOG_ENV


def write_termination_message(text: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Write ``text`` to the termination-message file; False when there is none to write.

    ``$SYNCREPLICAS_TERMINATION_LOG`` names the file (created if missing; "" turns the
    message off); without it the kubelet's ``/dev/termination-log`` is written if it exists.
    Any error is swallowed: the exit code and the stderr line still tell the story.
    """
    path = environ.get(TERMINATION_LOG_ENV)
    create = path is not None
    if path is None:
        path = DEFAULT_TERMINATION_LOG
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
