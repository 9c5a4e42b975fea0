"""Which epoch a replica joins after its step failed on a peer error (replica/rejoin.py).

A failed link (every PS answers, PS 0 still runs the epoch: typically a PS still dialling
the address a replaced pod had) means joining the same epoch again; a lost PS, an epoch
that moved on or ended, or too many quick failures in a row mean waiting for a new one.
The check that decided is named. An epoch left because a PS did not answer is joined again
once it goes on without the replica (PS 0 opens no new one for a lost link): as tables, and
with real processes whose worker's link to the PS is cut and restored.
On a real cluster: tests/cluster/test_monitoring.py (a worker replaced under ExitCode).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tensorflow as tf
from syncreplicas_runtime.foundation import exitcodes
from syncreplicas_runtime.foundation.phases import Phase
from syncreplicas_runtime.process.exits import Exit
from syncreplicas_runtime.replica import rejoin

from tests.runtime.rtutil import StepDelay, eventually, linear_job, runtime_env
from tests.support.partition import Forwarder
from tests.support.tfcluster import start_cluster

EPOCH = 0xE1


@dataclass
class FakeState:
    epoch: int
    phase: Phase
    global_step: int | None = None
    initialized: bool = True


@dataclass
class FakeProtocol:
    state_now: FakeState | None = None
    probe_error: Exception | None = None
    reopened: int = 0
    calls: list[str] = field(default_factory=list)

    states: list[FakeState] = field(default_factory=list)  # read in turn, the last kept
    probe_errors: list[Exception | None] = field(default_factory=list)  # raised in turn

    def probe(self, timeout: float = 2.0) -> None:
        self.calls.append("probe")
        if self.probe_errors:
            self.probe_error = self.probe_errors.pop(0)
        if self.probe_error is not None:
            raise self.probe_error

    def state(self) -> FakeState:
        self.calls.append("state")
        if self.states:
            self.state_now = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        assert self.state_now is not None
        return self.state_now

    def reopen(self) -> None:
        self.reopened += 1


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rejoin, "LINK_RETRY_PAUSE", 0.0)
    monkeypatch.setattr(rejoin, "HEAL_PROBE_SECONDS", 0.0)
    monkeypatch.setattr(rejoin, "POLL", 0.0)


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
    # Only an epoch left because a PS did not answer may be joined again once it is
    # healthy without this replica (wait_for_epoch).
    assert decided.heals == (probe_error is not None)
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


class FakeContext:
    def __init__(self) -> None:
        self.leaving = threading.Event()
        self.watchdog_armed = True
        self.lines: list[str] = []

    def log(self, msg: str) -> None:
        self.lines.append(msg)


UNAVAILABLE = tf.errors.UnavailableError(None, None, "ps-0: refused")


def running(step: int, epoch: int = EPOCH) -> FakeState:
    return FakeState(epoch, Phase.RUNNING, step)


def test_a_left_epoch_that_goes_on_without_the_replica_is_joined_again() -> None:
    # The PS did not answer at first; once it does, the step is read again and the epoch
    # must move on by HEALED_STEPS after that read.
    protocol = FakeProtocol(states=[running(10), running(10), running(11), running(11),
                                    running(11 + rejoin.HEALED_STEPS)],
                            probe_errors=[UNAVAILABLE, None])
    ctx = FakeContext()
    state = rejoin.wait_for_epoch(ctx, protocol, EPOCH, 10.0, heals=True)  # type: ignore[arg-type]
    assert (state.epoch, state.global_step) == (EPOCH, 11 + rejoin.HEALED_STEPS)
    assert protocol.calls.count("probe") == 2 and protocol.reopened == 1
    assert ctx.lines == [f"sync epoch {EPOCH:x} went on without this replica (every PS "
                         f"answers, global step 11 -> {11 + rejoin.HEALED_STEPS}): "
                         "joining it again"]


@pytest.mark.parametrize("after", [
    # A PS lost and back answers, but the epoch's updates fail on it: the step stays, and
    # PS 0 opens a new epoch, which is the one joined.
    [running(10)] * 5 + [FakeState(EPOCH + 1, Phase.RESETTING, 10)],
    # The epoch moved to another phase: start over (here it ends).
    [running(10), running(10), FakeState(EPOCH, Phase.DONE, 11)],
])
def test_a_left_epoch_that_does_not_go_on_is_not_joined_again(after: list[FakeState]) -> None:
    protocol = FakeProtocol(states=after)
    state = rejoin.wait_for_epoch(FakeContext(), protocol, EPOCH, 10.0, heals=True)  # type: ignore[arg-type]
    assert state is after[-1]


def test_without_heals_a_left_epoch_is_never_joined_again() -> None:
    # After a lost peer that was not a PS's silence (an epoch that ended, too many link
    # failures in a row), only a new epoch is joined, however the old one goes on.
    protocol = FakeProtocol(states=[running(step) for step in range(10, 400)])
    with pytest.raises(Exit) as raised:
        rejoin.wait_for_epoch(FakeContext(), protocol, EPOCH, 0.2)  # type: ignore[arg-type]
    assert raised.value.code == exitcodes.RETRY
    assert "probe" not in protocol.calls


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_worker_cut_off_from_the_ps_joins_the_epoch_that_went_on_without_it(
    tmp_path: Path,
) -> None:
    # PS, chief and two workers, R = 2 of 3 (one backup): the job trains on without any one
    # worker. Worker 1 reaches the PS through a forwarder (its TF_CONFIG names it), cut
    # until worker 1 has left the epoch on a PS that did not answer, then restored. PS 0
    # opens no new epoch for that, so worker 1 joins the running one again, well within
    # chiefLostTimeoutSeconds (its wait's bound, after which it would exit RETRY).
    job = linear_job(replicasToAggregate=2, training__maxSteps=100_000,
                     training__logEverySteps=1000)
    delay = StepDelay(tmp_path / "delay", 50)
    with start_cluster(job, workers=2, ps=1, workdir=tmp_path,
                       env={**runtime_env(), **delay.env}, start=False) as cluster:
        worker = cluster.replica("worker", 1)
        ps_port = int(cluster.replica("ps", 0).grpc_address.rpartition(":")[2])
        public = cluster.unique_port()
        link = Forwarder(public, ps_port)
        told = json.loads(worker.env["TF_CONFIG"])
        told["cluster"]["ps"] = [f"127.0.0.1:{public}"]
        worker.env["TF_CONFIG"] = json.dumps(told)
        try:
            cluster.start_all()
            assert eventually(lambda: "training in sync epoch" in cluster.log("worker", 1),
                              300), cluster.logs()
            epoch = cluster.log("worker", 1).split("training in sync epoch ")[1].split()[0]
            link.switch(0)  # every connection cut, every new one refused
            left = eventually(lambda: f"left sync epoch {epoch}" in cluster.log("worker", 1),
                              60)
            assert left, cluster.logs()
            line = cluster.log("worker", 1).split(f"left sync epoch {epoch}")[1].split("\n")[0]
            assert "rejoining (a PS did not answer" in line, line
            link.switch(ps_port)
            restored = time.monotonic()
            again = f"sync epoch {epoch} went on without this replica"
            assert eventually(lambda: cluster.log("worker", 1).count(
                f"training in sync epoch {epoch}") == 2, 60), cluster.logs()
            took = time.monotonic() - restored
            log = cluster.log("worker", 1)
            assert again in log, log
            assert all(code is None for code in cluster.poll().values()), cluster.logs()
        finally:
            link.close()
    print(f"worker 1 trained in its epoch again {took:.1f}s after its link came back")
