"""Warm restarts: when a replica's process is started again inside its container (PURE).

The operator turns them on per pod (``spec.runPolicy.warmRestarts``, docs/contract.md)
with three variables; without the first, ``python -m syncreplicas_runtime`` is the replica
itself and the container ends when it does. With it, the container's process keeps
TensorFlow imported and forks the replica (``supervisor.py``); this module decides, for each
exit of the replica, whether the container ends with that code or a new replica process
starts, and after how long:

- never after exit 0 (done), a FENCED exit (a newer incarnation holds the identity) or a
  stop the container itself was asked for (SIGTERM: the pod is going);
- under ``ExitCode``, never after a non-retryable code (64, 65, 69): the container ends
  with it and the operator fails the job, as without warm restarts;
- never once the pod has spent its budget (``backoffLimit``): the container ends with the
  code, and the kubelet and the operator take over as without warm restarts;
- otherwise (any other code, or killed by a signal: the OOM killer's SIGKILL) at once, or
  after a short, growing pause when the replica keeps dying within seconds of its start
  (a replica that ran for :data:`STEADY_SECONDS` starts the pause over).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..foundation.exitcodes import FENCED, NON_RETRYABLE, OK

# Set by the operator on pods whose replicas restart warm: the job's restartPolicy.
POLICY_ENV: Final = "SYNCREPLICAS_WARM_RESTARTS"
# The pod's budget of warm restarts: the job's backoffLimit.
LIMIT_ENV: Final = "SYNCREPLICAS_WARM_RESTART_LIMIT"
# A file that keeps the pod's count across container restarts (in the pod's /tmp emptyDir).
STATE_ENV: Final = "SYNCREPLICAS_WARM_RESTART_STATE"
# Told to each replica process: how many warm restarts its pod had before it (metrics).
COUNT_ENV: Final = "SYNCREPLICAS_PROCESS_RESTARTS"
# The fact the container's termination message ends with (docs/contract.md).
COUNT_KEY: Final = "processRestarts"

ON_FAILURE: Final = "OnFailure"
EXIT_CODE: Final = "ExitCode"
POLICIES: Final = (ON_FAILURE, EXIT_CODE)

STEADY_SECONDS: Final = 10.0  # a replica that ran this long died of something new
FIRST_PAUSE: Final = 0.5
MAX_PAUSE: Final = 8.0


class RuleError(ValueError):
    """A warm-restart variable the operator would not have written."""


@dataclass(frozen=True)
class Rule:
    """The pod's warm-restart settings."""

    policy: str
    limit: int
    state_file: str = ""


def parse_rule(env: Mapping[str, str]) -> Rule | None:
    """The rule the environment sets; None when warm restarts are off (no POLICY_ENV)."""
    policy = env.get(POLICY_ENV, "")
    if not policy:
        return None
    if policy not in POLICIES:
        raise RuleError(f"{POLICY_ENV}: {policy!r} is not one of {', '.join(POLICIES)}")
    raw = env.get(LIMIT_ENV, "")
    if not raw.isdigit():
        raise RuleError(f"{LIMIT_ENV}: {raw!r} is not a non-negative integer")
    return Rule(policy=policy, limit=int(raw), state_file=env.get(STATE_ENV, ""))


@dataclass(frozen=True)
class Exit:
    """One exit of the replica process, as its parent saw it."""

    code: int  # the exit status, or 128 + N when killed by signal N
    lived_seconds: float
    stopping: bool = False  # the container was asked to stop (SIGTERM or SIGINT)


def pause_before_restart(rule: Rule, done: Exit, restarts: int, quick: int) -> float | None:
    """Seconds to wait before the next replica process; None: the container ends with
    ``done.code``. ``restarts`` is the pod's warm restarts so far; ``quick`` how many
    replica processes in a row (this one included) lived under STEADY_SECONDS."""
    if done.stopping or done.code in (OK, FENCED):
        return None
    if rule.policy == EXIT_CODE and done.code in NON_RETRYABLE:
        return None
    if restarts >= rule.limit:
        return None
    if done.lived_seconds >= STEADY_SECONDS or quick <= 1:
        return 0.0
    return min(MAX_PAUSE, FIRST_PAUSE * (1 << (quick - 2)))


def count_fact(restarts: int) -> str:
    """The termination message's line of the pod's warm restarts."""
    return f"{COUNT_KEY}={restarts}\n"


def parse_count(text: str) -> int:
    """The count a state file holds (0 when empty or unreadable)."""
    text = text.strip()
    return int(text) if text.isdigit() else 0
