"""The cluster tests run against the cluster of `make cluster` (real API server, kubelets,
containerd, CoreDNS, kube-router; four nodes, Kueue and the Prometheus Operator under
`make test`), with the chart installed and both images loaded.

`make test` brings it up first and sets SYNCREPLICAS_REQUIRE_CLUSTER=1: then a missing
cluster fails these tests. Elsewhere (a plain `pytest`) they are skipped with the command
that brings the cluster up.

Most of them share the cluster: each in a namespace of its own, several at once
(`pytest -n 2 --dist loadgroup -m "not exclusive"`, as `make test` runs them), a file's
tests in one worker (its module's fixtures are made once). Those marked `exclusive` fault
nodes, hand the operator over, change what every job gets, start the RBAC run's forty
operators or load the API server with a 200-worker job; they run one at a time with
nothing else on the cluster (`-m exclusive`, no `-n`; `make test` runs them first, beside
the local lane, which takes the cores they leave while they wait on the cluster's
timers), and refuse to run in a run of several workers. Two of them, marked `paired` too,
`make test` runs beside each other and beside the tests marked `api_only` only (`-m
'paired or api_only' -n 3`): one crashes a real node, the other's 200 pods are all on
hollow nodes, and test_api.py's jobs are suspended or refused (the API server's verdicts,
no pod). With several workers the longest files are handed out first, so that no long one
starts last.

A failed test's report says how the API server answered /readyz just after (beside
tests/conftest.py's look at the machine): slow, refusing or not at all.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.cluster import kube, reads
from tests.support import machine

# The files of the shared run, longest first (their times three at a time, the cluster's
# tests alone, 2026-12-05: test_dashboard_browser 409 s, test_monitoring 324,
# test_warm_restarts 137, test_failures 137, test_job 128,
# test_queues 120, test_scale 103, test_spares 96, test_network_policy 90, test_api 68,
# then under 45 each; test_multikueue 45-90 then, and since it brings MultiKueue's worker
# cluster up and down itself, 91-95 s alone, 2026-12-07). xdist hands the files out in
# this order (make test's --no-loadscope-reorder); a worker holds the next file while it
# runs its last tests, so the short ones go last: the run ends with no long file queued
# behind another. test_multikueue comes first all the same: make test brings MultiKueue's
# worker cluster up for it before these begin, and it takes the worker down after its
# test (the sooner, the less the worker costs idle).
LONGEST_FIRST = ("test_multikueue.py", "test_dashboard_browser.py", "test_monitoring.py",
                 "test_warm_restarts.py", "test_failures.py", "test_job.py", "test_queues.py",
                 "test_scale.py", "test_spares.py", "test_network_policy.py",
                 "test_api.py", "test_topology.py",
                 "test_fuzzed_manifests.py", "test_pod_security.py", "test_nodes.py",
                 "test_names.py", "test_install.py", "test_lifecycle.py")  # fmt: skip


# Before xdist's own hook (its worker plugin, registered after this file, would otherwise
# run first and find no group to append to the test's id: every test its own group).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    ours = [item for item in items if str(item.fspath).startswith(here)]
    def rank(item: pytest.Item) -> int:
        name = os.path.basename(str(item.fspath))
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    for item in ours:
        name = os.path.basename(str(item.fspath)).removesuffix(".py")
        # The repeats of `make test REPEAT=N` (tests/conftest.py) stay in their file's group:
        # one after another, each beside the other workers' tests. In groups of their own
        # they ran beside each other: three browser tests at once, five test_job runs, a
        # load no `make test` makes.
        item.add_marker(pytest.mark.xdist_group(name))
    if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") != "1":
        mine = {id(item) for item in ours}
        items.sort(key=lambda item: rank(item) if id(item) in mine else -1)
    if not ours or kube.is_up():
        return
    if os.environ.get("SYNCREPLICAS_REQUIRE_CLUSTER") == "1":
        return  # the `cluster_up` fixture fails them, with the reason
    skip = pytest.mark.skip(reason="no local cluster: run `make cluster` first")
    for item in ours:
        item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """In a worker of a `--dist loadgroup` run, every test of ours carries its group in
    its id, which is how xdist keeps a file's tests together: a pytest whose ids xdist
    cannot append to (pytest 9.2 with xdist 3.8, pytest-dev/pytest-xdist#1386) would hand
    each test out on its own, a module's fixtures made on both workers and one test's
    data missing on the other. Refuse to run so rather than fail later for a reason that
    names neither."""
    if not session.config.getoption("loadgroup", False):
        return
    here = os.path.dirname(__file__)
    ungrouped = [i.nodeid for i in session.items
                 if str(i.fspath).startswith(here) and "@" not in i.nodeid]  # fmt: skip
    if ungrouped:
        raise pytest.UsageError(
            f"--dist loadgroup did not group {len(ungrouped)} tests (first: {ungrouped[0]}): "
            "this pytest and pytest-xdist do not work together (requirements.txt pins a "
            "pair that does)"
        )


WAITS_FILE = kube.REPO / "reports" / "cluster-waits.tsv"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test's waits (kube.eventually: what, how long; a module's fixture's count with
    the test it ran for), one line each in reports/cluster-waits.tsv when reports/ is there
    (make test makes it): hack/suite/slowest.py says what the slowest tests waited for."""
    kube.WAITS.clear()
    yield
    if kube.WAITS and WAITS_FILE.parent.is_dir():
        with WAITS_FILE.open("a") as out:
            out.writelines(f"{item.nodeid}\t{seconds:.1f}\t{' '.join(what.split())[:160]}\n"
                           for what, seconds in kube.WAITS)  # fmt: skip


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


# The runs in which the paired two may have company: each other, and the tests marked
# api_only (make test: `-m 'paired or api_only' -n 3`).
PAIRED_RUNS = ("paired", "paired or api_only")


def pytest_runtest_setup(item: pytest.Item) -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    if item.get_closest_marker("paired") and workers in ("1", "2", "3") and str(
            item.config.getoption("markexpr", "")).strip() in PAIRED_RUNS:  # fmt: skip
        return  # the two beside each other, and nothing else but the API server's tests
    if item.get_closest_marker("exclusive") and workers != "1":
        pytest.fail("this test needs the cluster alone: run it with -m exclusive and without "
                    "-n (the others: -m 'not exclusive' -n N; the paired two: -m "
                    f"'{PAIRED_RUNS[-1]}' -n 3)", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed and not hasattr(report, "wasxfail") and kube.KUBECONFIG.exists():
        report.sections.append((f"{machine.SECTION}: the API server", api_server_now()))


def api_server_now(timeout: float = 5.0) -> str:
    started = time.monotonic()
    try:
        answer = reads.get_text(kube.KUBECONFIG, "/readyz", timeout).strip()
    except (AssertionError, OSError, ValueError) as error:
        answer = f"{str(error).splitlines()[0][:200]}"
    return f"GET /readyz: {answer} after {time.monotonic() - started:.2f} s"
