"""The operator and the runtime must agree on what each exit code means."""

import pytest
from syncreplicas_operator.core import exitcodes as op
from syncreplicas_runtime.foundation import exitcodes as rt


def test_same_numbers_on_both_sides() -> None:
    assert op.NAMES == rt.NAMES
    assert op.NON_RETRYABLE == rt.NON_RETRYABLE


def test_fenced_is_77_on_both_sides_and_never_fails_the_job() -> None:
    """FENCED: a newer incarnation holds the replica's identity. Not a failure of the job
    (not in NON_RETRYABLE); the operator counts it as superseded and does not restart it."""
    assert op.FENCED == rt.FENCED == 77
    assert rt.NAMES[77] == "FENCED"
    assert 77 not in rt.NON_RETRYABLE


@pytest.mark.parametrize(
    ("code", "retry"),
    [
        (0, False), (64, False), (65, False), (69, False),
        (75, True), (1, True), (137, True), (143, True),
    ],
)
def test_retryable(code: int, retry: bool) -> None:
    assert rt.is_retryable(code) is retry
    assert op.is_retryable(code) is retry


@pytest.mark.parametrize(("code", "line"), [
    (64, "syncreplicas: CONFIG (64): bad field"),
    (75, "syncreplicas: RETRY (75): bad field"),
    (77, "syncreplicas: FENCED (77): bad field"),
    (143, "syncreplicas: EXIT (143): bad field"),
])
def test_exit_line(code: int, line: str) -> None:
    assert rt.exit_line(code, "bad field") == line
