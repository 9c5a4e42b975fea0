"""A replica stopped by SIGTERM lets its name go before it exits.

The operator takes a pod that is being deleted out of its replica's Service at once
(docs/contract.md, "Labels and names"), but the process can be quicker than that: a worker
leaves within a step of SIGTERM. A peer whose connection ends at the exit resolves the name
again at once; if it still gets this pod's address, gRPC dials a pod that is gone, waits for
its connect timeout (2 s, process/sessions.py) and only then looks again: seconds lost by
whoever replaces this replica. So before the exit the process waits, at most
``UNLISTED_WAIT_SECONDS``, until its name no longer resolves to an address of this pod.
Outside a cluster (a local run: the name is on the loopback) nothing waits.
"""

from __future__ import annotations

import socket
import time

UNLISTED_WAIT_SECONDS = 1.0
POLL_SECONDS = 0.02


def own_addresses() -> set[str]:
    """This pod's IPv4 addresses (its host name's, as the kubelet writes /etc/hosts), without
    the loopback."""
    try:
        _, _, addresses = socket.gethostbyname_ex(socket.gethostname())
    except OSError:
        return set()
    return {a for a in addresses if not a.startswith("127.")}


def resolves_to(host: str, addresses: set[str]) -> bool:
    try:
        infos = socket.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return any(info[4][0] in addresses for info in infos)


def wait_until_unlisted(address: str, limit: float = UNLISTED_WAIT_SECONDS,
                        poll: float = POLL_SECONDS) -> float | None:  # fmt: skip
    """Seconds waited until the host of ``address`` (host:port) stopped resolving to this
    pod (0.0: it did not); None when it still did after ``limit``."""
    host = address.rpartition(":")[0]
    mine = own_addresses()
    if not mine:
        return 0.0
    began = time.monotonic()
    while resolves_to(host, mine):
        if time.monotonic() - began >= limit:
            return None
        time.sleep(poll)
    return time.monotonic() - began
