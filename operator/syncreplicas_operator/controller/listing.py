"""What a job's loop reads from the API server besides kopf's indexes: its pods and
Services once, when it starts (their first watch events can still be in flight); whether
its PodDisruptionBudget and PodGroup exist, while the loop does not know (nothing watches
either); and whether the API serves the PodGroups its gang scheduler reads (API discovery,
which ``k8s.Api.serves`` keeps a while). Blocking calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging

from ..core import manifests, naming
from ..core.spares import ObservedSpare, observe_spare
from ..core.spec import Job
from ..core.status import ObservedPod, observe_pod
from ..resources import k8s

log = logging.getLogger("syncreplicas.operator")


async def list_children(
    client: k8s.Api,
    namespace: str,
    name: str,
    pods: list[ObservedPod],
    services: set[str],
    waiting: list[ObservedSpare],
) -> tuple[list[ObservedPod], set[str], list[ObservedSpare]]:
    """The indexed children completed by one list call per kind."""
    raw_pods = await asyncio.to_thread(client.list_children, "Pod", namespace, name)
    raw_services = await asyncio.to_thread(client.list_children, "Service", namespace, name)
    known = {p.name: p for p in pods}
    spares = {s.name: s for s in waiting}
    for raw in raw_pods:
        pod = observe_pod(raw)
        if pod is not None:
            known.setdefault(pod.name, pod)
        spare = observe_spare(raw)
        if spare is not None:
            spares.setdefault(spare.name, spare)
    services = services | {str(s["metadata"]["name"]) for s in raw_services}
    return list(known.values()), services, list(spares.values())


async def child_exists(
    client: k8s.Api,
    kind: str,
    namespace: str,
    name: str,
    child: str,
    unlisted: set[str],
    api_version: str = "",
) -> bool | None:
    """Whether the job's child ``child`` of ``kind`` exists (one list call): for the kinds
    nothing watches, its PodDisruptionBudget and PodGroup. None when the API does not say
    (no grant to list them, or an error): the plan then creates it, and one that exists
    answers that create with a harmless 409. A kind whose list failed joins ``unlisted``,
    the loop's, and is not listed again by that loop (nor warned about on every pass)."""
    if kind in unlisted:
        return None
    try:
        found = await asyncio.to_thread(client.list_children, kind, namespace, name, api_version)
    except k8s.ApiError as exc:
        unlisted.add(kind)
        log.warning("%s/%s: whether its %s exists is not known, so it is created (a 409 "
                    "if it does): %s", namespace, name, kind, exc)  # fmt: skip
        return None
    return any(item["metadata"].get("name") == child for item in found)


async def pod_group_exists(client: k8s.Api, job: Job, unlisted: set[str]) -> bool | None:
    """Whether the job's PodGroup exists (``child_exists``); None without a scheduling
    policy."""
    api_version = manifests.pod_group_api_version(job.spec)
    if api_version is None:
        return None
    return await child_exists(client, naming.POD_GROUP_KIND, job.namespace, job.name,
                              naming.pod_group_name(job.name), unlisted, api_version)  # fmt: skip


async def served(client: k8s.Api, job: Job) -> bool:
    """Whether the API serves the PodGroups the job's gang scheduler reads (True without
    a scheduling policy: nothing to serve)."""
    api_version = manifests.pod_group_api_version(job.spec)
    if api_version is None:
        return True
    return await asyncio.to_thread(client.serves, api_version, naming.POD_GROUP_PLURAL)
