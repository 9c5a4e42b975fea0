"""Child names, labels and selectors: deterministic, valid Kubernetes names, reversible."""

from __future__ import annotations

import re

import pytest
from syncreplicas_operator.core import naming

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("job", "replica_type", "index", "name"),
    [
        ("mnist", "ps", 0, "mnist-ps-0"),
        ("mnist", "chief", 0, "mnist-chief-0"),
        ("mnist", "worker", 12, "mnist-worker-12"),
        ("a-b", "worker", 0, "a-b-worker-0"),
    ],
)
def test_replica_name_round_trip(job: str, replica_type: str, index: int, name: str) -> None:
    assert naming.replica_name(job, replica_type, index) == name
    assert naming.parse_replica_name(job, name) == (replica_type, index)


@pytest.mark.parametrize(
    ("job", "name"),
    [
        ("mnist", "mnist-grpc"),  # the NetworkPolicy
        ("mnist", "other-worker-0"),
        ("mnist", "mnist-worker-"),
        ("mnist", "mnist-worker-01"),  # not a name the operator makes
        ("mnist", "mnist-worker--1"),
        ("mnist", "mnist-evaluator-0"),
        ("mnist", "mnist-worker-0x"),
        ("a", "a-b-worker-0"),  # job "a-b"'s pod, not job "a"'s
    ],
)
def test_parse_replica_name_rejects_foreign_names(job: str, name: str) -> None:
    assert naming.parse_replica_name(job, name) is None


def test_longest_names_fit_dns_labels() -> None:
    job = "j" * naming.MAX_JOB_NAME_LENGTH
    longest = naming.replica_name(job, naming.WORKER, naming.MAX_WORKERS - 1)
    assert len(longest) == 63
    assert DNS_1035.match(longest)
    assert len(naming.replica_name(job, naming.PS, naming.MAX_PARAMETER_SERVERS - 1)) <= 63
    assert len(naming.network_policy_name(job)) <= 63


def test_labels_and_selectors() -> None:
    labels = naming.replica_labels("mnist", "worker", 3)
    assert labels == {
        "syncreplicas.io/job-name": "mnist",
        "syncreplicas.io/replica-type": "worker",
        "syncreplicas.io/replica-index": "3",
    }
    assert naming.job_labels("mnist").items() <= labels.items()
    assert naming.job_selector("mnist") == "syncreplicas.io/job-name=mnist"


def test_address() -> None:
    """Under the job's Service (the pod's hostname and subdomain), or a replica's own."""
    assert (
        naming.replica_address("j", "ns", "ps", 1, replica_services=False) == "j-ps-1.j.ns.svc:2222"
    )
    assert naming.replica_address("j", "ns", "ps", 1, replica_services=True) == "j-ps-1.ns.svc:2222"


def test_constants_are_distinct() -> None:
    assert len(set(naming.CONDITION_TYPES)) == len(naming.CONDITION_TYPES)
    assert len(set(naming.PHASES)) == len(naming.PHASES)
    reasons = [v for k, v in vars(naming).items() if k.startswith("REASON_")]
    assert len(set(reasons)) == len(reasons)
    assert naming.API_VERSION == "syncreplicas.io/v1alpha1"
    assert naming.REPLICA_TYPES == ("ps", "chief", "worker")
