"""Read the chief's global step from its ``/metrics``, for ``status.globalStep``.

A failed read is logged and skipped (the daemon tries again next interval), never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import aiohttp

from ..core import metricnames, metricstext, naming
from ..core.status import POD_RUNNING, ObservedPod

log = logging.getLogger("syncreplicas.operator")


def running_chief(pods: Iterable[ObservedPod]) -> ObservedPod | None:
    """The chief's pod when it runs and has an IP to read from."""
    return next(
        (
            pod
            for pod in pods
            if pod.replica_type == naming.CHIEF and pod.phase == POD_RUNNING and pod.pod_ip
        ),
        None,
    )


async def read_global_step(pod_ip: str, port: int, timeout: float) -> int | None:
    """``syncreplicas_global_step`` from ``http://pod_ip:port/metrics``; None if unreadable."""
    url = f"http://{pod_ip}:{port}/metrics"
    try:
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        async with (
            aiohttp.ClientSession(timeout=client_timeout) as session,
            session.get(url) as response,
        ):
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.info("could not read %s: %s", url, exc)
        return None
    value = metricstext.first_value(metricstext.iter_families(text), metricnames.GLOBAL_STEP)
    return None if value is None else int(value)
