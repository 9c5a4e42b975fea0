"""The chart's Grafana dashboard as a Perses dashboard: `percli migrate`, then finished.

`percli migrate` (with the plugins' migration schemas) turns every panel, query, legend,
unit, threshold and row of the Grafana JSON into Perses'. What it cannot turn is
Grafana's data-source picker: a variable of type `datasource`, which becomes a
placeholder StaticListVariable ("grafana migration not supported") that every query then
names as its datasource. In Perses a dashboard without a datasource reference reads its
project's default datasource of the query's kind, which is what the picker chose in
Grafana, so `finish` drops the variable and the references to it. migrate also leaves
out the dashboard's refresh interval (Grafana's `refresh`), which `finish` copies to
Perses' `refreshInterval`. Everything else is migrate's own output; `not_migrated` finds
any placeholder migrate left behind, and the script refuses to write a dashboard with one.

Run: python3 dashboard.py --percli BIN --plugins DIR [--project P] GRAFANA_JSON > OUT.json
(DIR: the plugins unpacked, as the server unpacks its archives). The chart ships the
output as files/perses/syncreplicas.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

# What a migrated query names when the Grafana panel read the `datasource` variable.
PICKER = "${datasource}"
UNSUPPORTED = ["grafana", "migration", "not", "supported"]


def picker_variables(grafana: dict[str, Any]) -> list[str]:
    """The names of the Grafana dashboard's data-source pickers."""
    variables = grafana.get("templating", {}).get("list", [])
    return [v["name"] for v in variables if v.get("type") == "datasource"]


def _drop_picker_refs(node: Any, pickers: set[str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "datasource" and isinstance(value, dict) and value.get("name") in pickers:
                continue
            out[key] = _drop_picker_refs(value, pickers)
        return out
    if isinstance(node, list):
        return [_drop_picker_refs(item, pickers) for item in node]
    return node


def finish(migrated: dict[str, Any], grafana: dict[str, Any], *, project: str) -> dict[str, Any]:
    """The migrated dashboard without Grafana's data-source picker, in `project`."""
    names = picker_variables(grafana)
    pickers = {f"${{{n}}}" for n in names} | {f"${n}" for n in names}
    dashboard = _drop_picker_refs(migrated, pickers)
    spec = dashboard["spec"]
    spec["variables"] = [v for v in spec.get("variables", []) if v["spec"]["name"] not in names]
    if grafana.get("refresh") and "refreshInterval" not in spec:
        spec["refreshInterval"] = grafana["refresh"]
    # migrate's zero times and version: the server sets its own.
    dashboard["metadata"] = {"name": migrated["metadata"]["name"], "project": project}
    return dashboard


def not_migrated(dashboard: dict[str, Any]) -> list[str]:
    """Where the finished dashboard still holds one of migrate's placeholders."""
    found = []
    for key, panel in dashboard["spec"].get("panels", {}).items():
        if panel["spec"]["plugin"]["kind"] == "Markdown" and "not supported" in json.dumps(panel):
            found.append(f"panel {key} ({panel['spec']['display']['name']})")
    for variable in dashboard["spec"].get("variables", []):
        if variable["spec"].get("plugin", {}).get("spec", {}).get("values") == UNSUPPORTED:
            found.append(f"variable {variable['spec']['name']}")
    if PICKER in json.dumps(dashboard):
        found.append(f"a reference to {PICKER}")
    return found


def migrate(percli: str, plugins: str, grafana_path: str) -> dict[str, Any]:
    """`percli migrate` of the Grafana JSON, offline, with the plugins in `plugins`."""
    out = subprocess.run(
        [percli, "migrate", "-f", grafana_path, "--plugin.path", plugins, "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--percli", required=True)
    parser.add_argument("--plugins", required=True, help="the plugins, unpacked")
    parser.add_argument("--project", default="syncreplicas")
    parser.add_argument("grafana")
    args = parser.parse_args(argv)
    with open(args.grafana, encoding="utf-8") as f:
        grafana = json.load(f)
    migrated = migrate(args.percli, args.plugins, args.grafana)
    dashboard = finish(migrated, grafana, project=args.project)
    left = not_migrated(dashboard)
    if left:
        print(f"dashboard.py: not migrated: {', '.join(left)}", file=sys.stderr)
        return 1
    json.dump(dashboard, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
