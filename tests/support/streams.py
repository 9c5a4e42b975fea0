"""The local lane's two streams: which pytest-xdist worker runs which test outside the
cluster's.

`make test` runs the tests outside tests/cluster with two workers (`-n 2 --dist loadgroup`)
beside the cluster's tests. One worker runs the files named in SECOND, the other
everything else, one test after another in each. The lane is a chain of real processes
(TensorFlow replicas, operators, browsers) that mostly keeps one core busy, and alone it
took 16 min: longer than the cluster's exclusive tests, so it ran on into the shared ones,
which then took the longer. SECOND's files (about 5 of those minutes, measured alone) run
beside the rest while the exclusive cluster tests leave cores idle, waiting on the
cluster's timers.
"""

from __future__ import annotations

import os

import pytest

SECOND = ("tests/e2e/test_run.py", "tests/runtime/test_chaos.py", "tests/e2e/test_tensorboard.py")
FIRST_GROUP, SECOND_GROUP = "local-first", "local-second"


def stream_of(path: str) -> str:
    """The group of a test file given by its path relative to the repository."""
    return SECOND_GROUP if path in SECOND else FIRST_GROUP


def assign(root: str, items: list[pytest.Item]) -> None:
    """Each test outside tests/cluster into its stream's xdist group (the cluster's tests
    have their own groups: tests/cluster/conftest.py)."""
    cluster = os.path.join(root, "tests", "cluster") + os.sep
    for item in items:
        path = str(item.fspath)
        if not path.startswith(cluster):
            item.add_marker(pytest.mark.xdist_group(stream_of(os.path.relpath(path, root))))
