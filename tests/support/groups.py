"""Processes for the tests: stop one started in a process group of its own, with
everything it started; a process's parent, children and signal dispositions, as /proc has
them."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def parent_of(pid: int) -> int:
    """The parent pid (/proc/PID/stat, after the command name, which may hold spaces)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    """The pids of a process's children (those of its main thread)."""
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def signal_set(pid: int, field: str, signum: int) -> bool:
    """Whether ``signum`` is in a process's signal mask ``field`` of /proc/PID/status
    (``SigIgn``: ignored, ``SigCgt``: caught by a handler, ``SigBlk``: blocked)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def stop_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float) -> None:
    """SIGTERM the group, SIGKILL it after ``timeout`` seconds; a group already gone is
    fine."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass
