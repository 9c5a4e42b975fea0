"""Warm restarts: the runtime's rule for each exit (restarting.py), and how the operator
counts restarts that no container restart shows (core/warm.py, through plan_job) (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from syncreplicas_operator.core import exitcodes, metricnames, naming, status
from syncreplicas_operator.core.plan.context import Observed
from syncreplicas_operator.core.plan.pipeline import plan_job
from syncreplicas_operator.core.warm import fold
from syncreplicas_runtime.foundation import exitcodes as runtime_exitcodes
from syncreplicas_runtime.launch import restartrules as restarting
from syncreplicas_runtime.launch.restartrules import Exit, Rule, RuleError, pause_before_restart

from tests.support.jobs import planner_job
from tests.support.plans import T0, pods_of

ON_FAILURE = Rule("OnFailure", limit=6)
EXIT_CODE = Rule("ExitCode", limit=6)
LONG = 60.0  # seconds a replica trained before it died: a new death


# --- the runtime's rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "done", "restarts", "quick", "pause"),
    [
        # done, fenced, or the pod is stopping: the container ends with the code
        (ON_FAILURE, Exit(0, LONG), 0, 0, None),
        (ON_FAILURE, Exit(77, LONG), 0, 0, None),
        (ON_FAILURE, Exit(143, LONG, stopping=True), 0, 0, None),
        (ON_FAILURE, Exit(137, LONG, stopping=True), 0, 0, None),
        # killed (the OOM killer's SIGKILL), retryable, or any failure under OnFailure
        (ON_FAILURE, Exit(137, LONG), 0, 0, 0.0),
        (ON_FAILURE, Exit(75, LONG), 5, 0, 0.0),
        (ON_FAILURE, Exit(143, LONG), 0, 0, 0.0),
        (ON_FAILURE, Exit(64, LONG), 0, 0, 0.0),
        (ON_FAILURE, Exit(1, LONG), 0, 0, 0.0),
        # ExitCode: the non-retryable codes end the container (the operator fails the job)
        (EXIT_CODE, Exit(64, LONG), 0, 0, None),
        (EXIT_CODE, Exit(65, LONG), 0, 0, None),
        (EXIT_CODE, Exit(69, LONG), 0, 0, None),
        (EXIT_CODE, Exit(75, LONG), 0, 0, 0.0),
        (EXIT_CODE, Exit(137, LONG), 0, 0, 0.0),
        # the pod's budget spent: the kubelet and the operator take over
        (ON_FAILURE, Exit(137, LONG), 6, 0, None),
        (Rule("OnFailure", limit=0), Exit(137, LONG), 0, 0, None),
        # dying again and again within seconds of starting: a pause that grows, bounded
        (ON_FAILURE, Exit(75, 1.0), 0, 1, 0.0),
        (ON_FAILURE, Exit(75, 1.0), 1, 2, 0.5),
        (ON_FAILURE, Exit(75, 1.0), 2, 3, 1.0),
        (ON_FAILURE, Exit(75, 1.0), 3, 4, 2.0),
        (Rule("OnFailure", limit=99), Exit(75, 1.0), 9, 10, restarting.MAX_PAUSE),
        # a replica that trained for a while died of something new: at once again
        (ON_FAILURE, Exit(75, restarting.STEADY_SECONDS), 3, 4, 0.0),
    ],
)
def test_pause_before_restart(rule: Rule, done: Exit, restarts: int, quick: int,
                              pause: float | None) -> None:  # fmt: skip
    assert pause_before_restart(rule, done, restarts, quick) == pause


@pytest.mark.parametrize(
    ("env", "rule"),
    [
        ({}, None),
        ({"SYNCREPLICAS_WARM_RESTARTS": ""}, None),
        ({"SYNCREPLICAS_WARM_RESTARTS": "OnFailure", "SYNCREPLICAS_WARM_RESTART_LIMIT": "6"},
         Rule("OnFailure", 6)),
        ({"SYNCREPLICAS_WARM_RESTARTS": "ExitCode", "SYNCREPLICAS_WARM_RESTART_LIMIT": "0",
          "SYNCREPLICAS_WARM_RESTART_STATE": "/tmp/x"}, Rule("ExitCode", 0, "/tmp/x")),
    ],
)  # fmt: skip
def test_parse_rule(env: dict[str, str], rule: Rule | None) -> None:
    assert restarting.parse_rule(env) == rule


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"SYNCREPLICAS_WARM_RESTARTS": "Never", "SYNCREPLICAS_WARM_RESTART_LIMIT": "1"},
         "SYNCREPLICAS_WARM_RESTARTS: 'Never'"),
        ({"SYNCREPLICAS_WARM_RESTARTS": "OnFailure"}, "SYNCREPLICAS_WARM_RESTART_LIMIT: ''"),
        ({"SYNCREPLICAS_WARM_RESTARTS": "OnFailure", "SYNCREPLICAS_WARM_RESTART_LIMIT": "-1"},
         "SYNCREPLICAS_WARM_RESTART_LIMIT: '-1'"),
    ],
)  # fmt: skip
def test_a_bad_rule_names_its_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(RuleError, match=names):
        restarting.parse_rule(env)


def test_both_sides_name_the_same_things() -> None:
    assert restarting.POLICY_ENV == naming.ENV_WARM_RESTARTS
    assert restarting.LIMIT_ENV == naming.ENV_WARM_RESTART_LIMIT
    assert restarting.STATE_ENV == naming.ENV_WARM_RESTART_STATE
    assert restarting.COUNT_KEY == status.PROCESS_RESTARTS_KEY
    assert set(restarting.POLICIES) == {"OnFailure", "ExitCode"}
    assert runtime_exitcodes.FENCED == exitcodes.FENCED
    assert metricnames.PROCESS_RESTARTS == "syncreplicas_process_restarts"


def test_the_termination_message_says_the_count_the_operator_reads() -> None:
    text = runtime_exitcodes.termination_message(137, "killed by SIGKILL", 40)
    parsed = status.parse_termination_message(text + restarting.count_fact(3))
    assert parsed == status.TerminationMessage("killed by SIGKILL", 40, process_restarts=3)


# --- the operator's count ----------------------------------------------------------------


def a_pod(**changes: Any) -> status.ObservedPod:
    return status.ObservedPod("job-worker-0", "worker", 0, uid="u1", phase="Running", **changes)


@pytest.mark.parametrize(
    ("pod", "stored", "read", "count"),
    [
        (a_pod(), None, None, 0),
        # what the replica said this pass, for this pod
        (a_pod(), None, {"job-worker-0": ("u1", 2)}, 2),
        # kept from an earlier pass when this one did not read
        (a_pod(), [{"pod": "job-worker-0", "uid": "u1", "count": 3}], None, 3),
        # the highest of the three: a read never lowers it
        (a_pod(), [{"pod": "job-worker-0", "uid": "u1", "count": 3}],
         {"job-worker-0": ("u1", 1)}, 3),
        # the container's last word (its termination message)
        (a_pod(warm_restarts=4), [{"pod": "job-worker-0", "uid": "u1", "count": 3}], None, 4),
        # another pod of that name: its count is not this one's
        (a_pod(), [{"pod": "job-worker-0", "uid": "old", "count": 3}],
         {"job-worker-0": ("old", 5)}, 0),
        # malformed status entries are skipped
        (a_pod(), [{"pod": "job-worker-0", "uid": "u1", "count": "3"}], None, 0),
    ],
)  # fmt: skip
def test_fold(pod: status.ObservedPod, stored: Any, read: Any, count: int) -> None:
    (folded,), kept = fold([replace(pod, restart_count=1)], stored, read)
    assert folded.warm_restarts == count
    assert folded.restart_count == 1 + count  # the kubelet's one restart, then these
    assert kept == ([{"pod": "job-worker-0", "uid": "u1", "count": count}] if count else [])


def test_warm_restarts_count_and_spend_the_budget() -> None:
    job = planner_job(runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 3})
    pods = tuple(pods_of(job))
    worker = naming.replica_name(job.name, "worker", 0)
    uid = next(p.uid for p in pods if p.name == worker)
    plan = plan_job(job, Observed(pods, warm_reads={worker: (uid, 2)}), {}, T0)
    assert plan.status["replicaStatuses"]["worker"]["restarts"] == 2
    assert plan.status["warmRestarts"] == [{"pod": worker, "uid": uid, "count": 2}]
    # A later pass that reads nothing still counts them; one more over the budget fails.
    again = plan_job(job, Observed(pods), plan.status, T0)
    assert again.status["replicaStatuses"]["worker"]["restarts"] == 2
    assert again.status["phase"] != "Failed"
    over = plan_job(job, Observed(pods, warm_reads={worker: (uid, 4)}), plan.status, T0)
    assert over.status["phase"] == "Failed"
    failed = next(c for c in over.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "restarted 4 times" in failed["message"]


def test_a_warm_restart_is_a_recovery_and_a_chief_restart() -> None:
    job = planner_job()
    pods = tuple(pods_of(job))
    first = plan_job(job, Observed(pods, seen_pods=None), {}, T0)
    chief = naming.replica_name(job.name, "chief", 0)
    uid = next(p.uid for p in pods if p.name == chief)
    later = plan_job(job, Observed(pods, seen_pods=first.seen_pods,
                                   warm_reads={chief: (uid, 1)}), first.status, T0)  # fmt: skip
    assert later.status["chiefRestarts"] == 1
    assert later.status["lastRecovery"]["replica"] == "chief-0"


def test_the_warm_start_client_names_the_variables_the_runtime_reads() -> None:
    """A replica whose environment makes the runtime's entry point fork it again or wait as a
    spare is not forked from a warm-start server (whose child runs the replica alone): the
    operator's client names the variables as the runtime reads them."""
    from syncreplicas_operator.local import warmstart
    from syncreplicas_runtime.launch import sparerules as spare

    assert warmstart.WARM_RESTARTS_ENV == restarting.POLICY_ENV
    assert warmstart.SPARE_TOKEN_ENV == spare.TOKEN_ENV
