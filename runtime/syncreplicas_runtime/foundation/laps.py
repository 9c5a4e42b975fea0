"""How long each part of one piece of work took, for the log line that reports the work:
``Laps()``, then ``lap("graph")`` after each part; ``str()`` gives
``"1.20s: claim 0.05s, graph 0.60s, ..."`` (the total first)."""

from __future__ import annotations

import time
from collections.abc import Callable


class Laps:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.began = self.last = clock()
        self.parts: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        """The part ``name`` ends now (it began where the previous one ended)."""
        now = self.clock()
        self.parts.append((name, now - self.last))
        self.last = now

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.parts)
        return f"{self.last - self.began:.2f}s" + (f": {parts}" if parts else "")
