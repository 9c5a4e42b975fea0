"""A model entrypoint that imports and returns what no model may (not a mapping): its
error shows only when the graph is built."""

from __future__ import annotations

from typing import Any


def build(**_: Any) -> Any:
    return 42
