"""A planning context to run one step on, and its pods, for the per-step table tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import EmitEvent
from syncreplicas_operator.core.plan.context import Inputs, Observed, PlanContext
from syncreplicas_operator.core.spec import Job
from syncreplicas_operator.core.status import ObservedPod

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def context(
    job: Job,
    pods: list[ObservedPod] | tuple[ObservedPod, ...] = (),
    status: dict[str, Any] | None = None,
    now: datetime = T0,
    **observed: Any,
) -> PlanContext:
    """A context for ``job`` with ``pods`` observed (a Service per replica, as a job with
    spares has, and the NetworkPolicy and PodDisruptionBudget too, unless ``observed`` says
    otherwise: ``services=frozenset({job.name})`` is a job addressed through its Service;
    ``entropy=`` and ``spare_refill_delay=`` go to the inputs)."""
    observed.setdefault(
        "services",
        frozenset(
            naming.replica_name(job.name, t, i)
            for t, count in job.spec.replica_counts().items()
            for i in range(count)
        ),
    )
    observed.setdefault("network_policy", True)
    observed.setdefault("disruption_budget", True)
    entropy = str(observed.pop("entropy", ""))
    refill = float(observed.pop("spare_refill_delay", 0.0))
    inputs = Inputs(job, Observed(tuple(pods), **observed), status or {}, now, "img",
                    entropy=entropy, spare_refill_delay=refill)  # fmt: skip
    return PlanContext(inputs)


def pods_of(job: Job, **changes: Any) -> list[ObservedPod]:
    """Every replica's pod, running and ready, with ``changes`` applied to all of them."""
    fields: dict[str, Any] = {"phase": "Running", "ready": True, **changes}
    return [
        ObservedPod(naming.replica_name(job.name, t, i), t, i, uid=f"u-{t}-{i}", **fields)
        for t, count in job.spec.replica_counts().items()
        for i in range(count)
    ]


def kinds(ctx: PlanContext) -> list[str]:
    return [type(a).__name__ for a in ctx.actions]


def reasons(ctx: PlanContext) -> list[str]:
    return [a.reason for a in ctx.actions if isinstance(a, EmitEvent)]


def condition(ctx: PlanContext, ctype: str) -> tuple[str, str] | None:
    """(status, reason) of a condition, None when it was never set."""
    found = next((c for c in ctx.status.get("conditions", []) if c["type"] == ctype), None)
    return None if found is None else (found["status"], found["reason"])
