"""The site's API reference page is the API types': every field of the spec and the
status on it, and the checked-in page what `make docs` generates."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from syncreplicas_api.fields import OpenModel
from syncreplicas_api.fields_walk import fields
from syncreplicas_api.reference import render
from syncreplicas_api.status import JobStatus
from syncreplicas_api.types import JobSpec

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"


def every_field(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[tuple[str, str]]:
    """(object, field) of every field reachable from ``model``."""
    if model in seen:
        return set()
    seen.add(model)
    found = set()
    for field in fields(model):
        found.add((model.__name__, field.key))
        base = field.base
        if isinstance(base, type) and issubclass(base, BaseModel) and not issubclass(
                base, OpenModel):  # fmt: skip
            found |= every_field(base, seen)
    return found


def test_the_checked_in_page_is_the_generated_one() -> None:
    assert PAGE.read_text() == render(), "docs/reference/api.md is stale: run make docs"


def test_every_spec_and_status_field_has_its_row() -> None:
    text = render()
    sections = {s.split(" ", 1)[0]: s for s in text.split("\n## ")[1:]}
    expected = every_field(JobSpec, set()) | every_field(JobStatus, set())
    assert len(expected) > 100
    missing = [(obj, key) for obj, key in sorted(expected)
               if f"| `{key}` |" not in sections.get(obj, "")]  # fmt: skip
    assert not missing, missing
    assert "TensorBoard" in sections and "| `port` | integer | `6006` | ≥ 1, ≤ 65535 |" in text
