"""The chart's Perses dashboard (files/perses/syncreplicas.json) against its one source,
the Grafana dashboard: what `percli migrate` carried over, panel by panel, and the short
list of what it did not, each with what was done about it. The file itself is written by
hack/cluster/perses/dashboard.py with the percli and plugins `make cluster MONITORING=1`
builds; the cluster's browser test (tests/cluster/test_dashboard_browser.py) holds it
equal to what migrating the Grafana JSON gives there and then, and draws it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import pytest
from chartlib import CHART, REPO, by_kind, render

GRAFANA = json.loads((CHART / "files" / "dashboards" / "syncreplicas.json").read_text())
PERSES = json.loads((CHART / "files" / "perses" / "syncreplicas.json").read_text())

# Grafana's units as Perses names them (cue/common/migrate/mapping.cue of Perses v0.51.0).
UNITS = {"short": "decimal", "none": "decimal", "percentunit": "percent-decimal",
         "s": "seconds"}  # fmt: skip
CALCS = {"lastNotNull": "last-number", "max": "max"}

# What migrate does not carry over, and what was done.
NOT_MIGRATED = {
    # Grafana's data-source picker has no Perses counterpart: migrate makes it a
    # placeholder list ("grafana migration not supported") that every query names.
    # dashboard.py drops it and the references: a query without a datasource reads the
    # project's default Prometheus datasource, the one the picker chose in Grafana.
    "variable datasource": "dropped by dashboard.py",
    # The dashboard's refresh interval: dashboard.py copies it to refreshInterval.
    "refresh": "copied by dashboard.py",
    # Grafana's "ops" unit (ops/s) is not in migrate's table, and Perses' "counts/sec"
    # (from Grafana's "cps") is too long for a legend's columns: the rates' panels say
    # "/s" in their titles and use "short".
    "unit ops": "not used in the Grafana JSON",
}


def _load_finisher() -> Any:
    path = REPO / "hack" / "cluster" / "perses" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("perses_dashboard", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


finisher = _load_finisher()


def grafana_panels() -> list[tuple[str, dict[str, Any]]]:
    """(row title, panel) for every panel that is not a row, in order."""
    out, row = [], ""
    for panel in GRAFANA["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        else:
            out.append((row, panel))
    return out


def perses_panel(title: str) -> dict[str, Any]:
    found = [p["spec"] for p in PERSES["spec"]["panels"].values()
             if p["spec"]["display"]["name"] == title]  # fmt: skip
    assert len(found) == 1, f"{title}: {len(found)} Perses panels"
    return found[0]


@pytest.mark.parametrize("row,panel", grafana_panels(), ids=lambda p: p if isinstance(p, str)
                         else p["title"])  # fmt: skip
def test_every_panel_carries_its_queries_legends_unit_and_thresholds(
        row: str, panel: dict[str, Any]) -> None:  # fmt: skip
    spec = perses_panel(panel["title"])
    assert spec["display"].get("description") == panel.get("description")
    kind = {"stat": "StatChart", "timeseries": "TimeSeriesChart"}[panel["type"]]
    assert spec["plugin"]["kind"] == kind
    queries = [q["spec"]["plugin"]["spec"] for q in spec["queries"]]
    assert [q["query"] for q in queries] == [t["expr"] for t in panel["targets"]]
    assert [q.get("seriesNameFormat", "") for q in queries] == \
        [t.get("legendFormat", "") for t in panel["targets"]]
    assert all("datasource" not in q for q in queries), "the project's default datasource"
    defaults = panel["fieldConfig"]["defaults"]
    chart = spec["plugin"]["spec"]
    fmt = chart.get("format") or chart.get("yAxis", {}).get("format") or {}
    assert fmt.get("unit") == UNITS[defaults["unit"]], (defaults["unit"], fmt)
    if "decimals" in defaults:
        assert fmt.get("decimalPlaces") == defaults["decimals"]
    if panel["type"] == "timeseries":
        assert chart["yAxis"].get("min") == defaults.get("min")
        legend = panel["options"]["legend"]
        assert chart["legend"]["mode"] == legend["displayMode"]
        assert chart["legend"]["position"] == legend["placement"]
        assert chart["legend"]["values"] == [CALCS[c] for c in legend["calcs"]]
    else:
        steps = defaults["thresholds"]["steps"]
        migrated = chart["thresholds"]["steps"]
        assert [s["color"] for s in migrated] == [s["color"] for s in steps]
        assert [s["value"] for s in migrated[1:]] == [s["value"] for s in steps[1:]]
        assert chart["calculation"] == CALCS[panel["options"]["reduceOptions"]["calcs"][0]]


def test_rows_become_grids_with_their_panels_in_order() -> None:
    rows: dict[str, list[str]] = {}
    for row, panel in grafana_panels():
        rows.setdefault(row, []).append(panel["title"])
    panels = PERSES["spec"]["panels"]
    grids = {}
    for layout in PERSES["spec"]["layouts"]:
        items = sorted(layout["spec"]["items"], key=lambda i: (i["y"], i["x"]))
        grids[layout["spec"]["display"]["title"]] = [
            panels[i["content"]["$ref"].rsplit("/", 1)[1]]["spec"]["display"]["name"]
            for i in items]  # fmt: skip
    assert grids == rows


def test_variables_and_what_did_not_migrate() -> None:
    grafana_vars = GRAFANA["templating"]["list"]
    pickers = finisher.picker_variables(GRAFANA)
    assert pickers == ["datasource"] and "variable datasource" in NOT_MIGRATED
    perses_vars = {v["spec"]["name"]: v["spec"] for v in PERSES["spec"]["variables"]}
    assert list(perses_vars) == [v["name"] for v in grafana_vars if v["name"] not in pickers]
    for variable in grafana_vars:
        if variable["name"] in pickers:
            continue
        spec = perses_vars[variable["name"]]
        assert spec["plugin"]["kind"] == "PrometheusLabelValuesVariable"
        assert spec["allowMultiple"] == variable["multi"]
        assert spec["allowAllValue"] == variable["includeAll"]
        label = spec["plugin"]["spec"]["labelName"]
        assert variable["definition"].endswith(f", {label})")
    assert PERSES["spec"]["refreshInterval"] == GRAFANA["refresh"]
    assert PERSES["spec"]["duration"] == GRAFANA["time"]["from"].removeprefix("now-")
    assert finisher.not_migrated(PERSES) == []
    units = {p["fieldConfig"]["defaults"]["unit"] for _, p in grafana_panels()}
    assert units <= set(UNITS), f"units migrate may not know: {units - set(UNITS)}"


def test_finish_drops_the_picker_and_keeps_the_rest() -> None:
    migrated = {
        "kind": "Dashboard",
        "metadata": {"name": "d", "project": "", "version": 0},
        "spec": {
            "variables": [
                {"kind": "ListVariable", "spec": {"name": "datasource", "plugin": {
                    "kind": "StaticListVariable", "spec": {"values": finisher.UNSUPPORTED}}}},
                {"kind": "ListVariable", "spec": {"name": "job", "plugin": {
                    "kind": "PrometheusLabelValuesVariable", "spec": {"labelName": "job"}}}},
            ],
            "panels": {"0_0": {"kind": "Panel", "spec": {
                "display": {"name": "p"}, "plugin": {"kind": "StatChart", "spec": {}},
                "queries": [{"kind": "TimeSeriesQuery", "spec": {"plugin": {
                    "kind": "PrometheusTimeSeriesQuery", "spec": {
                        "datasource": {"kind": "PrometheusDatasource",
                                       "name": "${datasource}"},
                        "query": "up"}}}}]}}},
        },
    }  # fmt: skip
    assert finisher.not_migrated(migrated) == ["variable datasource",
                                               "a reference to ${datasource}"]
    grafana = {"refresh": "30s", "templating": {"list": [{"name": "datasource",
                                                          "type": "datasource"}]}}
    done = finisher.finish(migrated, grafana, project="ml")
    assert done["metadata"] == {"name": "d", "project": "ml"}
    assert [v["spec"]["name"] for v in done["spec"]["variables"]] == ["job"]
    query = done["spec"]["panels"]["0_0"]["spec"]["queries"][0]["spec"]["plugin"]["spec"]
    assert query == {"query": "up"}
    assert done["spec"]["refreshInterval"] == "30s"
    assert finisher.not_migrated(done) == []


def test_the_chart_renders_the_dashboard_for_perses_only_when_asked() -> None:
    assert not [o for o in render() if o["metadata"]["name"].endswith("-dashboard")]
    cm = by_kind(render(sets=["monitoring.perses.enabled=true",
                              "monitoring.perses.project=ml"]), "ConfigMap")  # fmt: skip
    cm = [o for o in cm if o["metadata"]["labels"].get("perses.dev/resource") == "true"]
    assert len(cm) == 1
    dashboard = json.loads(cm[0]["data"]["syncreplicas.json"])
    assert dashboard["metadata"] == {"name": PERSES["metadata"]["name"], "project": "ml"}
    assert dashboard["spec"] == PERSES["spec"]
    crs = by_kind(render(sets=["monitoring.perses.enabled=true",
                               "monitoring.perses.kind=PersesDashboard"]),
                  "PersesDashboard")  # fmt: skip
    assert len(crs) == 1 and crs[0]["apiVersion"] == "perses.dev/v1alpha1"
    assert crs[0]["spec"] == PERSES["spec"]
