"""Read SyncReplicasJob manifests from a YAML file (or stdin) into parsed jobs.

Shared by ``syncreplicas validate``, ``render`` and ``run``, so all three accept and reject
the same files with the same messages.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..core import naming
from ..core.spec import Job, SpecError, parse_job


class InputError(Exception):
    """The file cannot be read as SyncReplicasJob manifests at all."""


@dataclass(frozen=True)
class Document:
    """One YAML document of a manifest file; ``label`` says which, for messages."""

    label: str
    body: Any


def read_documents(path: Path) -> list[Document]:
    """The non-empty YAML documents of ``path`` ("-" reads stdin)."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not a text file ({err.reason})") from err
    try:
        bodies = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputError(f"{path}: not valid YAML{line}: {problem}") from err
    if not bodies:
        raise InputError(f"{path}: no YAML documents")
    if len(bodies) == 1:
        return [Document(str(path), bodies[0])]
    return [Document(f"{path} (document {i})", body) for i, body in enumerate(bodies, 1)]


def parse_documents(
    documents: Sequence[Document], namespace: str | None = None
) -> tuple[list[Job], list[str]]:
    """Jobs parsed from ``documents``, and one message line per problem found."""
    jobs: list[Job] = []
    problems: list[str] = []
    for document in documents:
        body = document.body
        if not isinstance(body, dict):
            problems.append(
                f"{document.label}: expected a {naming.KIND} object, got a YAML "
                f"{type(body).__name__}"
            )
            continue
        if body.get("kind") != naming.KIND:
            problems.append(
                f"{document.label}: kind: expected {naming.KIND}, got {body.get('kind')!r}"
            )
            continue
        if namespace is not None:
            body = {**body, "metadata": {**(body.get("metadata") or {}), "namespace": namespace}}
        try:
            jobs.append(parse_job(body))
        except SpecError as err:
            problems.extend(f"{document.label}: {p.path}: {p.message}" for p in err.problems)
    return jobs, problems
