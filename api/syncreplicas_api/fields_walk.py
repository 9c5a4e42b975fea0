"""Reading a type's fields back: each field's base type, its markers and its manifest name,
for the CRD generator and the rule runner alike."""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class FieldView:
    """One field of a model: ``name`` (Python), ``key`` (manifest), the type without
    ``None`` and ``Annotated``, and every marker on it (the field's and the type's)."""

    name: str
    key: str
    base: Any
    metadata: tuple[Any, ...]
    info: FieldInfo

    def markers(self, kind: type[Any] | types.UnionType) -> list[Any]:
        return [m for m in self.metadata if isinstance(m, kind)]


def unwrap(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """``Annotated[X, m...] | None`` -> (X, (m...))."""
    metadata: tuple[Any, ...] = ()
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *extra = get_args(annotation)
            annotation, metadata = base, (*metadata, *extra)
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                raise TypeError(f"unions other than Optional are not in the API: {annotation}")
            annotation = args[0]
        else:
            return annotation, metadata


def fields(model: type[BaseModel]) -> Iterator[FieldView]:
    """The fields of ``model`` in declaration order."""
    for name, info in model.model_fields.items():
        base, inner = unwrap(info.annotation)
        yield FieldView(name, info.alias or name, base, (*info.metadata, *inner), info)
