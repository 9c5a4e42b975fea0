"""The suite in two halves that `make test` runs side by side (pytest-xdist, `-n 2 --dist
loadgroup`): the tests on the real cluster in one worker, everything else (pure, kmock,
local processes, chart) in the other. Each half keeps its order; the cluster's tests that
time faults most closely (node faults, operator failover, warm restarts, spares, pod
failures) come last in theirs, by when the other half has ended. Without xdist nothing
changes but that order."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

CLUSTER = Path(__file__).parent / "cluster"
# Last in the cluster's half, in this order.
CLOSEST_TIMED: Final = (
    "test_failures",
    "test_spares",
    "test_warm_restarts",
    "test_operator_failover",
    "test_node_faults",
)


def _on_cluster(item: pytest.Item) -> bool:
    return CLUSTER in Path(str(item.fspath)).parents


def _rank(item: pytest.Item) -> int:
    name = Path(str(item.fspath)).stem
    return CLOSEST_TIMED.index(name) + 1 if name in CLOSEST_TIMED else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cluster = sorted((i for i in items if _on_cluster(i)), key=_rank)  # stable
    local = [i for i in items if not _on_cluster(i)]
    items[:] = local + cluster
    for item in local:
        item.add_marker(pytest.mark.xdist_group("local"))
    for item in cluster:
        item.add_marker(pytest.mark.xdist_group("cluster"))
