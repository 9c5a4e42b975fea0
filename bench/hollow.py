"""What kubemark hollow nodes cost on the cluster of `make cluster` (needs it up).

For each N (`--counts`, default 5, 20, 50): from no hollow node, `cluster.py hollow N`
until all N are Ready (the time is the command's own, wall clock); the memory of each
hollow node's one process idle, `--settle` s after Ready; then with `--pods` pods on each
(one Deployment of N x pods pause pods that select and tolerate the hollow nodes, none on
a real node) `--settle` s after every pod is Running, and the API server's and etcd's RSS
beside it. Per process: VmRSS and RssAnon (/proc/<pid>/status) and PSS
(/proc/<pid>/smaps_rollup). VmRSS counts the kubemark binary's mapped pages (~60 MiB)
in full in every process, although all the hollow nodes share them; RssAnon is what each
one adds, PSS that plus its share of the binary. Memory is the median over the hollow
nodes of each sample, then the median of `--samples` samples (3, `--interval` s apart);
the spread of VmRSS over the nodes is printed as min-max. The pods are deleted and the
hollow nodes removed after each N; the hollow count that ran before is restored at the end.

    .venv/bin/python bench/hollow.py [--counts 5,20,50] [--pods 100] [--samples 3]

The hollow nodes share the machine's cores with the control plane: on 2 cores, 50 of them
with 100 pods each (5,000 pods) take several minutes to start and settle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.cluster import kube  # noqa: E402

NAMESPACE = "bench-hollow"
LABEL = kube.node.hollow.LABEL
TOLERATION = {"key": LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
PAUSE = f"registry.k8s.io/pause:{kube.node.VERSIONS['PAUSE_VERSION']}"


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and PSS of one process, MiB."""
    found = {}
    for path, keys in ((f"/proc/{pid}/status", ("VmRSS", "RssAnon")),
                       (f"/proc/{pid}/smaps_rollup", ("Pss",))):  # fmt: skip
        for line in Path(path).read_text().splitlines():
            key = line.split(":")[0]
            if key in keys:
                found[key] = int(line.split()[1]) / 1024
    return found


def hollow_pids() -> list[int]:
    pids = [kube.node.running_pid(h.process) for h in kube.node.hollow.current()]
    if not all(pids):
        raise RuntimeError("a hollow node's process is not running")
    return [p for p in pids if p]


def control_plane_pid(name: str) -> int:
    return int((kube.node.RUN / "pids" / f"{name}.pid").read_text())


def sample(samples: int, interval: float) -> dict[str, Any]:
    """Per sample the median over the hollow nodes (and VmRSS's min and max); the medians
    of all samples."""
    series: dict[str, list[float]] = {}
    for i in range(samples):
        if i:
            time.sleep(interval)
        nodes = [memory_mib(p) for p in hollow_pids()]
        rss = [n["VmRSS"] for n in nodes]
        values = {
            "rss": statistics.median(rss),
            "anon": statistics.median(n["RssAnon"] for n in nodes),
            "pss": statistics.median(n["Pss"] for n in nodes),
            "min": min(rss),
            "max": max(rss),
            "apiserver": memory_mib(control_plane_pid("kube-apiserver"))["VmRSS"],
            "etcd": memory_mib(control_plane_pid("etcd"))["VmRSS"],
        }
        for key, value in values.items():
            series.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in series.items()}


def deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": "hollow-load"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "hollow-load", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {LABEL: "true"},
                    "tolerations": [TOLERATION],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": PAUSE}],
                },
            },
        },
    }


def running_pods() -> int:
    out = kube.kubectl("get", "pods", "-n", NAMESPACE, "--field-selector=status.phase=Running",
                       "-o", "name", timeout=300).stdout  # fmt: skip
    return len(out.split())


def load(count: int, per_node: int, timeout: float) -> float:
    """N x per_node pods on the hollow nodes, waited for until all are Running; seconds."""
    started = time.monotonic()
    kube.kubectl("create", "namespace", NAMESPACE, check=False)
    kube.kubectl("apply", "-f", "-", input=json.dumps(deployment(count * per_node)))
    total = count * per_node
    while (done := running_pods()) < total:
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{done} of {total} pods Running after {timeout:.0f} s")
        time.sleep(5)
    return time.monotonic() - started


def unload() -> None:
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=600s",
                 timeout=660)  # fmt: skip


def measure(count: int, args: argparse.Namespace) -> dict[str, Any]:
    kube.cluster("hollow", "0", timeout=600)
    started = time.monotonic()
    kube.cluster("hollow", str(count), timeout=600)
    ready = time.monotonic() - started
    print(f"N={count}: Ready in {ready:.1f} s; idle for {args.settle:.0f} s", flush=True)
    time.sleep(args.settle)
    idle = sample(args.samples, args.interval)
    print(f"N={count}: idle {idle['rss']:.1f} MiB RSS ({idle['anon']:.1f} anonymous) per "
          f"hollow node; {args.pods} pods each", flush=True)  # fmt: skip
    loaded_in = load(count, args.pods, timeout=120 + 6 * count * args.pods / 10)
    print(f"N={count}: {count * args.pods} pods Running in {loaded_in:.0f} s", flush=True)
    time.sleep(args.settle)
    loaded = sample(args.samples, args.interval)
    unload()
    kube.cluster("hollow", "0", timeout=600)
    return {"count": count, "ready": ready, "idle": idle, "loaded": loaded,
            "loaded_in": loaded_in}  # fmt: skip


def table(rows: list[dict[str, Any]], pods: int, samples: int) -> None:
    print(f"\n## Hollow nodes: memory per kubemark process (MiB, median of {samples} samples)\n")
    print(f"| N | Ready, s | idle RSS (min-max) | idle anon | idle PSS | {pods} pods each: RSS "
          "(min-max) | anon | PSS | pods Running, s | kube-apiserver RSS idle / loaded "
          "| etcd RSS idle / loaded |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        i, lo = r["idle"], r["loaded"]
        cells = [
            f"{r['count']}", f"{r['ready']:.1f}",
            f"{i['rss']:.0f} ({i['min']:.0f}-{i['max']:.0f})",
            f"{i['anon']:.0f}", f"{i['pss']:.0f}",
            f"{lo['rss']:.0f} ({lo['min']:.0f}-{lo['max']:.0f})",
            f"{lo['anon']:.0f}", f"{lo['pss']:.0f}",
            f"{r['loaded_in']:.0f}",
            f"{i['apiserver']:.0f} / {lo['apiserver']:.0f}", f"{i['etcd']:.0f} / {lo['etcd']:.0f}",
        ]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="5,20,50")
    parser.add_argument("--pods", type=int, default=100, help="pods per hollow node")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds to wait before sampling")  # fmt: skip
    args = parser.parse_args()
    if not kube.is_up():
        print("bench/hollow.py: the cluster is not up: run `make cluster`", file=sys.stderr)
        return 1
    before = len(kube.node.hollow.current())
    rows = []
    try:
        for count in (int(c) for c in args.counts.split(",")):
            rows.append(measure(count, args))
    finally:
        unload()
        kube.cluster("hollow", str(before), timeout=600)
    table(rows, args.pods, args.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
