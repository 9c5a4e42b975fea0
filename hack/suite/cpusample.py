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
one under the other pytest is the local lane's, every one under build-all.sh the build's
(a compile is the build's whatever it compiles) and under `make lint docs` the checks';
a process that exited unseen is its parent's component (iptables under kube-router is
kube-router's); MultiKueue's worker cluster's daemons are its own, whoever brought it
up. pids are used again many times over a cold run: a process is known by its pid and its
start. The machine's own total
(/proc/stat) is the check: what no process accounts for is shown as such. The jobs'
TensorFlow processes are also summed by the namespace their pod runs in (its
SYNCREPLICAS_NAMESPACE; a cluster test's namespace is named after the test), so the table
says which tests' jobs cost the most. The machine's busy time is also kept at each look:
the table ends with where it waited (busytime.py), minute by minute and by stage.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busytime import over_time, stages

TF_PODS = "jobs' TensorFlow processes (pods)"
WORKER_CLUSTER = "MultiKueue worker cluster (control plane, node daemons)"
# Processes by what they are: (component, a piece of the command line, or the comm).
# The first that matches names it; lanes (by ancestry) come before these.
COMPONENTS = (
    # MultiKueue's worker cluster's own processes (its control plane and its node's
    # daemons name its run directory; its pods count with their kind below).
    (WORKER_CLUSTER, "/tmp/syncreplicas-worker"),
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
BUILD_LANE = "the build (build-all.sh: Go compiles, npm, images)"
CHECKS_LANE = "lint and docs (ruff, mypy, import contracts, mkdocs)"
CLUSTER_TOOLS = {"kubectl": "kubectl", "helm": "helm", "chromium": "Chromium",
                 "chrome": "Chromium", "ctr": "ctr", "ip": "ip/iptables",
                 "iptables": "ip/iptables", "nsenter": "ip/iptables"}  # fmt: skip
INTERVAL = 3.0
TICK = os.sysconf("SC_CLK_TCK")
ACCT_HZ = 100  # acct v3 records CPU in AHZ (100) units


def lane_of(cmdline: str) -> str | None:
    """The lane a command line runs: a pytest lane's ("cluster", "local"), make test's
    build ("build": build-all.sh itself, not a wait for it) or its lint and docs
    ("checks"); None: none. Only a command's own words count: make test's recipe, a
    shell whose text names all of these, is none of them."""
    words = cmdline.split()
    if any(w.endswith("build-all.sh") for w in words[:2]) and "--await" not in words:
        return "build"
    if words and words[0].endswith("make") and words[-2:] == ["lint", "docs"]:
        return "checks"
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


# A process's start as the kernel's accounting gives it (whole seconds of the wall clock)
# and as /proc gives it (clock ticks since boot) agree to within this many seconds.
SLACK = 2.0


def boot_time() -> float:
    """The wall-clock time of the boot, in seconds (/proc/stat's btime)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


Seen = dict[str, object]


class Book:
    """What was seen of each process: its names, parent, start, and CPU at the first look.

    A pid is used again and again over a run (a cold build starts tens of thousands of
    processes, and pids wrap at /proc/sys/kernel/pid_max, 32768 here), so every process
    seen under a pid is kept, and one is found by the pid and when it started: a process's
    own record by its start, its parent as the one under the parent's pid that had started
    before it. The last process seen under a parent's pid is no guide: after a wrap it is
    most often an unrelated one (a `kubectl` of a test standing in for the process that
    started the API server, and the API server's CPU counted as the test's)."""

    def __init__(self, boot: float = 0.0) -> None:
        self.boot = boot
        self.seen: dict[int, list[Seen]] = {}

    def add(self, pid: int, found: Seen) -> None:
        self.seen.setdefault(pid, []).append(found)

    def born(self, info: Seen) -> float:
        """When the process started, in wall-clock seconds."""
        return self.boot + float(info["start"]) / TICK  # type: ignore[arg-type]

    def _last(self, pid: int, fits: Callable[[float], bool] | None) -> Seen | None:
        """The last process seen under ``pid`` whose start ``fits`` (None: the last one)."""
        for info in reversed(self.seen.get(pid) or []):
            if fits is None or fits(self.born(info)):
                return info
        return None

    def own(self, pid: int, born: float | None = None) -> Seen | None:
        """The process seen under ``pid`` that started at ``born`` (None: the last one seen
        under it; None if none started then)."""
        return self._last(pid, None if born is None else lambda at: abs(at - born) <= SLACK)

    def before(self, pid: int, born: float | None) -> Seen | None:
        """The process under ``pid`` that could have started one born at ``born``: the last
        one seen under it that had started by then."""
        return self._last(pid, None if born is None else lambda at: at <= born + SLACK)

    def look(self, first: bool = False) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            found = read_proc(name)
            if found is None:
                continue
            pid = int(name)
            history = self.seen.get(pid)
            old = history[-1] if history else None
            if old is not None and old["start"] != found["start"]:
                old = None  # a reused pid: another process
            if old is None:
                if first:
                    found["base"] = found["cpu"]
                self.add(pid, found)
            elif old["comm"] == found["comm"]:
                old["cpu"] = found["cpu"]
                continue
            else:  # it exec'd: known by its new command from now on
                old.update(comm=found["comm"], cmdline=found["cmdline"], cpu=found["cpu"])
                found = old
            if component(str(found["comm"]), str(found["cmdline"])) == TF_PODS:
                found["namespace"] = read_namespace(pid)

    def namespace(self, pid: int, comm: str, ppid: int = 0,
                  born: float | None = None) -> str | None:  # fmt: skip
        """The namespace a process seen under ``pid`` (with this ``comm``) ran in; for one
        that exited unseen (a replica forked and gone between two looks), its parent's."""
        info = self.own(pid, born)
        if info is None or (comm and not str(info["comm"]).startswith(comm[:15])):
            info = self.before(ppid, born)  # unseen, or a pid reused since
        found = info.get("namespace") if info is not None else None
        return str(found) if found else None

    def group(self, pid: int, comm: str = "", ppid: int = 0,
              born: float | None = None) -> str:  # fmt: skip
        """A process's component: by its lane ancestor, its names, else its parent's. With
        ``born`` (an exited process's start, from its accounting record) the process and
        its ancestors are the ones alive then."""
        info = self.own(pid, born)
        if info is not None:
            comm, ppid = str(info["comm"]), int(info["ppid"])  # type: ignore[call-overload]
            born = self.born(info)
        own_name = component(comm, str(info["cmdline"]) if info is not None else comm)
        if own_name == WORKER_CLUSTER:
            return own_name  # even when a cluster test brought it up (test_multikueue.py)
        chain: list[Seen] = [info] if info is not None else []
        at, child_born = ppid, born
        while at > 1 and len(chain) < 64:
            here = self.before(at, child_born)
            if here is None:
                break
            chain.append(here)
            at, child_born = int(here["ppid"]), self.born(here)  # type: ignore[call-overload]
        for ancestor in chain:
            lane = lane_of(str(ancestor["cmdline"]))
            if lane == "build":
                return BUILD_LANE
            if lane == "checks":
                return CHECKS_LANE
            if lane == "local":
                return LOCAL_LANE
            if lane == "cluster":
                return cluster_tool(comm)
        named = component(comm, str(info["cmdline"]) if info is not None else comm)
        if named:
            return named
        for ancestor in chain[1:] if info is not None else chain:
            named = component(str(ancestor["comm"]), str(ancestor["cmdline"]))
            if named:
                return named
        return "other"


def acct_records(path: Path) -> list[tuple[int, int, float, str, float]]:
    """(pid, ppid, CPU seconds, comm, start in wall-clock seconds) of every process the
    kernel accounted (acct v3)."""
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
        out.append((fields[6], fields[7], (comp(fields[10]) + comp(fields[11])) / ACCT_HZ, comm,
                    float(fields[8])))  # fmt: skip
    return out


def set_acct(path: Path | None) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.acct(str(path).encode() if path else None)) == 0


def sample(out: Path) -> None:
    """The sampler's loop: until SIGTERM, then the table."""
    acct = out / "acct.bin"
    acct.write_bytes(b"")
    accounting = set_acct(acct)
    book = Book(boot_time())
    started, machine_at_start = time.time(), machine_cpu()
    timeline = [(0.0, 0.0)]  # (seconds since the start, the machine's busy seconds since it)
    book.look(first=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        time.sleep(INTERVAL)
        book.look()
        timeline.append((round(time.time() - started, 1),
                         round(machine_cpu() - machine_at_start, 2)))  # fmt: skip
    book.look()
    if accounting:
        set_acct(None)
    totals: dict[str, float] = {}
    namespaces: dict[str, float] = {}

    def add(name: str, cpu: float, pid: int, comm: str = "", ppid: int = 0,
            born: float | None = None) -> None:  # fmt: skip
        totals[name] = totals.get(name, 0.0) + cpu
        namespace = book.namespace(pid, comm, ppid, born) if name == TF_PODS else None
        if namespace:
            namespaces[namespace] = namespaces.get(namespace, 0.0) + cpu

    for pid, ppid, cpu, comm, born in acct_records(acct):
        own = book.own(pid, born)
        cpu -= float(own.get("base", 0.0)) if own is not None else 0.0  # type: ignore[arg-type]
        add(book.group(pid, comm, ppid, born), max(cpu, 0.0), pid, comm, ppid, born)
    for name in os.listdir("/proc"):  # the living: what they used since the first look
        found = read_proc(name) if name.isdigit() else None
        if found is None:
            continue
        pid, born, comm, ppid = int(name), book.born(found), str(found["comm"]), int(found["ppid"])  # type: ignore[call-overload]
        own = book.own(pid, born)
        base = float(own.get("base", 0.0)) if own is not None else 0.0  # type: ignore[arg-type]
        add(book.group(pid, comm, ppid, born), max(float(found["cpu"]) - base, 0.0),  # type: ignore[arg-type]
            pid, comm, ppid, born)
    result = {"seconds": time.time() - started, "machine": machine_cpu() - machine_at_start,
              "accounting": accounting, "components": totals,
              "namespaces": namespaces, "started": started, "timeline": timeline,
              "stages": stages(out, started)}  # fmt: skip
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
    return "\n".join(lines + by_namespace(result.get("namespaces") or {})  # type: ignore[arg-type]
                     + over_time(result)) + "\n"


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
