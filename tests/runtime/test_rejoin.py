"""Which epoch a replica joins after its step failed on a peer error (replica/worker.py).

A failed link (every PS answers, PS 0 still runs the epoch: typically a PS still dialling
the address a replaced pod had) means joining the same epoch again; a lost PS, an epoch
that moved on or ended, or too many quick failures in a row mean waiting for a new one.
On a real cluster: tests/cluster/test_monitoring.py (a worker replaced under ExitCode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import tensorflow as tf
from syncreplicas_runtime.foundation.phases import Phase
from syncreplicas_runtime.replica import worker

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

    def probe(self) -> None:
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
    monkeypatch.setattr(worker, "LINK_RETRY_PAUSE", 0.0)


@pytest.mark.parametrize(("state", "probe_error", "failures", "skip"), [
    # the link failed, nothing else: join the same epoch again
    (FakeState(EPOCH, Phase.RUNNING), None, 1, None),
    (FakeState(EPOCH, Phase.GATHERING), None, 1, None),
    (FakeState(EPOCH, Phase.RESETTING), None, worker.LINK_RETRIES, None),
    # PS 0 opened another epoch, or ended training: not this one
    (FakeState(EPOCH + 1, Phase.RESETTING), None, 1, EPOCH),
    (FakeState(EPOCH, Phase.DONE), None, 1, EPOCH),
    # a PS does not answer: it was lost; PS 0 opens a new epoch once it is back
    (None, tf.errors.UnavailableError(None, None, "ps-1: refused"), 1, EPOCH),
    (None, tf.errors.DeadlineExceededError(None, None, "probe timed out"), 1, EPOCH),
    # too many quick failures in a row: wait for a new epoch like after a lost PS
    (FakeState(EPOCH, Phase.RUNNING), None, worker.LINK_RETRIES + 1, EPOCH),
])
def test_epoch_to_skip(state: FakeState | None, probe_error: Exception | None,
                       failures: int, skip: int | None) -> None:
    protocol = FakeProtocol(state, probe_error)
    assert worker.epoch_to_skip(protocol, EPOCH, failures) == skip  # type: ignore[arg-type]
    assert protocol.reopened == (1 if probe_error is not None else 0)


def test_link_failures_count_only_quick_failures_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(worker.time, "monotonic", lambda: now[0])
    protocol = FakeProtocol(FakeState(EPOCH, Phase.RUNNING))
    links = worker.LinkFailures()
    for expected in range(1, worker.LINK_RETRIES + 1):  # each failing 1 s after joining
        assert links.epoch_to_skip(protocol, EPOCH, now[0] - 1) is None  # type: ignore[arg-type]
        assert links.count == expected
    assert links.epoch_to_skip(protocol, EPOCH, now[0] - 1) == EPOCH  # type: ignore[arg-type]
    # a failure after a long stretch of training starts a new count
    long_ago = now[0] - worker.LINK_RETRY_WINDOW - 1
    assert links.epoch_to_skip(protocol, EPOCH, long_ago) is None  # type: ignore[arg-type]
    assert links.count == 1
