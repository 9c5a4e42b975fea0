"""Supervise the job's processes until it ends, as the operator supervises its pods.

Every exit is judged by the operator's own rule (``core.policy.decide_replica_exit``):
restart (after a delay, charged against backoffLimit unless ``--chaos`` caused it),
chiefRestartPolicy (RestartJob: every replica again, PS first), leave stopped, fail the
job, or succeed it when the chief reaches maxSteps. A job that can no longer aggregate a
step, or that outlives activeDeadlineSeconds, fails here instead of waiting forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from ..core import exitcodes, naming
from ..core.enums import ChiefRestartPolicy
from ..core.policy import ReplicaExitDecision, decide_replica_exit
from ..core.spec import Job
from .errors import RUN_FAILED, RUN_INTERRUPTED
from .replicas import STOP_GRACE_SECONDS, Replica, Replicas, describe_exit, state_after_exit

RESTART_DELAY_SECONDS: Final = 1.0
# After the chief succeeds, PS and workers finish on their own; this bounds the wait.
FINISH_GRACE_SECONDS: Final = 30.0
POLL_SECONDS: Final = 0.2

Outcome = tuple[str, int, str]  # (succeeded | failed | interrupted, exit code, message)


class Supervisor:
    """The supervision loop of one job; ``job_restarts`` is what backoffLimit counts."""

    def __init__(
        self,
        job: Job,
        replicas: Replicas,
        *,
        interrupted: Callable[[], bool],
        tick: Callable[[], None],
        note: Callable[[str], None],
    ) -> None:
        self.job = job
        self.replicas = replicas
        self.interrupted = interrupted
        self.tick = tick  # --chaos and --resize, once a round
        self.note = note
        self.job_restarts = 0  # restarts charged against runPolicy.backoffLimit

    def run(self, started: float) -> Outcome:
        """Until the job ends; ``started`` is the monotonic time the run began."""
        spec = self.job.spec
        deadline = spec.run_policy.active_deadline_seconds
        replicas = self.replicas
        while True:
            if self.interrupted():
                return "interrupted", RUN_INTERRUPTED, "interrupted (Ctrl-C)"
            now = time.monotonic()
            if deadline is not None and now - started > deadline:
                return "failed", RUN_FAILED, f"activeDeadlineSeconds ({deadline}s) exceeded"
            for replica in replicas:
                if replica.restart_at is not None and now >= replica.restart_at:
                    with replicas.lock:
                        replica.restarts += 1
                    replicas.spawn(replica)
                    continue
                if replica.popen is None or replica.state != "running":
                    continue
                code = replica.reap()
                if code is None:
                    continue
                verdict = self._on_exit(replica, code)
                if verdict is not None:
                    return verdict
            if not any(r.running() or r.restart_at is not None for r in replicas):
                return "failed", RUN_FAILED, "every replica stopped before the chief finished"
            # Replicas given up on: an exit already handled by _on_exit that left them
            # failed and not restarting. Not `not running()`: an incarnation that ends
            # between the loop above and here is not reaped yet, and its exit_codes still
            # end with an earlier incarnation's failure.
            lost = sum(1 for r in replicas if r.spec.replica_type != naming.PS
                       and r.state.startswith("failed") and r.restart_at is None)
            replicas_now = 1 + replicas.workers
            left = replicas_now - lost
            if left < min(spec.replicas_to_aggregate, replicas_now):
                # On a cluster the job would report Stalled and wait for someone to act;
                # here nobody else can bring a replica back, so waiting would hang forever.
                return "failed", RUN_FAILED, (
                    f"only {left} of the {spec.replicas_to_aggregate} replicas "
                    "each step needs are left (the rest exhausted their restarts): stalled"
                )
            self.tick()
            time.sleep(POLL_SECONDS)

    def _on_exit(self, replica: Replica, code: int) -> Outcome | None:
        if not self.replicas.active(replica):  # scaled down: it was asked to leave
            with self.replicas.lock:
                replica.state = "left" if code == 0 else f"left ({describe_exit(code)})"
            return None
        injected = replica.injected
        decision = decide_replica_exit(
            self.job.spec.run_policy, replica.spec.replica_type, code, self.job_restarts
        )
        reason = describe_exit(code)
        with self.replicas.lock:
            replica.state = state_after_exit(code)
        if decision is ReplicaExitDecision.SUCCEED_JOB:
            self._finish_after_chief()
            return "succeeded", 0, "the chief reached maxSteps"
        if decision is ReplicaExitDecision.IGNORE:
            if code != 0:
                self.note(f"{replica.name} exited {reason}; left stopped by the restart policy")
            return None
        if decision is ReplicaExitDecision.FAIL_JOB:
            message = f"{replica.name} exited {reason}; the job failed"
            self.note(message)
            if code in exitcodes.NON_RETRYABLE:
                return "failed", code, message + _log_tail(replica)
            return "failed", RUN_FAILED, message + _log_tail(replica)
        # RESTART. Injected faults are the user's experiment, not the job's failures: they
        # are not charged against backoffLimit.
        if not injected:
            self.job_restarts += 1
        if replica.spec.replica_type == naming.CHIEF:
            policy = self.job.spec.chief_restart_policy
            if policy == ChiefRestartPolicy.FAIL:
                return "failed", RUN_FAILED, f"chief exited {reason}; chiefRestartPolicy is Fail"
            if policy == ChiefRestartPolicy.RESTART_JOB:
                self._restart_job()
                return None
        self.note(f"{replica.name} exited {reason}; restarting")
        with self.replicas.lock:
            replica.state = f"restarting ({reason})"
            replica.restart_at = time.monotonic() + RESTART_DELAY_SECONDS
        return None

    def _restart_job(self) -> None:
        """chiefRestartPolicy RestartJob: stop workers and PS, then start all again (PS first)."""
        self.note("chief restarted: RestartJob restarts every replica from the checkpoint")
        self.replicas.stop(self.replicas.of_type(naming.WORKER), STOP_GRACE_SECONDS)
        self.replicas.stop(self.replicas.of_type(naming.PS), STOP_GRACE_SECONDS)
        restart_at = time.monotonic() + RESTART_DELAY_SECONDS
        with self.replicas.lock:
            for replica in self.replicas:
                if self.replicas.active(replica):
                    replica.state = "restarting (RestartJob)"
                    replica.restart_at = restart_at

    def _finish_after_chief(self) -> None:
        """The chief is done: PS and workers exit by themselves; stop what does not."""
        others = [r for r in self.replicas if r.spec.replica_type != naming.CHIEF]
        self.replicas.wait(others, FINISH_GRACE_SECONDS)
        with self.replicas.lock:
            for replica in others:
                code = replica.reap()
                if code is not None and replica.state == "running":
                    replica.state = state_after_exit(code)


def _log_tail(replica: Replica, lines: int = 5) -> str:
    try:
        tail = replica.log_path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"\n  last lines of {replica.log_path}:\n" + "\n".join(f"    {t}" for t in tail)
