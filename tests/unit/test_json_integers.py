"""Integers as the API server reads them from JSON, where the judges of a manifest (the API
server, `syncreplicas validate`, the runtime's settings parser) disagreed:

* A number beyond int64 (``2**63``) is not an integer to the API server ("must be of type
  integer"), whatever the field's format: the types refuse it too (``JsonInteger``), so
  validate and the runtime's parser no longer take it.
* An integral float (``2.0``) passes the schema's ``type: integer``; a CEL rule reading the
  value refuses it ("expected int, got float64"). Only some integers had a rule, so the API
  server took ``batchSize: 2.0`` and refused ``workers: 2.0``; the types refuse both. Every
  integer of the spec now has its bounds as a rule.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, Field
from syncreplicas_api import crd
from syncreplicas_api import types as api
from syncreplicas_api.fields import INT64_MAX, INT64_MIN, Int32
from syncreplicas_api.fields_walk import fields
from syncreplicas_api.problems import validate
from syncreplicas_runtime.foundation import config as cluster

from tests.unit.test_crd import SCHEMA


def integers(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths below ``spec`` of every integer field of ``model``."""
    found = []
    for view in fields(model):
        if isinstance(view.base, type) and issubclass(view.base, BaseModel):
            found += integers(view.base, (*prefix, view.key))
        elif view.base is int:
            found.append((*prefix, view.key))
    return found


INTEGERS = integers(api.JobSpec)


def spec_with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicasToAggregate": 1, "workers": 0, "model": {"entrypoint": "m:f"}}
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if path[0] == "runPolicy" and path[1] == "schedulingPolicy":
        node.setdefault("gangScheduler", "Coscheduling")
    if path[0] == "runPolicy" and path[1] == "stragglerPolicy":
        node.setdefault("evictAfterSeconds", 60)
    if path[0] == "elasticPolicy":
        node.setdefault("maxWorkers", 1)
    node[path[-1]] = value
    return spec


def test_every_integer_of_the_spec_is_found() -> None:
    assert len(INTEGERS) >= 20
    assert {("workers",), ("training", "batchSize"), ("runPolicy", "backoffLimit")} <= set(
        INTEGERS
    )


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(("spec", *path))


@pytest.mark.parametrize("path", INTEGERS, ids=dotted)
def test_beyond_int64_is_refused_naming_the_field(path: tuple[str, ...]) -> None:
    for value in (INT64_MAX + 1, 2**64, INT64_MIN - 1):
        _, problems = validate(api.JobSpec, spec_with(path, value), "spec")
        assert [p.path for p in problems] == [dotted(path)], problems


@pytest.mark.parametrize("path", INTEGERS, ids=dotted)
def test_an_integral_float_is_refused_naming_the_field(path: tuple[str, ...]) -> None:
    _, problems = validate(api.JobSpec, spec_with(path, 1.0), "spec")
    assert [(p.path, p.message) for p in problems] == [
        (dotted(path), "must be an integer, got number")
    ]


@pytest.mark.parametrize("path", INTEGERS, ids=dotted)
def test_every_integer_of_the_crd_has_a_rule_that_reads_it(path: tuple[str, ...]) -> None:
    node = SCHEMA["properties"]["spec"]
    for key in path:
        node = node["properties"][key]
    assert node["type"] == "integer"
    rules = [r["rule"] for r in node.get("x-kubernetes-validations", [])]
    assert any("self" in r and "oldSelf" not in r for r in rules), rules


def test_an_integer_of_the_spec_without_a_bound_is_a_generator_error() -> None:
    class Unbounded(BaseModel):
        count: Int32 = Field(0, description="no bound")

    with pytest.raises(ValueError, match="count: an integer of the spec needs a bound"):
        crd.model_schema(Unbounded)


def test_the_int64_edge_itself_is_an_integer() -> None:
    _, problems = validate(api.JobSpec, spec_with(("training", "maxSteps"), INT64_MAX), "spec")
    assert problems == []


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"training": {"maxSteps": INT64_MAX + 1}}, "training.maxSteps"),
        ({"initialTokens": 2**64}, "initialTokens"),
        ({"training": {"batchSize": 32.0}}, "training.batchSize"),
        ({"workers": 0.0}, "workers"),
    ],
)
def test_the_runtime_refuses_them_naming_the_field(settings: dict[str, Any], field: str) -> None:
    job = {"replicasToAggregate": 1, "workers": 0, "parameterServers": 1, **settings}
    with pytest.raises(cluster.ConfigError) as caught:
        cluster.parse_job(json.dumps(job))
    assert caught.value.field == field
