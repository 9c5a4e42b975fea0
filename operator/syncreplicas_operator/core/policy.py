"""What a replica's exit means for the replica and for the job: the one restart rule.

Shared by the planner (pods on a cluster) and the local runner (processes), so a job
behaves the same on a laptop and on a cluster.
"""

from __future__ import annotations

import enum
from typing import Protocol

from . import exitcodes, naming
from .enums import ChiefRestartPolicy, RestartPolicy


class ReplicaExitDecision(enum.Enum):
    """What a replica's exit means for the replica and for the job."""

    RESTART = "Restart"  # start the replica again (same name, same index)
    FAIL_JOB = "FailJob"  # the whole job has failed
    SUCCEED_JOB = "SucceedJob"  # the chief finished training: the job has succeeded
    IGNORE = "Ignore"  # leave the replica stopped; the job goes on (finished or lost backup)


class RestartRules(Protocol):
    """The part of ``spec.runPolicy`` that decides restarts."""

    @property
    def restart_policy(self) -> str: ...

    @property
    def backoff_limit(self) -> int: ...


class WarmRules(RestartRules, Protocol):
    @property
    def warm_restarts(self) -> bool: ...


def restarts_warm(run_policy: WarmRules, replica_type: str, chief_restart_policy: str) -> bool:
    """Whether the replica's process is restarted inside its container (the runtime's
    launch/restartrules.py decides each exit). Only where a restart needs no decision of the
    operator's first: not under ``Never``, and not for a chief whose restart must fail the
    job (``Fail``) or restart everyone else first (``RestartJob``)."""
    if not run_policy.warm_restarts or run_policy.restart_policy == RestartPolicy.NEVER:
        return False
    return replica_type != naming.CHIEF or chief_restart_policy not in (
        ChiefRestartPolicy.FAIL,
        ChiefRestartPolicy.RESTART_JOB,
    )


def decide_replica_exit(
    run_policy: RestartRules,
    replica_type: str,
    exit_code: int,
    restarts: int,
    *,
    disrupted: bool = False,
) -> ReplicaExitDecision:
    """Decide what a replica's exit means.

    ``replica_type`` is ``ps``, ``chief`` or ``worker``; ``restarts`` is the number of
    restarts the job has already spent against ``backoffLimit`` (all replicas together,
    as Kubernetes Jobs and Kubeflow count them).

    - Exit 0: the chief's means training reached ``maxSteps`` (the job succeeded); a PS or
      worker exiting 0 has finished its part and is left alone.
    - ``restartPolicy: ExitCode``: the runtime's non-retryable codes (bad configuration,
      bad model, unreachable peer) fail the job whatever the replica; every other code is
      retried like ``OnFailure``.
    - ``OnFailure``: retried while ``restarts < backoffLimit``.
    - ``Never``, or the backoff budget spent: a PS or the chief is essential, so the job
      fails; a worker is a replica the job may lose (backups absorb it; the planner
      reports Degraded or Stalled from the count of replicas left).
    - ``disrupted``: the cluster stopped the replica (eviction, preemption, node shutdown),
      not its own failure. Under ``OnFailure`` and ``ExitCode`` it is restarted whatever
      the budget (the caller does not count it against ``backoffLimit``); a non-retryable
      code under ``ExitCode`` still fails the job, and ``Never`` restarts nothing.
    """
    if exit_code == exitcodes.OK:
        if replica_type == naming.CHIEF:
            return ReplicaExitDecision.SUCCEED_JOB
        return ReplicaExitDecision.IGNORE
    policy = run_policy.restart_policy
    if policy == RestartPolicy.EXIT_CODE and not exitcodes.is_retryable(exit_code):
        return ReplicaExitDecision.FAIL_JOB
    if disrupted and policy != RestartPolicy.NEVER:
        return ReplicaExitDecision.RESTART
    retry = (
        policy in (RestartPolicy.ON_FAILURE, RestartPolicy.EXIT_CODE)
        and restarts < run_policy.backoff_limit
    )
    if retry:
        return ReplicaExitDecision.RESTART
    if replica_type == naming.WORKER:
        return ReplicaExitDecision.IGNORE
    return ReplicaExitDecision.FAIL_JOB


def job_failure_reason(run_policy: RestartRules, exit_code: int) -> str:
    """The event reason for a job that :func:`decide_replica_exit` failed on ``exit_code``."""
    if run_policy.restart_policy == RestartPolicy.EXIT_CODE and not exitcodes.is_retryable(
        exit_code
    ):
        return naming.REASON_NON_RETRYABLE_EXIT
    if run_policy.restart_policy != RestartPolicy.NEVER:
        return naming.REASON_BACKOFF_LIMIT_EXCEEDED
    return naming.REASON_REPLICA_FAILED
