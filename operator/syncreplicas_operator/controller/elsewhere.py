"""One pass for a job another controller runs (spec.managedBy; rules in core/managed.py):
what Kueue's side of it needs read, planned and written; no pod, Service or status."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from ..core import managed
from ..core.kueue import ObservedWorkload
from ..core.spec import Job
from ..resources import k8s
from ..resources.metrics import OperatorMetrics
from . import queueing
from .apply import apply_plan
from .expectations import Expectations
from .settings import SETTINGS


async def run_pass(
    client: k8s.Api,
    counters: OperatorMetrics,
    raw: Mapping[str, Any],
    job: Job,
    workloads: Iterable[ObservedWorkload],
    expectations: Expectations,
    *,
    announce: bool,
    warned: str = "",
) -> str:
    """Post the job's ManagedElsewhere Event when ``announce``, write a MultiKueue job's
    Workload, or say why it cannot be written unless ``warned`` said it already
    (k8s.ApiError: a write the API refused); the problem said ("" when none)."""
    fields = await queueing.observe(client, SETTINGS.kueue, job, workloads)
    plan = managed.plan_elsewhere(job, fields, announce=announce, default_image=SETTINGS.image,
                                  warned=warned)  # fmt: skip
    await asyncio.to_thread(apply_plan, client, counters, raw, plan, expectations)
    return managed.workload_problem(job, fields)
