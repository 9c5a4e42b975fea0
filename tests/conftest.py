"""Repeats, for the tests that have failed only under the suite's own load.

`make test REPEAT=5` (SYNCREPLICAS_REPEAT=5) runs each test named in tests/under-load.txt
five times inside the full run, in its own lane and beside everything else, as the suite
loads the machine: a bound that holds once but not under that load shows there. Each
repeat is a test of its own (``[run1]`` ... ``[run5]``), and
a cluster test's repeats go to pytest-xdist workers of their own (tests/cluster/conftest.py
groups them by repeat), so they run side by side as the file's first run does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LISTED = Path(__file__).with_name("under-load.txt")


def listed() -> list[str]:
    """The node ids (``path::name``, or a whole file's ``path``) that tests/under-load.txt
    names, relative to the repository."""
    lines = (line.split("#", 1)[0].strip() for line in LISTED.read_text().splitlines())
    return [line for line in lines if line]


def repeats() -> int:
    value = os.environ.get("SYNCREPLICAS_REPEAT", "1") or "1"
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"SYNCREPLICAS_REPEAT (make test REPEAT=N): {value!r} is "
                                "not a whole number of runs, 1 or more")  # fmt: skip
    return int(value)


def chosen(nodeid: str, names: list[str]) -> bool:
    path, _, function = nodeid.partition("::")
    return any(name in (path, f"{path}::{function.split('[')[0]}") for name in names)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    count = repeats()
    if count == 1 or not chosen(metafunc.definition.nodeid, listed()):
        return
    metafunc.fixturenames.append("under_load_run")
    metafunc.parametrize("under_load_run", range(1, count + 1), indirect=True,
                         ids=lambda run: f"run{run}")  # fmt: skip


@pytest.fixture
def under_load_run(request: pytest.FixtureRequest) -> int:
    """Which of the repeats this is (1 for the test's own run)."""
    return int(request.param)
