"""Carry out a plan's actions, in order, through an injected API client.

Runs in a worker thread (every call blocks). Runs of the same kind of write go out in
parallel; the plan's order between runs is kept (workers are deleted before parameter
servers, children are written before the status that reports them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ..core import kueue, naming
from ..core.actions import (
    NORMAL,
    Action,
    AssignSpare,
    CountMetric,
    CreateChild,
    DeleteJob,
    DeletePod,
    DeletePodGroup,
    DeleteService,
    DeleteWorkload,
    EmitEvent,
    ObserveMetric,
    PatchStatus,
    PatchWorkload,
    PublishPod,
)
from ..core.plan.context import Plan
from ..core.plan.spares import failed_assignment
from ..resources import sparecall
from ..resources.k8s import ApiError
from .expectations import Expectations

log = logging.getLogger("syncreplicas.operator")


class Api(Protocol):
    """The writes a plan needs (``resources.k8s.Api`` provides them)."""

    def create_many(self, namespace: str, bodies: list[Mapping[str, Any]]) -> int: ...

    def delete_many(
        self,
        kind: str,
        namespace: str,
        names: list[str],
        grace_period_seconds: int | None = None,
    ) -> int: ...

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        api_version: str = "",
        grace_period_seconds: int | None = None,
    ) -> bool: ...

    def post_event(
        self, namespace: str, job: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None: ...

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool: ...

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool: ...

    def patch_pods(self, namespace: str, patches: list[tuple[str, Mapping[str, Any]]]) -> int: ...

    def patch(
        self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], status: bool = False
    ) -> bool: ...

    def delete_job(self, namespace: str, name: str) -> bool: ...


class Counters(Protocol):
    """Where CountMetric and ObserveMetric actions go (``resources.metrics.OperatorMetrics``)."""

    def count(
        self, name: str, amount: int = 1, labels: Mapping[str, str] | None = None
    ) -> None: ...

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None: ...


def apply_plan(
    client: Api,
    counters: Counters,
    job: Mapping[str, Any],
    plan: Plan,
    expectations: Expectations,
    assign: SpareCall = sparecall.assign,
) -> bool:
    """Carry out the plan in order; True if the job is gone (deleted, or its status 404).
    ``assign`` hands a spare its replica (``resources/sparecall.py``)."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    refused = 0  # handovers the plan counted in status.spares.assigned that did not happen
    for batch in _batches(plan.actions):
        first = batch[0]
        if isinstance(first, CreateChild):
            creates = [a for a in batch if isinstance(a, CreateChild)]
            # Expect them before sending (the watch may be quicker than the response) and
            # again after: a large batch may outlast an expectation's lifetime.
            expectations.expect_created(creates)
            client.create_many(namespace, [a.body for a in creates])
            expectations.expect_created(creates)
        elif isinstance(first, DeletePod):
            names = [a.name for a in batch if isinstance(a, DeletePod)]
            # As for creations: a large batch (a resize's, against a busy API server) may
            # outlast the expectation, and a pass before the watch shows the pods
            # terminating would delete them again.
            expectations.expect_deleted(names)
            client.delete_many("Pod", namespace, names, first.grace_period_seconds)
            expectations.expect_deleted(names)
        elif isinstance(first, PublishPod):
            published = [a for a in batch if isinstance(a, PublishPod)]
            # A pod gone meanwhile (404) needs nothing more.
            client.patch_pods(namespace, [
                (a.name, {"metadata": {"labels": {
                    naming.LABEL_PUBLISHED: naming.PUBLISHED if a.published else None}}})
                for a in published
            ])  # fmt: skip
        elif isinstance(first, DeletePodGroup):
            client.delete(
                naming.POD_GROUP_KIND, namespace, first.name, api_version=first.api_version
            )
        elif isinstance(first, DeleteService):
            names = [a.name for a in batch if isinstance(a, DeleteService)]
            client.delete_many("Service", namespace, names)
        elif isinstance(first, EmitEvent):
            for event in batch:
                assert isinstance(event, EmitEvent)
                # Best effort: an Event the API refuses must not keep the status (written
                # after it) from the job.
                try:
                    client.post_event(namespace, job, event.type, event.reason, event.message)
                except ApiError as exc:
                    log.warning("%s/%s: event %s not posted: %s", namespace, name,
                                event.reason, exc)  # fmt: skip
        elif isinstance(first, CountMetric):
            for count in batch:
                assert isinstance(count, CountMetric)
                counters.count(count.name, count.amount, dict(count.labels))
        elif isinstance(first, ObserveMetric):
            for observed in batch:
                assert isinstance(observed, ObserveMetric)
                counters.observe(observed.name, observed.value, dict(observed.labels))
        elif isinstance(first, PatchStatus):
            if not client.patch_status(namespace, name, _uncount(first.patch, refused)):
                return True
        elif isinstance(first, AssignSpare):
            for action in batch:
                assert isinstance(action, AssignSpare)
                refused += not _assign_spare(client, assign, job, action, expectations)
        elif isinstance(first, PatchWorkload):
            if not client.patch(kueue.WORKLOAD_KIND, namespace, first.name, first.patch,
                                status=first.status):  # fmt: skip
                log.info("%s/%s: Workload %s changed or went before this patch; planning "
                         "again", namespace, name, first.name)  # fmt: skip
        elif isinstance(first, DeleteWorkload):
            client.delete(kueue.WORKLOAD_KIND, namespace, first.name)
        elif isinstance(first, DeleteJob):
            client.delete_job(namespace, name)
            return True
    return False


# (address, port, token, env) -> "" when the spare took the replica, else why not.
SpareCall = Callable[[str, int, str, Mapping[str, str]], str]


def _assign_spare(
    client: Api, assign: SpareCall, job: Mapping[str, Any], action: AssignSpare,
    expectations: Expectations,
) -> bool:  # fmt: skip
    """Hand the spare its replica, then relabel it (its Service selects it from then on);
    True if it took it. A spare that refuses, or whose pod cannot be patched, is deleted: the
    next pass gives the replica a pod of its own, and the spare's process, if it started, is
    fenced by it."""
    namespace = job["metadata"]["namespace"]
    incarnation = int(action.patch["metadata"]["annotations"][naming.ANNOTATION_INCARNATION])
    why = assign(action.address, action.port, action.token, dict(action.env))
    if not why:
        expectations.expect_assigned(action.spare, action.replica, incarnation)
        try:
            if client.patch_pod(namespace, action.spare, action.patch):
                client.post_event(namespace, job, NORMAL, naming.REASON_SPARE_ASSIGNED,
                                  f"spare {action.spare} took over {action.replica} "
                                  f"(incarnation {incarnation})")  # fmt: skip
                return True
            why = "its pod is gone"
        except ApiError as exc:
            why = f"relabelling failed: {exc}"
        expectations.assigned.pop(action.spare, None)
    log.warning("%s: spare %s did not take %s: %s", namespace, action.spare, action.replica, why)
    expectations.expect_deleted([action.spare])
    client.delete_many("Pod", namespace, [action.spare], 0)
    event_type, reason, message = failed_assignment(action.spare, action.replica, why)
    try:
        client.post_event(namespace, job, event_type, reason, message)
    except ApiError as exc:
        log.warning("%s: event %s not posted: %s", namespace, reason, exc)
    return False


def _uncount(patch: Mapping[str, Any], refused: int) -> Mapping[str, Any]:
    """The status patch without the ``refused`` handovers the plan counted as assigned."""
    spares = patch.get("spares")
    if not refused or not isinstance(spares, Mapping) or "assigned" not in spares:
        return patch
    assigned = max(0, int(spares["assigned"] or 0) - refused)
    return {**patch, "spares": {**spares, "assigned": assigned}}


def _batches(actions: Iterable[Action]) -> list[list[Action]]:
    """The actions cut into runs that may go out together."""
    batches: list[list[Action]] = []
    for action in actions:
        if batches and _same_batch(batches[-1][0], action):
            batches[-1].append(action)
        else:
            batches.append([action])
    return batches


def _same_batch(first: Action, other: Action) -> bool:
    if isinstance(first, CreateChild) and isinstance(other, CreateChild):
        return first.kind == other.kind
    if isinstance(first, DeletePod) and isinstance(other, DeletePod):
        # Same replica type ("<job>-<type>-<index>") and the same grace.
        return (
            first.name.rsplit("-", 2)[-2] == other.name.rsplit("-", 2)[-2]
            and first.grace_period_seconds == other.grace_period_seconds
        )
    return type(first) is type(other) and isinstance(
        first, DeleteService | PublishPod | EmitEvent | CountMetric | ObserveMetric
    )
