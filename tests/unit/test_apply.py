"""Carrying out a plan: an Event the API refuses does not keep the status from the job; a
batch of deletions slower than an expectation's lifetime is not sent again; a pod's
published label set and removed, a pod gone meanwhile skipped."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from syncreplicas_operator.controller import expectations as expectations_module
from syncreplicas_operator.controller.apply import apply_plan
from syncreplicas_operator.controller.expectations import Expectations
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.actions import (
    WARNING,
    DeletePod,
    EmitEvent,
    PatchStatus,
    PublishPod,
)
from syncreplicas_operator.core.plan.context import Plan
from syncreplicas_operator.core.status import ObservedPod
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


class SlowDeletes:
    """An API server that answers a batch of deletions after longer than an expectation
    lives (here: the clock moved on by that much while the batch ran)."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.deleted: list[str] = []

    def delete_many(self, kind: str, namespace: str, names: list[str],
                    grace_period_seconds: int | None = None) -> int:  # fmt: skip
        self.clock[0] += expectations_module.EXPECTATION_SECONDS + 5
        self.deleted += names
        return len(names)


def test_pods_deleted_by_a_slow_batch_stay_expected_until_the_watch_shows_them(
        monkeypatch: Any) -> None:  # fmt: skip
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    api = SlowDeletes(clock)
    expected = Expectations()
    names = [f"j-worker-{i}" for i in range(3)]
    plan = Plan(actions=tuple(DeletePod(n) for n in names), status={})
    apply_plan(api, NoCounters(), JOB, plan, expected)  # type: ignore[arg-type]
    # The watch has not shown them terminating yet: the next pass must see them going.
    pods = [ObservedPod(name=n, replica_type="worker", index=i) for i, n in enumerate(names)]
    observed = expected.observe("j", pods, set(), policy=True)
    assert all(p.deleting for p in observed.pods), observed.pods


class PodPatches:
    """An API that records pod patches; ``gone`` pods answer 404 (False)."""

    def __init__(self, gone: set[str]) -> None:
        self.gone = gone
        self.patched: list[tuple[str, Mapping[str, Any]]] = []

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        self.patched.append((name, patch))
        return name not in self.gone

    def patch_pods(self, namespace: str, patches: list[tuple[str, Mapping[str, Any]]]) -> int:
        return sum(self.patch_pod(namespace, name, patch) for name, patch in patches)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        self.patched.append(("status", patch))
        return True


def test_a_going_pod_leaves_its_service_and_one_already_gone_stops_nothing() -> None:
    api = PodPatches(gone={"j-ps-0"})
    plan = Plan(actions=(PublishPod("j-ps-0", published=False),
                         PublishPod("j-worker-0", published=True),
                         PatchStatus({"phase": "Running"})), status={})  # fmt: skip
    assert not apply_plan(api, NoCounters(), JOB, plan, Expectations())  # type: ignore[arg-type]
    assert api.patched == [
        ("j-ps-0", {"metadata": {"labels": {naming.LABEL_PUBLISHED: None}}}),
        ("j-worker-0", {"metadata": {"labels": {naming.LABEL_PUBLISHED: "true"}}}),
        ("status", {"phase": "Running"}),
    ]
