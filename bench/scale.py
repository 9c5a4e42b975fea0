"""The operator at scale on the real control plane (`bench/operator.py --cluster`): jobs of
hundreds of workers whose pods land on kubemark hollow nodes (a real kubelet with a fake
container runtime: `cluster.py hollow N`), side by side with the same scenarios on kmock.

Scenarios (``--quick``: 10x smaller), each repeat interleaved cluster, kmock:
1. one job of 1000 workers;
2. the same job with `runPolicy.spares: 1`, so a headless Service per replica instead of
   the job's one (cluster only; its spare pod comes once every replica runs, after what is
   timed): the two addressings side by side;
3. 100 jobs of 10 workers;
4. 10 elastic jobs of 100 workers, resized 100 -> 200 -> 50 with `kubectl scale` once all
   their pods run (cluster only: kmock has no kubelet, so no pod ever runs there).

Per scenario on the cluster: seconds from `kubectl create` to every child created (the
API server's time of the operator's last create, from the audit log) and to every pod
Running (the last container's start as the hollow kubelets report it, 1 s resolution;
polling a thousand pods with kubectl took seconds under this load, so polls only gate),
the job's status lag (from the last
pod Running to the status saying every replica runs), pod startup latency (creation to
running, per pod: p50 and p99), the operator's API requests by verb and resource from the
audit log (and any 409, 429 or 5xx), its peak RSS and CPU seconds (its own process
metrics), the watch events it received (its counter), and the API server's p99 latency of
mutating calls over the scenario (its request-duration histogram). Kubernetes' SLOs for
comparison: mutating API calls p99 <= 1 s, pod startup p99 <= 5 s.

    .venv/bin/python bench/operator.py --cluster [--quick] [--repeats N]

Needs `make cluster` with the chart's operator and enough hollow nodes for the largest
scenario (250 pods each: `python3 hack/cluster/cluster.py hollow 9` holds the 2020 pods of
10 jobs resized to 200 workers), and nothing else running.
"""

from __future__ import annotations

import collections
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.cluster import kube  # noqa: E402
from tests.cluster.scalelib import HOLLOW, hollow_job, operator_requests, tally  # noqa: E402

NAMESPACE = "bench-scale"
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class Scenario:
    name: str
    jobs: int
    workers: int
    resizes: tuple[int, ...] = ()
    spares: int = 0

    @property
    def pods(self) -> int:
        return self.jobs * (2 + max((self.workers, *self.resizes)))


# The names --only takes, in the order scenarios() returns them.
SCENARIO_KEYS = ("one-large", "one-large-per-replica", "many-small", "resize")


def scenarios(scale: int) -> list[Scenario]:
    return [
        Scenario(f"1 job x {1000 // scale} workers", 1, 1000 // scale),
        Scenario(f"1 job x {1000 // scale} workers, a Service per replica (spares: 1)", 1,
                 1000 // scale, spares=1),
        Scenario(f"{100 // scale} jobs x 10 workers", 100 // scale, 10),
        Scenario(f"{10 // scale} jobs x {100 // scale} workers, resized "
                 f"{100 // scale} -> {200 // scale} -> {50 // scale}", 10 // scale,
                 100 // scale, (200 // scale, 50 // scale)),
    ]


# --- what the cluster says ---------------------------------------------------------------


def hollow_capacity() -> int:
    nodes = kube.kubectl_json("get", "nodes", "-l", f"{HOLLOW}=true")["items"]
    return sum(int(n["status"].get("allocatable", {}).get("pods", 0)) for n in nodes
               if (kube.condition(n, "Ready") or {}).get("status") == "True")


def pod_phases() -> collections.Counter[str]:
    """Pods of the namespace by phase (the server's table: light at 1000 pods)."""
    out = kube.kubectl("get", "pods", "-n", NAMESPACE, "--no-headers", check=False).stdout
    return collections.Counter(line.split()[2] for line in out.splitlines() if line.strip())


def services() -> int:
    out = kube.kubectl("get", "services", "-n", NAMESPACE, "--no-headers", check=False).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def all_replicas_said(jobs: int, replicas: int) -> bool:
    """Every job's status says all its replicas run (the Running condition's message)."""
    items = kube.kubectl_json("get", "srj", "-n", NAMESPACE)["items"]
    said = [kube.condition(j, "Running") for j in items]
    return len(items) == jobs and all(
        c and f"{replicas} of {replicas} replicas running" in c.get("message", "") for c in said)


def operator_process() -> dict[str, float]:
    """The acting operator replica's process metrics (RSS bytes, CPU seconds), watch events."""
    pod = kube.leader_pod()
    text = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{kube.RELEASE_NAMESPACE}/pods/"
                        f"{pod}:9090/proxy/metrics", check=False).stdout  # fmt: skip
    out: dict[str, float] = {"watch": 0.0}
    for line in text.splitlines():
        if line.startswith("process_resident_memory_bytes "):
            out["rss"] = float(line.split()[1])
        elif line.startswith("process_cpu_seconds_total "):
            out["cpu"] = float(line.split()[1])
        elif line.startswith("syncreplicas_operator_watch_events_total{"):
            out["watch"] += float(line.split()[-1])
    return out


LATENCY = re.compile(r'^apiserver_request_duration_seconds_bucket\{(.*)\} (\S+)$', re.M)


def mutating_buckets() -> dict[float, float]:
    """The API server's request-duration histogram of mutating calls (every resource), by
    upper bound."""
    text = kube.kubectl("get", "--raw", "/metrics").stdout
    out: dict[float, float] = collections.defaultdict(float)
    for labels, value in LATENCY.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("verb") in MUTATING:
            out[float(fields["le"])] += float(value)
    return dict(out)


def quantile(buckets: dict[float, float], q: float) -> float:
    """Prometheus' histogram_quantile over cumulative buckets (linear within a bucket)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(buckets[bound] - below, 1e-9)
        lower, below = bound, buckets[bound]
    return lower


# Processes of this machine by what they are (every node's daemons run here): (group, what
# /proc/<pid>/comm is, or a piece of its command line).
COMPONENTS = (
    ("API server", "kube-apiserver"), ("etcd", "etcd"),
    ("controller-manager", "kube-controller"), ("scheduler", "kube-scheduler"),
    ("kube-router (4 nodes)", "kube-router"), ("hollow nodes", "--morph="),
    ("kubelets, containerd", "kubelet"), ("kubelets, containerd", "containerd"),
    ("operator", "syncreplicas"), ("Kueue", "manager"), ("CoreDNS", "coredns"),
)  # fmt: skip


def cpu_by_component() -> collections.Counter[str]:
    """CPU seconds so far of this machine's processes, summed by COMPONENTS (others:
    "other")."""
    out: collections.Counter[str] = collections.Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            raw = (proc / "cmdline").read_bytes()[:300]
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        group = next((g for g, key in COMPONENTS if comm == key or key in cmdline), "other")
        out[group] += (int(fields[11]) + int(fields[12])) / tick
    return out


def pod_starts() -> list[tuple[float, float]]:
    """Per replica pod (not a spare): its creation and its container's start, unix time
    (1 s resolution)."""
    out = []
    for pod in kube.kubectl_json("get", "pods", "-n", NAMESPACE)["items"]:
        if "-spare-" in pod["metadata"]["name"]:
            continue
        for status in pod.get("status", {}).get("containerStatuses", []):
            started = status.get("state", {}).get("running", {}).get("startedAt")
            if started:
                out.append((parse(pod["metadata"]["creationTimestamp"]), parse(started)))
    return out


def last_child_created(events: list[dict[str, Any]]) -> float:
    """Unix time at which the API server answered the operator's last create of a replica's
    pod or a Service (audit events)."""
    return max(parse(e["stageTimestamp"]) for e in events
               if e.get("verb") == "create"
               and (e.get("objectRef") or {}).get("resource") in ("pods", "services")
               and "-spare-" not in (e.get("objectRef") or {}).get("name", ""))  # fmt: skip


def parse(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --- one scenario on the cluster ---------------------------------------------------------


@dataclass
class Run:
    scenario: Scenario
    to_children: float = float("nan")
    to_running: float = float("nan")
    status_lag: float = float("nan")
    resizes: list[float] = field(default_factory=list)  # s to every pod running again
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[int] = field(default_factory=collections.Counter)
    peak_rss_mb: float = 0.0
    cpu_seconds: float = 0.0
    watch_events: float = 0.0
    mutating_p99: float = float("nan")
    startup: list[float] = field(default_factory=list)
    # CPU seconds by component from `kubectl create` to every pod Running.
    cpu_by: collections.Counter[str] = field(default_factory=collections.Counter)


def wait(what: str, check: Callable[[], bool], timeout: float, sample: Callable[[], None],
         started: float | None = None) -> float:  # fmt: skip
    """Poll ``check`` every 0.5 s (``sample`` too); seconds from ``started`` (default: now)
    until it held."""
    started = time.monotonic() if started is None else started
    while True:
        sample()
        if check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def on_cluster(s: Scenario, timeout: float = 900) -> Run:
    run = Run(s)
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=600s",
                 timeout=620)  # fmt: skip
    kube.kubectl("create", "namespace", NAMESPACE)
    names = [f"scale-{i}" for i in range(s.jobs)]
    max_workers = max(s.resizes) if s.resizes else None
    before = operator_process()
    latency_before = mutating_buckets()
    offset = kube.AUDIT_LOG.stat().st_size
    peak = [before.get("rss", 0.0)]

    def sample() -> None:
        peak.append(operator_process().get("rss", 0.0))

    started, wall = time.monotonic(), time.time()
    cpu_before = cpu_by_component()
    # One request per job (a client-side apply reads each first); the API server is busy
    # with the first jobs' children meanwhile: 100 jobs took over 2 minutes.
    kube.kubectl("create", "-f", "-", input=yaml.safe_dump_all(
        [hollow_job(n, NAMESPACE, s.workers, max_workers, s.spares) for n in names]),
        timeout=timeout)  # fmt: skip
    pods = s.jobs * (2 + s.workers)  # and a spare per job, once every replica runs
    wait("every child", lambda: sum(pod_phases().values()) >= pods
         and services() >= s.jobs, timeout, sample, started)  # fmt: skip
    wait("every pod Running", lambda: pod_phases().get("Running", 0) >= pods,
         timeout, sample, started)  # fmt: skip
    run.cpu_by = cpu_by_component()
    run.cpu_by.subtract(cpu_before)
    run.status_lag = wait("the status says so",
                          lambda: all_replicas_said(s.jobs, 1 + s.workers), 120, sample)
    starts = pod_starts()
    run.startup = [up - made for made, up in starts]
    run.to_running = max(up for _, up in starts) - wall
    run.to_children = last_child_created(operator_requests(offset, NAMESPACE)) - wall
    for workers in s.resizes:
        t0 = time.monotonic()
        for name in names:
            kube.kubectl("scale", "srj", name, "-n", NAMESPACE, f"--replicas={workers}")
        count = s.jobs * (2 + workers)
        run.resizes.append(time.monotonic() - t0 + wait(
            f"{workers} workers a job", lambda c=count: pod_phases() == {"Running": c},  # type: ignore[misc]
            timeout, sample))
    time.sleep(3)  # the status writes that follow the last event
    after = operator_process()
    run.peak_rss_mb = max(peak) / 2**20
    run.cpu_seconds = after.get("cpu", 0.0) - before.get("cpu", 0.0)
    run.watch_events = after["watch"] - before["watch"]
    latency_after = mutating_buckets()
    run.mutating_p99 = quantile({b: latency_after[b] - latency_before.get(b, 0.0)
                                 for b in latency_after}, 0.99)  # fmt: skip
    run.requests, failed = tally(operator_requests(offset, NAMESPACE))
    run.errors.update(code for _, _, code in failed)
    kube.kubectl("delete", "namespace", NAMESPACE, "--timeout=600s", timeout=620)
    return run


# --- the tables --------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def writes(requests: collections.Counter[str]) -> int:
    return sum(n for k, n in requests.items() if k.split()[0] in
               ("create", "update", "patch", "delete", "deletecollection"))  # fmt: skip


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def side_by_side(cluster: list[list[Run]], kmock: list[list[Any]]) -> str:
    """One row per scenario and system: medians over the repeats (max in brackets), counts
    from the last repeat."""
    header = ["scenario", "system", "s to all children", "s to all Running", "status lag s",
              "resize s", "writes/job", "errors", "operator peak RSS MB", "operator CPU s",
              "watch events/job", "mutating p99 ms", "pod startup p50/p99 s"]  # fmt: skip
    rows = []
    for runs, kms in zip(cluster, kmock, strict=True):
        last = runs[-1]
        s = last.scenario
        spread = lambda xs: f"{median(xs):.1f} ({max(xs):.1f})"  # noqa: E731
        resize = " / ".join(f"{median([r.resizes[i] for r in runs]):.1f}"
                            for i in range(len(s.resizes))) or "-"  # fmt: skip
        startup = [x for r in runs for x in r.startup]
        rows.append([s.name, "real control plane", spread([r.to_children for r in runs]),
                     spread([r.to_running for r in runs]), spread([r.status_lag for r in runs]),
                     resize, f"{writes(last.requests) / s.jobs:g}",
                     str(dict(last.errors) or 0), f"{max(r.peak_rss_mb for r in runs):.0f}",
                     f"{median([r.cpu_seconds for r in runs]):.1f}",
                     f"{last.watch_events / s.jobs:g}",
                     f"{median([r.mutating_p99 for r in runs]) * 1000:.0f}",
                     f"{p(startup, 0.5):.0f} / {p(startup, 0.99):.0f}"])  # fmt: skip
        if kms:
            k = kms[-1]
            rows.append([s.name, "kmock", spread([x.seconds_to_children for x in kms]), "-", "-",
                         "-", f"{sum(k.writes_per_job.values()):g}", "-", f"{k.rss_mb:.0f}",
                         "-", "-", "-", "-"])  # fmt: skip
    return table(header, rows)


def cpu_table(cluster: list[list[Run]]) -> str:
    """CPU seconds by component from `kubectl create` to every pod Running (median over the
    repeats), and each one's share of the machine's."""
    groups = sorted({g for runs in cluster for r in runs for g in r.cpu_by})
    header = ["component", *[runs[-1].scenario.name for runs in cluster]]
    totals = [median([sum(r.cpu_by.values()) for r in runs]) for runs in cluster]
    rows = []
    for group in groups:
        row = [group]
        for runs, total in zip(cluster, totals, strict=True):
            mine = median([r.cpu_by.get(group, 0.0) for r in runs])
            row.append(f"{mine:.1f} ({100 * mine / total:.0f}%)" if total else "-")
        rows.append(row)
    return table(header, rows)


def requests_table(cluster: list[list[Run]]) -> str:
    """The operator's requests per job by verb and resource (last repeat of each)."""
    kinds = sorted({k for runs in cluster for k in runs[-1].requests})
    header = ["request", *[runs[-1].scenario.name for runs in cluster]]
    rows = [[k, *[f"{runs[-1].requests.get(k, 0) / runs[-1].scenario.jobs:g}"
                  for runs in cluster]] for k in kinds]  # fmt: skip
    return table(header, rows)


SLOS = """\
Kubernetes' SLOs (sig-scalability): mutating API calls p99 <= 1 s (the column is every
mutating call the API server served meanwhile, the operator's and the kubelets' and the
scheduler's); pod startup p99 <= 5 s (creation to running, 1 s resolution; a hollow
kubelet starts a container at once, so what remains is scheduling, the kubelet's own
loop and the API server)."""


def main(argv: list[str], kmock_run: Callable[[int, int], Any]) -> int:
    """``kmock_run(jobs, workers)``: bench/operator.py's kmock scenario (a Result)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller, one repeat")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--only", choices=SCENARIO_KEYS, action="append",
                        help="scenarios (repeatable; default all three)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    chosen = [s for key, s in zip(SCENARIO_KEYS, scenarios(10 if args.quick else 1), strict=True)
              if not args.only or key in args.only]  # fmt: skip
    need = max(s.pods for s in chosen)
    if hollow_capacity() < need:
        print(f"bench/scale.py: the hollow nodes hold {hollow_capacity()} pods, the largest "
              f"scenario needs {need}: python3 hack/cluster/cluster.py hollow N",
              file=sys.stderr)  # fmt: skip
        return 2
    cluster: list[list[Run]] = [[] for _ in chosen]
    kmock: list[list[Any]] = [[] for _ in chosen]
    for _ in range(repeats):
        for i, s in enumerate(chosen):  # interleaved: the machine's drift hits both alike
            cluster[i].append(on_cluster(s))
            r = cluster[i][-1]
            print(f"  {s.name}, real: children {r.to_children:.1f}s, running "
                  f"{r.to_running:.1f}s, status lag {r.status_lag:.1f}s, writes/job "
                  f"{writes(r.requests) / s.jobs:g}, errors {dict(r.errors) or 0}, mutating p99 "
                  f"{r.mutating_p99 * 1000:.0f} ms, CPU {r.cpu_seconds:.1f}s, "
                  f"requests {dict(r.requests)}, CPU by component "
                  f"{ {k: round(v, 1) for k, v in r.cpu_by.most_common()} }",
                  flush=True)  # fmt: skip
            if not s.resizes and not s.spares:
                kmock[i].append(kmock_run(s.jobs, s.workers))
                print(f"  {s.name}, kmock: children "
                      f"{kmock[i][-1].seconds_to_children:.1f}s", flush=True)  # fmt: skip
    print()
    print(side_by_side(cluster, kmock))
    print()
    print(requests_table(cluster))
    print()
    print(cpu_table(cluster))
    print()
    print(SLOS)
    return 0
