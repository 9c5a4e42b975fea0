"""What the operator just created but the watch has not shown yet (controller/expectations.py):
in flight, a child counts as there; once the watch has shown it, its absence is a deletion."""

from __future__ import annotations

from syncreplicas_operator.controller.expectations import Expectations
from syncreplicas_operator.core.actions import CreateChild


def created(kind: str, name: str) -> CreateChild:
    return CreateChild({"kind": kind, "metadata": {"name": name}})


def test_a_network_policy_in_flight_counts_as_there() -> None:
    expect = Expectations()
    expect.expect_created([created("NetworkPolicy", "job-grpc")])
    assert expect.observe("job", [], set(), policy=False).network_policy


def test_a_network_policy_deleted_after_the_watch_showed_it_is_gone() -> None:
    expect = Expectations()
    expect.expect_created([created("NetworkPolicy", "job-grpc")])
    assert expect.observe("job", [], set(), policy=True).network_policy
    # Deleted by someone: the operator must create it again at once, not a minute later.
    assert not expect.observe("job", [], set(), policy=False).network_policy


def test_a_service_deleted_after_the_watch_showed_it_is_gone() -> None:
    expect = Expectations()
    expect.expect_created([created("Service", "job-ps-0")])
    assert expect.observe("job", [], set(), policy=False).services == {"job-ps-0"}
    assert expect.observe("job", [], {"job-ps-0"}, policy=False).services == {"job-ps-0"}
    assert expect.observe("job", [], set(), policy=False).services == frozenset()
