"""The phases of a sync epoch, as stored in the ``phase`` variable on PS 0 (pure)."""

from __future__ import annotations

from enum import IntEnum


class Phase(IntEnum):
    """RESETTING -> GATHERING (replicas join) -> RUNNING (tokens flowing) -> DONE."""

    NONE = 0
    RESETTING = 1
    GATHERING = 2
    RUNNING = 3
    DONE = 4
