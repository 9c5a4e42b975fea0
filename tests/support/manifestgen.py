"""Hypothesis strategies for SyncReplicasJob manifests, valid and invalid: a base manifest
(the examples) with up to three mutations, each recorded in words for the report.

Which fields exist, their bounds, patterns and enums are read from the API types
(``syncreplicas_api.types``), so a new field is fuzzed without a change here; the values
aim at the edges the three judges might read differently: both sides of every bound,
the OpenAPI formats' ranges (int32, int64), integral floats, numbers as strings, booleans
as integers, Go-vs-Python regexp corners (a final newline, non-ASCII ``\\w``), lengths at
and past every maximum, enum values in another case, unknown fields (refused, except in
the free-form objects), required fields removed, objects replaced by scalars, and the
rules across fields (replicasToAggregate vs workers and elasticPolicy, the gang
scheduler's fields, the metrics port, the templates' sidecars, the job's name).

``small=True`` keeps every *valid* pod count small (workers, parameter servers, worker
slots): the cluster test creates every accepted manifest for real. Pure: no I/O.
"""

from __future__ import annotations

import copy
import enum
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import annotated_types
from hypothesis import strategies as st
from pydantic import BaseModel
from syncreplicas_api import resource
from syncreplicas_api import types as api
from syncreplicas_api.fields import Format, GoPattern, OpenModel
from syncreplicas_api.fields_walk import FieldView, fields

Path = tuple[str, ...]


class _Delete:
    """A mutation's value: remove the key. Its repr is stable: test ids show it, and
    pytest-xdist's workers must collect the same ids."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE: Final = _Delete()

INT_FORMATS: Final = {"int32": 31, "int64": 63}
# Fields whose valid values decide how many pods and worker slots a job has.
SIZE_FIELDS: Final[frozenset[Path]] = frozenset(
    {("workers",), ("parameterServers",), ("elasticPolicy", "minWorkers"),
     ("elasticPolicy", "maxWorkers")}
)  # fmt: skip
SMALL_MAX: Final = 3
NAME = re.compile(resource.JOB_NAME_PATTERN, re.ASCII)


@dataclass(frozen=True)
class Leaf:
    """A scalar field of the spec: its path below ``spec`` and what the types say of it."""

    path: Path
    view: FieldView

    @property
    def dotted(self) -> str:
        return ".".join(("spec", *self.path))


@dataclass(frozen=True)
class Case:
    """A manifest and the mutations that made it from its base, in words."""

    base: str
    manifest: dict[str, Any]
    mutations: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.base} + [{'; '.join(self.mutations) or 'unchanged'}]"


def _walk(model: type[BaseModel], prefix: Path) -> Iterator[tuple[Path, FieldView]]:
    for view in fields(model):
        path = (*prefix, view.key)
        yield path, view
        if isinstance(view.base, type) and issubclass(view.base, BaseModel):
            yield from _walk(view.base, path)


SPEC_FIELDS: Final = tuple(_walk(api.JobSpec, ()))
LEAVES: Final = tuple(
    Leaf(path, view)
    for path, view in SPEC_FIELDS
    if not (isinstance(view.base, type) and issubclass(view.base, BaseModel))
    and view.base is not Any
    and getattr(view.base, "__origin__", None) not in (list, dict)
)
# Objects that refuse unknown fields (below spec; () is spec itself).
STRICT_OBJECTS: Final = (
    (),
    *(
        path
        for path, view in SPEC_FIELDS
        if isinstance(view.base, type)
        and issubclass(view.base, BaseModel)
        and not issubclass(view.base, OpenModel)
    ),
)
# Every object of the spec, strict or free-form, and the manifest's template paths.
OBJECTS: Final = (
    *STRICT_OBJECTS,
    ("model", "args"),
    ("template",),
    ("template", "spec"),
    ("worker", "template", "spec"),
)


def _marker(view: FieldView, kind: type) -> Any:
    found = view.markers(kind)
    return found[0] if found else None


def _bounds(view: FieldView) -> tuple[Any, Any]:
    """(low, high) of a numeric field, None where it has none."""
    low: Any = None
    high: Any = None
    for mark in view.metadata:
        if isinstance(mark, annotated_types.Ge):
            low = mark.ge
        elif isinstance(mark, annotated_types.Gt):
            low = mark.gt
        elif isinstance(mark, annotated_types.Le):
            high = mark.le
    return low, high


def int_values(leaf: Leaf, small: bool) -> st.SearchStrategy[Any]:
    low, high = _bounds(leaf.view)
    bits = INT_FORMATS[_marker(leaf.view, Format).name]
    lo = int(low) if low is not None else -(2**bits)
    hi = int(high) if high is not None else 2**bits - 1
    edges = {lo - 1, lo, lo + 1, hi, hi + 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1,
             2**63, -(2**63) - 1, 2**53 + 1}  # fmt: skip
    top = min(hi, lo + 1000)
    if small and leaf.path in SIZE_FIELDS:
        top = min(hi, SMALL_MAX)
        edges = {e for e in edges if not lo <= e <= hi or e <= top}
    in_range = st.integers(lo, top)
    return st.one_of(
        in_range,
        in_range,
        st.sampled_from(sorted(edges)),
        in_range.map(float),  # 2.0: an integral float
        st.one_of(in_range.map(str), st.sampled_from([lo + 0.5, True, False, None])),
    )


def number_values(leaf: Leaf) -> st.SearchStrategy[Any]:
    low, high = _bounds(leaf.view)
    edges = [0, 0.0, -0.0, 5e-324, 1e-300, 0.5, 1, 1.0, 1.0000000000000002, 2, 1e308, -1,
             2**63, 2**64 + 1]  # fmt: skip
    edges += [b for b in (low, high) if b is not None]
    return st.one_of(
        st.sampled_from(edges),
        st.floats(-2.0, 2.0),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["0.1", True, None, [0.1]]),
    )


# What a string at its maximum length starts with, to match the field's pattern.
PREFIXES: Final[dict[Path, str]] = {
    ("model", "entrypoint"): "m:",
    ("training", "checkpointDir"): "/",
}


def string_values(leaf: Leaf) -> st.SearchStrategy[Any]:
    view = leaf.view
    longest = _marker(view, annotated_types.MaxLen)
    shortest = _marker(view, annotated_types.MinLen)
    pattern = _marker(view, GoPattern)
    options: list[st.SearchStrategy[Any]] = [
        st.text(max_size=12),
        st.sampled_from([5, True, None, ["x"], ""]),
    ]
    if pattern is not None:
        # Python's `$` also matches before a final newline, Go's does not; \w: ASCII or not.
        options += [
            st.from_regex(re.compile(pattern.pattern, re.ASCII)),
            st.from_regex(pattern.pattern),
        ]
    if longest is not None:
        # At the limit, one past it and one short of it; lengths in characters, also when a
        # character takes two or four bytes (Go counts runes, CEL code points).
        limit = longest.max_length
        prefix = PREFIXES.get(leaf.path, "r/")
        ats = [prefix + fill * (limit - len(prefix)) for fill in ("x", "é", "\U0001d4b3")]
        options.append(st.sampled_from([*ats, *(a + "x" for a in ats), ats[0][:-1]]))
    if shortest is not None:
        options.append(st.just("x" * shortest.min_length))
    return st.one_of(options)


def enum_values(leaf: Leaf) -> st.SearchStrategy[Any]:
    members = [m.value for m in leaf.view.base]
    return st.one_of(
        st.sampled_from(members),
        st.sampled_from(members).map(str.lower),
        st.sampled_from(members).map(str.upper),
        st.sampled_from(["", "Other", 1, None, True]),
    )


def bool_values() -> st.SearchStrategy[Any]:
    return st.sampled_from([True, False, "true", "false", 0, 1, None])


def leaf_values(leaf: Leaf, small: bool) -> st.SearchStrategy[Any]:
    base = leaf.view.base
    if base is bool:
        return bool_values()
    if base is int:
        return int_values(leaf, small)
    if base is float:
        return number_values(leaf)
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return enum_values(leaf)
    return string_values(leaf)


# --- rules across fields ----------------------------------------------------------------


@st.composite
def cluster_shape(draw: st.DrawFn, small: bool) -> dict[str, Any]:
    """replicasToAggregate, minReplicasToAggregate, workers and elasticPolicy drawn together:
    a valid shape, then (a third of the time) one of them moved one past a rule's edge."""
    top = SMALL_MAX if small else 6
    workers = draw(st.integers(0, top))
    elastic = draw(st.booleans())
    low = draw(st.integers(0, workers)) if elastic else workers
    high = draw(st.integers(max(workers, 1), top)) if elastic else workers
    r = draw(st.integers(1, 1 + (low if elastic else top)))
    fewest = draw(st.one_of(st.none(), st.integers(1, r)))
    shape: dict[str, Any] = {
        "replicasToAggregate": r,
        "workers": workers,
        "minReplicasToAggregate": DELETE if fewest is None else fewest,
        "elasticPolicy": {"minWorkers": low, "maxWorkers": high} if elastic else DELETE,
    }
    if elastic and draw(st.booleans()) and low == 0:
        del shape["elasticPolicy"]["minWorkers"]  # its default, 0
    if draw(st.integers(0, 2)) == 0:
        edges: list[tuple[str, Any]] = [
            ("replicasToAggregate", 0),
            ("minReplicasToAggregate", r + 1),
            ("minReplicasToAggregate", 0),
        ]
        if elastic:
            edges += [
                ("workers", high + 1),
                ("workers", low - 1),
                ("elasticPolicy", {"minWorkers": high + 1, "maxWorkers": high}),
                ("elasticPolicy", {"minWorkers": low, "maxWorkers": 0}),
                ("replicasToAggregate", low + 2),
                ("elasticPolicy", {"maxWorkers": high}),
            ]
        key, value = draw(st.sampled_from(edges))
        shape[key] = value
    return shape


def scheduling_policy() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "gangScheduler": st.sampled_from(["Coscheduling", "Volcano", "Kueue"]),
            "scheduleTimeoutSeconds": st.sampled_from([0, 1, 60, "60"]),
            "queue": st.sampled_from(["", "q", "default"]),
            "schedulerName": st.sampled_from(["", "vc", "default-scheduler"]),
        },
    )


def straggler_policy() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "evictAfterSeconds": st.sampled_from([0, 1, 300, 2**31]),
            "minDropFraction": st.sampled_from([0, 1e-9, 0.5, 1, 1.0000001, 2]),
        },
    )


def container() -> st.SearchStrategy[dict[str, Any]]:
    """A template's container: the runtime's by name or a sidecar, with or without an
    image; some with fields the API server checks only in a Pod (the operator's problem)."""
    names = ["syncreplicas", "tensorflow", "trainer", "side", "main", "a" * 63, "a" * 64,
             "Bad_Name", 5]  # fmt: skip
    return st.fixed_dictionaries(
        {"name": st.sampled_from(names)},
        optional={
            "image": st.sampled_from(["busybox:1.36", "", "r/" + "i" * 1023, None]),
            "resources": st.sampled_from(
                [{"limits": {"memory": "64Mi"}}, {"limits": {"cpu": "lots"}}]
            ),
            "command": st.sampled_from([["sleep", "1"], "not-a-list"]),
        },
    )


def containers(at_most: int) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(container(), max_size=at_most),
        st.sampled_from(["syncreplicas", [None], {"name": "syncreplicas"}]),
    )


# Fields a Pod has that the CRD does not check (free-form template): refused only when
# the operator creates the pods.
POD_GARBAGE: Final = (
    (("template", "spec", "restartPolicy"), "Sometimes"),
    (("template", "metadata", "labels"), {"bad key!": "v"}),
    (("template", "spec", "tolerations"), "none"),
    (("chief", "template", "spec", "priorityClassName"), "no-such-class"),
)


def job_names() -> st.SearchStrategy[Any]:
    longest = resource.MAX_JOB_NAME_LENGTH
    return st.one_of(
        st.from_regex(NAME, fullmatch=True).filter(lambda n: len(n) <= longest + 2),
        st.sampled_from(
            ["a" * longest, "a" * (longest + 1), "a" * 254, "Bad-Name", "1starts-digit",
             "ends-", "has.dot", "under_score", "", 5, "a", "x\n"]
        ),
        st.text(alphabet="abz019-._A", max_size=8),
    )


def object_metadata() -> st.SearchStrategy[list[Mutation]]:
    """Kubernetes' own metadata besides the name: labels, annotations, finalizers, a
    generated name, a field ObjectMeta does not have (judges.OBJECT_METADATA)."""
    labels = st.sampled_from([{"team": "ml"}, {"bad key!": "v"}, {"k": "v" * 64},
                              {"example.org/role": "trainer"}, {"k": 1}])  # fmt: skip
    annotations = st.sampled_from([{"example.org/owner": "ml-team"}, {"k": 1}, {"": "v"}])
    return st.one_of(
        labels.map(lambda v: [_set(("metadata", "labels"), v)]),
        annotations.map(lambda v: [_set(("metadata", "annotations"), v)]),
        st.sampled_from([["example.org/cleanup"], ["bad finalizer"]]).map(
            lambda v: [_set(("metadata", "finalizers"), v)]
        ),
        st.sampled_from(["job-", "1a-", "A-", "a" * 47]).map(
            lambda v: [_set(("metadata", "name"), DELETE), _set(("metadata", "generateName"), v)]
        ),
        st.just([_set(("metadata", "owner"), "me")]),
    )


def unknown_keys() -> st.SearchStrategy[str]:
    """Keys no type declares: typos and other spellings of real ones, and made-up names."""
    real = sorted({view.key for _, view in SPEC_FIELDS})
    variants = [k.lower() for k in real if k.lower() != k] + [
        re.sub(r"([A-Z])", r"_\1", k).lower() for k in real if k.lower() != k
    ]
    return st.one_of(
        st.sampled_from([*variants, "replicas", "kwargs", "Workers", "packMinBytesPerPs"]),
        st.from_regex(re.compile(r"[a-z][a-zA-Z0-9]{0,10}", re.ASCII), fullmatch=True),
    )


# --- mutations --------------------------------------------------------------------------

Mutation = tuple[Path, Any, str]  # (path from the manifest's root, value or DELETE, words)


def _set(path: Path, value: Any) -> Mutation:
    shown = "removed" if value is DELETE else f"= {value!r}"[:80]
    return path, value, f"{'.'.join(path)} {shown}"


def _leaf_mutation(leaf: Leaf, small: bool) -> st.SearchStrategy[list[Mutation]]:
    return leaf_values(leaf, small).map(lambda v: [_set(("spec", *leaf.path), v)])


@functools.cache
def mutations(small: bool) -> st.SearchStrategy[list[Mutation]]:
    """One change (or a few that belong together) to a manifest."""
    leaf = st.one_of([_leaf_mutation(f, small) for f in LEAVES])
    removed = st.sampled_from([p for p, _ in SPEC_FIELDS]).map(
        lambda p: [_set(("spec", *p), DELETE)]
    )
    unknown = st.tuples(st.sampled_from(OBJECTS), unknown_keys()).map(
        lambda pk: [_set(("spec", *pk[0], pk[1]), 1)]
    )
    not_object = st.tuples(
        st.sampled_from([p for p in OBJECTS if p]), st.sampled_from(["x", [], 5])
    ).map(lambda pv: [_set(("spec", *pv[0]), pv[1])])
    shape = cluster_shape(small).map(lambda s: [_set(("spec", k), v) for k, v in s.items()])
    policies = st.one_of(
        scheduling_policy().map(lambda p: [_set(("spec", "runPolicy", "schedulingPolicy"), p)]),
        straggler_policy().map(lambda p: [_set(("spec", "runPolicy", "stragglerPolicy"), p)]),
        st.sampled_from([0, 2222, 2223, 9090, 65535, 65536, -1]).map(
            lambda p: [_set(("spec", "metrics", "port"), p)]
        ),
    )
    template = st.one_of(
        containers(3).map(lambda c: [_set(("spec", "template", "spec", "containers"), c)]),
        st.tuples(st.sampled_from(resource.REPLICA_TYPES), containers(2)).map(
            lambda rc: [_set(("spec", rc[0], "template", "spec", "containers"), rc[1])]
        ),
        st.sampled_from(POD_GARBAGE).map(lambda pv: [_set(("spec", *pv[0]), pv[1])]),
    )
    name = st.one_of(job_names().map(lambda n: [_set(("metadata", "name"), n)]),
                     object_metadata())  # fmt: skip
    envelope = st.sampled_from(
        [_set(("apiVersion",), "syncreplicas.io/v1"), _set(("kind",), "SyncReplicasJobs"),
         _set(("specs",), {"workers": 1}), _set(("spec",), DELETE), _set(("spec",), [])]
    ).map(lambda m: [m])  # fmt: skip
    return st.one_of(
        leaf, leaf, leaf, removed, unknown, not_object, shape, shape, policies, template,
        template, name, envelope,
    )  # fmt: skip


def apply(manifest: dict[str, Any], mutation: Mutation) -> bool:
    """Carry out ``mutation`` in place; False (nothing changed) when a parent on the way is
    not an object (an earlier mutation replaced it)."""
    path, value, _ = mutation
    node: Any = manifest
    for key in path[:-1]:
        if not isinstance(node, dict):
            return False
        node = node.setdefault(key, {}) if value is not DELETE else node.get(key)
        if node is None:
            return True
    if not isinstance(node, dict):
        return False
    if value is DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)
    return True


def cases(
    bases: Sequence[tuple[str, dict[str, Any]]],
    *,
    small: bool,
    prepare: Callable[[dict[str, Any]], None] | None = None,
) -> st.SearchStrategy[Case]:
    """Cases from ``bases`` ((label, manifest) pairs): about one in six unchanged, the rest
    with one to three mutations. ``prepare`` edits every base first (say, a namespace)."""

    @st.composite
    def build(draw: st.DrawFn) -> Case:
        label, base = draw(st.sampled_from(bases))
        manifest = copy.deepcopy(base)
        if prepare is not None:
            prepare(manifest)
        # Unchanged bases are one in six: they are valid, and the rest are mostly not.
        count = draw(st.integers(0, 5))
        count = max(0, count - 2) if count >= 3 else min(count, 1)
        words: list[str] = []
        for _ in range(count):
            for mutation in draw(mutations(small)):
                if apply(manifest, mutation):
                    words.append(mutation[2])
        return Case(label, manifest, tuple(words))

    return build()
