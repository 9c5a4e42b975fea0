"""What the machine was doing when a test failed: its load, memory, pressure and busiest
processes, for the failure's report (tests/conftest.py).

A bound that holds alone and fails under the suite's own load says little by itself; the
report says whether the machine was starved (the CPU's pressure near 100%, a load of tens
on two cores), short of memory, or waiting on its disk, and what took the cores.

    snapshot()           the text: reads /proc, looks twice, `interval` seconds apart
    describe(...)        the same from what was read (pure)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# The title of a failed test's report section of this (tests/conftest.py), and the start
# of any other section on the machine's state then (tests/cluster/conftest.py's API
# server): the failures log copies every section whose title starts so.
SECTION = "the machine when it failed"
PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")
TOP = 6


@dataclass(frozen=True)
class Process:
    pid: int
    name: str  # its command line, shortened
    cpu: float  # CPU seconds since it started


def pressure(text: str) -> tuple[float, float]:
    """avg10 and avg60 of a /proc/pressure file's "some" line (percent of the time some
    task waited for the resource)."""
    for line in text.splitlines():
        if line.startswith("some "):
            fields = dict(item.split("=", 1) for item in line.split()[1:])
            return float(fields["avg10"]), float(fields["avg60"])
    raise ValueError(f"no 'some' line in {text!r}")


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields in KiB."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            out[key] = int(rest.split()[0])
    return out


def busiest(before: list[Process], after: list[Process], seconds: float,
            top: int = TOP) -> list[tuple[float, Process]]:  # fmt: skip
    """The processes that used the most CPU between two looks, as cores (CPU seconds per
    second), the busiest first; a pid seen only in the second look counts from 0."""
    earlier = {p.pid: p.cpu for p in before}
    used = [((p.cpu - earlier.get(p.pid, 0.0)) / max(seconds, 1e-6), p) for p in after]
    used = [(cores, p) for cores, p in used if cores > 0.005]
    return sorted(used, key=lambda item: -item[0])[:top]


def describe(loadavg: str, memory: dict[str, int], pressures: dict[str, tuple[float, float]],
             top: list[tuple[float, Process]], cores: int) -> str:  # fmt: skip
    """The snapshot's text from what was read."""
    one, five, fifteen, threads = loadavg.split()[:4]
    lines = [f"load {one} {five} {fifteen} on {cores} cores ({threads} runnable/threads)"]
    if memory:
        lines.append(f"memory {memory.get('MemAvailable', 0) / 2**20:.1f} GiB available of "
                     f"{memory.get('MemTotal', 0) / 2**20:.1f}")  # fmt: skip
    if pressures:
        lines.append("pressure, the share of the last 10 s / 60 s some task waited for it: " +
                     ", ".join(f"{name} {ten:.0f}%/{sixty:.0f}%"
                               for name, (ten, sixty) in pressures.items()))  # fmt: skip
    if top:
        lines.append("the busiest processes (cores): " +
                     "; ".join(f"{cores_used:.2f} {p.name} [{p.pid}]" for cores_used, p in top))
    return "\n".join(lines)


def _processes() -> list[Process]:
    out = []
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            stat = (PROC / entry / "stat").read_text()
            cmdline = (PROC / entry / "cmdline").read_bytes()[:160]
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        comm = stat[stat.index("(") + 1: stat.rindex(")")]
        name = cmdline.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{comm}]"
        out.append(Process(int(entry), name[:80], (int(fields[11]) + int(fields[12])) / TICK))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def snapshot(interval: float = 1.0) -> str:
    """The machine now: load, memory, pressure, and the busiest processes over
    ``interval`` seconds."""
    before = _processes()
    started = time.monotonic()
    time.sleep(interval)
    after = _processes()
    pressures = {}
    for name in ("cpu", "memory", "io"):
        text = _read(PROC / "pressure" / name)
        if text:
            pressures[name] = pressure(text)
    return describe(_read(PROC / "loadavg") or "? ? ? ?", meminfo(_read(PROC / "meminfo")),
                    pressures, busiest(before, after, time.monotonic() - started),
                    os.cpu_count() or 1)  # fmt: skip
