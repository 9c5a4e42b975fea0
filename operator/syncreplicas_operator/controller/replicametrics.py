"""Read the job's replicas' ``/metrics`` for its status.

Every scrape interval: the chief's global and restored step, and the coordinator's (PS
0's) R and live replicas. Every replica scrape interval (longer): the gradient counters of
every replica that pushes gradients (the chief and the workers), for the straggler window,
and every replica's warm restarts (core/warm.py; the parameter servers too), at most
``concurrency`` reads at once. Each read is one HTTP GET of a few kilobytes served
by the runtime's metrics thread (no TensorFlow call): for W workers that is W + 1 GETs per
replica interval, e.g. 1000 workers every 30 s is about 33 GETs/s and ~150 KB/s. A failed
read is skipped (the next interval tries again), never an error; the failures of a round
are logged in one line. The daemon runs the replicas' reads in the background
(controller/daemon.py): a round of unanswered reads (a partitioned node's replicas, each
waiting out its timeout) takes W x timeout / concurrency and holds no pass up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp

from ..core import metricnames, metricstext, naming
from ..core.status import POD_RUNNING, ObservedPod
from ..core.straggler import GradientCounts, Scrape

log = logging.getLogger("syncreplicas.operator")


@dataclass(frozen=True)
class Progress:
    """What the chief and the coordinator said this interval (None: not read)."""

    global_step: int | None = None
    restored_step: int | None = None
    replicas_to_aggregate: int | None = None
    live_replicas: int | None = None


def readable(pod: ObservedPod) -> bool:
    """The pod runs, has an IP to read its metrics from, and is not on its way out."""
    return pod.phase == POD_RUNNING and bool(pod.pod_ip) and not pod.deleting


def running_pod(pods: Iterable[ObservedPod], replica_type: str, index: int) -> ObservedPod | None:
    """The replica's pod when it runs and has an IP to read from."""
    return next(
        (
            pod
            for pod in pods
            if pod.replica_type == replica_type and pod.index == index and readable(pod)
        ),
        None,
    )


def running_chief(pods: Iterable[ObservedPod]) -> ObservedPod | None:
    return running_pod(pods, naming.CHIEF, 0)


async def read_values(
    session: aiohttp.ClientSession, pod_ip: str, port: int, failed: list[str]
) -> dict[str, float] | None:
    """Flat sample values of ``http://pod_ip:port/metrics``; None if unreadable (and why
    appended to ``failed``)."""
    url = f"http://{pod_ip}:{port}/metrics"
    try:
        async with session.get(url) as response:
            text = await response.text()
        return metricstext.flatten(metricstext.parse(text))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        failed.append(f"{url}: {type(exc).__name__} {exc}".rstrip())
        return None


def log_failed(what: str, failed: list[str], of: int) -> None:
    """One line for every read of a round that failed (a thousand unreachable replicas are
    one line, not a thousand)."""
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        log.info("could not read %d of %d %s: %s%s", len(failed), of, what, failed[0], more)


def _int(values: dict[str, float] | None, name: str) -> int | None:
    value = (values or {}).get(name)
    return None if value is None else int(value)


async def read_progress(pods: Iterable[ObservedPod], port: int, timeout: float) -> Progress:
    """The chief's steps and the coordinator's R, read side by side."""
    pods = list(pods)
    targets = [running_chief(pods), running_pod(pods, naming.PS, 0)]
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    failed: list[str] = []
    async with aiohttp.ClientSession(timeout=client_timeout) as session:

        async def read(pod: ObservedPod | None) -> dict[str, float] | None:
            return None if pod is None else await read_values(session, pod.pod_ip, port, failed)

        chief, coordinator = await asyncio.gather(*(read(p) for p in targets))
    log_failed("of the chief's and PS 0's metrics", failed, sum(p is not None for p in targets))
    return Progress(
        global_step=_int(chief, metricnames.GLOBAL_STEP),
        restored_step=_int(chief, metricnames.RESTORED_STEP),
        replicas_to_aggregate=_int(coordinator, metricnames.REPLICAS_TO_AGGREGATE),
        live_replicas=_int(coordinator, metricnames.LIVE_REPLICAS),
    )


def gradient_sources(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """The replicas whose gradient counters can be read now: running chief and workers."""
    return [p for p in pods if p.replica_type in (naming.CHIEF, naming.WORKER) and readable(p)]


def warm_sources(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """Every replica whose warm restarts (core/warm.py) can be read now: the gradient
    sources and the running parameter servers."""
    return [p for p in pods if readable(p)]


def holders(pods: Iterable[ObservedPod]) -> dict[str, str]:
    """Replica key -> uid of the pod that holds it now (the pods a scrape's counts must
    come from to count: core/straggler.drop_fractions)."""
    return {naming.replica_key(p.replica_type, p.index): p.uid for p in pods if p.active}


# What a read of every replica found: the gradient counters (replica key -> counts) and
# the warm restarts (pod name -> (uid, count)).
ReplicaReads = tuple[Scrape, dict[str, tuple[str, int]]]


async def read_gradients(
    pods: Iterable[ObservedPod], port: int, timeout: float, concurrency: int
) -> ReplicaReads:
    """Pushed and dropped gradient counters of every running chief and worker, and the warm
    restarts of every running replica (pod name -> (uid, count))."""
    targets = warm_sources(pods)
    limit = asyncio.Semaphore(max(1, concurrency))
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    connector = aiohttp.TCPConnector(limit=max(1, concurrency))
    warm: dict[str, tuple[str, int]] = {}
    failed: list[str] = []
    async with aiohttp.ClientSession(timeout=client_timeout, connector=connector) as session:

        async def read(pod: ObservedPod) -> tuple[str, GradientCounts] | None:
            async with limit:
                values = await read_values(session, pod.pod_ip, port, failed)
            if values is None:
                return None
            restarts = values.get(metricnames.PROCESS_RESTARTS)
            if restarts is not None:
                warm[pod.name] = (pod.uid, int(restarts))
            pushed = values.get(metricnames.GRADIENTS_PUSHED)
            if pushed is None or pod.replica_type == naming.PS:
                return None
            dropped = values.get(metricnames.STALE_GRADIENTS_DROPPED, 0.0)
            key = naming.replica_key(pod.replica_type, pod.index)
            return key, GradientCounts(pushed=pushed, dropped=dropped, pod=pod.uid)

        results = await asyncio.gather(*(read(p) for p in targets))
    log_failed("replicas' metrics", failed, len(targets))
    return dict(r for r in results if r is not None), warm
