"""Benchmark the local Kubernetes cluster (`make cluster`) and a job on it against the same
job run by `syncreplicas run`.

1. Cluster: `cluster.py up` from nothing (etcd empty, images already in containerd) until
   the node is Ready, `make cluster` when everything is up (the idempotent no-op), and the
   warm rebuild of the binaries (`build-binaries.sh --force` with the Go build cache warm:
   the link step).
2. A job, side by side: examples/digits.yaml (or --manifest) applied with `kubectl apply`
   on the cluster vs run with `syncreplicas run` on this machine, interleaved, `--repeats`
   each (3). Time from the start (kubectl apply returns / the runner starts) to the chief's
   first step (its own log line, `first step done at unix time T`) and to success (the
   job's Succeeded condition / the runner's exit); the ratio cluster / local per column.
3. The operator's API requests for one job, from the API server's audit log (the cluster
   records every request of the operator's ServiceAccount): by verb and resource, from
   `kubectl apply` to the job's deletion.

    .venv/bin/python bench/cluster.py [--repeats N] [--manifest FILE]

Needs the cluster (`make cluster`) and nothing else running: the job's pods and the local
runner's processes compete for the machine's cores.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.cluster import kube  # noqa: E402

AUDIT_LOG = kube.AUDIT_LOG
FIRST_STEP = re.compile(r"first step done at unix time ([0-9.]+)")
NAMESPACE = "bench"


def timed(argv: list[str], **kw: Any) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO, **kw)
    return time.monotonic() - started


def cluster_times(repeats: int) -> dict[str, list[float]]:
    cluster_py = ["python3", str(kube.CLUSTER_PY)]
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(repeats):
        times["make cluster, already up (no-op)"].append(
            timed(["make", "--no-print-directory", "cluster"]))
        times["build-binaries.sh --force (Go cache warm)"].append(
            timed([str(REPO / "hack/cluster/build-binaries.sh"), "--force"]))
    for _ in range(repeats):
        timed([*cluster_py, "down"])
        times["cluster.py up (node Ready)"].append(timed([*cluster_py, "up"]))
        started = time.monotonic()
        subprocess.run(["make", "--no-print-directory", "cluster"], check=True,
                       capture_output=True, cwd=REPO)  # fmt: skip
        times["cluster.py up + images + chart (make cluster)"].append(
            times["cluster.py up (node Ready)"][-1] + time.monotonic() - started)
    return times


def on_cluster(manifest: dict[str, Any]) -> tuple[float, float, collections.Counter[str]]:
    name = manifest["metadata"]["name"]
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s",
                 timeout=150)  # fmt: skip
    kube.kubectl("create", "namespace", NAMESPACE)
    audit_from = AUDIT_LOG.stat().st_size if AUDIT_LOG.exists() else 0
    started = time.time()
    kube.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(manifest))
    kube.kubectl("wait", "-n", NAMESPACE, f"srj/{name}", "--for=condition=Succeeded",
                 "--timeout=900s", timeout=920)  # fmt: skip
    succeeded = time.time() - started
    log = kube.kubectl("logs", "-n", NAMESPACE, f"{name}-chief-0").stdout
    first = float(FIRST_STEP.search(log).group(1)) - started  # type: ignore[union-attr]
    kube.kubectl("delete", "srj", name, "-n", NAMESPACE, "--timeout=120s", timeout=150)
    time.sleep(5)  # the operator's last status writes and deletions after the job's end
    requests: collections.Counter[str] = collections.Counter()
    with AUDIT_LOG.open() as audit:
        audit.seek(audit_from)
        for line in audit:
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef", {})
            if ref.get("namespace") not in (NAMESPACE, None):
                continue
            resource = ref.get("resource", "?") + (f"/{ref['subresource']}"
                                                   if ref.get("subresource") else "")
            requests[f"{event['verb']} {resource}"] += 1
    return first, succeeded, requests


def locally(path: Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as workdir:
        started = time.time()
        subprocess.run([str(REPO / ".venv/bin/syncreplicas"), "run", str(path), "--plain",
                        "--workdir", workdir, "--fresh"], check=True, capture_output=True)
        done = time.time() - started
        logs = "".join(p.read_text(errors="replace") for p in Path(workdir).rglob("*.log"))
        first = min(float(m) for m in FIRST_STEP.findall(logs)) - started
    return first, done


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--manifest", type=Path, default=REPO / "examples" / "digits.yaml")
    parser.add_argument("--skip-cluster", action="store_true", help="only the job table")
    args = parser.parse_args()
    if not kube.is_up():
        print("bench/cluster.py: the cluster is not up: run `make cluster`", file=sys.stderr)
        return 2
    manifest = yaml.safe_load(args.manifest.read_text())
    manifest["metadata"].pop("namespace", None)

    if not args.skip_cluster:
        times = cluster_times(args.repeats)
        print(f"\n## The cluster (median of {args.repeats})\n")
        print("| step | seconds | runs |")
        print("| --- | --- | --- |")
        for what, values in times.items():
            runs = ", ".join(f"{v:.1f}" for v in values)
            print(f"| {what} | {median(values):.1f} | {runs} |")

    results: dict[str, list[tuple[float, float]]] = {"cluster": [], "local": []}
    requests: list[collections.Counter[str]] = []
    for repeat in range(args.repeats):
        first, done, counted = on_cluster(manifest)
        results["cluster"].append((first, done))
        requests.append(counted)
        results["local"].append(locally(args.manifest))
        print(f"repeat {repeat + 1}: cluster {first:.1f} s / {done:.1f} s, local "
              f"{results['local'][-1][0]:.1f} s / {results['local'][-1][1]:.1f} s",
              file=sys.stderr)  # fmt: skip
    kube.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)

    print(f"\n## {args.manifest.name}: kubectl apply vs syncreplicas run "
          f"(median of {args.repeats}, interleaved)\n")  # fmt: skip
    print("| | to the first global step, s | to success, s |")
    print("| --- | --- | --- |")
    medians = {}
    for system, rows in results.items():
        medians[system] = (median([r[0] for r in rows]), median([r[1] for r in rows]))
        runs = "; ".join(f"{a:.1f}/{b:.1f}" for a, b in rows)
        print(f"| {system} ({runs}) | {medians[system][0]:.1f} | {medians[system][1]:.1f} |")
    print(f"| cluster / local | {medians['cluster'][0] / medians['local'][0]:.2f}x | "
          f"{medians['cluster'][1] / medians['local'][1]:.2f}x |")

    print("\n## The operator's API requests for one job (audit log, median)\n")
    print("| request | count |")
    print("| --- | --- |")
    keys = sorted({k for c in requests for k in c})
    for key in keys:
        print(f"| {key} | {median([c[key] for c in requests]):.0f} |")
    print(f"| all | {median([sum(c.values()) for c in requests]):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
