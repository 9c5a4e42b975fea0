"""Stragglers: whose gradients the accumulators drop most, and when to evict it.

Pure. Each replica's ``syncreplicas_stale_gradients_dropped_total`` over
``syncreplicas_gradients_pushed_total``, measured over a window of scrapes, is its drop
fraction. A replica is flagged (``status.straggler``, condition StragglerDetected) once its
fraction exceeds the threshold, and cleared only when it falls below half of it
(hysteresis: a replica hovering at the threshold does not flap). Under
``runPolicy.stragglerPolicy`` a replica flagged for ``evictAfterSeconds`` has its pod
deleted, so that the scheduler may place it on another node; the caller decides who may be
evicted (never a PS or the chief, one at a time).

Evidence is of one pod: a replica's counts come from the pod that holds it now (a scrape
of a pod since replaced, still in flight when it was replaced, says nothing about the new
one), and a replica is evicted only at a pass that measured it, never on a flag alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from syncreplicas_api.types import StragglerPolicy

from .timefmt import format_time, parse_time

# Flag a replica above this fraction when the job sets no stragglerPolicy (the policy's
# default).
DEFAULT_MIN_DROP_FRACTION: Final[float] = StragglerPolicy.model_fields["min_drop_fraction"].default
# Fewer pushes than this in the window say nothing about a replica.
MIN_PUSHES: Final = 5


@dataclass(frozen=True)
class GradientCounts:
    """A replica's two counters at one scrape, and the uid of the pod they were read from
    ("" when unknown)."""

    pushed: float
    dropped: float
    pod: str = ""


Scrape = Mapping[str, GradientCounts]  # replica key -> counters


def drop_fractions(
    window: Sequence[Scrape],
    holders: Mapping[str, str] | None = None,
    min_pushes: int = MIN_PUSHES,
) -> dict[str, float]:
    """Dropped over pushed between each replica's first and last scrape in ``window``.

    Only scrapes of the pod the last one read count (another pod is another process).
    With ``holders`` (replica key -> uid of the pod that holds it now), a replica whose
    last scrape read another pod is left out. Counters that went down belong to a new
    process in the same pod: its counts since it started are the window's. Replicas with
    fewer than ``min_pushes`` pushes in the window are left out.
    """
    if not window:
        return {}
    out: dict[str, float] = {}
    for replica, last in window[-1].items():
        if holders is not None and holders.get(replica) != last.pod:
            continue
        first = next(s[replica] for s in window if replica in s and s[replica].pod == last.pod)
        pushed, dropped = last.pushed - first.pushed, last.dropped - first.dropped
        if pushed < 0 or dropped < 0:
            pushed, dropped = last.pushed, last.dropped
        if pushed >= min_pushes:
            out[replica] = min(1.0, max(0.0, dropped / pushed))
    return out


@dataclass(frozen=True)
class StragglerDecision:
    state: dict[str, Any] | None  # the new status.straggler
    detected: str | None = None  # newly flagged replica
    cleared: str | None = None  # replica no longer flagged (recovered, not evicted)
    evict: str | None = None  # replica whose pod goes now
    evict_in: float | None = None  # seconds until the flagged replica is due


def decide_straggler(
    state: Mapping[str, Any] | None,
    fractions: Mapping[str, float] | None,
    threshold: float,
    evict_after_seconds: int | None,
    now: datetime,
    evictable: Callable[[str], bool],
) -> StragglerDecision:
    """Flag, keep, clear or evict, from the last ``status.straggler`` and this pass's
    fractions (None: not measured this pass, the flag stays as it is)."""
    current = dict(state) if state else None
    detected = cleared = None
    measured = fractions or {}
    if current is not None:
        fraction = measured.get(current["replica"])
        if fraction is not None and fraction < threshold / 2:
            cleared, current = current["replica"], None
        elif fraction is not None:
            current["dropFraction"] = round(fraction, 3)
    if current is None:
        above = [(f, r) for r, f in measured.items() if f > threshold and r != cleared]
        if above:
            fraction, replica = max(above)
            current = {
                "replica": replica,
                "dropFraction": round(fraction, 3),
                "since": format_time(now),
            }
            detected = replica
    if current is None or evict_after_seconds is None:
        return StragglerDecision(current, detected, cleared)
    since = parse_time(current.get("since")) or now
    remaining = evict_after_seconds - (now - since).total_seconds()
    if remaining > 0:
        return StragglerDecision(current, detected, cleared, evict_in=remaining)
    # Due: evicted at a pass that measured it again (between reads the flag may be older
    # than the pod that holds the replica now; the next read decides).
    if current["replica"] in measured and evictable(current["replica"]):
        return StragglerDecision(None, detected, cleared, evict=current["replica"])
    return StragglerDecision(current, detected, cleared)


def straggler_message(state: Mapping[str, Any], threshold: float) -> str:
    return (
        f"{state['replica']}: {100 * float(state['dropFraction']):.0f}% of its gradients "
        f"dropped as stale (threshold {100 * threshold:.0f}%)"
    )
