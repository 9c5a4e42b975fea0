#!/usr/bin/env python3
"""A lane of `make test` in a CPU cgroup of its own, so that its weight is the lane's.

    cpushare.py enter NAME SHARES -- COMMAND...   # run COMMAND in cgroup NAME
    cpushare.py set NAME SHARES                   # its weight from now on (rc 1: no cgroup)
    cpushare.py remove NAME                       # once the lane has ended

Why a cgroup, not `nice`: with the kernel's autogroups (kernel.sched_autogroup_enabled, on
by default), each session of the root cgroup is weighed as one, whatever its processes'
nice values, and nice orders only the processes of one session. The local lane's replicas
each start a session of their own (so that a kill reaches all of a replica), and so did the
warm-start servers: two busy processes niced 5 in sessions of their own took as much CPU
as two that were not (3.0 CPU-s each of 12, measured on this machine; in one session,
1.6 against 4.4). The local lane weighed as several sessions, each as much as a whole
node of the cluster (a node's daemons and pods are one cgroup). A cgroup of the root is
weighed as one, with its own cpu.shares (cgroup v1; cpu.weight in v2), whatever sessions
its processes start (autogroups apply to the root cgroup only), and the kernel takes it
out of the count while it waits: the cores it leaves go to the others.

Where no CPU cgroup can be made (no permission, no cpu controller), `enter` says so on
stderr and runs COMMAND as it is.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

V1_ROOTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct"))
V2_ROOT = Path("/sys/fs/cgroup")
V1_DEFAULT = 1024  # cpu.shares of a cgroup nobody set (v2: cpu.weight 100)


def weight_file(name: str) -> tuple[Path, str] | None:
    """The cgroup's directory and the file of its weight, in the hierarchy that has the cpu
    controller (v1 first: this host's), or None."""
    for root in V1_ROOTS:
        if (root / "cpu.shares").exists():
            return root / name, "cpu.shares"
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return V2_ROOT / name, "cpu.weight"
    return None


def value(file: str, shares: int) -> int:
    """SHARES as the file takes it: v1's shares (2 .. 262144), or v2's weight (1 .. 10000,
    100 for v1's 1024)."""
    if file == "cpu.shares":
        return max(2, min(262144, shares))
    return max(1, min(10000, round(shares * 100 / V1_DEFAULT)))


def make(name: str, shares: int) -> Path:
    found = weight_file(name)
    if found is None:
        raise OSError("no cgroup hierarchy with the cpu controller")
    path, file = found
    if file == "cpu.weight":
        control = V2_ROOT / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu")
    path.mkdir(exist_ok=True)
    (path / file).write_text(str(value(file, shares)))
    return path


def enter(name: str, shares: int, command: list[str]) -> None:
    try:
        path = make(name, shares)
        (path / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as error:
        print(f"cpushare: {name} runs without a CPU cgroup of its own ({error})",
              file=sys.stderr)  # fmt: skip
    os.execvp(command[0], command)


def set_weight(name: str, shares: int) -> bool:
    found = weight_file(name)
    if found is None or not found[0].is_dir():
        return False
    path, file = found
    try:
        (path / file).write_text(str(value(file, shares)))
    except OSError:
        return False
    return True


def remove(name: str, wait_s: float = 10.0) -> bool:
    """Remove the cgroup once its last process has gone (a lane's children may take a moment
    to exit after it); False if some are still there after ``wait_s``."""
    found = weight_file(name)
    if found is None or not found[0].is_dir():
        return True
    deadline = time.monotonic() + wait_s
    while True:
        try:
            found[0].rmdir()
            return True
        except OSError:
            if time.monotonic() > deadline:
                left = (found[0] / "cgroup.procs").read_text().split()
                print(f"cpushare: {name} still holds processes {' '.join(left)}",
                      file=sys.stderr)  # fmt: skip
                return False
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    if len(argv) >= 5 and argv[0] == "enter" and argv[3] == "--":
        enter(argv[1], int(argv[2]), argv[4:])
    if len(argv) == 3 and argv[0] == "set":
        return 0 if set_weight(argv[1], int(argv[2])) else 1
    if len(argv) == 2 and argv[0] == "remove":
        return 0 if remove(argv[1]) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
