#!/usr/bin/env python3
"""The slowest tests of each lane of `make test`, from the JUnit XML files pytest wrote.

    slowest.py [-n 25] [--waits FILE.tsv] LANE=FILE.xml [LANE=FILE.xml ...]

A lane may have several files (the cluster's tests that need it alone, then those that
share it): give the same LANE name again. A test's time is its setup, call and teardown (a
module's fixture counts where it ran: with its first test). Missing files are said, not
fatal: the run that should have written them failed before it could.

With ``--waits`` (reports/cluster-waits.tsv: test id, seconds, what, as the cluster tests'
conftest.py writes each ``kube.eventually``), the slowest tests of the lanes it has lines
for are followed by what each of them waited for longest, and how much of its time was
spent outside those waits.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def cases(path: Path) -> tuple[list[tuple[float, str, str]], float, dict[str, int]]:
    """(seconds, test id, outcome) of each test case; the files' own wall time; counts."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    found, wall, counts = [], 0.0, {"passed": 0, "failed": 0, "skipped": 0}
    for suite in suites:
        wall += float(suite.get("time") or 0)
        for case in suite.iter("testcase"):
            outcome = "passed"
            if case.find("failure") is not None or case.find("error") is not None:
                outcome = "failed"
            elif case.find("skipped") is not None:
                outcome = "skipped"
            counts[outcome] += 1
            # A test's own name, without the "@group" pytest-xdist's loadgroup appends.
            name = case.get("name", "").rsplit("@", 1)[0]
            found.append((float(case.get("time") or 0),
                          f"{case.get('classname', '')}::{name}", outcome))
    return found, wall, counts


def junit_id(nodeid: str) -> str:
    """A pytest node id as JUnit names it (tests/x/test_a.py::t[p] -> tests.x.test_a::t[p])."""
    path, _, name = nodeid.partition("::")
    return f"{path.removesuffix('.py').replace('/', '.')}::{name.rsplit('@', 1)[0]}"


def read_waits(path: Path) -> dict[str, list[tuple[float, str]]]:
    """(seconds, what) of each test's waits, by its JUnit id."""
    found: dict[str, list[tuple[float, str]]] = {}
    for line in path.read_text().splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            found.setdefault(junit_id(parts[0]), []).append((float(parts[1]), parts[2]))
    return found


def waited(seconds: float, waits: list[tuple[float, str]], top: int = 3) -> str:
    """One line: a test's ``top`` longest waits and the time outside every wait."""
    longest = sorted(waits, reverse=True)
    shown = "; ".join(f"{s:.0f} s {what}" for s, what in longest[:top])
    rest = longest[top:]
    more = f"; {len(rest)} more waits {sum(s for s, _ in rest):.0f} s" if rest else ""
    outside = seconds - sum(s for s, _ in waits)
    return f"{shown}{more}; outside them {max(outside, 0):.0f} s"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=25)
    parser.add_argument("--waits", type=Path, help="reports/cluster-waits.tsv")
    parser.add_argument("--waits-n", type=int, default=12, help="how many tests' waits")
    parser.add_argument("lanes", nargs="+", metavar="LANE=FILE")
    args = parser.parse_args(argv)
    lanes: dict[str, list[Path]] = {}
    for item in args.lanes:
        lane, _, file = item.partition("=")
        lanes.setdefault(lane, []).append(Path(file))
    for lane, files in lanes.items():
        every: list[tuple[float, str, str]] = []
        walls, totals = [], {"passed": 0, "failed": 0, "skipped": 0}
        for file in files:
            if not file.exists():
                print(f"({lane}: {file} was not written)")
                continue
            found, wall, counts = cases(file)
            every += found
            walls.append(f"{file.name} {wall / 60:.1f} min")
            for key, value in counts.items():
                totals[key] += value
        summary = ", ".join(f"{v} {k}" for k, v in totals.items() if v)
        print(f"\n--- the slowest {args.n} of {lane} ({summary}; {'; '.join(walls)}) ---")
        slowest = sorted(every, reverse=True)
        for seconds, name, outcome in slowest[: args.n]:
            mark = "" if outcome == "passed" else f"  [{outcome}]"
            print(f"{seconds:8.1f} s  {name}{mark}")
        waits = read_waits(args.waits) if args.waits and args.waits.exists() else {}
        mine = [(s, n) for s, n, _ in slowest if n in waits][: args.waits_n]
        if mine:
            print(f"\n--- what the slowest {len(mine)} of {lane} waited for longest "
                  f"({args.waits}) ---")
            for seconds, name in mine:
                print(f"{seconds:8.1f} s  {name}\n           {waited(seconds, waits[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
