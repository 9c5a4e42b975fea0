"""Progress and estimated time to completion from the global step (pure).

The rate is a moving average of the steps per second between the operator's reads of the
global step that saw it move (each read weighs ``NEWEST_WEIGHT``), so a pause or a restart
shows within a few reads without one slow read swinging the estimate. A step that goes back
(a parameter server's loss rolled the job back to a snapshot or checkpoint) is no rate at
all: the average keeps its last value.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

NEWEST_WEIGHT: Final = 0.5


def step_rate(previous: float | None, steps: int, seconds: float) -> float | None:
    """The moving average after ``steps`` more in ``seconds``; ``previous`` when the step
    did not go forward or no time passed."""
    if steps <= 0 or seconds <= 0:
        return previous
    sample = steps / seconds
    return sample if previous is None else NEWEST_WEIGHT * sample + (1 - NEWEST_WEIGHT) * previous


def percent(step: int, max_steps: int) -> str:
    """``42%``: the share of maxSteps done, whole percents, 100% at most."""
    return f"{min(100, max(0, step) * 100 // max(1, max_steps))}%"


def remaining_seconds(step: int, max_steps: int, rate: float | None) -> float | None:
    """Seconds until maxSteps at ``rate``; None without a rate, 0 once there."""
    if step >= max_steps:
        return 0.0
    return (max_steps - step) / rate if rate else None


def duration(seconds: float) -> str:
    """A duration as kubectl prints ages: ``45s``, ``3m20s``, ``2h5m``, ``3d4h``."""
    whole = max(0, round(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def completion(now: datetime, seconds: float) -> datetime:
    """When the job should reach maxSteps, to the second."""
    return (now + timedelta(seconds=seconds)).replace(microsecond=0)


def summary(step: float | None, max_steps: int, rate: float | None) -> str:
    """``42%, ETA 3m20s`` (the percentage alone without a rate, "" without a step): what
    the local live view shows beside the global step."""
    if step is None:
        return ""
    done = percent(int(step), max_steps)
    left = remaining_seconds(int(step), max_steps, rate)
    return f"{done}, ETA {duration(left)}" if left else done
