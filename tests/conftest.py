"""Repeats, for the tests that have failed only under the suite's own load; a log of the
failures as they happen.

`make test REPEAT=5` (SYNCREPLICAS_REPEAT=5) runs each test named in tests/under-load.txt
five times inside the full run, in its own lane and beside everything else, as the suite
loads the machine: a bound that holds once but not under that load shows there. Each
repeat is a test of its own (``[run1]`` ... ``[run5]``); a cluster test's repeats stay in
its file's pytest-xdist group (tests/cluster/conftest.py), so they run one after another,
each beside the other workers' tests as the first run is, and not beside each other.

`make test` names a file per lane in SYNCREPLICAS_FAILURES_LOG: each failed test's report
is appended to it when the test fails, so a long run's failures can be read while it runs,
and a run stopped before pytest's own summary keeps them.

Outside tests/cluster, the local lane's two pytest-xdist workers (`-n 2 --dist loadgroup`)
take the tests one at a time, as each is free; a file whose tests share a module's fixture
that starts processes keeps them in one worker with an ``xdist_group`` mark of its own
(tests/runtime/test_bad_config.py), so that the fixture is made once.

A failed test's report ends with what the machine was doing then (tests/support/machine.py:
load, memory, pressure, the busiest processes), one look per process every SNAPSHOT_EVERY
seconds at most: a failure among many at once refers to the last look.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support import machine

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


SNAPSHOT_EVERY = 20.0
_last_snapshot: list[tuple[float, str, str]] = []  # (monotonic, HH:MM:SS, text)


def machine_now() -> str:
    now = time.monotonic()
    if _last_snapshot and now - _last_snapshot[0][0] < SNAPSHOT_EVERY:
        at, clock, text = _last_snapshot[0]
        return f"not looked again: the last look, {now - at:.0f} s before ({clock}):\n{text}"
    _last_snapshot[:] = [(now, time.strftime("%H:%M:%S"), machine.snapshot())]
    return f"at {_last_snapshot[0][1]}:\n{_last_snapshot[0][2]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed and not hasattr(report, "wasxfail"):
        report.sections.append((machine.SECTION, machine_now()))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failed test's report (a crashed xdist worker's too) into SYNCREPLICAS_FAILURES_LOG,
    written by the process that prints the run's summary (not by xdist's workers, whose
    reports reach it as they come)."""
    path = os.environ.get("SYNCREPLICAS_FAILURES_LOG")
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a") as log:
        log.write(f"=== {time.strftime('%H:%M:%S')} FAILED {report.nodeid} ({report.when}, "
                  f"{report.duration:.1f} s)\n{report.longreprtext}\n")
        for title, text in report.sections:
            if title.startswith(machine.SECTION):
                log.write(f"--- {title} ---\n{text}\n")
        log.write("\n")
