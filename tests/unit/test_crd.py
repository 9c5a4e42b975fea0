"""The CRD and spec.py accept and reject the same manifests, naming the same field.

The CRD side is checked the way the API server checks a custom resource: structural
defaults applied, unknown fields rejected (kubectl's strict field validation), the OpenAPI
v3 schema (openapi-schema-validator) and the ``x-kubernetes-validations`` CEL rules
(cel-python, with the two functions of the API server's CEL libraries the rules use),
including transition rules against an old object, each rule's ``fieldPath`` and its
``messageExpression``. The same bad manifests (the tables below and the files in
tests/fixtures/invalid) then go through ``syncreplicas validate``.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy import celtypes
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30Validator
from syncreplicas_api import types as api_types
from syncreplicas_operator import cli
from syncreplicas_operator.core import naming, podtemplate, recovery, spec, tfconfig
from syncreplicas_operator.core.enums import (
    ChiefRestartPolicy,
    CleanPodPolicy,
    Optimizer,
    RestartPolicy,
)

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "syncreplicasjobs.yaml"
CRD = yaml.safe_load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


class _Missing:
    """No value: the key is absent. A stable repr: test ids show it (pytest-xdist's workers
    must collect the same ids)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()

# --- an API-server-like checker for the CRD ---------------------------------------------


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: a missing property with a default gets it, recursively."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = apply_defaults(sub, out[key])
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], v) for v in value]
    return value


def unknown_fields(schema: dict[str, Any], value: Any, path: str) -> list[tuple[str, str]]:
    if schema.get("x-kubernetes-preserve-unknown-fields") or not isinstance(value, dict):
        return []
    properties = schema.get("properties")
    if properties is None:
        return []
    problems = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in properties:
            problems.append((where, "unknown field"))
        else:
            problems.extend(unknown_fields(properties[key], item, where))
    return problems


def go_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """``pattern`` as Go's regexp (the API server) reads it: ``$`` is the very end of the
    text, and classes like ``\\w`` are ASCII. Python's ``$`` also matches before a final
    newline."""
    if not isinstance(instance, str):
        return
    anchored = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
    if re.search(anchored, instance, re.ASCII) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


GoPatternValidator = validators.extend(OAS30Validator, {"pattern": go_pattern})


def field_path(parts: Any) -> str:
    """``spec.template.spec.containers[1].image``: list indices in brackets, as the API
    server writes a field path."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def schema_errors(value: Any) -> list[tuple[str, str]]:
    problems = []
    for error in GoPatternValidator(SCHEMA).iter_errors(value):
        path = field_path(error.absolute_path)
        if error.validator == "required":
            missing = re.match(r"'([^']+)'", error.message)
            if missing:
                path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        problems.append((path, error.message))
    return problems


def index_of(items: Any, value: Any) -> celtypes.IntType:
    """``list.indexOf(value)`` of the API server's CEL list library (not in cel-python)."""
    return celtypes.IntType(next((i for i, item in enumerate(items) if item == value), -1))


def format_string(template: Any, args: Any) -> celtypes.StringType:
    """``string.format([args])`` of the API server's CEL string library, for the ``%d`` and
    ``%s`` verbs the rules use (not in cel-python)."""
    values = iter(args)
    return celtypes.StringType(re.sub(r"%[ds]", lambda _: str(next(values)), str(template)))


KUBERNETES_CEL_FUNCTIONS = {"indexOf": index_of, "format": format_string}


@cache
def program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=KUBERNETES_CEL_FUNCTIONS)


def to_cel(schema: dict[str, Any], value: Any) -> Any:
    """Typed like the API server types it: the schema says int or double, not the JSON."""
    kind = schema.get("type")
    if kind == "integer":
        return celtypes.IntType(value)
    if kind == "number":
        return celtypes.DoubleType(value)
    if kind == "object" and "properties" in schema and isinstance(value, dict):
        properties = schema["properties"]
        return celtypes.MapType(
            {
                celtypes.StringType(k): (
                    to_cel(properties[k], v) if k in properties else celpy.json_to_cel(v)
                )
                for k, v in value.items()
            }
        )
    return celpy.json_to_cel(value)


def cel_errors(schema: dict[str, Any], new: Any, old: Any, path: str) -> list[tuple[str, str]]:
    problems = []
    for rule in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is MISSING:
            continue  # transition rules run on updates of fields that existed before
        activation = {"self": to_cel(schema, new)}
        if transition:
            activation["oldSelf"] = to_cel(schema, old)
        try:
            result = program(rule["rule"]).evaluate(activation)
        except celpy.CELEvalError as err:
            result = err
        if result is not True and result != celtypes.BoolType(True):
            where = path + rule.get("fieldPath", "")
            problems.append((where, rule_message(rule, activation)))
    if isinstance(new, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in new:
                before = old.get(key, MISSING) if isinstance(old, dict) else MISSING
                where = f"{path}.{key}" if path else key
                problems.extend(cel_errors(sub, new[key], before, where))
    return problems


def rule_message(rule: dict[str, Any], activation: dict[str, Any]) -> str:
    """The message of a failed rule: its messageExpression's value, else (also when that
    fails, as on the API server) its message, else the rule."""
    if "messageExpression" in rule:
        try:
            return str(program(rule["messageExpression"]).evaluate(activation))
        except celpy.CELEvalError:
            pass
    return str(rule.get("message", rule["rule"]))


def crd_problems(
    manifest: dict[str, Any], old: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """What the API server would say about creating ``manifest`` (or updating ``old``)."""
    new = apply_defaults(SCHEMA, manifest)
    problems = unknown_fields(SCHEMA, new, "") + schema_errors(new)
    if problems:
        return problems  # values of the wrong type never reach the CEL rules
    previous = apply_defaults(SCHEMA, old) if old is not None else MISSING
    return cel_errors(SCHEMA, new, previous, "")


def names_field(problems: list[tuple[str, str]], field: str) -> bool:
    """A problem at ``field``, or a message naming it (rules on a parent or the root)."""
    relative = field.removeprefix("spec.")
    return any(path == field or relative in message for path, message in problems)


# --- manifests ----------------------------------------------------------------------------


def minimal() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "tests/fixtures/manifests/minimal.yaml").read_text())


def full() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "tests/fixtures/manifests/full.yaml").read_text())


def fixture(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "tests/fixtures/manifests" / name).read_text())


def elastic(**spec: Any) -> dict[str, Any]:
    """minimal.yaml (R 2, 2 workers) with elasticPolicy 1..6 and ``spec`` on top."""
    manifest = minimal()
    manifest["spec"].update({"elasticPolicy": {"minWorkers": 1, "maxWorkers": 6}, **spec})
    return manifest


def with_value(base: Callable[[], dict[str, Any]], dotted: str, value: Any) -> dict[str, Any]:
    """``base()`` with the field at ``dotted`` set (or removed when value is MISSING)."""
    manifest = base()
    parts = dotted.split(".")
    node = manifest
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if value is MISSING:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return manifest


GOOD = [
    pytest.param(minimal(), id="minimal"),
    pytest.param(full(), id="full"),
    pytest.param(with_value(minimal, "spec.workers", 0), id="no-workers"),
    pytest.param(with_value(minimal, "spec.replicasToAggregate", 7), id="R-above-replicas"),
    pytest.param(with_value(full, "spec.minReplicasToAggregate", 3), id="min-R-equals-R"),
    pytest.param(with_value(minimal, "spec.training.checkpointDir", ""), id="no-checkpoints"),
    pytest.param(with_value(minimal, "spec.metrics.port", 0), id="metrics-off"),
    pytest.param(with_value(minimal, "spec.tensorboard", {}), id="tensorboard"),
    pytest.param(with_value(minimal, "spec.tensorboard", {"port": 8080}), id="tensorboard-port"),
    pytest.param(with_value(minimal, "spec.managedBy", "kueue.x-k8s.io/multikueue"),
                 id="managed-by-multikueue"),
    pytest.param(with_value(minimal, "spec.training.learningRate", 1), id="integer-rate"),
    pytest.param(with_value(minimal, "spec.stallTimeoutSeconds", 0), id="stall-off"),
    pytest.param(
        with_value(minimal, "spec.runPolicy.stragglerPolicy", {"evictAfterSeconds": 300}),
        id="straggler-policy",
    ),
    pytest.param(
        with_value(
            minimal,
            "spec.runPolicy.stragglerPolicy",
            {"evictAfterSeconds": 1, "minDropFraction": 1},
        ),
        id="straggler-policy-bounds",
    ),
    pytest.param(with_value(minimal, "metadata.name", "a" * 51), id="longest-name"),
    pytest.param(with_value(minimal, "spec.elasticPolicy", {"minWorkers": 1, "maxWorkers": 6}),
                 id="elastic"),
    pytest.param(with_value(minimal, "spec.elasticPolicy", {"minWorkers": 2, "maxWorkers": 2}),
                 id="elastic-at-both-bounds"),
    pytest.param(elastic(workers=0, minReplicasToAggregate=1, elasticPolicy={"maxWorkers": 4}),
                 id="elastic-from-zero"),
    pytest.param(with_value(minimal, "spec.model.args", {"hidden": [64, 32]}), id="args"),
    pytest.param(
        with_value(minimal, "spec.runPolicy.schedulingPolicy",
                   {"gangScheduler": "Coscheduling", "scheduleTimeoutSeconds": 60}),
        id="coscheduling",
    ),
    pytest.param(
        with_value(minimal, "spec.runPolicy.schedulingPolicy",
                   {"gangScheduler": "Volcano", "queue": "q", "schedulerName": "vc"}),
        id="volcano",
    ),
    # Learning-rate schedules and the optimizers' own settings.
    pytest.param(with_value(minimal, "spec.training.learningRateSchedule", {"warmupSteps": 10}),
                 id="warm-up-only"),
    pytest.param(with_value(minimal, "spec.training.learningRateSchedule",
                            {"decay": "Exponential", "decaySteps": 100, "decayRate": 0.5,
                             "staircase": True, "warmupSteps": 5}),
                 id="exponential"),
    pytest.param(with_value(minimal, "spec.training.learningRateSchedule",
                            {"decay": "Cosine", "decaySteps": 100, "alpha": 0.1}), id="cosine"),
    pytest.param(with_value(minimal, "spec.training.learningRateSchedule",
                            {"decay": "Piecewise", "steps": [{"step": 20, "rate": 0.01},
                                                             {"step": 10, "rate": 0.05}]}),
                 id="piecewise"),
    pytest.param(with_value(minimal, "spec.training",
                            {"optimizer": "momentum", "momentum": 0.5, "nesterov": True,
                             "clipGradientNorm": 5}), id="momentum-settings"),
    pytest.param(with_value(minimal, "spec.training",
                            {"optimizer": "adam", "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}),
                 id="adam-settings"),
    pytest.param(with_value(minimal, "spec.training",
                            {"optimizer": "rmsprop", "momentum": 0.1, "epsilon": 1e-6}),
                 id="rmsprop-settings"),
    pytest.param(with_value(minimal, "spec.training.warmStart", {"checkpoint": "/pretrained"}),
                 id="warm-start"),
    pytest.param(with_value(minimal, "spec.training.warmStart",
                            {"checkpoint": "/p/model.ckpt-100", "variables": "m/(?!head/).*"}),
                 id="warm-start-pattern"),
    # Pod templates: which container is the runtime's, and sidecars with images.
    pytest.param(fixture("tfjob-style.yaml"), id="tfjob-style"),
    pytest.param(with_value(minimal, "spec.template.spec.containers", [{"name": "trainer"}]),
                 id="only-container"),
    pytest.param(
        with_value(minimal, "spec.template.spec.containers",
                   [{"name": "tensorflow"}, {"name": "side", "image": "s:1"}]),
        id="sidecar-with-image",
    ),
    pytest.param(
        with_value(full, "spec.worker.template.spec.containers",
                   [{"name": "log-shipper", "resources": {"limits": {"memory": "64Mi"}}}]),
        id="role-overrides-a-sidecar",
    ),
    pytest.param(with_value(minimal, "spec.chief.template.spec.containers", [{"name": "main"}]),
                 id="role-only-container"),
    pytest.param(
        with_value(
            lambda: with_value(minimal, "spec.template.spec.containers", [{"name": "trainer"}]),
            "spec.ps.template.spec.containers", [{"name": "trainer"}, {"name": "tensorflow"}],
        ),
        id="role-names-the-runtime-container",
    ),
]  # fmt: skip

# (field set, value, field the problem must name)
BAD = [
    ("spec.training", {"momentum": 0.5}, "spec.training.momentum"),
    ("spec.training", {"optimizer": "adam", "momentum": 0.5}, "spec.training.momentum"),
    ("spec.training", {"optimizer": "rmsprop", "nesterov": True}, "spec.training.nesterov"),
    ("spec.training", {"optimizer": "momentum", "beta1": 0.5}, "spec.training.beta1"),
    ("spec.training", {"optimizer": "sgd", "beta2": 0.5}, "spec.training.beta2"),
    ("spec.training", {"optimizer": "adagrad", "epsilon": 0.1}, "spec.training.epsilon"),
    ("spec.training", {"optimizer": "adam", "beta1": 1.5}, "spec.training.beta1"),
    ("spec.training", {"optimizer": "adam", "epsilon": 0}, "spec.training.epsilon"),
    ("spec.training.clipGradientNorm", 0, "spec.training.clipGradientNorm"),
    ("spec.training.warmStart", {}, "spec.training.warmStart.checkpoint"),
    ("spec.training.warmStart", {"checkpoint": "pretrained"},
     "spec.training.warmStart.checkpoint"),
    ("spec.training.warmStart", {"checkpoint": "/p", "variables": ""},
     "spec.training.warmStart.variables"),
    ("spec.training.learningRateSchedule", {"decay": "Linear"},
     "spec.training.learningRateSchedule.decay"),
    ("spec.training.learningRateSchedule", {"warmupSteps": -1},
     "spec.training.learningRateSchedule.warmupSteps"),
    ("spec.training.learningRateSchedule", {"decay": "Exponential", "decaySteps": 10},
     "spec.training.learningRateSchedule.decayRate"),
    ("spec.training.learningRateSchedule", {"decay": "Exponential", "decayRate": 0.5},
     "spec.training.learningRateSchedule.decaySteps"),
    ("spec.training.learningRateSchedule", {"decay": "Cosine"},
     "spec.training.learningRateSchedule.decaySteps"),
    ("spec.training.learningRateSchedule", {"decay": "Cosine", "decaySteps": 0},
     "spec.training.learningRateSchedule.decaySteps"),
    ("spec.training.learningRateSchedule",
     {"decay": "Exponential", "decaySteps": 10, "decayRate": 1.5},
     "spec.training.learningRateSchedule.decayRate"),
    ("spec.training.learningRateSchedule", {"decay": "Cosine", "decaySteps": 10, "alpha": 2},
     "spec.training.learningRateSchedule.alpha"),
    ("spec.training.learningRateSchedule", {"decay": "Cosine", "decaySteps": 10,
                                            "decayRate": 0.5},
     "spec.training.learningRateSchedule.decayRate"),
    ("spec.training.learningRateSchedule", {"staircase": True},
     "spec.training.learningRateSchedule.staircase"),
    ("spec.training.learningRateSchedule", {"decay": "Exponential", "decaySteps": 10,
                                            "decayRate": 0.5, "alpha": 0.1},
     "spec.training.learningRateSchedule.alpha"),
    ("spec.training.learningRateSchedule", {"decay": "Piecewise"},
     "spec.training.learningRateSchedule.steps"),
    ("spec.training.learningRateSchedule", {"decay": "Piecewise", "steps": []},
     "spec.training.learningRateSchedule.steps"),
    ("spec.training.learningRateSchedule", {"steps": [{"step": 5, "rate": 0.1}]},
     "spec.training.learningRateSchedule.steps"),
    ("spec.training.learningRateSchedule",
     {"decay": "Piecewise", "steps": [{"step": 5, "rate": 0.1}, {"step": 5, "rate": 0.2}]},
     "spec.training.learningRateSchedule.steps"),
    ("spec.training.learningRateSchedule",
     {"decay": "Piecewise", "steps": [{"step": 0, "rate": 0.1}]},
     "spec.training.learningRateSchedule.steps[0].step"),
    ("spec.training.learningRateSchedule",
     {"decay": "Piecewise", "steps": [{"step": 5, "rate": 0}]},
     "spec.training.learningRateSchedule.steps[0].rate"),
    ("spec.training.learningRateSchedule",
     {"decay": "Piecewise", "steps": [{"step": 5}]},
     "spec.training.learningRateSchedule.steps[0].rate"),
    ("spec.replicasToAggregate", MISSING, "spec.replicasToAggregate"),
    ("spec.replicasToAggregate", 0, "spec.replicasToAggregate"),
    ("spec.replicasToAggregate", "2", "spec.replicasToAggregate"),
    ("spec.replicasToAggregate", 1.5, "spec.replicasToAggregate"),
    ("spec.minReplicasToAggregate", 0, "spec.minReplicasToAggregate"),
    ("spec.minReplicasToAggregate", 4, "spec.minReplicasToAggregate"),
    ("spec.minReplicasToAggregate", "1", "spec.minReplicasToAggregate"),
    ("spec.workers", MISSING, "spec.workers"),
    ("spec.workers", -1, "spec.workers"),
    ("spec.workers", 10001, "spec.workers"),
    ("spec.parameterServers", 0, "spec.parameterServers"),
    ("spec.parameterServers", True, "spec.parameterServers"),
    ("spec.initialTokens", -1, "spec.initialTokens"),
    ("spec.model", MISSING, "spec.model"),
    ("spec.model.entrypoint", MISSING, "spec.model.entrypoint"),
    ("spec.model.entrypoint", "no_function", "spec.model.entrypoint"),
    ("spec.model.entrypoint", "pkg.mod:1fn", "spec.model.entrypoint"),
    ("spec.model.entrypoint", "pkg mod:fn", "spec.model.entrypoint"),
    ("spec.model.entrypoint", "pkg.mod:fn\n", "spec.model.entrypoint"),
    ("spec.model.entrypoint", "m:" + "f" * 252, "spec.model.entrypoint"),
    ("spec.model.args", [1, 2], "spec.model.args"),
    ("spec.model.kwargs", {}, "spec.model.kwargs"),
    ("spec.training", "fast", "spec.training"),
    ("spec.training.optimizer", "adamw", "spec.training.optimizer"),
    ("spec.training.learningRate", 0, "spec.training.learningRate"),
    ("spec.training.learningRate", -0.1, "spec.training.learningRate"),
    ("spec.training.learningRate", "0.1", "spec.training.learningRate"),
    ("spec.training.batchSize", 0, "spec.training.batchSize"),
    ("spec.training.maxSteps", 0, "spec.training.maxSteps"),
    ("spec.training.checkpointDir", "relative/dir", "spec.training.checkpointDir"),
    ("spec.training.checkpointDir", "/" + "d" * 1024, "spec.training.checkpointDir"),
    ("spec.training.checkpointEverySteps", 0, "spec.training.checkpointEverySteps"),
    ("spec.training.snapshotEverySteps", -1, "spec.training.snapshotEverySteps"),
    ("spec.training.logEverySteps", 0, "spec.training.logEverySteps"),
    ("spec.training.summaryEverySteps", -1, "spec.training.summaryEverySteps"),
    ("spec.training.evalEverySteps", -1, "spec.training.evalEverySteps"),
    ("spec.training.seed", -1, "spec.training.seed"),
    ("spec.training.startupTimeoutSeconds", 0, "spec.training.startupTimeoutSeconds"),
    ("spec.training.chiefLostTimeoutSeconds", 0, "spec.training.chiefLostTimeoutSeconds"),
    ("spec.training.packVariables", "yes", "spec.training.packVariables"),
    ("spec.training.packMinBytesPerPS", -1, "spec.training.packMinBytesPerPS"),
    ("spec.training.batch_size", 32, "spec.training.batch_size"),
    ("spec.metrics.port", 2222, "spec.metrics.port"),
    ("spec.tensorboard.port", 2222, "spec.tensorboard.port"),
    ("spec.tensorboard.port", 9090, "spec.tensorboard.port"),  # metrics.port's default
    ("spec.tensorboard.port", 0, "spec.tensorboard.port"),
    ("spec.tensorboard", "yes", "spec.tensorboard"),
    ("spec.managedBy", "multikueue", "spec.managedBy"),
    ("spec.managedBy", "Kueue.x-k8s.io/multikueue", "spec.managedBy"),
    ("spec.managedBy", "example.com/" + "c" * 60, "spec.managedBy"),
    ("spec.metrics.port", 70000, "spec.metrics.port"),
    ("spec.metrics.port", -1, "spec.metrics.port"),
    ("spec.image", "", "spec.image"),
    ("spec.image", 5, "spec.image"),
    ("spec.image", "r/" + "i" * 1023, "spec.image"),
    ("spec.template", "pod", "spec.template"),
    ("spec.ps.template", [1], "spec.ps.template"),
    ("spec.template.spec", "pod", "spec.template.spec"),
    ("spec.template.spec.containers", {"name": "a"}, "spec.template.spec.containers"),
    ("spec.template.spec.containers", ["a"], "spec.template.spec.containers[0]"),
    (
        "spec.template.spec.containers",
        [{"name": "a" * 64}],
        "spec.template.spec.containers[0].name",
    ),
    (
        "spec.template.spec.containers",
        [{"name": "syncreplicas", "image": ""}],
        "spec.template.spec.containers[0].image",
    ),
    (
        "spec.template.spec.containers",
        [{"name": f"c{i}", "image": "i"} for i in range(33)],
        "spec.template.spec.containers",
    ),
    (
        "spec.template.spec.containers",
        [{"name": "syncreplicas"}, {"name": "tensorflow"}, {"name": "side"}],
        "spec.template.spec.containers[2].image",
    ),
    (
        "spec.worker.template.spec.containers",
        [{"name": 5}],
        "spec.worker.template.spec.containers[0].name",
    ),
    ("spec.worker.replicas", 3, "spec.worker.replicas"),
    ("spec.runPolicy.restartPolicy", "Always", "spec.runPolicy.restartPolicy"),
    ("spec.runPolicy.backoffLimit", -1, "spec.runPolicy.backoffLimit"),
    ("spec.runPolicy.activeDeadlineSeconds", 0, "spec.runPolicy.activeDeadlineSeconds"),
    ("spec.runPolicy.ttlSecondsAfterFinished", -1, "spec.runPolicy.ttlSecondsAfterFinished"),
    ("spec.runPolicy.cleanPodPolicy", "Some", "spec.runPolicy.cleanPodPolicy"),
    ("spec.runPolicy.suspend", "yes", "spec.runPolicy.suspend"),
    (
        "spec.runPolicy.stragglerPolicy.evictAfterSeconds",
        0,
        "spec.runPolicy.stragglerPolicy.evictAfterSeconds",
    ),
    (
        "spec.runPolicy.stragglerPolicy",
        {"minDropFraction": 0.5},
        "spec.runPolicy.stragglerPolicy.evictAfterSeconds",
    ),
    (
        "spec.runPolicy.stragglerPolicy",
        {"evictAfterSeconds": 60, "minDropFraction": 1.5},
        "spec.runPolicy.stragglerPolicy.minDropFraction",
    ),
    (
        "spec.runPolicy.stragglerPolicy",
        {"evictAfterSeconds": 60, "minDropFraction": 0},
        "spec.runPolicy.stragglerPolicy.minDropFraction",
    ),
    (
        "spec.runPolicy.stragglerPolicy",
        {"evictAfterSeconds": 60, "dropFraction": 0.5},
        "spec.runPolicy.stragglerPolicy.dropFraction",
    ),
    ("spec.runPolicy.schedulingPolicy", "volcano", "spec.runPolicy.schedulingPolicy"),
    ("spec.runPolicy.schedulingPolicy", {}, "spec.runPolicy.schedulingPolicy.gangScheduler"),
    ("spec.runPolicy.schedulingPolicy", {"gangScheduler": "Kueue"},
     "spec.runPolicy.schedulingPolicy.gangScheduler"),
    ("spec.runPolicy.schedulingPolicy", {"gangScheduler": "Volcano", "scheduleTimeoutSeconds": 9},
     "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"),
    ("spec.runPolicy.schedulingPolicy", {"gangScheduler": "Coscheduling", "queue": "q"},
     "spec.runPolicy.schedulingPolicy.queue"),
    ("spec.runPolicy.schedulingPolicy", {"gangScheduler": "Coscheduling",
                                         "scheduleTimeoutSeconds": 0},
     "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"),
    ("spec.runPolicy.schedulingPolicy", {"gangScheduler": "Volcano", "schedulerName": ""},
     "spec.runPolicy.schedulingPolicy.schedulerName"),
    ("spec.runPolicy.schedulingPolicy", {"gangScheduler": "Volcano", "minMember": 3},
     "spec.runPolicy.schedulingPolicy.minMember"),
    ("spec.chiefRestartPolicy", "Ignore", "spec.chiefRestartPolicy"),
    ("spec.stallTimeoutSeconds", -1, "spec.stallTimeoutSeconds"),
    ("spec.replicaToAggregate", 2, "spec.replicaToAggregate"),
    ("specs", {"workers": 1}, "specs"),
    ("metadata.name", "Bad_Name", "metadata.name"),
    ("metadata.name", "1starts-with-digit", "metadata.name"),
    ("metadata.name", "a" * 52, "metadata.name"),
    # elasticPolicy on minimal.yaml (R 2, 2 workers): its bounds hold workers, and the chief
    # with minWorkers workers must be able to make an update.
    ("spec.elasticPolicy", {"minWorkers": 3, "maxWorkers": 6}, "spec.workers"),
    ("spec.elasticPolicy", {"minWorkers": 1, "maxWorkers": 1}, "spec.workers"),
    ("spec.elasticPolicy", {"minWorkers": 4, "maxWorkers": 3}, "spec.elasticPolicy.minWorkers"),
    ("spec.elasticPolicy", {"maxWorkers": 4}, "spec.minReplicasToAggregate"),
    ("spec.elasticPolicy", {"minWorkers": 1}, "spec.elasticPolicy.maxWorkers"),
    ("spec.elasticPolicy", {"minWorkers": 1, "maxWorkers": 0}, "spec.elasticPolicy.maxWorkers"),
    ("spec.elasticPolicy", {"minWorkers": -1, "maxWorkers": 4},
     "spec.elasticPolicy.minWorkers"),
    ("spec.elasticPolicy", {"minWorkers": 1, "maxWorkers": 4, "stepWorkers": 1},
     "spec.elasticPolicy.stepWorkers"),
]
INVALID_FILES = sorted((ROOT / "tests/fixtures/invalid").glob("*.yaml"))


def invalid_fixture(path: Path) -> tuple[dict[str, Any], str]:
    """An invalid manifest and the field its first line says the problem names."""
    text = path.read_text()
    named = re.match(r"# names: (\S+)\n", text)
    assert named, f"{path}: the first line must be '# names: <field path>'"
    return yaml.safe_load(text), named.group(1)


# (manifest, the field the problem must name): the table above on minimal.yaml, then the
# files in tests/fixtures/invalid.
BAD_MANIFESTS = [
    pytest.param(with_value(minimal, field, value), named, id=f"{field}={value!r}"[:60])
    for field, value, named in BAD
] + [pytest.param(*invalid_fixture(path), id=path.name) for path in INVALID_FILES]

# Updates of full.yaml: (field, new value, the field the refusal names or None if allowed).
TRANSITIONS = [
    ("spec.replicasToAggregate", 2, "spec.replicasToAggregate"),
    ("spec.minReplicasToAggregate", 1, "spec.minReplicasToAggregate"),
    ("spec.workers", 4, "spec.workers"),
    ("spec.parameterServers", 1, "spec.parameterServers"),
    ("spec.initialTokens", 0, "spec.initialTokens"),
    ("spec.model.entrypoint", "other.module:build", "spec.model.entrypoint"),
    ("spec.training.maxSteps", 5000, "spec.training"),
    ("spec.training.learningRate", 0.5, "spec.training"),
    ("spec.metrics.port", 9191, "spec.metrics"),
    ("spec.tensorboard", {}, "spec.tensorboard"),
    ("spec.runPolicy.suspend", True, None),
    ("spec.runPolicy.backoffLimit", 1, None),
    ("spec.runPolicy.ttlSecondsAfterFinished", 60, None),
    ("spec.runPolicy.stragglerPolicy", {"evictAfterSeconds": 120}, None),
    ("spec.chiefRestartPolicy", "Fail", None),
    ("spec.stallTimeoutSeconds", 30, None),
    ("spec.image", "example.org/runtime:2", None),
    ("spec.model.args", {"hidden": [8]}, None),
    ("spec.elasticPolicy", {"minWorkers": 1, "maxWorkers": 6}, "spec.elasticPolicy"),
    # Its replicas are addressed through the job's Service: no spare can take one over.
    ("spec.runPolicy.spares", 1, "spec.runPolicy.spares"),
    ("spec.runPolicy.spares", 0, None),
]

# Updates of an elastic job (minimal.yaml with elasticPolicy 1..6, 2 workers): (field, new
# value, the field the refusal names or None if allowed).
ELASTIC_TRANSITIONS = [
    ("spec.workers", 4, None),
    ("spec.workers", 1, None),
    ("spec.workers", 6, None),
    ("spec.elasticPolicy", MISSING, "spec.elasticPolicy"),
    ("spec.elasticPolicy.maxWorkers", 8, "spec.elasticPolicy.maxWorkers"),
    ("spec.elasticPolicy.minWorkers", 0, "spec.elasticPolicy.minWorkers"),
    ("spec.replicasToAggregate", 1, "spec.replicasToAggregate"),
]


# --- the CRD object itself ----------------------------------------------------------------


def test_crd_identity() -> None:
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["metadata"]["name"] == naming.CRD_NAME
    names = CRD["spec"]["names"]
    assert (CRD["spec"]["group"], names["kind"], names["plural"], names["singular"]) == (
        naming.GROUP,
        naming.KIND,
        naming.PLURAL,
        naming.SINGULAR,
    )
    assert names["shortNames"] == [naming.SHORT_NAME]
    assert [v["name"] for v in CRD["spec"]["versions"]] == [naming.VERSION]
    assert VERSION["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.workers",
            "statusReplicasPath": ".status.workers",
            "labelSelectorPath": ".status.workerSelector",
        },
    }
    columns = {c["name"]: c["jsonPath"] for c in VERSION["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Step"] == ".status.globalStep"
    assert columns["Ready"] == ".status.ready"
    assert columns["Age"] == ".metadata.creationTimestamp"
    assert columns["Worker-Pods"] == ".status.workers"


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(CRD, "1.35.0", strict=True)


def _walk(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for key, sub in schema.get("properties", {}).items():
        nodes.extend(_walk(sub, f"{path}.{key}"))
    if "items" in schema:
        nodes.extend(_walk(schema["items"], f"{path}[]"))
    return nodes


def test_schema_is_structural_and_documented() -> None:
    for path, node in _walk(SCHEMA, ""):
        assert "type" in node, f"{path}: structural schemas need a type"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object", path
    for path, node in _walk(SCHEMA["properties"]["spec"], "spec"):
        assert node.get("description"), f"{path}: no description"


def test_status_fields_are_in_the_schema() -> None:
    status = SCHEMA["properties"]["status"]["properties"]
    for key in (
        "phase",
        "ready",
        "conditions",
        "replicaStatuses",
        "globalStep",
        "chiefRestarts",
        "lastCleanup",
        "startTime",
        "completionTime",
        "observedGeneration",
    ):
        assert key in status
    assert set(status["phase"]["enum"]) == set(naming.PHASES)
    assert set(status["replicaStatuses"]["properties"]) == set(naming.REPLICA_TYPES)


def test_a_full_status_fits_the_schema() -> None:
    """Every status field the operator writes is in the schema: a real API server prunes
    unknown status fields silently (the status subresource has no strict mode)."""
    counts = {"active": 1, "succeeded": 0, "failed": 0, "restarts": 2}
    status = {
        "phase": "Running",
        "ready": "4/5",
        "conditions": [
            {
                "type": "Running",
                "status": "True",
                "reason": "JobRunning",
                "message": "the chief and every PS are running",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            }
        ],
        "replicaStatuses": {"ps": counts, "chief": counts, "worker": counts},
        "globalStep": 1200,
        "replicasToAggregate": 2,
        "liveReplicas": 2,
        "restoredStep": 1100,
        "lastRecovery": {
            "replica": "ps-0",
            "cause": "ContainerRestarted",
            "message": "job-ps-0 restarted after exiting with KILLED (137)",
            "startedAt": "2026-01-02T03:04:05Z",
            "recoveredAt": "2026-01-02T03:05:05Z",
            "globalStepBefore": 1150,
            "resumedFrom": 1100,
            "stepsLost": 50,
        },
        "straggler": {
            "replica": "worker-2",
            "dropFraction": 0.8,
            "since": "2026-01-02T03:04:05Z",
        },
        "lastProgressTime": "2026-01-02T03:04:05Z",
        "progress": "42%",
        "stepsPerSecond": 8.5,
        "eta": "3m20s",
        "estimatedCompletionTime": "2026-01-02T03:07:25Z",
        "chiefRestarts": 1,
        "chief": {"uid": "3c1e", "restartCount": 1},
        "restartJob": {"round": 1, "since": "2026-01-02T03:04:05Z"},
        "recreations": {"ps": 1, "chief": 0, "worker": 2},
        "lastCleanup": {
            "time": "2026-01-02T03:04:05Z",
            "policy": "ResetSyncState",
            "reason": "the chief container restarted",
        },
        "startTime": "2026-01-02T03:04:05Z",
        "completionTime": "2026-01-02T04:04:05Z",
        "observedGeneration": 2,
        "message": "",
    }
    manifest = {**minimal(), "status": status}
    assert crd_problems(manifest) == []
    assert crd_problems({**minimal(), "status": {**status, "percentDone": 1}}) == [
        ("status.percentDone", "unknown field")
    ]


def test_defaults_pass_their_own_rules() -> None:
    """The API server refuses a CRD whose default fails a rule of its own node, and checks
    the default as written: ``metrics: {default: {}}`` without ``port`` (the nested
    default is not applied first), so a rule reading ``self.port`` must ask ``has``."""
    checked = 0
    for path, node in _walk(SCHEMA, ""):
        if "default" not in node:
            continue
        for rule in node.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"]:
                continue
            try:
                result = program(rule["rule"]).evaluate({"self": to_cel(node, node["default"])})
            except celpy.CELEvalError as err:
                result = err
            assert result == celtypes.BoolType(True), (path, rule["rule"], result)
            checked += 1
    assert checked


def test_enums_and_defaults_match_the_types() -> None:
    props = SCHEMA["properties"]["spec"]["properties"]
    training = props["training"]["properties"]
    run_policy = props["runPolicy"]["properties"]
    assert tuple(training["optimizer"]["enum"]) == tuple(Optimizer)
    assert tuple(run_policy["restartPolicy"]["enum"]) == tuple(RestartPolicy)
    assert tuple(run_policy["cleanPodPolicy"]["enum"]) == tuple(CleanPodPolicy)
    assert tuple(props["chiefRestartPolicy"]["enum"]) == tuple(ChiefRestartPolicy)
    assert props["model"]["properties"]["entrypoint"]["pattern"] == api_types.ENTRYPOINT.pattern
    assert training["checkpointDir"]["pattern"] == api_types.CHECKPOINT_DIR.pattern
    entrypoint = props["model"]["properties"]["entrypoint"]
    assert entrypoint["maxLength"] == api_types.MAX_ENTRYPOINT_LENGTH
    assert training["checkpointDir"]["maxLength"] == api_types.MAX_PATH_LENGTH
    assert props["image"]["maxLength"] == api_types.MAX_IMAGE_LENGTH
    assert props["workers"]["maximum"] == naming.MAX_WORKERS
    assert props["parameterServers"]["maximum"] == naming.MAX_PARAMETER_SERVERS
    # The CRD's defaults, applied by the API server, are the ones spec.py applies.
    manifest = minimal()
    defaulted = apply_defaults(SCHEMA, manifest)
    assert spec.parse_job(defaulted) == spec.parse_job(manifest)
    settings = tfconfig.job_settings(spec.parse_job(manifest).spec)
    for key in ("parameterServers", "initialTokens", "chiefRestartPolicy"):
        assert defaulted["spec"][key] == settings[key], key
    # The settings name every key; one the CRD leaves out without a default is null there.
    assert defaulted["spec"]["training"] == {k: v for k, v in settings["training"].items()
                                             if v is not None}  # fmt: skip
    assert defaulted["spec"]["metrics"] == settings["metrics"]
    parsed = spec.parse_job(manifest).spec
    assert defaulted["spec"]["stallTimeoutSeconds"] == parsed.stall_timeout_seconds
    assert defaulted["spec"]["runPolicy"] == {
        "restartPolicy": parsed.run_policy.restart_policy,
        "backoffLimit": parsed.run_policy.backoff_limit,
        "warmRestarts": parsed.run_policy.warm_restarts,
        "spares": parsed.run_policy.spares,
        "cleanPodPolicy": parsed.run_policy.clean_pod_policy,
        "suspend": parsed.run_policy.suspend,
    }


def test_template_containers_match_podtemplate_py() -> None:
    """Every template (spec.template and each role's) declares the containers its CEL
    rules read, with the bounds spec.py checks and the runtime container's names."""
    props = SCHEMA["properties"]["spec"]["properties"]
    roles = [props[r]["properties"]["template"] for r in naming.REPLICA_TYPES]
    templates = [props["template"], *roles]
    for template in templates:
        containers = template["properties"]["spec"]["properties"]["containers"]
        assert containers["maxItems"] == podtemplate.MAX_CONTAINERS
        item = containers["items"]
        assert item["required"] == ["name"]
        assert item["properties"]["name"]["maxLength"] == podtemplate.MAX_CONTAINER_NAME_LENGTH
        assert item["properties"]["image"]["maxLength"] == api_types.MAX_IMAGE_LENGTH
    names = str(list(podtemplate.RUNTIME_CONTAINER_NAMES))
    base = props["template"]["properties"]["spec"]["properties"]["containers"]
    at_spec = SCHEMA["properties"]["spec"]["x-kubernetes-validations"]
    rules = [*base["x-kubernetes-validations"], *at_spec]
    paths = {r.get("fieldPath") for r in rules if names in r["rule"]}
    assert paths == {None} | {f".{r}.template.spec.containers" for r in naming.REPLICA_TYPES}


def test_immutable_fields_match_spec_py() -> None:
    props = SCHEMA["properties"]["spec"]["properties"]

    def immutable(node: dict[str, Any]) -> bool:
        return any(r["rule"] == "self == oldSelf" for r in node.get("x-kubernetes-validations", []))

    in_crd = {k for k, v in props.items() if immutable(v)} | {
        f"{parent}.{k}"
        for parent in ("model", "elasticPolicy", "tensorboard")
        for k, v in props[parent]["properties"].items()
        if immutable(v)
    }
    assert in_crd == set(spec.IMMUTABLE_FIELDS)


# --- good and bad manifests on both sides -------------------------------------------------


@pytest.mark.parametrize("manifest", GOOD)
def test_good_manifests_pass_both(manifest: dict[str, Any]) -> None:
    assert crd_problems(manifest) == []
    spec.parse_job(manifest)


def test_invalid_fixtures_are_found() -> None:
    assert len(INVALID_FILES) >= 5


@pytest.mark.parametrize(("manifest", "named"), BAD_MANIFESTS)
def test_bad_manifests_fail_both_naming_the_field(manifest: dict[str, Any], named: str) -> None:
    problems = crd_problems(manifest)
    assert names_field(problems, named), problems
    with pytest.raises(spec.SpecError) as caught:
        spec.parse_job(manifest)
    assert named in [p.path for p in caught.value.problems], caught.value.problems


@pytest.mark.parametrize(("manifest", "named"), BAD_MANIFESTS)
def test_bad_manifests_through_validate(
    manifest: dict[str, Any], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert cli.main(["validate", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(f": {named}: " in line for line in lines), lines


def test_all_problems_reported_at_once() -> None:
    manifest = minimal()
    manifest["spec"].update(replicasToAggregate=0, workers=-2, chiefRestartPolicy="x")
    manifest["spec"]["training"] = {"batchSize": 0, "optimizer": "sgdd"}
    with pytest.raises(spec.SpecError) as caught:
        spec.parse_job(manifest)
    assert {p.path for p in caught.value.problems} == {
        "spec.replicasToAggregate",
        "spec.workers",
        "spec.chiefRestartPolicy",
        "spec.training.batchSize",
        "spec.training.optimizer",
    }


@pytest.mark.parametrize(("field", "value", "refused"), TRANSITIONS)
def test_updates_same_on_both_sides(field: str, value: Any, refused: str | None) -> None:
    old = full()
    new = with_value(full, field, value)
    assert crd_problems(new) == []
    update = crd_problems(new, old)
    assert [path for path, _ in update] == ([refused] if refused else []), update
    changes = spec.immutable_changes(spec.parse_job(old).spec, spec.parse_job(new).spec)
    assert [p.path for p in changes] == ([refused] if refused else [])


def with_tensorboard() -> dict[str, Any]:
    return with_value(full, "spec.tensorboard", {"port": 6006})


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        ("spec.tensorboard.port", 6007, "spec.tensorboard.port"),
        ("spec.tensorboard", MISSING, "spec.tensorboard"),
        ("spec.tensorboard.port", MISSING, None),  # its default: the same port
    ],
)
def test_tensorboard_stays_as_the_job_was_created(
    field: str, value: Any, refused: str | None
) -> None:
    old = with_tensorboard()
    new = with_value(with_tensorboard, field, value)
    assert [path for path, _ in crd_problems(new, old)] == ([refused] if refused else [])
    changes = spec.immutable_changes(spec.parse_job(old).spec, spec.parse_job(new).spec)
    assert [p.path for p in changes] == ([refused] if refused else [])


@pytest.mark.parametrize("spares", [0, 1, 3])
def test_a_job_with_spares_may_change_them(spares: int) -> None:
    """Created with spares (a Service per replica), a job may keep any number, even 0."""
    old = with_value(full, "spec.runPolicy.spares", 2)
    new = with_value(lambda: old, "spec.runPolicy.spares", spares)
    assert crd_problems(new, old) == []
    assert spec.immutable_changes(spec.parse_job(old).spec, spec.parse_job(new).spec) == []


@pytest.mark.parametrize(("field", "value", "refused"), ELASTIC_TRANSITIONS)
def test_elastic_updates_same_on_both_sides(field: str, value: Any, refused: str | None) -> None:
    old = elastic(minReplicasToAggregate=1)
    new = with_value(lambda: elastic(minReplicasToAggregate=1), field, value)
    assert crd_problems(new) == []
    update = crd_problems(new, old)
    assert [path for path, _ in update] == ([refused] if refused else []), update
    changes = spec.immutable_changes(spec.parse_job(old).spec, spec.parse_job(new).spec)
    assert [p.path for p in changes] == ([refused] if refused else [])


def test_scaling_out_of_bounds_names_workers() -> None:
    """An update (kubectl scale) beyond the bounds fails like a create, naming spec.workers
    with the bounds."""
    old = elastic(minReplicasToAggregate=1)
    said = "spec.workers must be in [1, 6] (spec.elasticPolicy.minWorkers..maxWorkers)"
    for workers in (7, 0):
        problems = crd_problems(with_value(lambda: old, "spec.workers", workers), old)
        assert problems == [("spec.workers", f"{said}, got {workers}")]
        with pytest.raises(spec.SpecError) as caught:
            spec.parse_job(with_value(lambda: old, "spec.workers", workers))
        assert [p.path for p in caught.value.problems] == ["spec.workers"]


def test_adding_a_default_is_not_a_change() -> None:
    """Stored objects carry defaults; a re-apply without them must not trip immutability."""
    old = apply_defaults(SCHEMA, minimal())
    assert crd_problems(minimal(), old) == []
    assert spec.immutable_changes(spec.parse_job(old).spec, spec.parse_job(minimal()).spec) == []


# --- validate: the file level -------------------------------------------------------------


def run_validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    code = cli.main(["validate", str(path)])
    return code, capsys.readouterr().out


def test_validate_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_validate(tmp_path, yaml.safe_dump(full()), capsys)
    assert code == 0
    assert out.startswith("valid")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("replicas: [1, 2\n", "not valid YAML (line 2)"),
        ("", "no YAML documents"),
        ("- a\n- b\n", "expected a SyncReplicasJob object, got a YAML list"),
        ("apiVersion: v1\nkind: ConfigMap\n", "kind: expected SyncReplicasJob, got 'ConfigMap'"),
        (
            yaml.safe_dump(with_value(minimal, "apiVersion", "syncreplicas.io/v1")),
            "apiVersion: must be syncreplicas.io/v1alpha1",
        ),
        (
            yaml.safe_dump(with_value(minimal, "metadata", MISSING)),
            "metadata: is required",
        ),
        (
            yaml.safe_dump(with_value(minimal, "spec", MISSING)),
            "spec: is required",
        ),
    ],
    ids=["not-yaml", "empty", "list", "wrong-kind", "wrong-version", "no-metadata", "no-spec"],
)
def test_validate_rejects_files_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    code, out = run_validate(tmp_path, text, capsys)
    assert code == 1
    assert expected in out, out


def test_validate_multi_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = yaml.safe_dump(minimal())
    bad = yaml.safe_dump(with_value(minimal, "spec.workers", -1))
    code, out = run_validate(tmp_path, f"{good}---\n{bad}", capsys)
    assert code == 1
    assert out.strip().splitlines() == [
        f"{tmp_path / 'job.yaml'} (document 2): spec.workers: must be >= 0, got -1"
    ]
    code, out = run_validate(tmp_path, f"{good}---\n{good}", capsys)
    assert code == 0
    assert len(out.strip().splitlines()) == 2


def test_validate_entry_point(tmp_path: Path) -> None:
    """The installed console script, as a user runs it: one line per problem, exit 1."""
    path = tmp_path / "job.yaml"
    manifest = with_value(minimal, "spec.training.batchSize", 0)
    manifest["spec"]["runPolicy"] = {"restartPolicy": "Sometimes"}
    path.write_text(yaml.safe_dump(manifest))
    script = Path(sys.executable).with_name("syncreplicas")
    result = subprocess.run(
        [str(script), "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        f"{path}: spec.training.batchSize: must be >= 1, got 0",
        f"{path}: spec.runPolicy.restartPolicy: must be one of OnFailure, Never, ExitCode; "
        "got 'Sometimes'",
    ]


def test_recovery_causes_match_recovery_py() -> None:
    status = SCHEMA["properties"]["status"]["properties"]
    assert tuple(status["lastRecovery"]["properties"]["cause"]["enum"]) == recovery.CAUSES
