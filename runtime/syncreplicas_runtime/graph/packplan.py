"""Which PS holds which model variable, and which variables share one packed variable (pure).

Every replica (and anything else that builds the training graph) must arrive at the same
plan from the same model, so the plan is a pure function of the variables' names, sizes,
dtypes and order of creation, with no tie left to chance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class VariableInfo:
    """One trainable model variable as the planner sees it."""

    name: str
    nbytes: int
    dtype: str
    # False when it cannot share a flat variable (sparse or no gradient, not a float).
    packable: bool = True


@dataclass(frozen=True)
class Placement:
    """One variable on a PS: a flat pack of ``names`` (in creation order) or one as it is."""

    ps: int
    dtype: str
    names: tuple[str, ...]
    packed: bool


def balance_by_bytes(sizes: Sequence[tuple[str, int]], num_ps: int) -> dict[str, int]:
    """name -> PS task, so that the bytes on the busiest PS are as few as greedy can make.

    Largest first onto the least-loaded PS (longest-processing-time rule: within 4/3 of the
    best possible); equal sizes go in name order and equal loads to the lower task index,
    so the answer depends on nothing but the arguments.
    """
    if num_ps < 1:
        raise ValueError(f"num_ps must be >= 1, got {num_ps}")
    load = [0] * num_ps
    out: dict[str, int] = {}
    for name, nbytes in sorted(sizes, key=lambda s: (-s[1], s[0])):
        if name in out:
            raise ValueError(f"variable {name!r} appears twice")
        ps = min(range(num_ps), key=lambda i: (load[i], i))
        out[name] = ps
        load[ps] += nbytes
    return out


def ps_to_use(total_bytes: int, num_ps: int, min_bytes_per_ps: int) -> int:
    """How many PS (tasks 0..k-1) hold a model of ``total_bytes``: as many as give each at
    least ``min_bytes_per_ps`` (at least 1, at most ``num_ps``; 0 means every PS).

    Every PS that holds a variable costs each replica one more round trip each way per step,
    so spreading a small model buys no bandwidth and only adds latency and CPU (the same
    reason TensorFlow's partitioners have a minimum slice size)."""
    if num_ps < 1:
        raise ValueError(f"num_ps must be >= 1, got {num_ps}")
    if min_bytes_per_ps < 0:
        raise ValueError(f"min_bytes_per_ps must be >= 0, got {min_bytes_per_ps}")
    if min_bytes_per_ps == 0:
        return num_ps
    return max(1, min(num_ps, total_bytes // min_bytes_per_ps))


def plan_packing(variables: Sequence[VariableInfo], num_ps: int,
                 min_bytes_per_ps: int = 0) -> list[Placement]:
    """The PS variables that hold ``variables``: per PS and dtype one flat pack of the
    packable ones, and every other one alone, byte-balanced over the first
    ``ps_to_use(...)`` PS. Packs come first (by PS, then by the dtype's first appearance),
    then the variables kept alone, in creation order."""
    used = ps_to_use(sum(v.nbytes for v in variables), num_ps, min_bytes_per_ps)
    where = balance_by_bytes([(v.name, v.nbytes) for v in variables], used)
    packs: dict[tuple[int, str], list[str]] = {}
    alone: list[Placement] = []
    for v in variables:
        if v.packable:
            packs.setdefault((where[v.name], v.dtype), []).append(v.name)
        else:
            alone.append(Placement(where[v.name], v.dtype, (v.name,), packed=False))
    ordered = sorted(packs.items(), key=lambda kv: kv[0][0])  # stable: dtypes keep order
    return [Placement(ps, dtype, tuple(names), packed=True)
            for (ps, dtype), names in ordered] + alone
