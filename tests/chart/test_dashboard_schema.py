"""The chart's dashboard against Grafana's own schema: loaded into grafana-foundation-sdk's
models (Grafana's types, generated from the schema Grafana 11.6 validates dashboards
with) and written back, it loses no field but those Grafana itself writes and the SDK
does not model, and changes no value it holds; what the SDK adds are the schema's
defaults, none of which would change what a user sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from chartlib import DASHBOARDS
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

# Written by Grafana's editor and not in the SDK's model: a query variable's
# `definition` is the query as its editor shows it (the model keeps `query` itself).
NOT_MODELLED = {"templating.list[].definition"}
# Defaults the SDK writes whose value decides what is drawn: the dashboard must say them
# itself rather than leave them to whichever default a Grafana version has.
MUST_BE_EXPLICIT = {"panels[].options.legend.showLegend"}


def flat(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) of every leaf, a list of objects indexed (``panels[3].title``), any
    other list a leaf."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flat(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for index, item in enumerate(value):
            yield from flat(item, f"{path}[{index}]")
    else:
        yield path, value


def shape(path: str) -> str:
    """panels[3].options.legend -> panels[].options.legend"""
    out, inside = [], False
    for char in path:
        if char == "[":
            inside = True
            out.append("[]")
        elif char == "]":
            inside = False
        elif not inside:
            out.append(char)
    return "".join(out)


@dataclass(frozen=True)
class RoundTrip:
    """One dashboard as the chart has it and as the SDK writes it back, and both flat."""

    name: str
    written: dict[str, Any]
    before: dict[str, Any]
    after: dict[str, Any]


@pytest.fixture(scope="module")
def dashboards() -> list[RoundTrip]:
    register_default_plugins()
    found = []
    for path in DASHBOARDS:
        source = json.loads(path.read_text())
        written = json.loads(json.dumps(Dashboard.from_json(source), cls=JSONEncoder))
        found.append(RoundTrip(path.name, written, dict(flat(source)), dict(flat(written))))
    assert found
    return found


def test_grafanas_schema_loses_only_what_it_does_not_model(dashboards: list[RoundTrip]) -> None:
    for d in dashboards:
        lost = {shape(p) for p in d.before.keys() - d.after.keys()}
        assert lost <= NOT_MODELLED, (d.name, sorted(lost - NOT_MODELLED))
        changed = {p: (d.before[p], d.after[p]) for p in d.before.keys() & d.after.keys()
                   if d.before[p] != d.after[p]}  # fmt: skip
        assert not changed, (d.name, changed)


def test_what_decides_the_picture_is_said_not_defaulted(dashboards: list[RoundTrip]) -> None:
    for d in dashboards:
        defaulted = {shape(p) for p in d.after.keys() - d.before.keys()}
        assert not defaulted & MUST_BE_EXPLICIT, (d.name, defaulted & MUST_BE_EXPLICIT)


def test_the_round_trip_is_stable(dashboards: list[RoundTrip]) -> None:
    """Written by the SDK, read and written again: the same document."""
    for d in dashboards:
        again = json.loads(json.dumps(Dashboard.from_json(d.written), cls=JSONEncoder))
        assert again == d.written, d.name
