"""Validate a value with an API type and say what is wrong in the project's words: one
(field path, reason) per problem, ``spec.training.batchSize: must be >= 1, got 0``.

Fields are checked first (pydantic); the rules across fields (``Rule.check``) run once
every field is valid, as the API server's CEL rules see only well-typed objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .fields import ApiModel, Rule
from .fields_walk import fields


class Problem(NamedTuple):
    """One thing wrong with a value: where (a dotted field path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def type_name(value: object) -> str:
    """The JSON type of ``value``, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def join(path: str, relative: str | int) -> str:
    """``path`` + a relative field path or list index: ``a.b``, ``a[3]``."""
    if isinstance(relative, int):
        return f"{path}[{relative}]"
    if not path or relative.startswith("["):
        return f"{path}{relative}"
    return f"{path}.{relative}" if relative else path


_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "string_type": "a string",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "an array",
}


def _message(error: ErrorDetails) -> str:
    kind, value, ctx = error["type"], error["input"], error.get("ctx", {})
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}, got {type_name(value)}"
    if kind in ("enum", "literal_error"):
        if not isinstance(value, str):
            return f"must be a string, got {type_name(value)}"
        choices = ", ".join(str(ctx["expected"]).replace("'", "").replace(" or ", ", ").split(", "))
        return f"must be one of {choices}; got {value!r}"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<="}
    if kind in bounds:
        limit = ctx[{">=": "ge", ">": "gt", "<=": "le"}[bounds[kind]]]
        return f"must be {bounds[kind]} {limit}, got {value}"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters long, got {len(value)}"
    if kind == "string_too_short":
        return f"must be at least {ctx['min_length']} character(s) long"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} items, got {ctx['actual_length']}"
    if kind == "go_pattern":
        hint = f" ({ctx['hint']})" if ctx.get("hint") else ""
        return f"{value!r} does not match {ctx['pattern']}{hint}"
    messages = {"missing": "is required", "extra_forbidden": "unknown field (check the spelling)"}
    return messages.get(kind, error["msg"])


def _path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        path = join(path, part)
    return path


Model = TypeVar("Model", bound=BaseModel)


def validate(model: type[Model], value: object, path: str) -> tuple[Model | None, list[Problem]]:
    """``value`` as a ``model``, or None and every problem; ``path`` prefixes the paths."""
    try:
        # By the manifest's (camelCase) names only; Python's names are for code.
        result = model.model_validate(value, by_alias=True, by_name=False)
    except ValidationError as err:
        errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
        return None, [Problem(_path(path, e["loc"]), _message(e)) for e in errors]
    problems = list(rule_problems(result, path))
    return (None if problems else result), problems


def rule_problems(value: BaseModel, path: str) -> Iterator[Problem]:
    """What the rules across fields of ``value`` and of everything in it say."""
    if isinstance(value, ApiModel):
        for rule in type(value).cel_rules:
            yield from _run(rule, value, path)
    for field in fields(type(value)):
        item = getattr(value, field.name)
        where = join(path, field.key)
        if item is None:
            continue
        for rule in field.markers(Rule):
            yield from _run(rule, item, where)
        if isinstance(item, BaseModel):
            yield from rule_problems(item, where)
        elif isinstance(item, list):
            for i, element in enumerate(item):
                if isinstance(element, BaseModel):
                    yield from rule_problems(element, join(where, i))


def _run(rule: Rule[Any], node: object, path: str) -> Iterator[Problem]:
    for relative, message in rule.check(node):
        yield Problem(join(path, relative), message)
