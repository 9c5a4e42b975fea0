"""The alert rules pass promtool, and promtool's unit tests fire and clear every alert.

files/alerts.yaml is the one source: promtool checks and tests it, and the chart's
PrometheusRule carries it (the rendered rules are checked by promtool again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import (
    ALERTS_FILE,
    MONITORING_API,
    alert_names,
    load_alert_groups,
    one,
    render,
    run,
    tool,
)

TESTS_FILE = Path(__file__).with_name("alerts_test.yaml")

# The alerts the chart promises (README, NOTES.txt): one per failure a job can have, and
# one for the operator itself.
OPERATOR_ALERTS = {"SyncReplicasOperatorNotActing"}
REQUIRED = OPERATOR_ALERTS | {
    "SyncReplicasTrainingStalled",
    "SyncReplicasStalenessHigh",
    "SyncReplicasStaleGradientsDroppingFast",
    "SyncReplicasTokenQueueStarved",
    "SyncReplicasChiefRestartingRepeatedly",
    "SyncReplicasFewerThanRReplicas",
    "SyncReplicasDegraded",
}


def rules() -> list[dict[str, Any]]:
    return [r for g in load_alert_groups() for r in g["rules"]]


def test_promtool_check_rules() -> None:
    out = run([tool("promtool"), "check", "rules", str(ALERTS_FILE)])
    assert "SUCCESS" in out.stdout


def test_promtool_unit_tests_pass() -> None:
    out = run([tool("promtool"), "test", "rules", str(TESTS_FILE)], timeout=120)
    assert "SUCCESS" in out.stdout


def test_rendered_prometheusrule_passes_promtool(tmp_path: Path) -> None:
    rule = one(render(api_versions=[MONITORING_API]), "PrometheusRule")
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    run([tool("promtool"), "check", "rules", str(path)])


def test_the_promised_alerts_exist() -> None:
    assert set(alert_names(load_alert_groups())) == REQUIRED


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_alert_is_tested_firing_and_quiet(name: str) -> None:
    cases = [
        case
        for test in yaml.safe_load(TESTS_FILE.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == name
    ]
    assert [c for c in cases if c["exp_alerts"]], f"no test where {name} fires"
    assert [c for c in cases if not c["exp_alerts"]], f"no test where {name} stays quiet"


@pytest.mark.parametrize("rule", [r for r in rules() if "alert" in r], ids=lambda r: r["alert"])
def test_alerts_are_actionable(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert {"summary", "description"} <= set(rule["annotations"])
    if rule["alert"] in OPERATOR_ALERTS:
        # One alert per operator: its namespace named, the series grouped by it.
        for key, text in rule["annotations"].items():
            assert key == "runbook_url" or "$labels.namespace" in text
        assert "by (namespace)" in rule["expr"]
        return
    # One alert per job: every annotation a person reads names the job and its namespace.
    for key, text in rule["annotations"].items():
        if key != "runbook_url":
            assert "$labels.syncreplicas_job" in text and "$labels.namespace" in text
    assert "namespace, syncreplicas_job" in rule["expr"]


def test_chart_readme_documents_every_alert() -> None:
    readme = (ALERTS_FILE.parents[1] / "README.md").read_text()
    for name in alert_names(load_alert_groups()):
        assert f"`{name}`" in readme, f"{name} is missing from charts/syncreplicas/README.md"


RUNBOOKS = ALERTS_FILE.parents[3] / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/syncreplicas/syncreplicas/blob/main/docs/runbooks.md"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings, as GitHub and MkDocs both make them from a heading
    of letters only (lower case)."""
    return {line[3:].strip().lower() for line in markdown.splitlines() if line.startswith("## ")}


def test_every_alert_links_its_section_of_the_runbooks() -> None:
    anchors = heading_anchors(RUNBOOKS.read_text())
    alerts = [r for r in rules() if "alert" in r]
    for rule in alerts:
        url = rule["annotations"].get("runbook_url", "")
        assert url == f"{RUNBOOK_BASE}#{rule['alert'].lower()}", (rule["alert"], url)
        assert url.rsplit("#", 1)[1] in anchors, f"docs/runbooks.md has no {rule['alert']}"
    assert len(anchors) == len(alerts)  # and no section for an alert that is not there


def test_runbook_base_url_points_the_links_elsewhere() -> None:
    base = "https://wiki.example.org/ml/syncreplicas-runbooks"
    rendered = one(render(sets=[f"monitoring.prometheusRule.runbookBaseURL={base}"],
                          api_versions=[MONITORING_API]), "PrometheusRule")  # fmt: skip
    urls = {r["alert"]: r["annotations"]["runbook_url"]
            for g in rendered["spec"]["groups"] for r in g["rules"] if "alert" in r}  # fmt: skip
    assert urls == {name: f"{base}#{name.lower()}" for name in alert_names(load_alert_groups())}
