"""tests/under-load.txt names tests that exist: `make test REPEAT=N` repeats nothing for a
name that went stale, so a stale one fails here instead."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import chosen, listed

REPO = Path(__file__).resolve().parents[2]


def test_every_name_in_the_list_is_a_test_of_the_repository() -> None:
    names = listed()
    assert names
    for name in names:
        path, _, function = name.partition("::")
        source = REPO / path
        assert source.is_file(), name
        defined = rf"^(async )?def {re.escape(function)}\("
        assert not function or re.search(defined, source.read_text(), re.MULTILINE), name


def test_a_listed_test_is_chosen_with_its_parameters_and_no_other() -> None:
    names = ["tests/a.py::test_x", "tests/b.py"]
    assert chosen("tests/a.py::test_x", names)
    assert chosen("tests/a.py::test_x[chief]", names)
    assert chosen("tests/b.py::test_anything", names)
    assert not chosen("tests/a.py::test_xy", names)
    assert not chosen("tests/c.py::test_x", names)
