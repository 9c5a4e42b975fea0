"""Time series drawn from scraped samples: pure, shared by the live view, summary and plots.

Counters restart from zero when a replica restarts, so totals add up the increases of
every incarnation instead of reading the last value.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Final

from ..core import metricnames, metricstext
from .scrape import Sample

Point = tuple[float, float]

# Flat keys of the held-out metric's series start so (metricstext.series_key).
_EVAL_PREFIX: Final = f"{metricnames.EVAL_METRIC}{{{metricnames.EVAL_METRIC_NAME_LABEL}="
_ACCURACY: Final = metricstext.series_key(
    metricnames.EVAL_METRIC, {metricnames.EVAL_METRIC_NAME_LABEL: "accuracy"}
)


def by_replica(history: Iterable[Sample]) -> dict[str, list[Sample]]:
    """Samples grouped by replica, each group in time order."""
    out: dict[str, list[Sample]] = {}
    for sample in sorted(history, key=lambda s: s.at):
        out.setdefault(sample.replica, []).append(sample)
    return out


def series(samples: Sequence[Sample], name: str) -> list[Point]:
    """(seconds, value) of one metric for one replica."""
    return [(s.at, v) for s in samples if (v := s.values.get(name)) is not None]


def eval_series(history: Iterable[Sample]) -> str | None:
    """Flat key of the model's held-out metric (``accuracy`` first), if the chief exports one."""
    keys = sorted({n for s in history for n in s.values if n.startswith(_EVAL_PREFIX)})
    preferred = [k for k in keys if k == _ACCURACY]
    return (preferred or keys or [None])[0]


def eval_label(key: str | None) -> str | None:
    """``syncreplicas_eval_metric{name=accuracy}`` -> ``accuracy``."""
    return key[len(_EVAL_PREFIX) : -1] if key else None


def global_step_series(history: Iterable[Sample]) -> list[Point]:
    """Every reported global step, over time (replicas interleaved)."""
    return [
        (s.at, v)
        for s in sorted(history, key=lambda s: s.at)
        if (v := s.values.get(metricnames.GLOBAL_STEP)) is not None
    ]


def progress_series(history: Iterable[Sample]) -> list[Point]:
    """The highest global step reported so far, over time: the job's progress.

    Each replica reports the step it saw after its own last step, so the raw values of
    different replicas interleave out of order; the running maximum is the job's step.
    """
    out: list[Point] = []
    highest = 0.0
    for at, step in global_step_series(history):
        highest = max(highest, step)
        out.append((at, highest))
    return out


def steps_per_second(points: Sequence[Point], window: float = 2.0) -> list[Point]:
    """Rate of the global step over windows of about ``window`` seconds (drops count as 0)."""
    out: list[Point] = []
    if not points:
        return out
    start_at, start_step = points[0]
    for at, step in points[1:]:
        if at - start_at >= window:
            out.append((at, max(0.0, (step - start_step) / (at - start_at))))
            start_at, start_step = at, step
    return out


def mean_staleness(samples: Sequence[Sample]) -> list[Point]:
    """Mean staleness (in steps) of the gradients pushed between two scrapes of a replica."""
    out: list[Point] = []
    previous: tuple[float, float] | None = None
    for sample in samples:
        total = sample.values.get(metricnames.GRADIENT_STALENESS_SUM)
        count = sample.values.get(metricnames.GRADIENT_STALENESS_COUNT)
        if total is None or count is None:
            continue
        if previous is not None and count > previous[1]:
            out.append((sample.at, (total - previous[0]) / (count - previous[1])))
        previous = (total, count)  # also resets the baseline after a process restart
    return out


def counter_total(points: Sequence[Point]) -> float:
    """Sum of increases, treating a drop as a process restart that began again at zero."""
    total = 0.0
    previous = 0.0
    for _, value in points:
        total += value - previous if value >= previous else value
        previous = value
    return total


def aggregating_fewer(coordinator: Sequence[Sample]) -> tuple[int | None, float]:
    """(the lowest R below the spec's, seconds spent below it) from PS 0's samples in time
    order: each sample's R holds until the next sample. (None, 0.0) when R never dropped."""
    lowest: int | None = None
    seconds = 0.0
    for this, following in itertools.pairwise(coordinator):
        r = this.values.get(metricnames.REPLICAS_TO_AGGREGATE)
        spec = this.values.get(metricnames.SPEC_REPLICAS_TO_AGGREGATE)
        if r is not None and spec is not None and r < spec:
            lowest = int(r) if lowest is None else min(lowest, int(r))
            seconds += following.at - this.at
    return lowest, seconds


def last(points: Sequence[Point]) -> float | None:
    """The latest value of a series, None when it is empty."""
    return points[-1][1] if points else None
