"""``plan_job``: one pass of the planning steps, in order, over one context."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from .. import manifests, warm
from ..spec import Job
from . import (
    chief,
    children,
    exits,
    gates,
    lifecycle,
    nodes,
    progress,
    queue,
    recoveries,
    resize,
    spares,
    stragglers,
)
from .context import Inputs, Observed, Plan, PlanContext
from .result import build_plan

# A step reads the context, writes into it and returns True when the pass ends with it.
Step = Callable[[PlanContext], bool]

STEPS: Final[tuple[Step, ...]] = (
    nodes.replace_lost,
    children.force_delete_stuck,
    queue.admit,
    lifecycle.plan_finished,
    lifecycle.plan_suspended,
    lifecycle.start,
    lifecycle.check_deadline,
    lifecycle.check_gang_scheduler,
    children.publish_addresses,
    exits.handle_exits,
    chief.check_chief,
    resize.plan_resize,
    children.reconcile_children,
    spares.keep_spares,
    progress.report_progress,
    recoveries.report_recovery,
    stragglers.report_straggler,
    gates.report_gated,
)


def plan_job(
    job: Job,
    observed: Observed,
    status: Mapping[str, Any],
    now: datetime,
    *,
    default_image: str = manifests.DEFAULT_IMAGE,
    metrics_from: tuple[str, ...] = (),
    entropy: str = "",
    spare_refill_delay: float = 0.0,
) -> Plan:
    """The actions that move the job's children towards its spec, and its new status.

    ``status`` is the job's current ``.status`` (possibly empty); ``now`` is aware;
    ``default_image`` runs pods whose spec and template name no image; ``metrics_from``
    names the namespaces whose pods may read the metrics port (empty: any); ``entropy``
    is random text for the secrets of the spare pods this pass creates;
    ``spare_refill_delay``: seconds after a spare took a replica over before the spare
    behind it is started (core/plan/spares.py).
    """
    pods, warm_restarts = warm.fold(observed.pods, status.get("warmRestarts"), observed.warm_reads)
    observed = replace(observed, pods=pods)
    ctx = PlanContext(Inputs(job, observed, status, now, default_image, metrics_from, entropy,
                             spare_refill_delay))
    if warm_restarts:
        ctx.status["warmRestarts"] = warm_restarts
    else:
        ctx.status.pop("warmRestarts", None)
    for step in STEPS:
        if step(ctx):
            break
    return build_plan(ctx)
