"""An API installed after the operator started (Kueue's Workloads): stop, to start again
watching it.

kopf resolves the resources it watches when it starts, and again on each event of a
CustomResourceDefinition of their group, from the API server's discovery. Discovery of a
new CRD's resources lags behind the CRD's own events (its last event, Established, can
come before /apis/<group> lists the resource): a CRD created after the operator started
may then stay unresolved ("Unresolved resources cannot be served") until the operator
restarts, and a queued job's Workload is never seen. This watches discovery itself: when
an API that was missing at the start is served, it asks the operator to stop (as SIGTERM
would: kopf ends, the Lease is released and a follower leads at once) and says why; the
container's restart starts a process that resolves it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..resources import k8s

logger = logging.getLogger("syncreplicas.operator")

# How often discovery is asked while the API is missing.
POLL_SECONDS = 10.0


def stop_when_served(
    client: k8s.Api,
    api_version: str,
    plural: str,
    stop: Callable[[], None],
    poll_seconds: float = POLL_SECONDS,
) -> threading.Thread | None:
    """None when ``plural`` of ``api_version`` is served now; else a daemon thread that
    calls ``stop`` once it is."""
    if _served(client, api_version, plural):
        return None
    logger.info("%s %s is not served: watching discovery for it (every %.0f s)",
                api_version, plural, poll_seconds)  # fmt: skip

    def watch() -> None:
        while not _served(client, api_version, plural, wait=poll_seconds):
            pass
        logger.warning(
            "%s %s is served now, after the operator started: stopping so that the "
            "restarted operator watches it (a follower leads meanwhile)", api_version, plural)
        stop()

    thread = threading.Thread(target=watch, name=f"late-api-{plural}", daemon=True)
    thread.start()
    return thread


def _served(client: k8s.Api, api_version: str, plural: str, wait: float = 0.0) -> bool:
    if wait:
        threading.Event().wait(wait)
    try:
        return client.serves(api_version, plural, fresh=True)
    except Exception as error:  # an unreachable server, say: ask again later
        logger.debug("discovery of %s: %s", api_version, error)
        return False
