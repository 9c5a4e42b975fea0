"""SYNCREPLICAS_INCARNATION: a replica process's incarnation (fencing), parsed purely."""

from __future__ import annotations

import json

import pytest
from syncreplicas_runtime.foundation import exitcodes
from syncreplicas_runtime.foundation.config import (
    INCARNATION_ENV,
    ConfigError,
    parse_config,
    parse_incarnation,
)

STARTED_MS = 1_700_000_000_123


def env(**extra: str) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": {"ps": ["ps0:2222"], "chief": ["c:2222"],
                                                 "worker": ["w0:2222"]},
                                     "task": {"type": "worker", "index": 0}}),
            "SYNCREPLICAS_JOB": json.dumps({"replicasToAggregate": 2, "workers": 1,
                                            "parameterServers": 1}), **extra}


@pytest.mark.parametrize(("text", "expected"), [
    (None, STARTED_MS),                      # unset: the process's start time
    ("", STARTED_MS),
    ("  ", STARTED_MS),
    ("1", 1),
    ("1795577616453", 1795577616453),        # the operator's clock in ms
    (" 42 ", 42),
    (str(2**63 - 1), 2**63 - 1),             # int64's largest
])
def test_parse_incarnation(text: str | None, expected: int) -> None:
    assert parse_incarnation(text, STARTED_MS) == expected


@pytest.mark.parametrize("text", [
    "0", "-5", "+5", "1.5", "1e3", "abc", "12ms", str(2**63), "١٢",  # non-ASCII digits
])
def test_a_bad_incarnation_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_incarnation(text, STARTED_MS)
    assert err.value.field == INCARNATION_ENV == "SYNCREPLICAS_INCARNATION"
    with pytest.raises(ConfigError, match=r"^SYNCREPLICAS_INCARNATION: "):
        parse_config(env(SYNCREPLICAS_INCARNATION=text), started_ms=STARTED_MS)


def test_the_config_carries_the_incarnation() -> None:
    assert parse_config(env(), started_ms=STARTED_MS).incarnation == STARTED_MS
    told = parse_config(env(SYNCREPLICAS_INCARNATION="2000"), started_ms=STARTED_MS)
    assert told.incarnation == 2000


@pytest.mark.parametrize(("slot", "who"), [(0, "the chief"), (1, "worker 0"), (8, "worker 7")])
def test_the_fenced_exit_line_names_both_incarnations(slot: int, who: str) -> None:
    line = exitcodes.exit_line(exitcodes.FENCED, exitcodes.fenced_reason(slot, 1000, 2000))
    assert line == (f"syncreplicas: FENCED (77): superseded: {who} (replica slot {slot}) is "
                    "held by incarnation 2000, newer than this process's incarnation 1000; "
                    "standing down (never restart)")
