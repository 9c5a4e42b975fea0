"""Commands and long-running processes: the host's or a node's (in its network namespace
and its cgroup), each with a pid file and a log under the run directory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from .config import REPO, RUN


class ClusterError(RuntimeError):
    """The cluster could not be brought to the state asked for."""


def log(message: str) -> None:
    print(f"cluster: {message}", flush=True)


def run(*argv: str | Path, check: bool = True, quiet: bool = True, **kw: object) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, **kw  # type: ignore[call-overload]
    )
    if check and result.returncode != 0:
        raise ClusterError(
            f"{' '.join(str(a) for a in argv)} exited {result.returncode}: "
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )
    if not quiet and result.stdout:
        print(result.stdout, end="")
    return str(result.stdout)


def in_netns(netns: str | None, *argv: str | Path) -> list[str | Path]:
    """``argv`` run in a named network namespace, and nothing else of the host changed:
    nsenter enters the network namespace only (``ip netns exec`` would also give it a
    mount namespace of its own with a fresh /sys, hiding the cgroup hierarchy)."""
    if netns is None:
        return list(argv)
    return ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]


def wait_for(what: str, ready: Callable[[], bool], timeout: float, log_name: str = "") -> None:
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        with contextlib.suppress(Exception):
            if ready():
                return
        if log_name and pid_file(log_name).exists() and running_pid(log_name) is None:
            what += " exited and is"
            break
        time.sleep(0.5)
    tail = ""
    if log_name:
        path = RUN / "logs" / f"{log_name}.log"
        if path.exists():
            tail = "\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:])
    raise ClusterError(f"{what} not ready after {time.monotonic() - started:.0f} s{tail}")


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def write_config(path: Path, text: str) -> None:
    """Write a configuration file only when its content changes: kube-proxy exits when
    the file it was started with is written to, even with the same content."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def pid_file(name: str) -> Path:
    return RUN / "pids" / f"{name}.pid"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def running_pid(name: str) -> int | None:
    path = pid_file(name)
    if not path.exists():
        return None
    try:
        pid = int(path.read_text())
    except ValueError:
        return None
    return pid if alive(pid) else None


def start(name: str, argv: list[str | Path], netns: str | None = None,
          cgroup: str | None = None) -> None:  # fmt: skip
    """Start ``argv`` in the background as ``name`` (no-op when it runs): in ``netns`` when
    given, and moved into ``cgroup`` (a path below every cgroup v1 controller's root, made
    when missing) so that a node's processes are all found, and stopped, by their cgroup."""
    if running_pid(name):
        return
    (RUN / "logs").mkdir(parents=True, exist_ok=True)
    (RUN / "pids").mkdir(parents=True, exist_ok=True)
    with open(RUN / "logs" / f"{name}.log", "ab") as out:
        process = subprocess.Popen(
            [str(a) for a in in_netns(netns, *argv)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=RUN,
        )
    if cgroup is not None:
        join_cgroup(process.pid, cgroup)
    pid_file(name).write_text(str(process.pid))


def cgroup_controllers() -> list[Path]:
    """The root of every cgroup v1 controller hierarchy (and the v2 one, when mounted)."""
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and fields[4].startswith("/sys/fs/cgroup/"):
            roots.append(Path(fields[4]))
    return roots


def make_cgroup(path: str) -> None:
    for root in cgroup_controllers():
        target = root / path.strip("/")
        target.mkdir(parents=True, exist_ok=True)
        # cpuset cgroups start empty: copy the parent's cpus and mems.
        for key in ("cpuset.cpus", "cpuset.mems"):
            mine, parent = target / key, target.parent / key
            if mine.exists() and not mine.read_text().strip():
                mine.write_text(parent.read_text())


def join_cgroup(pid: int, path: str) -> None:
    for root in cgroup_controllers():
        if root.name == "unified":  # the v2 mount beside v1: no controllers there
            continue
        procs = root / path.strip("/") / "cgroup.procs"
        if procs.parent.exists():
            with contextlib.suppress(OSError):
                procs.write_text(str(pid))


def stop(name: str, timeout: float = 15, sig: int = signal.SIGTERM) -> None:
    pid = running_pid(name)
    if pid is None:
        pid_file(name).unlink(missing_ok=True)
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.1)
    pid_file(name).unlink(missing_ok=True)


def kubectl_path() -> str:
    tool = REPO / ".tools" / "bin" / "kubectl"
    return str(tool) if tool.exists() else "kubectl"


def kubectl(*args: str, check: bool = True, input: str | None = None) -> str:
    return run(kubectl_path(), "--kubeconfig", RUN / "admin.kubeconfig", *args,
               check=check, input=input)  # fmt: skip
