#!/usr/bin/env python3
"""The slowest tests of each lane of `make test`, from the JUnit XML files pytest wrote.

    slowest.py [-n 25] LANE=FILE.xml [LANE=FILE.xml ...]

A lane may have several files (the cluster's tests that share it, then those that need it
alone): give the same LANE name again. A test's time is its setup, call and teardown (a
module's fixture counts where it ran: with its first test). Missing files are said, not
fatal: the run that should have written them failed before it could.
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=25)
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
        for seconds, name, outcome in sorted(every, reverse=True)[: args.n]:
            mark = "" if outcome == "passed" else f"  [{outcome}]"
            print(f"{seconds:8.1f} s  {name}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
