"""How kopf calls the operator's handlers: a job's loop is woken for a child's event only
once kopf's index holds it, and only from kopf's event loop (handlers.py says why).

kopf calls a resource's indexers, stores their values, then calls its event handlers; it
runs a coroutine in its event loop and any other function in a thread. A wake from an
indexer could reach the loop before the store (a pass planned from the old state, not
woken again: a job that never turned Ready under load), and a wake from a thread sets an
asyncio Event from outside its loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from syncreplicas_operator.controller import daemon, handlers
from syncreplicas_operator.core import naming

NS, JOB = "team-a", "wiring"


def pod_body(name: str = f"{JOB}-worker-0") -> kopf.Body:
    return kopf.Body({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": "u-1",
                     "labels": {naming.LABEL_JOB_NAME: JOB}},
        "spec": {},
        "status": {"phase": "Running"},
    })  # fmt: skip


@pytest.fixture()
def registry() -> Iterator[kopf.OperatorRegistry]:
    """The handlers of an operator started with --kueue (Workloads too), in a registry of
    the test's own."""
    default = kopf.get_default_registry()
    fresh = kopf.OperatorRegistry()
    for kind in ("_indexing", "_watching", "_spawning", "_changing", "_activities"):
        for handler in getattr(default, kind).get_all_handlers():
            getattr(fresh, kind).append(handler)
    kopf.set_default_registry(fresh)
    try:
        handlers.watch_workloads()
        yield fresh
    finally:
        kopf.set_default_registry(default)


@pytest.fixture()
def state() -> Iterator[daemon.JobState]:
    state = daemon.STATES.setdefault((NS, JOB), daemon.JobState())
    try:
        yield state
    finally:
        daemon.STATES.pop((NS, JOB), None)


def selectors(handlers_: Any) -> set[tuple[str, str]]:
    return {(h.selector.group, h.selector.any_name) for h in handlers_}


def test_every_indexer_and_event_handler_is_a_coroutine(registry: kopf.OperatorRegistry) -> None:
    for handler in [*registry._indexing.get_all_handlers(),
                    *registry._watching.get_all_handlers(),
                    *registry._spawning.get_all_handlers()]:  # fmt: skip
        assert asyncio.iscoroutinefunction(handler.fn), f"{handler.id} runs in kopf's threads"


def test_every_indexed_kind_has_an_event_handler_that_wakes_the_job(
    registry: kopf.OperatorRegistry,
) -> None:
    indexed = selectors(registry._indexing.get_all_handlers())
    assert {("", "pods"), ("", "services"), ("networking.k8s.io", "networkpolicies"),
            ("kueue.x-k8s.io", "workloads")} <= indexed  # fmt: skip
    assert indexed <= selectors(registry._watching.get_all_handlers())


@pytest.mark.asyncio(loop_scope="session")
async def test_an_indexer_only_indexes_and_the_event_handler_wakes(
    state: daemon.JobState,
) -> None:
    indexed = await handlers.pods_by_job(namespace=NS, body=pod_body())
    assert indexed is not None and (NS, JOB) in indexed
    assert await handlers.services_by_job(namespace=NS, name=JOB, body=pod_body()) == {
        (NS, JOB): JOB
    }
    assert not state.wake.is_set()
    await handlers.pod_changed(namespace=NS, body=pod_body())
    assert state.wake.is_set()
