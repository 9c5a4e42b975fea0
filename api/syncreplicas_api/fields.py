"""The vocabulary the API types are written in: strict scalar types, schema markers and
the cross-field ``Rule``, each read both by pydantic (validation) and by ``crd`` (schema).

A value is never coerced: ``"2"`` and ``2.0`` are not integers, ``1`` is not a boolean, as
on the API server (which refuses ``2.0`` through the CEL rule ``crd`` gives every integer of
the spec). ``null`` means absent, as the API server prunes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, Strict, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, PydanticCustomError, core_schema


@dataclass(frozen=True)
class Format:
    """The OpenAPI ``format`` of a value (``int32``, ``int64``, ``date-time``)."""

    name: str


@dataclass(frozen=True)
class GoPattern:
    """A ``pattern`` as the API server (Go's regexp) reads it: ``$`` is the very end of the
    text (Python's also matches before a final newline) and classes like ``\\w`` are ASCII.
    ``hint`` says in words what the pattern wants."""

    pattern: str
    hint: str = ""

    def matches(self, value: str) -> bool:
        regex = self.pattern
        anchored = regex[:-1] + r"\Z" if regex.endswith("$") else regex
        return re.search(anchored, value, re.ASCII) is not None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: str) -> str:
        if not self.matches(value):
            context = {"pattern": self.pattern, "hint": self.hint}
            raise PydanticCustomError("go_pattern", "does not match {pattern}", context)
        return value


INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True)
class JsonInteger:
    """An integer as the API server reads one from JSON: within int64, whatever the field's
    ``format`` says (it checks no format's range). A larger number is a floating-point
    number to it, refused as not an integer."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: int) -> int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise PydanticCustomError(
                "int64_range",
                "must be an integer within int64 (-2^63 .. 2^63 - 1), got {value}",
                {"value": value},
            )
        return value


@dataclass(frozen=True)
class Immutable:
    """The field cannot change once the job exists (the CRD's ``self == oldSelf``)."""


@dataclass(frozen=True)
class CelBounds:
    """The field's bounds, restated as a CEL rule whose message names the field (every
    integer of the spec has its own anyway: ``crd``)."""


@dataclass(frozen=True)
class ListMap:
    """``x-kubernetes-list-type: map``: list items are merged by these keys."""

    keys: tuple[str, ...]


Node = TypeVar("Node")


@dataclass(frozen=True)
class Rule(Generic[Node]):
    """A rule across fields, declared once in both forms: ``cel`` with ``message`` (and
    optionally ``field_path`` and ``message_expression``) for the CRD, ``check`` for
    Python. ``check`` receives the node the rule sits on and returns one (path relative to
    that node, message) per problem; tests/unit/test_crd.py proves both forms agree."""

    cel: str
    message: str
    check: Callable[[Node], Sequence[tuple[str, str]]]
    field_path: str = ""
    message_expression: str = ""

    def to_crd(self) -> dict[str, str]:
        """The rule as an ``x-kubernetes-validations`` item."""
        out = {"rule": self.cel}
        if self.field_path:
            out["fieldPath"] = self.field_path
        out["message"] = self.message
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        return out


def port_is_not(reserved: int, owner: str, what: str) -> Rule[Any]:
    """The rule of an object with a ``port`` field (``owner``: its path, e.g. ``metrics``)
    that it must not be ``reserved`` (``what`` names that port, e.g. "the gRPC port"). It
    reads ``self.port`` with has(): the API server checks a default ``{}`` as written."""

    def check(node: Any) -> list[tuple[str, str]]:
        return [("port", f"must differ from {what} {reserved}")] if node.port == reserved else []

    return Rule(f"!has(self.port) || self.port != {reserved}",
                f"{owner}.port must differ from {what} {reserved}", check)  # fmt: skip


def only_with(field: str, attribute: str, selector: str, values: Sequence[str],
              where: str) -> Rule[Any]:
    """A field (``field`` in the manifest, ``attribute`` in Python) that only some values of
    its sibling ``selector`` give a meaning: refused by name under any other. An absent
    selector is its default, which must not be one of ``values``."""
    allowed = " || ".join(f"self.{selector} == '{v}'" for v in values)
    words = " or ".join(str(v) for v in values)

    def check(node: Any) -> list[tuple[str, str]]:
        if getattr(node, attribute) is not None and getattr(node, selector) not in values:
            return [(field, f"applies to {selector} {words} only")]
        return []

    return Rule(f"!has(self.{field}) || (has(self.{selector}) && ({allowed}))",
                f"{where}.{field} applies to {selector} {words} only", check,
                field_path=f".{field}")  # fmt: skip


@dataclass(frozen=True)
class TransitionRule(Generic[Node]):
    """A rule between the stored object and its update (CEL's ``oldSelf``), declared once in
    both forms: ``cel`` with ``message`` and ``field_path`` for the CRD, ``check(old, new)``
    for Python (``syncreplicas_operator.core.spec.immutable_changes``). It runs on updates
    only; ``check`` returns one (path relative to the node, message) per problem."""

    cel: str
    message: str
    check: Callable[[Node, Node], Sequence[tuple[str, str]]]
    field_path: str = ""

    def to_crd(self) -> dict[str, str]:
        """The rule as an ``x-kubernetes-validations`` item."""
        out = {"rule": self.cel}
        if self.field_path:
            out["fieldPath"] = self.field_path
        out["message"] = self.message
        return out


Int32 = Annotated[int, Strict(), Format("int32"), JsonInteger()]
Int64 = Annotated[int, Strict(), Format("int64"), JsonInteger()]
Number = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
DateTime = Annotated[str, Strict(), Format("date-time")]


class ApiModel(BaseModel):
    """An object of the API: camelCase names, no unknown fields, frozen, ``null`` = absent.

    ``cel_rules`` are the object's rules across its fields (``Rule`` on this node);
    ``transition_rules`` compare it with the stored object on an update."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )
    cel_rules: ClassVar[tuple[Rule[Any], ...]] = ()
    transition_rules: ClassVar[tuple[TransitionRule[Any], ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class OpenModel(ApiModel):
    """An object of which only some fields are checked; the rest is kept as written
    (``x-kubernetes-preserve-unknown-fields``), like a Kubernetes pod template."""

    model_config = ConfigDict(extra="allow")
