"""Write the site's generated pages: the API reference (docs/reference/api.md, from the
API types; checked in) and the benchmarks (docs/benchmarks.md, bench/RESULTS.md with its
links made the site's; not checked in, written by every `make docs`).

    python hack/gendocs.py           # write them (make docs)
    python hack/gendocs.py --check   # exit 1 when the checked-in API page differs
"""

from __future__ import annotations

import sys
from pathlib import Path

from syncreplicas_api.reference import render

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "api.md"
RESULTS = ROOT / "bench" / "RESULTS.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
BENCHMARKS_HEADER = """\
<!-- Generated from bench/RESULTS.md by `make docs`: edit that file. -->

"""


def benchmarks() -> str:
    """bench/RESULTS.md as a page of the site: its one image link is the site's."""
    text = RESULTS.read_text().replace("](../docs/images/", "](images/")
    return BENCHMARKS_HEADER + text


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} differs from the API types: run make docs", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    BENCHMARKS.write_text(benchmarks())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
