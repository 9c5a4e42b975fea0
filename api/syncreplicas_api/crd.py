"""The SyncReplicasJob CRD, generated from the types: a structural OpenAPI v3 schema (every
type inlined, ``Optional`` as an absent field, ``default``s, ``x-kubernetes-validations``),
printer columns, the status subresource and the scale subresource (``spec.workers``). Pure:
returns dicts; ``hack/gencrd.py`` writes the files.

CEL rules come from the markers: ``Immutable`` (``self == oldSelf``), ``CelBounds`` (the
field's bounds), every enum field of the spec (``self in [...]``), every ``Rule`` and every
``TransitionRule`` (``oldSelf``: updates only). Every integer of the spec has its bounds as
a rule too: the schema's ``type: integer`` lets an integral float (``2.0``) through, a rule
that reads the value refuses it at the field's own path ("expected int, got float64"), as
the types do.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from . import resource
from .fields import ApiModel, CelBounds, Format, GoPattern, Immutable, ListMap, OpenModel, Rule
from .fields_walk import FieldView, fields
from .status import JobStatus
from .types import NAME_RULES, JobSpec

Schema = dict[str, Any]

DESCRIPTION: Final = (
    "A synchronous data-parallel training job: parameter servers, one chief and workers, "
    "training with TensorFlow's SyncReplicasOptimizer."
)
PRINTER_COLUMNS: Final = (
    ("Phase", "string", ".status.phase", 0, "Lifecycle phase of the job."),
    ("Step", "integer", ".status.globalStep", 0, "Global step, read from the chief's metrics."),
    ("Ready", "string", ".status.ready", 0,
     "Ready replicas (parameter servers, chief and workers) out of all."),
    ("Progress", "string", ".status.progress", 0, "Global step as a share of maxSteps."),
    ("ETA", "string", ".status.eta", 0,
     "Time left to maxSteps at the recent step rate, when the step last moved."),
    ("R", "integer", ".spec.replicasToAggregate", 1, "Gradients aggregated per update."),
    ("Aggregating", "integer", ".status.replicasToAggregate", 1,
     "Gradients the coordinator aggregates per update now (below R while degraded)."),
    ("Workers", "integer", ".spec.workers", 1, "Non-chief workers (spec)."),
    ("Worker-Pods", "integer", ".status.workers", 1,
     "Worker pods that exist and are not being deleted (differs from Workers while resizing)."),
    ("PS", "integer", ".spec.parameterServers", 1, "Parameter servers."),
    ("Chief-Restarts", "integer", ".status.chiefRestarts", 1,
     "Chief restarts handled by the chief restart policy."),
    ("Age", "date", ".metadata.creationTimestamp", 0, ""),
)  # fmt: skip

# kubectl scale and an HPA change spec.workers (the CRD's rules allow it only with
# spec.elasticPolicy, within its bounds); the operator reports the worker pods it sees.
SCALE: Final = {
    "specReplicasPath": ".spec.workers",
    "statusReplicasPath": ".status.workers",
    "labelSelectorPath": ".status.workerSelector",
}


# Keys in the order a reader expects them, whatever order the markers came in.
_KEY_ORDER: Final = (
    "type", "format", "description", "required", "enum", "pattern", "minLength", "maxLength",
    "minimum", "exclusiveMinimum", "maximum", "minItems", "maxItems", "default",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-validations", "items", "properties",
)  # fmt: skip


def _ordered(node: Schema) -> Schema:
    return {key: node[key] for key in sorted(node, key=_KEY_ORDER.index)}


def _default(field: FieldView) -> object:
    """The field's default as the API server applies it; PydanticUndefined for none. An
    object defaults to ``{}``: the API server fills in its own fields' defaults."""
    info = field.info
    factory = info.default_factory
    if factory is not None:
        is_object = isinstance(factory, type) and issubclass(factory, ApiModel)
        return {} if is_object else PydanticUndefined
    default = info.default
    if default is None or default is PydanticUndefined:
        return PydanticUndefined
    if isinstance(default, enum.Enum):
        return default.value
    return {} if isinstance(default, BaseModel) else default


def _literal(kind: str, value: object) -> str:
    return repr(float(value)) if kind == "number" else str(value)  # type: ignore[arg-type]


def _bounds_rule(node: Schema, marks: list[Any], where: str) -> Schema:
    kind = node["type"]
    rule, words = [], []
    for mark in marks:
        for op, attribute in ((">=", "ge"), (">", "gt"), ("<=", "le")):
            if hasattr(mark, attribute):
                limit = getattr(mark, attribute)
                rule.append(f"self {op} {_literal(kind, limit)}")
                words.append((op, limit))
    if not words:
        raise ValueError(f"{where}: an integer of the spec needs a bound (its rule refuses 2.0)")
    if len(words) == 1:
        message = f"{where} must be {words[0][0]} {words[0][1]}"
    else:
        (low_op, low), (_, high) = words
        message = f"{where} must be in {'[' if low_op == '>=' else '('}{low}, {high}]"
    return {"rule": " && ".join(rule), "message": message}


def _type(base: Any, metadata: tuple[Any, ...], where: str) -> Schema:
    """The schema of a value of type ``base`` with ``metadata``'s markers and bounds."""
    node: Schema = {}
    if isinstance(base, type) and issubclass(base, BaseModel):
        node = model_schema(base, where)
    elif get_origin(base) is list:
        (item,) = get_args(base)
        node = {"type": "array", "items": _type(item, (), where)}
        if isinstance(item, type) and issubclass(item, BaseModel) and item.__doc__:
            node["items"] = _ordered({"description": item.__doc__.strip(), **node["items"]})
    elif get_origin(base) is dict:
        node = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    elif isinstance(base, type) and issubclass(base, enum.Enum):
        node = {"type": "string", "enum": [m.value for m in base]}
    elif get_origin(base) is Literal:
        node = {"type": "string", "enum": list(get_args(base))}
    else:
        kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
        node = {"type": kinds[base]}
    for mark in metadata:
        if isinstance(mark, Format):
            node["format"] = mark.name
        elif isinstance(mark, GoPattern):
            node["pattern"] = mark.pattern
        elif isinstance(mark, annotated_types.MinLen):
            node["minItems" if node["type"] == "array" else "minLength"] = mark.min_length
        elif isinstance(mark, annotated_types.MaxLen):
            node["maxItems" if node["type"] == "array" else "maxLength"] = mark.max_length
        elif isinstance(mark, annotated_types.Ge):
            node["minimum"] = mark.ge
        elif isinstance(mark, annotated_types.Gt):
            node["minimum"], node["exclusiveMinimum"] = mark.gt, True
        elif isinstance(mark, annotated_types.Le):
            node["maximum"] = mark.le
        elif isinstance(mark, ListMap):
            node["x-kubernetes-list-type"] = "map"
            node["x-kubernetes-list-map-keys"] = list(mark.keys)
    return node


def _field_schema(model: type[BaseModel], field: FieldView, where: str) -> Schema:
    node = _type(field.base, field.metadata, where)
    default = _default(field)
    if default is not PydanticUndefined:
        node["default"] = default
    if field.info.description:
        node["description"] = field.info.description
    rules = list(node.pop("x-kubernetes-validations", []))
    own: list[Schema] = []
    if field.markers(CelBounds) or (node["type"] == "integer" and _in_spec(model)):
        bounds = field.markers(annotated_types.Ge | annotated_types.Gt | annotated_types.Le)
        own.append(_bounds_rule(node, bounds, where))
    if "enum" in node and _in_spec(model):
        values = node["enum"]
        own.append({"rule": f"self in {values}",
                    "message": f"{where} must be one of {', '.join(values)}"})  # fmt: skip
    if field.markers(Immutable):
        own.append({"rule": "self == oldSelf", "message": f"{where} is immutable"})
    own.extend(rule.to_crd() for rule in field.markers(Rule))
    if own or rules:
        node["x-kubernetes-validations"] = own + rules
    return _ordered(node)


def _in_spec(model: type[BaseModel]) -> bool:
    """Enum fields of the spec restate their values as a CEL rule (naming the field); the
    status's do not."""
    return not model.__module__.endswith(".status")


def model_schema(model: type[BaseModel], where: str = "") -> Schema:
    """The structural schema of ``model``; ``where`` is its path below ``spec`` (messages)."""
    node: Schema = {"type": "object"}
    required = [f.key for f in fields(model) if f.info.is_required()]
    if required:
        node["required"] = required
    if issubclass(model, OpenModel):
        node["x-kubernetes-preserve-unknown-fields"] = True
    node["properties"] = {
        f.key: _field_schema(model, f, f"{where}.{f.key}" if where else f.key)
        for f in fields(model)
    }
    if issubclass(model, ApiModel) and (model.cel_rules or model.transition_rules):
        node["x-kubernetes-validations"] = [rule.to_crd() for rule in model.cel_rules] + [
            rule.to_crd() for rule in model.transition_rules
        ]
    return _ordered(node)


def open_api_schema() -> Schema:
    """``openAPIV3Schema`` of the resource."""
    return {
        "type": "object",
        "description": DESCRIPTION,
        "required": ["spec"],
        "x-kubernetes-validations": [rule.to_crd() for rule in NAME_RULES],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {**model_schema(JobSpec), "description": "Desired training job."},
            "status": {
                **model_schema(JobStatus),
                "description": "Observed state, written by the operator.",
            },
        },
    }


def _column(name: str, kind: str, path: str, priority: int, description: str) -> Schema:
    column: Schema = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        column["priority"] = priority
    if description:
        column["description"] = description
    return column


def build_crd() -> Schema:
    """The whole CustomResourceDefinition."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": resource.CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "syncreplicas",
                "app.kubernetes.io/component": "crd",
            },
        },
        "spec": {
            "group": resource.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": resource.KIND,
                "listKind": f"{resource.KIND}List",
                "plural": resource.PLURAL,
                "singular": resource.SINGULAR,
                "shortNames": [resource.SHORT_NAME],
                "categories": [resource.CATEGORY],
            },
            "versions": [
                {
                    "name": resource.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": SCALE},
                    "additionalPrinterColumns": [_column(*c) for c in PRINTER_COLUMNS],
                    "schema": {"openAPIV3Schema": open_api_schema()},
                }
            ],
        },
    }
