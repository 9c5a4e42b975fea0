"""The field table of the site's "Writing a job" (docs/jobs.md) and docs/contract.md's
SYNCREPLICAS_JOB follow the API types: every field documented, no field that is not, and
the defaults the types apply."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from syncreplicas_api.contract import JobSettings
from syncreplicas_api.fields import OpenModel
from syncreplicas_api.fields_walk import FieldView, fields
from syncreplicas_api.types import JobSpec

ROOT = Path(__file__).resolve().parents[2]


def leaves(model: type[BaseModel], prefix: str) -> dict[str, FieldView]:
    """Every field a user sets: nested objects opened, free-form ones (templates) whole."""
    found: dict[str, FieldView] = {}
    for field in fields(model):
        path = f"{prefix}.{field.key}"
        nested = isinstance(field.base, type) and issubclass(field.base, BaseModel)
        if nested and not issubclass(field.base, OpenModel):
            found.update(leaves(field.base, path))
        else:
            found[path] = field
    return found


def readme_rows() -> dict[str, str]:
    """{field path: default cell} of docs/jobs.md's table of the resource."""
    text = (ROOT / "docs" / "jobs.md").read_text()
    table = text.split("| field | default | meaning |", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    for line in table.strip().splitlines()[1:]:
        names, default = line.split(" | ")[:2]
        for name in re.findall(r"`([^`]+)`", names):
            rows[name] = default.strip()
    return rows


FIELDS = leaves(JobSpec, "spec")


def test_readme_documents_every_field_and_no_other() -> None:
    assert set(readme_rows()) == set(FIELDS)


def shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return str(value)


@pytest.mark.parametrize("path", sorted(FIELDS))
def test_readme_defaults_are_the_types(path: str) -> None:
    field, cell = FIELDS[path], readme_rows()[path]
    if field.info.is_required():
        assert cell.startswith("required"), (path, cell)
        return
    default = field.info.default
    if default is None or default is PydanticUndefined:
        assert not cell.startswith("required"), (path, cell)
        return
    value = getattr(default, "value", default)
    assert cell == shown(value), (path, cell, value)


def contract_example() -> dict[str, Any]:
    """The SYNCREPLICAS_JOB example of docs/contract.md, its // comments removed."""
    text = (ROOT / "docs" / "contract.md").read_text()
    block = text.split("## `SYNCREPLICAS_JOB`", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    parsed: dict[str, Any] = json.loads(re.sub(r"//[^\n]*", "", block))
    return parsed


def test_contract_example_is_the_types_defaults() -> None:
    """Beyond the job's shape (R, W, P), the example shows every key with its default."""
    example = contract_example()
    shape = {k: example[k] for k in ("replicasToAggregate", "minReplicasToAggregate",
                                     "workers", "parameterServers")}  # fmt: skip
    assert example == JobSettings.model_validate(shape).model_dump(mode="json")


def test_contract_example_marks_the_required_keys() -> None:
    text = (ROOT / "docs" / "contract.md").read_text().split("## `SYNCREPLICAS_JOB`", 1)[1]
    required = {f.key for f in fields(JobSettings) if f.info.is_required()}
    marked = set(re.findall(r'"(\w+)":[^\n]*\(required\)', text.split("```", 2)[1]))
    assert marked == required
