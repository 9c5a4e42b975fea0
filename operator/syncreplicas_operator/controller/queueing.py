"""What a queued job's pass reads of Kueue (rules in ``core/kueue.py``): whether the API
serves Workloads, the job's Workload (from kopf's index), its WorkloadPriorityClass and the
ResourceFlavors its admission assigned (read from the API, kept for a while: both change
rarely and a running job is planned often)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..core import kueue
from ..core.kueue import Flavor, ObservedWorkload
from ..core.spec import Job
from ..resources import k8s

# How long a read ResourceFlavor or WorkloadPriorityClass is trusted.
CACHE_SECONDS: Final = 30.0

_cache: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}


async def observe(
    client: k8s.Api, enabled: bool, job: Job, workloads: Iterable[ObservedWorkload]
) -> dict[str, Any]:
    """The Observed fields of Kueue for ``job`` (none when the job is in no queue or the
    integration is off)."""
    if not enabled or kueue.queue_name(job) is None:
        return {}
    served = await asyncio.to_thread(client.serves, kueue.API_VERSION, kueue.WORKLOAD_PLURAL)
    if not served:
        return {"kueue": True, "kueue_served": False}
    name = kueue.workload_name(job)
    workload = next((w for w in workloads if w.name == name), None)
    fields: dict[str, Any] = {"kueue": True, "kueue_served": True, "workload": workload}
    if workload is None:
        fields.update(await _priority(client, kueue.priority_class(job)))
    elif workload.admission is not None:
        fields["flavors"] = await _flavors(client, kueue.flavors_of(workload))
    return fields


async def _priority(client: k8s.Api, name: str | None) -> dict[str, Any]:
    if name is None:
        return {}
    found = await _read(client, kueue.PRIORITY_CLASS_PLURAL, name)
    value = (found or {}).get("value")
    if not isinstance(value, int):
        return {
            "priority_problem": f"label {kueue.PRIORITY_CLASS_LABEL}: WorkloadPriorityClass "
            f"{name!r} not found (kubectl get workloadpriorityclasses)"
        }
    return {"priority": (name, value)}


async def _flavors(client: k8s.Api, names: Iterable[str]) -> Mapping[str, Flavor]:
    flavors = {}
    for name in sorted(names):
        found = await _read(client, kueue.FLAVOR_PLURAL, name)
        if found is not None:
            spec = found.get("spec") or {}
            flavors[name] = Flavor(
                node_labels={str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()},
                tolerations=tuple(t for t in spec.get("tolerations") or [] if isinstance(t, dict)),
            )
    return flavors


async def _read(client: k8s.Api, plural: str, name: str) -> dict[str, Any] | None:
    key = (plural, name)
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    found = await asyncio.to_thread(client.read_cluster_object, kueue.API_VERSION, plural, name)
    _cache[key] = (now + CACHE_SECONDS, found)
    return found
