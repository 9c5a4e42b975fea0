"""Write the API reference page (docs/reference/api.md), generated from the API types.

    python hack/genapiref.py           # write it (make docs)
    python hack/genapiref.py --check   # exit 1 when the checked-in page differs
"""

from __future__ import annotations

import sys
from pathlib import Path

from syncreplicas_api.reference import render

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} differs from the API types: run make docs", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
