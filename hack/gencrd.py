"""Write the SyncReplicasJob CRD, generated from the API types, to crds/ and the chart.

    python hack/gencrd.py           # write both files (make crds)
    python hack/gencrd.py --check   # exit 1 when a checked-in file differs
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from syncreplicas_api.crd import build_crd

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (
    ROOT / "crds" / "syncreplicasjobs.yaml",
    ROOT / "charts" / "syncreplicas" / "crds" / "syncreplicasjobs.yaml",
)
HEADER = """\
# SyncReplicasJob: synchronous data-parallel TensorFlow training with SyncReplicasOptimizer.
# Generated from the API types (api/syncreplicas_api) by `make crds`: do not edit.
"""


def render() -> str:
    """The CRD file's text."""
    body = yaml.safe_dump(build_crd(), sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        stale = [str(p.relative_to(ROOT)) for p in TARGETS if p.read_text() != text]
        for path in stale:
            print(f"{path} differs from the API types: run make crds", file=sys.stderr)
        return 1 if stale else 0
    for path in TARGETS:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
