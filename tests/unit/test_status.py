"""Pods to facts, facts to conditions, phase and counts (pure, tables of cases)."""

from __future__ import annotations

from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.core.plan.result import counts_only
from syncreplicas_operator.core.status import (
    ObservedPod,
    TerminationMessage,
    exit_summary,
    find_condition,
    is_stalled,
    observe_pod,
    parse_termination_message,
    phase_of,
    ready_replicas,
    replica_statuses,
    set_condition,
    total_restarts,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def pod(
    name: str = "j-worker-1",
    *,
    phase: str | None = "Running",
    labels: dict[str, str] | None = None,
    state: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    restarts: int = 0,
    ready: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": "u-" + name,
        "labels": labels
        if labels is not None
        else {
            naming.LABEL_JOB_NAME: "j",
            naming.LABEL_REPLICA_TYPE: name.split("-")[1],
            naming.LABEL_REPLICA_INDEX: name.split("-")[2],
        },
    }
    if deleting:
        meta["deletionTimestamp"] = T0
    status: dict[str, Any] = {"podIP": "10.1.2.3"}
    if phase is not None:
        status["phase"] = phase
    container: dict[str, Any] = {
        "name": naming.CONTAINER_NAME,
        "restartCount": restarts,
        "ready": ready,
        "state": state or {"running": {}},
    }
    if last is not None:
        container["lastState"] = last
    status["containerStatuses"] = [{"name": "sidecar", "restartCount": 9}, container]
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (pod(), {"replica_type": "worker", "index": 1, "phase": "Running", "ready": True}),
        (pod(phase=None, ready=False), {"phase": "Pending", "ready": False, "active": True}),
        (
            pod(phase="Failed", state={"terminated": {"exitCode": 75}}),
            {"exit_code": 75, "active": False, "finished": True},
        ),
        (
            pod("j-chief-0", phase="Succeeded", state={"terminated": {"exitCode": 0}}),
            {"replica_type": "chief", "exit_code": 0},
        ),
        (pod(phase="Failed", state={"waiting": {}}), {"exit_code": -1}),  # evicted
        (
            pod(restarts=2, last={"terminated": {"exitCode": 137}}),
            {"restart_count": 2, "last_exit_code": 137, "exit_code": None},
        ),
        (pod(deleting=True), {"deleting": True, "active": False}),
        # The runtime's termination message: its reason, and the chief's final step.
        (
            pod("j-chief-0", phase="Succeeded", state={"terminated": {
                "exitCode": 0,
                "message": "syncreplicas: OK (0): finished at global step 3000\nglobalStep=3000\n",
            }}),
            {"exit_code": 0, "exit_step": 3000, "exit_reason": "finished at global step 3000"},
        ),
        (
            pod(phase="Failed", state={"terminated": {
                "exitCode": 64, "message": "syncreplicas: CONFIG (64): bad configuration: x\n",
            }}),
            {"exit_code": 64, "exit_reason": "bad configuration: x", "exit_step": None},
        ),
        (
            pod(restarts=1, last={"terminated": {
                "exitCode": 65, "message": "syncreplicas: MODEL (65): cannot import 'm'\n",
            }}),
            {"last_exit_code": 65, "last_exit_reason": "cannot import 'm'", "exit_reason": ""},
        ),
        (pod(phase="Failed", state={"terminated": {"exitCode": 1}}), {"exit_reason": ""}),
        # Labels edited away: the deterministic name still identifies the replica.
        (pod("j-ps-3", labels={naming.LABEL_JOB_NAME: "j"}), {"replica_type": "ps", "index": 3}),
    ],
)
def test_observe_pod(raw: dict[str, Any], expected: dict[str, Any]) -> None:
    observed = observe_pod(raw)
    assert observed is not None
    for key, value in expected.items():
        assert getattr(observed, key) == value, key


@pytest.mark.parametrize(
    "raw",
    [
        pod(labels={}),  # not a child of any job
        pod("stranger-0", labels={naming.LABEL_JOB_NAME: "j"}),  # labelled, not a replica name
    ],
)
def test_observe_pod_ignores_strangers(raw: dict[str, Any]) -> None:
    assert observe_pod(raw) is None


def test_replica_statuses_count_every_phase_and_restart() -> None:
    pods = [
        ObservedPod("j-ps-0", "ps", 0, phase="Running", restart_count=1),
        ObservedPod("j-chief-0", "chief", 0, phase="Succeeded"),
        ObservedPod("j-worker-0", "worker", 0, phase="Pending"),
        ObservedPod("j-worker-1", "worker", 1, phase="Failed", exit_code=1),
        ObservedPod("j-worker-2", "worker", 2, phase="Running", restart_count=2),
    ]
    counts = replica_statuses(pods, {"worker": 3})
    assert counts == {
        "ps": {"active": 1, "ready": 0, "succeeded": 0, "failed": 0, "restarts": 1},
        "chief": {"active": 0, "ready": 0, "succeeded": 1, "failed": 0, "restarts": 0},
        "worker": {"active": 2, "ready": 0, "succeeded": 0, "failed": 1, "restarts": 5},
    }
    assert total_restarts(counts) == 6


def test_ready_counts_only_ready_live_pods() -> None:
    pods = [
        ObservedPod("a", "ps", 0, phase="Running", ready=True),
        ObservedPod("b", "chief", 0, phase="Running", ready=True, deleting=True),
        ObservedPod("c", "worker", 0, phase="Running", ready=False),
    ]
    assert ready_replicas(pods, 3) == "1/3"


def test_set_condition_keeps_transition_time_until_the_status_flips() -> None:
    conds = set_condition([], "Running", True, "R", "m1", T0)
    assert conds == [
        {"type": "Running", "status": "True", "reason": "R", "message": "m1",
         "lastTransitionTime": T0}
    ]  # fmt: skip
    same = set_condition(conds, "Running", True, "R2", "m2", T1)
    assert same[0]["lastTransitionTime"] == T0 and same[0]["message"] == "m2"
    flipped = set_condition(same, "Running", False, "Done", "m3", T1)
    assert flipped[0]["status"] == "False" and flipped[0]["lastTransitionTime"] == T1
    # A condition that never was true is not added just to say False.
    assert set_condition([], "Stalled", False, "Progressing", "ok", T0) == []
    assert find_condition(flipped, "Stalled") is None


@pytest.mark.parametrize(
    ("true_conditions", "phase"),
    [
        ([], naming.PHASE_PENDING),
        (["Created"], naming.PHASE_CREATED),
        (["Created", "Running"], naming.PHASE_RUNNING),
        (["Created", "Running", "Restarting"], naming.PHASE_RESTARTING),
        (["Created", "Suspended"], naming.PHASE_SUSPENDED),
        (["Created", "Running", "Succeeded"], naming.PHASE_SUCCEEDED),
        (["Created", "Running", "Failed"], naming.PHASE_FAILED),
        (["Created", "Running", "Stalled"], naming.PHASE_RUNNING),  # Stalled is a condition
    ],
)
def test_phase_is_the_most_decisive_true_condition(true_conditions: list[str], phase: str) -> None:
    conds: list[dict[str, Any]] = []
    for ctype in true_conditions:
        conds = set_condition(conds, ctype, True, "r", "m", T0)
    conds = set_condition(conds, "Degraded", False, "r", "m", T0)
    assert phase_of(conds) == phase


@pytest.mark.parametrize(
    ("running", "last", "now", "timeout", "stalled"),
    [
        (True, 100.0, 399.0, 300, False),
        (True, 100.0, 400.0, 300, True),
        (False, 100.0, 1000.0, 300, False),  # pods not running: waiting, not stalled
        (True, None, 1000.0, 300, False),  # no clock started yet
        (True, 100.0, 1000.0, 0, False),  # disabled
    ],
)
def test_is_stalled(
    running: bool, last: float | None, now: float, timeout: int, stalled: bool
) -> None:
    assert is_stalled(running, last, now, timeout) is stalled


@pytest.mark.parametrize(
    ("status", "disruption"),
    [
        ({"phase": "Failed", "reason": "Evicted", "message": "low on memory"},
         "Evicted: low on memory"),
        ({"phase": "Failed", "reason": "Preempting"}, "Preempting"),
        ({"phase": "Failed", "reason": "Terminated", "message": "node shutdown\nmore"},
         "Terminated: node shutdown"),
        ({"phase": "Running", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "preempted"}]}, "PreemptionByScheduler: preempted"),
        ({"phase": "Running", "conditions": [
            {"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}]},
         ""),
        # Kueue's TAS failed a pod its ungater had pinned to a node that failed since.
        ({"phase": "Failed", "conditions": [
            {"type": "TerminatedByKueue", "status": "True", "reason": "UnschedulableOnAssignedNode",
             "message": "Pod terminated by Kueue NodeController due to node taint"}]},
         "UnschedulableOnAssignedNode: Pod terminated by Kueue NodeController due to node taint"),
        ({"phase": "Failed", "reason": "OOMKilled"}, ""),  # the replica's own failure
        ({"phase": "Failed"}, ""),
    ],
)  # fmt: skip
def test_disruptions_are_read_from_the_pod_status(
    status: dict[str, Any], disruption: str
) -> None:
    raw = {
        "metadata": {
            "name": "j-ps-0",
            "labels": {naming.LABEL_JOB_NAME: "j"},
            "deletionTimestamp": "2026-01-01T00:00:30Z",
        },
        "status": status,
    }
    pod = observe_pod(raw)
    assert pod is not None
    assert pod.disruption == disruption
    assert pod.deleting and pod.deletion_timestamp == "2026-01-01T00:00:30Z"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (None, TerminationMessage()),
        ("", TerminationMessage()),
        (
            "syncreplicas: OK (0): finished at global step 3000\nglobalStep=3000\n",
            TerminationMessage("finished at global step 3000", 3000),
        ),
        (
            "syncreplicas: CONFIG (64): bad configuration: TF_CONFIG: is not valid JSON\n",
            TerminationMessage("bad configuration: TF_CONFIG: is not valid JSON"),
        ),
        # Keys it does not know are left alone; a step that is no number is none.
        (
            "syncreplicas: OK (0): finished\nfuture=1\nglobalStep=x\n",
            TerminationMessage("finished"),
        ),
        # The log's tail (FallbackToLogsOnError): the exit line in it, else the last line.
        (
            "12:00:00 syncreplicas worker-0: started\n"
            "syncreplicas: RETRY (75): no token and no new sync epoch for 120s\n",
            TerminationMessage("no token and no new sync epoch for 120s"),
        ),
        (
            'Traceback (most recent call last):\n  File "x.py", line 1\nMemoryError: boom\n',
            TerminationMessage("MemoryError: boom"),
        ),
        # A log tail of progress only (killed while training): no reason at all.
        (
            "12:00:00 syncreplicas worker-0: global_step=1200 local_step=300 steps/s=9.0\n"
            "12:00:05 syncreplicas worker-0: global_step=1300 local_step=325 steps/s=9.1\n",
            TerminationMessage(),
        ),
        ("x" * 500, TerminationMessage("x" * 200)),  # bounded for conditions and Events
    ],
)  # fmt: skip
def test_parse_termination_message(message: str | None, expected: TerminationMessage) -> None:
    assert parse_termination_message(message) == expected


@pytest.mark.parametrize(
    ("code", "reason", "said"),
    [
        (64, "bad configuration: x", "CONFIG (64): bad configuration: x"),
        (137, "", "EXIT (137)"),
    ],
)
def test_exit_summary(code: int, reason: str, said: str) -> None:
    assert exit_summary(code, reason) == said


def test_a_patch_that_only_recounts_replicas_may_wait_for_the_next_write() -> None:
    running = {"type": "Running", "status": "True", "reason": "Running",
               "message": "chief and 1 PS running, 3 of 201 replicas running"}  # fmt: skip
    old = {"phase": "Running", "conditions": [running],
           "replicaStatuses": {"worker": {"active": 200, "ready": 2}}}  # fmt: skip
    more = {**running, "message": "chief and 1 PS running, 90 of 201 replicas running"}
    counts = {"replicaStatuses": {"worker": {"ready": 89}}, "conditions": [more]}
    assert counts_only(counts, old)
    assert counts_only({"ready": "90/202"}, old)
    stalled = {"type": "Stalled", "status": "True", "reason": "NoProgress", "message": ""}
    assert not counts_only({**counts, "conditions": [more, stalled]}, old)  # a new condition
    assert not counts_only({**counts, "conditions": [{**more, "status": "False"}]}, old)
    assert not counts_only({**counts, "phase": "Restarting"}, old)
    assert not counts_only({**counts, "recreations": {"worker": 1}}, old)
    assert not counts_only({}, old)
