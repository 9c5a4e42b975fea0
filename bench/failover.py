"""Benchmark: how long no operator acts when its pod or node is lost, or during an upgrade,
with the chart's two replicas (leader election) and with one replica (no election).

    make cluster NODES=4 && .venv/bin/python bench/operator.py --cluster --failover
    .venv/bin/python bench/failover.py --repeats 5 --one-crash-repeats 1

Events, each on the acting replica:

    delete   its pod deleted (`kubectl delete pod`: SIGTERM, 30 s grace)
    crash    its node crashed (hack/cluster `cluster.py node NAME crash`; `start` after)
    upgrade  `helm upgrade` to another operator image (two tags of the same image, loaded
             by images.sh --operator-tag, alternating), waited for

Systems, switched by a helm upgrade:

    two  the chart's defaults: 2 replicas, one acting through the Lease (15 s lease, 10 s
         renew deadline, 2 s retry), released at SIGTERM; RollingUpdate (surge 1)
    one  1 replica, --leader-elect=off, strategy Recreate (the chart before election)

Per cell: seconds without an acting replica (no operator pod whose /metrics says
syncreplicas_operator_leader 1, sampled every 0.2 s through the API server's proxy: the
longest such stretch from the event until the rollout is done and one acts), and the
seconds until the pods of a job applied at the event exist (the operator acted on it; for
the upgrade, a job applied when the rollout began). Each repeat runs every event under
one system, then under the other, the order alternating. A crash under `one` waits out
Kubernetes' eviction of the dead pod (about 6 min): --one-crash-repeats runs fewer of
those. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import ssl
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import kube

EVENTS = ("delete", "crash", "upgrade")
SYSTEMS = ("two", "one")
NAMESPACE = "bench-failover"
JOB = "probe"
TAGS = ("0.1.1-a", "0.1.1-b")
REPO = "ghcr.io/syncreplicas/syncreplicas-operator"
SETTINGS = {
    "two": ["operator.replicas=2", "operator.leaderElection.enabled=true"],
    "one": ["operator.replicas=1", "operator.leaderElection.enabled=false"],
}


@dataclass
class Cell:
    system: str
    event: str
    repeat: int
    leaderless: float | None = None
    job_pods: float | None = None
    note: str = ""


PKI = kube.node.RUN / "pki"


def api_context() -> ssl.SSLContext:
    """TLS to the API server as the cluster's admin (no kubectl process per request: the
    watch samples every 0.2 s)."""
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    return context


def acting_pods(context: ssl.SSLContext | None = None) -> list[str]:
    """Operator pods whose /metrics say they act (the gauge at 1: their controllers run)."""
    context = context or api_context()
    base = f"{kube.node.APISERVER}/api/v1/namespaces/{kube.RELEASE_NAMESPACE}/pods"
    acting: list[str] = []
    try:
        with urllib.request.urlopen(f"{base}?labelSelector={kube.OPERATOR_PODS}",
                                    context=context, timeout=2) as resp:  # fmt: skip
            items = json.load(resp)["items"]
    except OSError:
        return acting
    for item in items:
        name = item["metadata"]["name"]
        if item["status"].get("phase") != "Running":
            continue
        try:
            with urllib.request.urlopen(f"{base}/{name}:9090/proxy/metrics", context=context,
                                        timeout=1) as resp:  # fmt: skip
                text = resp.read().decode()
        except OSError:
            continue
        if "\nsyncreplicas_operator_leader 1.0" in text:
            acting.append(name)
    return acting


class ActingWatch:
    """Whether some operator replica acts, sampled every 0.2 s in a thread."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._context = api_context()

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            self.samples.append((at, bool(acting_pods(self._context))))
            self._stop.wait(max(0.0, 0.2 - (time.monotonic() - at)))

    def __enter__(self) -> ActingWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def longest_gap(self, since: float) -> float:
        """The longest stretch after ``since`` with no replica acting (from the last sample
        that saw one, or ``since``, to the next that did)."""
        longest, last_acting, gap = 0.0, since, False
        for at, ok in self.samples:
            if at < since:
                continue
            if ok:
                if gap:
                    longest = max(longest, at - last_acting)
                last_acting, gap = at, False
            else:
                gap = True
        return longest


def probe_job() -> str:
    manifest = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    manifest["metadata"]["name"] = JOB
    manifest["spec"].update({"workers": 1, "replicasToAggregate": 1, "parameterServers": 1})
    return str(yaml.safe_dump(manifest))


def helm_set(*sets: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    kube.helm("upgrade", kube.RELEASE, str(kube.CHART), "-n", kube.RELEASE_NAMESPACE,
              "--reuse-values", *args, "--wait", "--timeout", "10m", timeout=700)  # fmt: skip
    kube.kubectl("rollout", "status", "deployment/syncreplicas-operator", "-n",
                 kube.RELEASE_NAMESPACE, "--timeout=600s", timeout=620)  # fmt: skip


def switch(system: str, *sets: str) -> None:
    """Run the operator as ``system``. To two replicas, the old one is stopped first: it
    does not elect, so it would act beside the new leader during a rolling update (what a
    user upgrading from a release without election does too: README)."""
    if system == "two":
        kube.kubectl("scale", "deployment/syncreplicas-operator", "--replicas=0", "-n",
                     kube.RELEASE_NAMESPACE)  # fmt: skip
        kube.eventually("no operator pod", lambda: not kube.pods(
            kube.RELEASE_NAMESPACE, kube.OPERATOR_PODS), 120)  # fmt: skip
    helm_set(*SETTINGS[system], *sets)


def settled(system: str) -> None:
    """Every replica of ``system`` Ready, one acting, every node Ready."""
    want = 2 if system == "two" else 1

    def ready() -> bool:
        dep = kube.kubectl_json("get", "deployment", "syncreplicas-operator", "-n",
                                kube.RELEASE_NAMESPACE)  # fmt: skip
        nodes = kube.kubectl_json("get", "nodes")["items"]
        return (dep["status"].get("readyReplicas") == want
                and dep["status"].get("updatedReplicas") == want
                and dep["status"].get("replicas") == want
                and all(kube.condition(n, "Ready")["status"] == "True" for n in nodes)  # type: ignore[index]
                and len(acting_pods()) == 1)  # fmt: skip

    kube.eventually(f"the operator settled ({system})", ready, 600, interval=2)


def acting_node() -> tuple[str, str]:
    (pod,) = kube.eventually("one acting replica", acting_pods, 60)
    return pod, str(kube.kubectl_json("get", "pod", pod, "-n", kube.RELEASE_NAMESPACE)[
        "spec"]["nodeName"])  # fmt: skip


def run_cell(system: str, event: str, repeat: int, tag: str, timeout: float) -> Cell:
    cell = Cell(system, event, repeat)
    settled(system)
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=180s",
                 timeout=200)  # fmt: skip
    kube.kubectl("create", "namespace", NAMESPACE)
    pod, node = acting_node()
    crashed = ""
    upgrade: threading.Thread | None = None
    try:
        with ActingWatch() as watch:
            time.sleep(1.5)
            at = time.monotonic()
            if event == "delete":
                kube.kubectl("delete", "pod", pod, "-n", kube.RELEASE_NAMESPACE, "--wait=false")
            elif event == "crash":
                kube.node_fault(node, "crash")
                crashed = node
            else:
                upgrade = threading.Thread(target=helm_set, args=(f"image.tag={tag}",))
                upgrade.start()
            kube.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=probe_job())
            deadline = at + timeout
            while time.monotonic() < deadline:
                if cell.job_pods is None and len(kube.pods(
                        NAMESPACE, f"syncreplicas.io/job-name={JOB}")) == 3:  # fmt: skip
                    cell.job_pods = time.monotonic() - at
                rolled = upgrade is None or not upgrade.is_alive()
                # Done once a replica other than the one hit acts (the hit one, for a crash
                # under `one`, is gone with its node), or, for the upgrade, once it rolled.
                others = [p for p in acting_pods() if p != pod]
                if cell.job_pods is not None and rolled and (others or event == "upgrade"):
                    break
                time.sleep(1)
            else:
                cell.note = f"not recovered within {timeout:.0f} s"
            if upgrade is not None:
                upgrade.join()
            time.sleep(1)
            cell.leaderless = watch.longest_gap(at)
    except AssertionError as error:
        cell.note = f"failed: {str(error).splitlines()[0][:120]}"
    finally:
        if crashed:
            kube.node_fault(crashed, "start", check=False)
        kube.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    print(f"  {system:3} {event:8} #{repeat}: without an acting replica {fmt(cell.leaderless)} s, "
          f"a job's pods after {fmt(cell.job_pods)} s {cell.note}", flush=True)
    return cell


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def column(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    missing = f", {len(values) - len(known)} n/a" if len(known) < len(values) else ""
    return f"{statistics.median(known):.1f} (max {max(known):.1f}{missing})"


def table(cells: list[Cell]) -> str:
    lines = ["| event | operator | repeats | without an acting replica, s "
             "| a job applied at the event has its pods after, s |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for event in EVENTS:
        for system in SYSTEMS:
            mine = [c for c in cells if c.event == event and c.system == system]
            if mine:
                lines.append(f"| {event} | {system} | {len(mine)} | "
                             f"{column([c.leaderless for c in mine])} | "
                             f"{column([c.job_pods for c in mine])} |")  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--one-crash-repeats", type=int, default=1,
                   help="repeats of the crash under one replica (each about 6 min)")
    p.add_argument("--only", choices=EVENTS, action="append", help="events (repeatable)")
    p.add_argument("--systems", default="two,one", help="comma-separated: two, one")
    p.add_argument("--timeout", type=float, default=600.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    events = opts.only or list(EVENTS)
    systems = [s for s in opts.systems.split(",") if s]
    if not kube.is_up():
        print("bench/failover.py: the cluster is not up: run `make cluster`", file=sys.stderr)
        return 1
    started = datetime.datetime.now(datetime.UTC)
    print(f"# bench/failover.py {' '.join(argv or sys.argv[1:])}  ({started:%Y-%m-%d %H:%M} "
          f"UTC): {opts.repeats} repeats of {', '.join(events)} x {', '.join(systems)}",
          flush=True)  # fmt: skip
    for tag in TAGS:
        kube.run(str(kube.REPO / "hack" / "cluster" / "images.sh"), "--operator-tag", tag,
                 timeout=900)  # fmt: skip
    cells: list[Cell] = []
    current: str | None = None
    upgrades = 0
    try:
        for repeat in range(1, opts.repeats + 1):
            order = systems if repeat % 2 else systems[::-1]
            for system in order:
                if system != current:
                    switch(system)
                    current = system
                for event in events:
                    if event == "crash" and system == "one" and repeat > opts.one_crash_repeats:
                        continue
                    upgrades += event == "upgrade"
                    cells.append(run_cell(system, event, repeat, TAGS[upgrades % 2], opts.timeout))
    finally:
        if current != "two":
            switch("two", "image.tag=")
        else:
            helm_set("image.tag=")
    print()
    print(table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
