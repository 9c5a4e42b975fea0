"""The status and Event for a job whose spec does not parse: Failed, naming every bad field;
and the Event of an update that is not applied to a job that runs.

Pure; the daemon writes the result. Reported once: a job already marked Failed with the
same conditions (e.g. before an operator restart) gives no plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core import naming
from ..core.spec import Problem, SpecError
from ..core.status import set_condition


@dataclass(frozen=True)
class InvalidJobPlan:
    status_patch: dict[str, Any]
    message: str  # the Warning Event's message (REASON_INVALID_SPEC)


def plan_invalid_job(
    current: Mapping[str, Any], error: SpecError, now: str
) -> InvalidJobPlan | None:
    """The status patch and Event message for an invalid job; None when already reported.

    ``current`` is the job's status, ``now`` an RFC 3339 timestamp."""
    message = "; ".join(str(p) for p in error.problems)
    conditions = set_condition(
        current.get("conditions") or [],
        naming.CONDITION_FAILED,
        True,
        naming.REASON_INVALID_SPEC,
        message,
        now,
    )
    if current.get("phase") == naming.PHASE_FAILED and current.get("conditions") == conditions:
        return None
    patch: dict[str, Any] = {"phase": naming.PHASE_FAILED, "conditions": conditions}
    if "completionTime" not in current:
        patch["completionTime"] = now
    return InvalidJobPlan(status_patch=patch, message=message)


def refused_update_message(problems: list[Problem]) -> str:
    """The Warning Event of an update not applied (REASON_SPEC_CHANGE_REFUSED): the job goes
    on as it was; each problem names its field."""
    said = "; ".join(str(p) for p in problems)
    return f"spec update not applied (the job goes on with the spec it had): {said}"
