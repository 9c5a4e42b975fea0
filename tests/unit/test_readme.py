"""The README is a front door: short, the quick start on its first screen, its links
alive."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_short_with_the_quick_start_first() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    words = ("helm install", "kubectl apply", "kubectl get srj", "dashboard")
    first = {w: next(i for i, line in enumerate(lines) if w in line) for w in words}
    assert all(i < 60 for i in first.values()), first


def test_every_relative_link_resolves() -> None:
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
