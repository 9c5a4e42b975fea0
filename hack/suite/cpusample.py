#!/usr/bin/env python3
"""Where the test suite's CPU goes: every process of this machine, by component.

    cpusample.py start DIR     # in the background: samples until `stop`
    cpusample.py stop DIR      # ends it; DIR/cpu.json and DIR/cpu.txt (the table)
    cpusample.py table DIR     # prints DIR/cpu.txt again

Two sources, so that nothing is missed: the kernel's process accounting (acct(2), as root)
writes a record with the CPU time of every process that exits, the shortest `kubectl get`
included; and a look at /proc every few seconds learns each living process's command
line and parent, to name its component, and at the end the CPU of the ones still running.
Processes alive at the start count only what they use after it. What a process is comes
from its command line, or from its ancestors: every process under the pytest of the
cluster's tests is that lane's (by its command: kubectl, helm, Chromium, the rest), every
one under the other pytest is the local lane's; a process that exited unseen is its
parent's component (iptables under kube-router is kube-router's). The machine's own total
(/proc/stat) is the check: what no process accounts for is shown as such. The jobs'
TensorFlow processes are also summed by the namespace their pod runs in (its
SYNCREPLICAS_NAMESPACE; a cluster test's namespace is named after the test), so the table
says which tests' jobs cost the most.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys
import time
from pathlib import Path

TF_PODS = "jobs' TensorFlow processes (pods)"
# Processes by what they are: (component, a piece of the command line, or the comm).
# The first that matches names it; lanes (by ancestry) come before these.
COMPONENTS = (
    # MultiKueue's worker cluster's own processes (its control plane and its node's
    # daemons name its run directory; its pods count with their kind below).
    ("MultiKueue worker cluster (control plane, node daemons)", "/tmp/syncreplicas-worker"),
    (TF_PODS, "syncreplicas_runtime"),
    ("operator (2 replicas, pods)", "syncreplicas_operator"),
    ("operator (2 replicas, pods)", "syncreplicas operator"),
    ("API server", "kube-apiserver"),
    ("etcd", "etcd"),
    ("controller-manager", "kube-controller-manager"),
    ("scheduler", "kube-scheduler"),
    ("kube-router (every node)", "kube-router"),
    ("hollow nodes (kubemark)", "--morph="),
    ("Prometheus Operator", "/bin/operator"),
    ("kubelets", "kubelet"),
    ("containerd, shims, runc", "containerd"),
    ("containerd, shims, runc", "runc"),
    ("CoreDNS", "coredns"),
    ("Prometheus (and its config reloader)", "prometheus-config-reloader"),
    ("Prometheus (and its config reloader)", "prometheus"),
    ("Perses", "perses"),
    ("Kueue", "kueue"),
    ("Kueue", "/manager"),
    ("pause containers", "/pause"),
)
NAMESPACE_ENV = b"SYNCREPLICAS_NAMESPACE="
TOP_NAMESPACES = 20
LOCAL_LANE = "tests outside the cluster (pytest, local TensorFlow, kmock, chart)"
CLUSTER_LANE = "cluster tests: "
CLUSTER_TOOLS = {"kubectl": "kubectl", "helm": "helm", "chromium": "Chromium",
                 "chrome": "Chromium", "ctr": "ctr", "ip": "ip/iptables",
                 "iptables": "ip/iptables", "nsenter": "ip/iptables"}  # fmt: skip
INTERVAL = 3.0
TICK = os.sysconf("SC_CLK_TCK")
ACCT_HZ = 100  # acct v3 records CPU in AHZ (100) units


def lane_of(cmdline: str) -> str | None:
    """The lane a pytest command line runs (None: not a lane's pytest)."""
    if "pytest" not in cmdline:
        return None
    if "tests/cluster" in cmdline and "--ignore=tests/cluster" not in cmdline:
        return "cluster"
    if "--ignore=tests/cluster" in cmdline:
        return "local"
    return None


def component(comm: str, cmdline: str) -> str | None:
    """The component of a process by its own names (None: none of COMPONENTS)."""
    for name, key in COMPONENTS:
        if key in cmdline or comm == key:
            return name
    return None


def cluster_tool(comm: str) -> str:
    for key, name in CLUSTER_TOOLS.items():
        if comm.startswith(key):
            return CLUSTER_LANE + name
    return CLUSTER_LANE + "pytest, host processes"


def read_proc(pid: str) -> dict[str, object] | None:
    try:
        stat = (Path("/proc") / pid / "stat").read_text()
        cmdline = (Path("/proc") / pid / "cmdline").read_bytes()[:400]
    except OSError:
        return None
    comm = stat[stat.index("(") + 1: stat.rindex(")")]
    fields = stat.rpartition(")")[2].split()
    return {"comm": comm, "cmdline": cmdline.replace(b"\0", b" ").decode(errors="replace"),
            "ppid": int(fields[1]), "start": int(fields[19]),
            "cpu": (int(fields[11]) + int(fields[12])) / TICK}  # fmt: skip


def namespace_of(environ: bytes) -> str | None:
    """SYNCREPLICAS_NAMESPACE of a NUL-separated environment (None: not there)."""
    for item in environ.split(b"\0"):
        if item.startswith(NAMESPACE_ENV):
            return item[len(NAMESPACE_ENV):].decode(errors="replace")
    return None


def read_namespace(pid: int) -> str | None:
    try:
        return namespace_of((Path("/proc") / str(pid) / "environ").read_bytes())
    except OSError:
        return None


def machine_cpu() -> float:
    """Busy CPU seconds of the machine since boot (all but idle and iowait)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(parts[:8]) - parts[3] - parts[4]) / TICK


class Book:
    """What was seen of each process: its names, parent, and CPU at the first look."""

    def __init__(self) -> None:
        self.seen: dict[int, dict[str, object]] = {}
        self.baseline: dict[int, float] = {}

    def look(self, first: bool = False) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            found = read_proc(name)
            if found is None:
                continue
            pid = int(name)
            old = self.seen.get(pid)
            if old is not None and old["start"] != found["start"]:
                old = None  # a reused pid
            if first:
                self.baseline[pid] = float(found["cpu"])  # type: ignore[arg-type]
            if old is None or not old.get("cmdline"):
                if component(str(found["comm"]), str(found["cmdline"])) == TF_PODS:
                    found["namespace"] = read_namespace(pid)
                self.seen[pid] = found
            else:
                old["cpu"] = found["cpu"]

    def namespace(self, pid: int, comm: str, ppid: int = 0) -> str | None:
        """The namespace a process seen under ``pid`` (with this ``comm``) ran in; for one
        that exited unseen (a replica forked and gone between two looks), its parent's."""
        info = self.seen.get(pid)
        if info is None or (comm and not str(info["comm"]).startswith(comm[:15])):
            info = self.seen.get(ppid)  # unseen, or a pid reused since
        found = info.get("namespace") if info is not None else None
        return str(found) if found else None

    def group(self, pid: int, comm: str = "", ppid: int = 0, depth: int = 0) -> str:
        """A process's component: by its lane ancestor, its names, else its parent's."""
        info = self.seen.get(pid)
        if info is not None:
            comm, ppid = str(info["comm"]), int(info["ppid"])  # type: ignore[call-overload]
        chain, at = [], (pid if info is not None else ppid)
        while at > 1 and len(chain) < 64:
            here = self.seen.get(at)
            if here is None:
                break
            chain.append(here)
            at = int(here["ppid"])  # type: ignore[call-overload]
        for ancestor in chain:
            lane = lane_of(str(ancestor["cmdline"]))
            if lane == "local":
                return LOCAL_LANE
            if lane == "cluster":
                return cluster_tool(comm)
        if info is not None:
            named = component(comm, str(info["cmdline"]))
            if named:
                return named
        elif comm:
            named = component(comm, comm)
            if named:
                return named
        if ppid > 1 and depth < 32:
            return self.group(ppid, depth=depth + 1)
        return "other"


def acct_records(path: Path) -> list[tuple[int, int, float, str]]:
    """(pid, ppid, CPU seconds, comm) of every process the kernel accounted (acct v3)."""
    data = path.read_bytes() if path.exists() else b""

    def comp(value: int) -> int:
        return (value & 0x1FFF) << (3 * ((value >> 13) & 7))

    out = []
    for offset in range(0, len(data) - 63, 64):
        record = data[offset: offset + 64]
        fields = struct.unpack("=BBHIIIIIIfHH", record[:36])
        if fields[1] != 3:
            continue
        comm = record[48:64].split(b"\0")[0].decode(errors="replace")
        out.append((fields[6], fields[7], (comp(fields[10]) + comp(fields[11])) / ACCT_HZ, comm))
    return out


def set_acct(path: Path | None) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.acct(str(path).encode() if path else None)) == 0


def sample(out: Path) -> None:
    """The sampler's loop: until SIGTERM, then the table."""
    acct = out / "acct.bin"
    acct.write_bytes(b"")
    accounting = set_acct(acct)
    book = Book()
    started, machine_at_start = time.time(), machine_cpu()
    book.look(first=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        time.sleep(INTERVAL)
        book.look()
    book.look()
    if accounting:
        set_acct(None)
    totals: dict[str, float] = {}
    namespaces: dict[str, float] = {}

    def add(name: str, cpu: float, pid: int, comm: str = "", ppid: int = 0) -> None:
        totals[name] = totals.get(name, 0.0) + cpu
        namespace = book.namespace(pid, comm, ppid) if name == TF_PODS else None
        if namespace:
            namespaces[namespace] = namespaces.get(namespace, 0.0) + cpu

    alive = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    counted: set[int] = set()
    for pid, ppid, cpu, comm in acct_records(acct):
        if pid in alive:
            continue  # a reused pid that lives again: counted below
        cpu -= book.baseline.pop(pid, 0.0)
        add(book.group(pid, comm, ppid), max(cpu, 0.0), pid, comm, ppid)
        counted.add(pid)
    for pid in alive:
        found = read_proc(str(pid))
        if found is None or pid in counted:
            continue
        old = book.seen.get(pid)
        base = book.baseline.get(pid, 0.0) if old and old["start"] == found["start"] else 0.0
        add(book.group(pid), max(float(found["cpu"]) - base, 0.0), pid)  # type: ignore[arg-type]
    result = {"seconds": time.time() - started, "machine": machine_cpu() - machine_at_start,
              "accounting": accounting, "components": totals,
              "namespaces": namespaces}  # fmt: skip
    (out / "cpu.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    (out / "cpu.txt").write_text(table(result))
    acct.unlink(missing_ok=True)


def table(result: dict[str, object]) -> str:
    """The components by CPU seconds, with their share of the machine's busy time."""
    totals: dict[str, float] = result["components"]  # type: ignore[assignment]
    machine = float(result["machine"])  # type: ignore[arg-type]
    wall = float(result["seconds"])  # type: ignore[arg-type]
    rows = sorted(totals.items(), key=lambda kv: -kv[1])
    accounted = sum(totals.values())
    lines = [f"CPU by component over {wall / 60:.1f} min: the machine busy "
             f"{machine / 60:.1f} core-min ({machine / max(wall, 1) / (os.cpu_count() or 1):.0%}"
             f" of {os.cpu_count()} cores)", "",
             f"{'component':<58} {'core-min':>8} {'share':>6}"]  # fmt: skip
    for name, cpu in rows:
        if cpu >= 0.5:
            lines.append(f"{name:<58} {cpu / 60:>8.1f} {cpu / max(machine, 1):>6.1%}")
    small = sum(cpu for _, cpu in rows if cpu < 0.5)
    lines.append(f"{'(each under 0.5 s)':<58} {small / 60:>8.1f} {small / max(machine, 1):>6.1%}")
    rest = machine - accounted
    lines.append(f"{'kernel, interrupts, not in any process':<58} {rest / 60:>8.1f} "
                 f"{rest / max(machine, 1):>6.1%}")  # fmt: skip
    if not result.get("accounting"):
        lines.append("(no process accounting here: processes that exited unseen are missing)")
    return "\n".join(lines + by_namespace(result.get("namespaces") or {})) + "\n"  # type: ignore[arg-type]


def by_namespace(namespaces: dict[str, float]) -> list[str]:
    """The top TOP_NAMESPACES of the jobs' TensorFlow CPU by namespace, and the rest."""
    if not namespaces:
        return []
    rows = sorted(namespaces.items(), key=lambda kv: -kv[1])
    total = sum(namespaces.values())
    lines = ["", f"jobs' TensorFlow processes by namespace ({total / 60:.1f} core-min of them "
             f"seen in {len(rows)})", "", f"{'namespace':<58} {'core-min':>8} {'share':>6}"]
    for name, cpu in rows[:TOP_NAMESPACES]:
        lines.append(f"{name:<58} {cpu / 60:>8.1f} {cpu / max(total, 1):>6.1%}")
    rest = sum(cpu for _, cpu in rows[TOP_NAMESPACES:])
    if rest:
        label = f"({len(rows) - TOP_NAMESPACES} more)"
        lines.append(f"{label:<58} {rest / 60:>8.1f} {rest / max(total, 1):>6.1%}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop", "table", "run"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    pidfile = out / "cpusample.pid"
    if argv[1] == "run":
        sample(out)
        return 0
    if argv[1] == "start":
        log = open(out / "cpusample.log", "w")  # noqa: SIM115 (the child's)
        child = os.fork()
        if child == 0:
            os.setsid()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            os.execv(sys.executable, [sys.executable, __file__, "run", str(out)])
        pidfile.write_text(str(child))
        return 0
    if argv[1] == "stop":
        try:
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError) as error:
            print(f"cpusample: no sampler to stop ({error})", file=sys.stderr)
            return 1
        deadline = time.monotonic() + 120  # it writes the table, then exits
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            if "Z" in Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2][:3]:
                break
            time.sleep(0.2)
        pidfile.unlink(missing_ok=True)
    text = (out / "cpu.txt").read_text() if (out / "cpu.txt").exists() else "no table\n"
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
