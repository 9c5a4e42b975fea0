"""Replica exits: what an exit means (policy), then each stopped pod through the exits
step, restartPolicy and backoffLimit (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from syncreplicas_operator.core import exitcodes, naming
from syncreplicas_operator.core.actions import DeletePod
from syncreplicas_operator.core.plan.exits import final_step, handle_exits, last_failure
from syncreplicas_operator.core.policy import ReplicaExitDecision, decide_replica_exit
from syncreplicas_operator.core.recovery import Failure
from syncreplicas_operator.core.spec import RunPolicy
from syncreplicas_operator.core.status import replica_statuses

from tests.support.jobs import planner_job
from tests.support.plans import condition, context, pods_of, reasons

RESTART = ReplicaExitDecision.RESTART
FAIL = ReplicaExitDecision.FAIL_JOB
SUCCEED = ReplicaExitDecision.SUCCEED_JOB
IGNORE = ReplicaExitDecision.IGNORE
EXITED: dict[str, Any] = {"phase": "Failed", "ready": False}


# --- decide_replica_exit -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "rtype", "code", "restarts", "decision"),
    [
        # exit 0: the chief's means done; others are left alone
        ("OnFailure", "chief", 0, 0, SUCCEED),
        ("Never", "chief", 0, 0, SUCCEED),
        ("ExitCode", "chief", 0, 9, SUCCEED),
        ("OnFailure", "worker", 0, 0, IGNORE),
        ("OnFailure", "ps", 0, 0, IGNORE),
        # OnFailure: any failure retried within the budget
        ("OnFailure", "worker", 1, 0, RESTART),
        ("OnFailure", "ps", 137, 5, RESTART),
        ("OnFailure", "chief", 64, 0, RESTART),  # codes do not matter under OnFailure
        ("OnFailure", "ps", 1, 6, FAIL),  # budget spent: an essential replica fails the job
        ("OnFailure", "chief", 1, 6, FAIL),
        ("OnFailure", "worker", 1, 6, IGNORE),  # budget spent: a worker is lost, not fatal
        # Never: nothing restarts
        ("Never", "ps", 75, 0, FAIL),
        ("Never", "chief", 75, 0, FAIL),
        ("Never", "worker", 75, 0, IGNORE),
        ("Never", "worker", 64, 0, IGNORE),
        # ExitCode: non-retryable codes fail the job, whoever exits
        ("ExitCode", "worker", 64, 0, FAIL),
        ("ExitCode", "ps", 65, 0, FAIL),
        ("ExitCode", "chief", 69, 0, FAIL),
        ("ExitCode", "worker", 75, 0, RESTART),
        ("ExitCode", "chief", 143, 0, RESTART),
        ("ExitCode", "ps", -1, 0, RESTART),  # evicted: no exit code, retried
        ("ExitCode", "ps", 137, 0, RESTART),  # SIGKILL (deleted, preempted, OOM): retried
        ("ExitCode", "chief", 75, 6, FAIL),
        ("ExitCode", "worker", 75, 6, IGNORE),
    ],
)
def test_decide_replica_exit(
    policy: str, rtype: str, code: int, restarts: int, decision: ReplicaExitDecision
) -> None:
    rules = RunPolicy(restart_policy=policy, backoff_limit=6)
    assert decide_replica_exit(rules, rtype, code, restarts) is decision


@pytest.mark.parametrize(
    ("policy", "rtype", "code", "decision"),
    [
        # The cluster stopped it (evicted, preempted): restarted even with the budget spent.
        ("ExitCode", "ps", 137, RESTART),
        ("ExitCode", "chief", -1, RESTART),
        ("OnFailure", "worker", 143, RESTART),
        ("ExitCode", "worker", 64, FAIL),  # the runtime's verdict still stands
        ("Never", "ps", 137, FAIL),  # Never restarts nothing
        ("Never", "worker", 137, IGNORE),
    ],
)
def test_disrupted_replicas_restart_whatever_the_budget(
    policy: str, rtype: str, code: int, decision: ReplicaExitDecision
) -> None:
    rules = RunPolicy(restart_policy=policy, backoff_limit=0)
    assert decide_replica_exit(rules, rtype, code, 5, disrupted=True) is decision


# --- the exits step --------------------------------------------------------------------


def exited(job: Any, who: str, **changes: Any) -> list[Any]:
    """Every pod running, ``who`` with ``changes``."""
    return [replace(p, **changes) if p.name == who else p for p in pods_of(job)]


@pytest.mark.parametrize(
    ("policy", "who", "changes", "ended", "failed", "deleted", "restarts"),
    [
        # The chief's exit 0 is the job's success, whatever the policy.
        ("Never", "j-chief-0", {"phase": "Succeeded", "exit_code": 0}, True, None, [], 0),
        # A worker's exit 0 changes nothing.
        ("OnFailure", "j-worker-0", {"phase": "Succeeded", "exit_code": 0}, False, None, [], 0),
        # Retried: the pod goes, one restart counts.
        ("OnFailure", "j-worker-1", {**EXITED, "exit_code": 1}, False, None, ["j-worker-1"], 1),
        ("ExitCode", "j-ps-0", {**EXITED, "exit_code": 137}, False, None, ["j-ps-0"], 1),
        ("ExitCode", "j-ps-0", {**EXITED, "exit_code": -1}, False, None, ["j-ps-0"], 1),
        # Disrupted by the cluster: replaced, not counted.
        ("ExitCode", "j-worker-0", {**EXITED, "exit_code": 137, "disruption": "Evicted: x"},
         False, None, ["j-worker-0"], 0),
        # Fatal.
        ("ExitCode", "j-worker-0", {**EXITED, "exit_code": 64}, True,
         naming.REASON_NON_RETRYABLE_EXIT, [], 0),
        ("Never", "j-ps-0", {**EXITED, "exit_code": 1}, True, naming.REASON_REPLICA_FAILED,
         [], 0),
        # A worker lost under Never: nothing to do here (Degraded says it).
        ("Never", "j-worker-1", {**EXITED, "exit_code": 1}, False, None, [], 0),
        # Still running with no exit code: not an exit.
        ("Never", "j-worker-1", {"exit_code": None}, False, None, [], 0),
        # In-place restarts beyond the budget.
        ("OnFailure", "j-worker-1", {"restart_count": 7}, True,
         naming.REASON_BACKOFF_LIMIT_EXCEEDED, [], 7),
    ],
)  # fmt: skip
def test_handle_exits(
    policy: str,
    who: str,
    changes: dict[str, Any],
    ended: bool,
    failed: str | None,
    deleted: list[str],
    restarts: int,
) -> None:
    job = planner_job(2, runPolicy={"restartPolicy": policy, "backoffLimit": 6})
    ctx = context(job, exited(job, who, **changes))
    assert handle_exits(ctx) is ended
    if failed is not None:
        assert condition(ctx, "Failed") == ("True", failed)
    if not ended:
        assert [a.name for a in ctx.actions if isinstance(a, DeletePod)] == deleted
        restarting = condition(ctx, "Restarting")
        assert (restarting == ("True", naming.REASON_REPLICA_RESTARTED)) is bool(deleted)
    assert ctx.restarts_so_far() == restarts


def test_a_failed_chief_restarted_by_the_operator_is_a_chief_restart() -> None:
    job = planner_job(2, runPolicy={"restartPolicy": "ExitCode"})
    ctx = context(job, exited(job, "j-chief-0", **EXITED, exit_code=75), {"chief": {"uid": "u"}})
    assert handle_exits(ctx) is False
    assert DeletePod("j-chief-0") in ctx.actions
    assert ctx.status["chiefRestarts"] == 1
    assert "chief" not in ctx.status  # counted here, not again when it is seen going
    assert reasons(ctx) == [
        naming.REASON_CHIEF_RESTARTED,
        naming.REASON_CHIEF_CLEANUP,
        naming.REASON_REPLICA_RESTARTED,
    ]
    assert ctx.failures[-1].cause == "Exited"


def test_pods_the_cluster_deletes_are_named_once() -> None:
    job = planner_job(2)
    pods = exited(job, "j-worker-0", deleting=True, disruption="Preempting: x")
    ctx = context(job, pods)
    assert handle_exits(ctx) is False
    assert reasons(ctx) == [naming.REASON_REPLICA_RESTARTED]
    again = context(job, pods, ctx.status)
    handle_exits(again)
    assert reasons(again) == []  # the same news


@pytest.mark.parametrize(
    ("known", "read", "said", "step", "written"),
    [
        (None, None, None, None, False),
        (100, None, None, 100, False),
        (100, 120, None, 120, True),
        (100, 120, 130, 130, True),
        (300, 120, 130, 300, False),  # never lower than known
    ],
)
def test_final_step(
    known: int | None, read: int | None, said: int | None, step: int | None, written: bool
) -> None:
    job = planner_job(2)
    status = {} if known is None else {"globalStep": known}
    chief = replace(pods_of(job)[1], phase="Succeeded", exit_code=0, exit_step=said)
    ctx = context(job, [chief], status, global_step=read)
    assert final_step(ctx, chief) == step
    assert ("lastProgressTime" in ctx.status) is written


def test_the_chiefs_exports_go_into_the_status_when_it_succeeds() -> None:
    job = planner_job(2)
    exports = (("export", "/c/export/300", 300), ("bestExport", "/c/export/best/200", 200))
    chief = replace(pods_of(job)[1], phase="Succeeded", exit_code=0, exit_step=300,
                    exports=exports)  # fmt: skip
    ctx = context(job, [pods_of(job)[0], chief, *pods_of(job)[2:]])
    assert handle_exits(ctx)
    assert ctx.status["export"] == {"path": "/c/export/300", "globalStep": 300}
    assert ctx.status["bestExport"] == {"path": "/c/export/best/200", "globalStep": 200}
    # A chief that exported nothing leaves no such field.
    chief = replace(chief, exports=())
    ctx = context(job, [pods_of(job)[0], chief, *pods_of(job)[2:]])
    assert handle_exits(ctx) and "export" not in ctx.status and "bestExport" not in ctx.status


def test_last_failure() -> None:
    job = planner_job(2)
    ctx = context(job, pods_of(job))
    assert last_failure(ctx) == ""
    ctx = context(job, exited(job, "j-ps-0", restart_count=1, last_exit_code=75))
    assert last_failure(ctx) == "j-ps-0 restarted after exiting with RETRY (75)"
    ctx.failures.append(Failure("worker-0", "Deleted", "pod j-worker-0 was deleted"))
    assert last_failure(ctx) == "pod j-worker-0 was deleted"


# --- not failures: a fenced replica, a pod the cluster stopped ----------------------------


@pytest.mark.parametrize("restart_policy", ["ExitCode", "OnFailure", "Never"])
@pytest.mark.parametrize("replica", ["j-ps-0", "j-chief-0", "j-worker-1"])
def test_a_fenced_replica_is_replaced_whatever_the_policy_and_never_counted(
    restart_policy: str, replica: str
) -> None:
    """Exit FENCED (77): a newer incarnation of the replica ran; not its failure."""
    job = planner_job(2, runPolicy={"restartPolicy": restart_policy, "backoffLimit": 0})
    pods = [
        replace(p, **EXITED, exit_code=exitcodes.FENCED) if p.name == replica else p
        for p in pods_of(job)
    ]
    ctx = context(job, pods)
    assert handle_exits(ctx) is False
    assert DeletePod(replica) in ctx.actions
    assert ctx.recreations == {}
    assert not ctx.finished()
    restarting = [c for c in ctx.conditions if c["type"] == naming.CONDITION_RESTARTING]
    assert "FENCED (77)" in restarting[0]["message"]
    assert "not counted against backoffLimit" in restarting[0]["message"]


@pytest.mark.parametrize(
    ("changes", "failed"),
    [
        ({"exit_code": 1}, 1),
        ({"exit_code": exitcodes.FENCED}, 0),
        ({"exit_code": 137, "disruption": "DisruptionTarget: drained"}, 0),
        ({"exit_code": -1, "disruption": "Evicted: low on memory"}, 0),
    ],
)
def test_fenced_and_disrupted_pods_are_not_counted_failed(
    changes: dict[str, Any], failed: int
) -> None:
    job = planner_job(2)
    pods = [replace(p, **EXITED, **changes) if p.name == "j-worker-0" else p for p in pods_of(job)]
    statuses = replica_statuses(pods, {})
    assert statuses["worker"]["failed"] == failed
