"""Prometheus text exposition -> metric families and flat values, for every reader.

The controller reads the chief's global step with it; the local runner reads every
replica's metrics with it. Parsing only: fetching the text is the caller's business.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> tuple[Metric, ...]:
    """Parse Prometheus text exposition into metric families (ValueError when malformed)."""
    return tuple(iter_families(text))


def iter_families(text: str) -> Iterator[Metric]:
    """The families of ``text`` one by one: a reader that stops early parses no further."""
    yield from text_string_to_metric_families(text)


def first_value(families: Iterable[Metric], name: str) -> float | None:
    """The first sample's value of the family called ``name``, or None if it has none."""
    for family in families:
        if family.name == name:
            for sample in family.samples:
                return float(sample.value)
    return None


def series_key(name: str, labels: Mapping[str, str]) -> str:
    """Key of one labelled series in flat values: ``name{k=v,...}`` (labels sorted)."""
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def flatten(families: Iterable[Metric]) -> dict[str, float]:
    """Sample name -> value, summed over label sets (histogram buckets left out).

    Buckets would be noise here: the live view and report use sums and counts (means
    over an interval); the aggregated endpoint keeps the buckets.
    """
    values: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
            if sample.labels:
                # Labelled series are also kept one by one, e.g. the eval metric per name.
                values[series_key(sample.name, sample.labels)] = float(sample.value)
    return values
