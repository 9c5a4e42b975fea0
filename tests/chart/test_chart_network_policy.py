"""The chart's NetworkPolicy setting reaches the operator: who may read the metrics port."""

from __future__ import annotations

import pytest
from chartlib import helm_template, one, render
from syncreplicas_operator import cli
from syncreplicas_operator.controller.settings import metrics_namespaces


def operator_args(sets: list[str]) -> list[str]:
    deployment = one(render(sets=sets), "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        ([], []),  # from anywhere
        (["networkPolicy.metricsFromNamespaces={monitoring}"], ["monitoring"]),
        (["networkPolicy.metricsFromNamespaces={monitoring,observability}"],
         ["monitoring", "observability"]),
    ],
)  # fmt: skip
def test_metrics_from_namespaces_become_the_operators_arguments(
    sets: list[str], named: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = operator_args(sets)
    parsed = cli.build_parser(args).parse_args(args)
    assert parsed.metrics_from_namespace == named
    # The operator's namespace (its pod's, from the downward API) is always added.
    monkeypatch.setenv("POD_NAMESPACE", "syncreplicas-system")
    expected = tuple(sorted({*named, "syncreplicas-system"})) if named else ()
    assert metrics_namespaces(parsed.metrics_from_namespace) == expected


@pytest.mark.parametrize("bad", ["{Monitoring}", "{a_b}", "{monitoring,monitoring}"])
def test_a_namespace_that_cannot_exist_is_refused_by_the_schema(bad: str) -> None:
    refused = helm_template(sets=[f"networkPolicy.metricsFromNamespaces={bad}"], check=False)
    assert refused.returncode != 0
    assert "metricsFromNamespaces" in refused.stderr, refused.stderr
