"""The API reference page (docs/reference/api.md), generated from the API types: every
field of the spec and the status, with its type, default, bounds and description, one
table per object, so the page cannot drift from what the API server and the operator
accept (``make docs`` writes it; a unit test fails when the checked-in page differs).
Pure: text in, text out."""

from __future__ import annotations

import enum
from typing import Any, get_args, get_origin

from annotated_types import Ge, Gt, Le, MaxLen, MinLen
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from . import resource
from .fields import OpenModel
from .fields_walk import FieldView, fields
from .status import JobStatus
from .types import JobSpec

HEADER = f"""\
# API reference: `{resource.KIND}` (`{resource.API_VERSION}`)

Generated from the API types (`api/syncreplicas_api`) by `make docs`: every field of the
spec and of the status, as the CRD's schema and the operator apply them. Rules across
fields (for example `replicasToAggregate` against the replicas there are) are checked by
the API server and named in its error; `kubectl explain {resource.PLURAL}.spec` shows the
same descriptions. `{resource.API_VERSION}` is an alpha API: fields may still be renamed or
removed in a later version, with a conversion for the ones that existed.

"""


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _type(field: FieldView) -> str:
    base = field.base
    origin = get_origin(base)
    if origin in (list, tuple):
        (item, *_) = get_args(base) or (Any,)
        inner = item.__name__ if isinstance(item, type) else "value"
        if isinstance(item, type) and issubclass(item, BaseModel):
            inner = f"[{item.__name__}](#{_anchor(item)})"
        return f"list of {inner}"
    if origin is dict or base is dict:
        return "object"
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in base)
    if isinstance(base, type) and issubclass(base, OpenModel):
        return "object (free-form)"
    if isinstance(base, type) and issubclass(base, BaseModel):
        return f"[{base.__name__}](#{_anchor(base)})"
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return names.get(base, getattr(base, "__name__", str(base)))


def _default(field: FieldView) -> str:
    info = field.info
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        return "`{}`" if isinstance(field.base, type) and issubclass(field.base, BaseModel) else ""
    value = info.default
    if value is None or value is PydanticUndefined:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _bounds(field: FieldView) -> str:
    words = []
    for marker in field.metadata:
        if isinstance(marker, Ge):
            words.append(f"≥ {marker.ge}")
        elif isinstance(marker, Gt):
            words.append(f"> {marker.gt}")
        elif isinstance(marker, Le):
            words.append(f"≤ {marker.le}")
        elif isinstance(marker, MinLen) and marker.min_length > 0:
            words.append(f"at least {marker.min_length} long")
        elif isinstance(marker, MaxLen):
            words.append(f"at most {marker.max_length} long")
    return ", ".join(words)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _nested(field: FieldView) -> list[type[BaseModel]]:
    base = field.base
    candidates = [base, *(get_args(base) if get_origin(base) in (list, tuple) else ())]
    return [
        c for c in candidates
        if isinstance(c, type) and issubclass(c, BaseModel) and not issubclass(c, OpenModel)
    ]  # fmt: skip


def _section(model: type[BaseModel], path: str) -> str:
    doc = (model.__doc__ or "").strip().split("\n\n", 1)[0]
    lines = [
        f'## {model.__name__} {{#{_anchor(model)}}}',
        "",
        f"`{path}`: {_cell(doc)}" if doc else f"`{path}`",
        "",
        "| field | type | default | bounds | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for field in fields(model):
        description = _cell(field.info.description or "")
        lines.append(f"| `{field.key}` | {_type(field)} | {_default(field)} | "
                     f"{_bounds(field)} | {description} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def render() -> str:
    """The page: the spec's objects, then the status's, each once, in the order a reader
    meets them (breadth first)."""
    sections: list[str] = []
    seen: set[type[BaseModel]] = set()
    queue: list[tuple[type[BaseModel], str]] = [(JobSpec, "spec"), (JobStatus, "status")]
    while queue:
        model, path = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        sections.append(_section(model, path))
        for field in fields(model):
            queue += [(nested, f"{path}.{field.key}") for nested in _nested(field)]
    return HEADER + "\n".join(sections)
