"""Which epoch a replica joins after its step failed on a peer error (replica/rejoin.py).

A failed link (every PS answers, PS 0 still runs the epoch: typically a PS still dialling
the address a replaced pod had) means joining the same epoch again; a lost PS, an epoch
that moved on or ended, or too many quick failures in a row mean waiting for a new one.
The check that decided is named.
On a real cluster: tests/cluster/test_monitoring.py (a worker replaced under ExitCode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import tensorflow as tf
from syncreplicas_runtime.foundation.phases import Phase
from syncreplicas_runtime.replica import rejoin

EPOCH = 0xE1


@dataclass
class FakeState:
    epoch: int
    phase: Phase


@dataclass
class FakeProtocol:
    state_now: FakeState | None = None
    probe_error: Exception | None = None
    reopened: int = 0
    calls: list[str] = field(default_factory=list)

    def probe(self, timeout: float = 2.0) -> None:
        self.calls.append("probe")
        if self.probe_error is not None:
            raise self.probe_error

    def state(self) -> FakeState:
        self.calls.append("state")
        assert self.state_now is not None
        return self.state_now

    def reopen(self) -> None:
        self.reopened += 1


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rejoin, "LINK_RETRY_PAUSE", 0.0)


@pytest.mark.parametrize(("state", "probe_error", "failures", "skip", "why"), [
    # the link failed, nothing else: join the same epoch again
    (FakeState(EPOCH, Phase.RUNNING), None, 1, None, "every PS answers"),
    (FakeState(EPOCH, Phase.GATHERING), None, 1, None, "every PS answers"),
    (FakeState(EPOCH, Phase.RESETTING), None, rejoin.LINK_RETRIES, None, "every PS answers"),
    # PS 0 opened another epoch, or ended training: not this one
    (FakeState(EPOCH + 1, Phase.RESETTING), None, 1, EPOCH, f"PS 0 runs sync epoch {EPOCH + 1:x}"),
    (FakeState(EPOCH, Phase.DONE), None, 1, EPOCH, "the epoch is DONE"),
    # a PS does not answer: lost (PS 0 opens a new epoch once it is back), or slow to
    (None, tf.errors.UnavailableError(None, None, "ps-1: refused"), 1, EPOCH,
     "a PS did not answer: UnavailableError: ps-1: refused"),
    (None, tf.errors.DeadlineExceededError(None, None, "probe timed out"), 1, EPOCH,
     "a PS did not answer: DeadlineExceededError: probe timed out"),
    # too many quick failures in a row: wait for a new epoch like after a lost PS
    (FakeState(EPOCH, Phase.RUNNING), None, rejoin.LINK_RETRIES + 1, EPOCH,
     f"{rejoin.LINK_RETRIES + 1} link failures in a row"),
])
def test_epoch_to_skip(state: FakeState | None, probe_error: Exception | None,
                       failures: int, skip: int | None, why: str) -> None:
    protocol = FakeProtocol(state, probe_error)
    decided = rejoin.epoch_to_skip(protocol, EPOCH, failures)  # type: ignore[arg-type]
    assert decided.epoch == skip
    assert decided.why.startswith(why), decided.why  # named in the "left sync epoch" line
    assert protocol.reopened == (1 if probe_error is not None else 0)


def test_link_failures_count_only_quick_failures_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(rejoin.time, "monotonic", lambda: now[0])
    protocol = FakeProtocol(FakeState(EPOCH, Phase.RUNNING))
    links = rejoin.LinkFailures()
    for expected in range(1, rejoin.LINK_RETRIES + 1):  # each failing 1 s after joining
        skip = links.epoch_to_skip(protocol, EPOCH, now[0] - 1)  # type: ignore[arg-type]
        assert skip.epoch is None
        assert links.count == expected
    assert links.epoch_to_skip(protocol, EPOCH, now[0] - 1).epoch == EPOCH  # type: ignore[arg-type]
    # a failure after a long stretch of training starts a new count
    long_ago = now[0] - rejoin.LINK_RETRY_WINDOW - 1
    assert links.epoch_to_skip(protocol, EPOCH, long_ago).epoch is None  # type: ignore[arg-type]
    assert links.count == 1
