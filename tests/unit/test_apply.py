"""Carrying out a plan: an Event the API refuses does not keep the status from the job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncreplicas_operator.controller.apply import apply_plan
from syncreplicas_operator.controller.expectations import Expectations
from syncreplicas_operator.core.actions import WARNING, EmitEvent, PatchStatus
from syncreplicas_operator.core.plan.context import Plan
from syncreplicas_operator.resources.k8s import ApiError

JOB = {"metadata": {"namespace": "team", "name": "j"}}


class EventsRefused:
    """An API whose RBAC lacks `create events`."""

    def __init__(self) -> None:
        self.patched: list[Mapping[str, Any]] = []

    def post_event(self, namespace: str, job: Mapping[str, Any], event_type: str,
                   reason: str, message: str) -> None:  # fmt: skip
        raise ApiError("POST", f"/api/v1/namespaces/{namespace}/events", 403, "forbidden")

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        self.patched.append(patch)
        return True


class NoCounters:
    def count(self, name: str, amount: int = 1, labels: Mapping[str, str] | None = None) -> None:
        pass

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        pass


def test_a_refused_event_does_not_stop_the_status_patch() -> None:
    api = EventsRefused()
    plan = Plan(actions=(EmitEvent(WARNING, "Stalled", "no progress"),
                         PatchStatus({"phase": "Running"})), status={})  # fmt: skip
    gone = apply_plan(api, NoCounters(), JOB, plan, Expectations())  # type: ignore[arg-type]
    assert not gone
    assert api.patched == [{"phase": "Running"}]
