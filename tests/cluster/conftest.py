"""The cluster tests run against the cluster of `make cluster` (real API server, kubelets,
containerd, CoreDNS, kube-router; four nodes, Kueue and the Prometheus Operator under
`make test`), with the chart installed and both images loaded.

`make test` brings it up first and sets SYNCREPLICAS_REQUIRE_CLUSTER=1: then a missing
cluster fails these tests. Elsewhere (a plain `pytest`) they are skipped with the command
that brings the cluster up.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.cluster import kube


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    ours = [item for item in items if str(item.fspath).startswith(here)]
    if not ours or kube.is_up():
        return
    if os.environ.get("SYNCREPLICAS_REQUIRE_CLUSTER") == "1":
        return  # the `cluster_up` fixture fails them, with the reason
    skip = pytest.mark.skip(reason="no local cluster: run `make cluster` first")
    for item in ours:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster_up() -> None:
    if not kube.is_up():
        pytest.fail("the local cluster is not up (make cluster); it is required here")


@pytest.fixture
def namespace(cluster_up: None, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own per test, deleted (with everything in it) afterwards."""
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)
