"""The test suite's own tools: which reads skip kubectl, how the CPU sampler names a
process, and the slowest tests read back from JUnit XML."""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from tests.cluster.reads import object_path

REPO = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "hack" / "suite" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cpusample = load("cpusample")
slowest = load("slowest")


@pytest.mark.parametrize(
    ("args", "path"),
    [
        (("get", "srj", "x", "-n", "ns"),
         "/apis/syncreplicas.io/v1alpha1/namespaces/ns/syncreplicasjobs/x"),
        (("get", "pods", "-n", "ns", "-l", "a=b,c in (d)"),
         "/api/v1/namespaces/ns/pods?labelSelector=a%3Db%2Cc%20in%20%28d%29"),
        (("get", "nodes"), "/api/v1/nodes"),
        (("get", "node", "n1"), "/api/v1/nodes/n1"),
        (("get", "lease", "l", "--namespace", "kube-system"),
         "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"),
        # kubectl's own: other verbs, kinds it alone resolves, flags, no namespace, -A
        (("get", "srj", "--all-namespaces"), None),
        (("get", "pods", "-A"), None),
        (("get", "pod", "x"), None),
        (("get", "workloads.kueue.x-k8s.io", "-n", "ns"), None),
        (("get", "events", "-n", "ns", "--field-selector", "reason=X"), None),
        (("get", "pod", "a", "b", "-n", "ns"), None),
        (("get", "pod", "a", "-n", "ns", "-l", "x=y"), None),
        (("describe", "srj", "x", "-n", "ns"), None),
    ],
)  # fmt: skip
def test_object_path(args: tuple[str, ...], path: str | None) -> None:
    assert object_path(*args) == path


@pytest.mark.parametrize(
    ("cmdline", "lane"),
    [
        (".venv/bin/python -m pytest tests --ignore=tests/cluster -p no:cacheprovider", "local"),
        (".venv/bin/python -m pytest -p no:cacheprovider tests/cluster -m exclusive", "cluster"),
        (".venv/bin/python -m pytest tests/cluster/test_job.py", "cluster"),
        ("python3 hack/cluster/cluster.py up", None),
        ("python -m syncreplicas_runtime", None),
        ("bash hack/cluster/build-all.sh --status /w/reports/build-status", "build"),
        ("/bin/bash /w/hack/cluster/build-all.sh", "build"),
        ("bash hack/cluster/build-all.sh --await /w/reports/build-status all", None),
        ("make --no-print-directory lint docs", "checks"),
        # make test's recipe, a shell whose first 400 bytes name build-all.sh and make
        ("/bin/bash -c hack/cluster/install-host.sh && make --no-print-directory prometheus "
         "chromium || exit 1; SYNCREPLICAS_KUEUE=1 hack/cluster/build-all.sh --status x & "
         "make --no-print-directory venv tools || exit 1; make lint docs", None),
    ],
)  # fmt: skip
def test_lane_of(cmdline: str, lane: str | None) -> None:
    assert cpusample.lane_of(cmdline) == lane


@pytest.mark.parametrize(
    ("comm", "cmdline", "component"),
    [
        ("python", "python -m syncreplicas_runtime", "jobs' TensorFlow processes (pods)"),
        ("kube-apiserver", "/x/kube-apiserver --etcd-servers=...", "API server"),
        ("kube-router", "/x/kube-router --run-firewall", "kube-router (every node)"),
        ("kubemark", "/x/kubemark --morph=kubelet", "hollow nodes (kubemark)"),
        ("prometheus", "/bin/prometheus --config.file=/etc/x", "Prometheus (and its config "
                                                               "reloader)"),
        ("operator", "/bin/operator --kubelet-service=kube-system/kubelet", "Prometheus Operator"),
        ("bash", "bash -c true", None),
    ],
)  # fmt: skip
def test_component(comm: str, cmdline: str, component: str | None) -> None:
    assert cpusample.component(comm, cmdline) == component


def seen(comm: str, cmdline: str, ppid: int, start: float, **more: object) -> dict[str, object]:
    """A process as the sampler's look records it, started ``start`` s after the boot."""
    return {"comm": comm, "cmdline": cmdline, "ppid": ppid, "start": start * cpusample.TICK,
            "cpu": 0, **more}  # fmt: skip


def test_a_process_that_exited_unseen_is_its_parents_and_lanes_go_by_ancestry() -> None:
    book = cpusample.Book()
    book.add(10, seen("kube-router", "/x/kube-router", 1, 1))
    book.add(20, seen("python", "python -m pytest tests/cluster -n 3", 1, 1))
    book.add(21, seen("python", "python -c import execnet", 20, 2))
    assert book.group(99, "iptables", 10) == "kube-router (every node)"
    assert book.group(98, "kubectl", 21) == "cluster tests: kubectl"
    assert book.group(21) == "cluster tests: pytest, host processes"
    assert book.group(97, "sh", 1) == "other"


def test_a_reused_pid_is_told_apart_by_when_each_process_started() -> None:
    """pids wrap many times in a cold run: the API server, started by a `make cluster`
    whose pid a test's kubectl took later, is still the API server; an exited process's
    record finds its own entry by its start, not the last one under its pid."""
    book = cpusample.Book(boot=1000.0)
    book.add(300, seen("python3", "python3 hack/cluster/cluster.py up", 1, 100))
    book.add(400, seen("kube-apiserver", "/b/kube-apiserver --etcd-servers=x", 300, 110))
    book.add(20, seen("python", "python -m pytest tests/cluster -n 2", 1, 500))
    book.add(300, seen("kubectl", "kubectl get pods", 20, 900))  # pid 300 again
    book.add(77, seen("python", "python -m syncreplicas_runtime", 1, 600, namespace="t-a"))
    book.add(77, seen("compile", "/go/compile -o x", 1, 950))  # pid 77 again
    assert book.group(400, born=1110.0) == "API server"
    assert book.group(400, "kube-apiserver", 300, born=1110.0) == "API server"
    assert book.group(300, "kubectl", 20, born=1900.0) == "cluster tests: kubectl"
    assert book.group(300, "python3", 1, born=1100.0) == "other"  # cluster.py itself
    assert book.group(77, "python", 1, born=1600.5) == cpusample.TF_PODS
    assert book.namespace(77, "python", 1, born=1600.5) == "t-a"
    assert book.namespace(77, "compile", 1, born=1950.0) is None
    # Unseen (between two looks), born after the kubectl: its parent is the kubectl.
    assert book.group(555, "kubectl", 300, born=1901.0) == "cluster tests: kubectl"


def test_the_table_accounts_for_the_whole_machine() -> None:
    text = cpusample.table({"seconds": 600, "machine": 900.0, "accounting": True,
                            "components": {"API server": 300.0, "etcd": 120.0, "tiny": 0.2}})
    lines = text.splitlines()
    assert "busy 15.0 core-min" in lines[0]
    assert [line.split()[0] for line in lines[3:5]] == ["API", "etcd"]
    assert lines[-1].split()[-2:] == ["8.0", "53.3%"]  # 900 - 420.2 s, unaccounted


def test_slowest_reads_junit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite time="90"><testcase classname="tests.cluster.test_a" name="t1" '
        'time="60"/><testcase classname="tests.cluster.test_b" name="t2" time="25">'
        '<failure message="x"/></testcase><testcase classname="c" name="s" time="0">'
        "<skipped/></testcase></testsuite></testsuites>"
    )
    assert slowest.main(["-n", "2", f"cluster={xml}", f"cluster={tmp_path / 'missing.xml'}"]) == 0
    out = capsys.readouterr().out
    assert "1 passed, 1 failed, 1 skipped" in out
    assert out.index("tests.cluster.test_a::t1") < out.index("tests.cluster.test_b::t2  [failed]")
    assert "missing.xml was not written" in out


def test_the_jobs_tensorflow_cpu_is_summed_by_the_namespace_its_pods_ran_in() -> None:
    assert cpusample.namespace_of(b"A=1\0SYNCREPLICAS_NAMESPACE=t-test-x-ab12\0B=2") == (
        "t-test-x-ab12")
    assert cpusample.namespace_of(b"A=1\0") is None
    book = cpusample.Book()
    book.add(7, seen("python", "python -m syncreplicas_runtime", 1, 1, namespace="t-test-x-ab12"))
    assert book.namespace(7, "python") == "t-test-x-ab12"
    assert book.namespace(7, "kubectl") is None  # the pid was reused since
    assert book.namespace(8, "python") is None
    assert book.namespace(8, "python", 7) == "t-test-x-ab12"  # forked and gone unseen
    shares = {f"ns-{i}": 60.0 * (30 - i) for i in range(25)}
    text = cpusample.table({"seconds": 600, "machine": 900.0, "accounting": True,
                            "components": {cpusample.TF_PODS: 600.0}, "namespaces": shares})
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("jobs' TensorFlow "
                                                                    "processes by namespace")))
    assert lines[at + 3].split()[:2] == ["ns-0", "30.0"]
    assert lines[-1].split()[:3] == ["(5", "more)", "40.0"]  # 10 + 9 + 8 + 7 + 6 min


def test_slowest_says_what_the_slowest_cluster_tests_waited_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite time="90"><testcase classname="tests.cluster.test_a" '
        'name="t1[p/q]" time="60"/><testcase classname="tests.cluster.test_b" name="t2" '
        'time="25"/></testsuite></testsuites>'
    )
    waits = tmp_path / "w.tsv"
    waits.write_text("tests/cluster/test_a.py::t1[p/q]@test_a\t30.0\tstep 100\n"
                     "tests/cluster/test_a.py::t1[p/q]@test_a\t12.0\tthe chief's recovery\n"
                     "tests/cluster/test_a.py::t1[p/q]@test_a\t2.0\tpods\n"
                     "tests/cluster/test_a.py::t1[p/q]@test_a\t1.0\tmore\n"
                     "bad line\n")
    assert slowest.main(["--waits", str(waits), f"cluster={xml}"]) == 0
    out = capsys.readouterr().out
    assert "what the slowest 1 of cluster waited for longest" in out
    assert ("30 s step 100; 12 s the chief's recovery; 2 s pods; 1 more waits 1 s; "
            "outside them 15 s") in out
    assert slowest.junit_id("tests/cluster/test_b.py::t2") == "tests.cluster.test_b::t2"


def test_acct_records_read_the_kernels_v3_records(tmp_path: Path) -> None:
    def record(pid: int, ppid: int, btime: int, utime: int, stime: int, comm: bytes) -> bytes:
        head = struct.pack("=BBHIIIIIIfHH", 0, 3, 0, 0, 0, 0, pid, ppid, btime, 0.0, utime, stime)
        return head + bytes(12) + comm.ljust(16, b"\0")

    # 12000 AHZ ticks as comp_t: 1500 << 3 (mantissa 1500, base-8 exponent 1).
    path = tmp_path / "acct.bin"
    path.write_bytes(record(42, 7, 1_700_000_000, (1 << 13) | 1500, 153, b"kube-apiserver")
                     + record(43, 42, 1_700_000_009, 0, 0, b"sleep"))  # fmt: skip
    assert cpusample.acct_records(path) == [
        (42, 7, 121.53, "kube-apiserver", 1_700_000_000.0),
        (43, 42, 0.0, "sleep", 1_700_000_009.0),
    ]


def test_the_builds_processes_are_the_builds_whatever_they_build() -> None:
    """A compile under `go build .../prometheus` is the build's, not Prometheus' (the Go
    command names what it builds); the Prometheus that runs later is Prometheus."""
    book = cpusample.Book()
    book.add(5, seen("build-all.sh", "bash hack/cluster/build-all.sh --status r/b", 1, 1))
    book.add(6, seen("bash", "bash -c build-binaries.sh --go-rest", 5, 2))
    book.add(7, seen("go", "go build -o bin github.com/prometheus/prometheus/cmd/prometheus",
                     6, 3))  # fmt: skip
    book.add(9, seen("prometheus", "/bin/prometheus --config.file=/etc/p.yml", 1, 90))
    assert book.group(8, "compile", 7, born=4.0) == cpusample.BUILD_LANE
    assert book.group(9) == "Prometheus (and its config reloader)"


def test_the_worker_clusters_daemons_are_its_own_when_a_cluster_test_brings_it_up() -> None:
    """test_multikueue.py brings MultiKueue's worker cluster up under the cluster lane's
    pytest: its daemons are the worker cluster's, its kubectl the lane's."""
    book = cpusample.Book()
    book.add(20, seen("python", "python -m pytest tests/cluster -n 3", 1, 1))
    book.add(30, seen("bash", "bash hack/cluster/install-multikueue.sh", 20, 2))
    book.add(31, seen("etcd", "/b/etcd --data-dir /tmp/syncreplicas-worker/etcd", 30, 3))
    book.add(32, seen("kubectl", "kubectl apply -f -", 30, 4))
    assert book.group(31) == cpusample.WORKER_CLUSTER
    assert book.group(32) == "cluster tests: kubectl"


def test_the_table_says_where_the_machine_waited(tmp_path: Path) -> None:
    busytime = load("busytime")
    cores = os.cpu_count() or 1
    # Busy on every core for 2 minutes, then idle for one, then half busy for 30 s.
    timeline = [[t, t * cores] for t in range(0, 121, 3)]
    timeline += [[t, 120.0 * cores] for t in range(123, 181, 3)]
    timeline += [[t, 120.0 * cores + (t - 180) * cores / 2] for t in range(183, 211, 3)]
    timeline.append([210, 120.0 * cores + 15 * cores])
    started = 1_800_000_000.0
    for name, offset, took in (("local", 0.0, 120.0), ("cluster-shared", 120.0, 90.0)):
        stamp = datetime.fromtimestamp(started + offset, UTC).isoformat()
        (tmp_path / f"junit-{name}.xml").write_text(
            f'<testsuites><testsuite time="{took}" timestamp="{stamp}"/></testsuites>')
    (tmp_path / "junit-broken.xml").write_text("<testsuites>")
    spans = busytime.stages(tmp_path, started)
    assert spans == {"local": (0.0, 120.0), "cluster-shared": (120.0, 210.0)}
    lines = busytime.over_time({"timeline": timeline, "stages": spans})
    idle = (210 - 135) * cores / 60
    assert f"({idle:.1f} core-min idle in all)" in lines[1]
    assert lines[3].split()[2:] == ["100%", "100%", "0%", "50%"]  # the last minute's 30 s
    rows = {line.split()[0]: line.split()[1:] for line in lines[6:]}
    assert rows["local"] == ["0.0", "2.0", "100%", "0.0"]
    assert rows["cluster-shared"][2:] == ["17%", f"{(90 - 15) * cores / 60:.1f}"]
    assert busytime.over_time({"timeline": [[0, 0]]}) == []
    # A stage outside the sampler's run is left out; one that began before it, cut.
    spans = {"before": (-100.0, -10.0), "across": (-60.0, 60.0)}
    lines = busytime.over_time({"timeline": timeline, "stages": spans})
    assert [line.split()[:3] for line in lines[6:]] == [["across", "0.0", "1.0"]]
