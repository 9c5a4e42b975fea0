"""Table tests of the packing plan: byte-balanced PS placement, one pack per PS and dtype."""

from __future__ import annotations

import pytest
from syncreplicas_runtime.graph.packplan import (
    Placement,
    VariableInfo,
    balance_by_bytes,
    plan_packing,
    ps_to_use,
)


@pytest.mark.parametrize(
    ("sizes", "num_ps", "expected"),
    [
        ([("a", 8)], 1, {"a": 0}),
        ([("a", 8), ("b", 8)], 1, {"a": 0, "b": 0}),
        # Largest first onto the lightest PS; equal loads go to the lower index.
        ([("a", 100), ("b", 60), ("c", 50), ("d", 10)], 2, {"a": 0, "b": 1, "c": 1, "d": 0}),
        # Equal sizes in name order, whatever order they come in.
        ([("z", 4), ("y", 4), ("x", 4)], 2, {"x": 0, "y": 1, "z": 0}),
        # One huge variable cannot be split: the rest balance around it.
        ([("big", 1000), ("s1", 10), ("s2", 10), ("s3", 10)], 2,
         {"big": 0, "s1": 1, "s2": 1, "s3": 1}),
        # More PS than variables: some PS hold nothing.
        ([("a", 4), ("b", 4)], 3, {"a": 0, "b": 1}),
        # 64 equal variables over 3 PS: 22/21/21.
        ([(f"v{i:02d}", 64) for i in range(64)], 3,
         {f"v{i:02d}": i % 3 for i in range(64)}),
        ([], 2, {}),
    ],
)
def test_balance_by_bytes(sizes: list[tuple[str, int]], num_ps: int,
                          expected: dict[str, int]) -> None:
    assert balance_by_bytes(sizes, num_ps) == expected


@pytest.mark.parametrize(
    ("sizes", "num_ps"),
    [([(f"v{i}", (i * 37) % 101 + 1) for i in range(50)], n) for n in (2, 3, 5)],
)
def test_balance_is_within_the_greedy_bound(sizes: list[tuple[str, int]], num_ps: int) -> None:
    where = balance_by_bytes(sizes, num_ps)
    load = [sum(b for n, b in sizes if where[n] == ps) for ps in range(num_ps)]
    total, largest = sum(b for _, b in sizes), max(b for _, b in sizes)
    assert max(load) <= total / num_ps + largest


@pytest.mark.parametrize(
    ("sizes", "num_ps", "error"),
    [([("a", 1)], 0, "num_ps"), ([("a", 1), ("a", 2)], 1, "twice")],
)
def test_balance_rejects(sizes: list[tuple[str, int]], num_ps: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        balance_by_bytes(sizes, num_ps)


F, H = "float32", "float16"


@pytest.mark.parametrize(
    ("variables", "num_ps", "expected"),
    [
        # Two PS: w (64 B) alone on PS 0, the rest packed on PS 1 in creation order.
        ([VariableInfo("w1", 64, F), VariableInfo("b1", 16, F), VariableInfo("w2", 32, F),
          VariableInfo("b2", 4, F)], 2,
         [Placement(0, F, ("w1",), True), Placement(1, F, ("b1", "w2", "b2"), True)]),
        # One PS: everything in one pack, creation order kept.
        ([VariableInfo("b", 4, F), VariableInfo("a", 40, F)], 1,
         [Placement(0, F, ("b", "a"), True)]),
        # Two dtypes on one PS: one pack each, in the order the dtypes first appear.
        ([VariableInfo("h", 8, H), VariableInfo("f", 8, F), VariableInfo("h2", 8, H)], 1,
         [Placement(0, H, ("h", "h2"), True), Placement(0, F, ("f",), True)]),
        # Not packable (sparse gradient, no gradient): alone, but balanced with the rest.
        ([VariableInfo("emb", 400, F, packable=False), VariableInfo("w", 40, F),
          VariableInfo("b", 4, F), VariableInfo("unused", 12, F, packable=False)], 2,
         [Placement(1, F, ("w", "b"), True), Placement(0, F, ("emb",), False),
          Placement(1, F, ("unused",), False)]),
        ([], 2, []),
    ],
)
def test_plan_packing(variables: list[VariableInfo], num_ps: int,
                      expected: list[Placement]) -> None:
    assert plan_packing(variables, num_ps) == expected


@pytest.mark.parametrize(
    ("total", "num_ps", "minimum", "expected"),
    [
        (68, 2, 256 * 1024, 1),               # a tiny model stays on PS 0
        (68, 2, 0, 2),                        # 0: every PS, however small
        (512 * 1024 - 1, 2, 256 * 1024, 1),   # just short of two shares
        (512 * 1024, 2, 256 * 1024, 2),       # two whole shares
        (100 * 2**20, 4, 256 * 1024, 4),      # never more than the job has
        (3 * 2**20, 8, 2**20, 3),             # three 1 MiB shares of 8 PS
        (0, 3, 256 * 1024, 1),                # nothing to place: still PS 0
        (0, 3, 0, 3),
    ],
)
def test_ps_to_use(total: int, num_ps: int, minimum: int, expected: int) -> None:
    assert ps_to_use(total, num_ps, minimum) == expected


@pytest.mark.parametrize(("num_ps", "minimum", "error"), [(0, 0, "num_ps"), (2, -1, "min_bytes")])
def test_ps_to_use_rejects(num_ps: int, minimum: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ps_to_use(1, num_ps, minimum)


def test_plan_packing_spreads_only_over_the_ps_that_get_their_share() -> None:
    variables = [VariableInfo(f"w{i}", 100, F) for i in range(6)] + [
        VariableInfo("emb", 300, F, packable=False)]  # 900 bytes in all
    # Shares of at least 300 bytes: 3 of the 4 PS, byte-balanced among them (300 each:
    # the embedding fills PS 0).
    assert plan_packing(variables, 4, 300) == [
        Placement(1, F, ("w0", "w2", "w4"), True), Placement(2, F, ("w1", "w3", "w5"), True),
        Placement(0, F, ("emb",), False)]
    # Shares of at least 1000: one PS, everything packed there but the sparse one.
    assert plan_packing(variables, 4, 1000) == [
        Placement(0, F, tuple(f"w{i}" for i in range(6)), True),
        Placement(0, F, ("emb",), False)]
    # 0 (the function's default): every PS.
    assert {p.ps for p in plan_packing(variables, 4)} == {0, 1, 2, 3}
