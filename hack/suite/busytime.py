#!/usr/bin/env python3
"""Where the machine waited during the test suite: cpusample.py's record of its busy CPU
every few seconds, read minute by minute and over each stage of `make test` (the JUnit
report of each: the local lane, the exclusive, paired and shared cluster tests). The
stages overlap (the local lane runs beside the exclusive ones); what a stage leaves idle
is where a test could run beside it, or where its own tests wait on timers."""

from __future__ import annotations

import bisect
import os
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path


def stages(out: Path, started: float) -> dict[str, tuple[float, float]]:
    """Each JUnit report's run in DIR (junit-<stage>.xml), as (start, end) in seconds since
    the sampler's start."""
    found = {}
    for path in sorted(out.glob("junit-*.xml")):
        try:
            suite = ET.parse(path).getroot().find(".//testsuite")
            begun = datetime.fromisoformat(suite.get("timestamp", "")).timestamp()  # type: ignore[union-attr]
            took = float(suite.get("time", ""))  # type: ignore[union-attr]
        except (ET.ParseError, AttributeError, ValueError):
            continue
        found[path.stem.removeprefix("junit-")] = (begun - started, begun - started + took)
    return found


def busy_between(timeline: list[list[float]], start: float, end: float) -> float:
    """The machine's busy core-seconds from ``start`` to ``end`` (seconds since the start),
    read from the last sample at or before each (the samples are a few seconds apart)."""
    moments = [seconds for seconds, _ in timeline]

    def at(moment: float) -> float:
        index = bisect.bisect_right(moments, moment) - 1
        return timeline[index][1] if index >= 0 else 0.0

    return at(end) - at(start)


def over_time(result: dict[str, object]) -> list[str]:
    """Where the machine waited: its busy share minute by minute, and over each stage."""
    timeline: list[list[float]] = result.get("timeline") or []  # type: ignore[assignment]
    if len(timeline) < 2:
        return []
    cores = os.cpu_count() or 1
    wall = timeline[-1][0]
    idle = wall * cores - timeline[-1][1]
    lines = ["", f"the machine's busy share minute by minute ({idle / 60:.1f} core-min idle "
             f"in all)", ""]
    shares = []  # the last minute's share of what of it has passed
    for start in range(0, int(wall), 60):
        span = min(60.0, wall - start)
        shares.append(busy_between(timeline, start, start + span) / (span * cores))
    for row in range(0, len(shares), 10):
        cells = " ".join(f"{min(share, 1):>4.0%}" for share in shares[row: row + 10])
        lines.append(f"min {row:>3}-{row + 9:<3} {cells}")
    spans: dict[str, list[float]] = result.get("stages") or {}  # type: ignore[assignment]
    rows = []
    for name, (begun, ended) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        start, end = max(begun, 0.0), min(ended, wall)  # what the sampler saw of it
        if end <= start:
            continue
        busy, span = busy_between(timeline, start, end), end - start
        rows.append(f"{name:<30} {start / 60:>6.1f} {end / 60:>6.1f} "
                    f"{busy / (span * cores):>5.0%} {(span * cores - busy) / 60:>13.1f}")
    if rows:
        lines += ["", f"{'stage (its JUnit report)':<30} {'from':>6} {'to':>6} {'busy':>5} "
                  f"{'idle core-min':>13}", *rows]  # fmt: skip
    return lines

