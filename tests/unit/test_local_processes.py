"""Rendered Pods -> local processes: only addresses, ports and the checkpoint dir change."""

from __future__ import annotations

import json
from typing import Any

import pytest
from syncreplicas_operator.core import naming
from syncreplicas_operator.local.processes import (
    ENV_TERMINATION_LOG,
    LocalPlanError,
    next_incarnation,
    plan_local_processes,
    spawn_env,
)
from syncreplicas_runtime.foundation.config import INCARNATION_ENV
from syncreplicas_runtime.foundation.exitcodes import TERMINATION_LOG_ENV

CLUSTER = {
    "ps": ["j-ps-0.ns.svc:2222"],
    "chief": ["j-chief-0.ns.svc:2222"],
    "worker": ["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"],
}
JOB = {
    "replicasToAggregate": 2,
    "workers": 2,
    "training": {"checkpointDir": "/ckpt", "maxSteps": 5},
}


def pod(replica_type: str, index: int, **container: Any) -> dict[str, Any]:
    env = [
        {"name": "TF_CONFIG", "value": json.dumps(
            {"cluster": CLUSTER, "task": {"type": replica_type, "index": index}})},
        {"name": "SYNCREPLICAS_JOB", "value": json.dumps(JOB)},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GREETING", "value": "pod $(POD_NAME)"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"j-{replica_type}-{index}",
            "namespace": "ns",
            "labels": naming.replica_labels("j", replica_type, index),
        },
        "spec": {"containers": [{
            "name": naming.CONTAINER_NAME,
            "image": "runtime:1",
            "command": ["python", "-m", "syncreplicas_runtime"],
            "env": env,
            **container,
        }]},
    }


PODS = [pod("ps", 0), pod("chief", 0), pod("worker", 0), pod("worker", 1)]
TF_PORTS = {"ps-0": 1000, "chief-0": 1001, "worker-0": 1002, "worker-1": 1003}
METRICS_PORTS = {"ps-0": 2000, "chief-0": 2001, "worker-0": 2002, "worker-1": 2003}


def plan(pods: list[dict[str, Any]] = PODS, checkpoint_dir: str = "/tmp/c"):
    return plan_local_processes(pods, tf_ports=TF_PORTS, metrics_ports=METRICS_PORTS,
                                checkpoint_dir=checkpoint_dir, python="/venv/bin/python")


def test_rewrites_addresses_ports_checkpoints_and_python():
    processes = plan()
    assert [p.name for p in processes] == ["ps-0", "chief-0", "worker-0", "worker-1"]
    worker = processes[3]
    assert worker.argv == ("/venv/bin/python", "-m", "syncreplicas_runtime")
    tf_config = json.loads(worker.env["TF_CONFIG"])
    assert tf_config == {
        "cluster": {"ps": ["127.0.0.1:1000"], "chief": ["127.0.0.1:1001"],
                    "worker": ["127.0.0.1:1002", "127.0.0.1:1003"]},
        "task": {"type": "worker", "index": 1},
    }
    job = json.loads(worker.env["SYNCREPLICAS_JOB"])
    assert job == {**JOB, "training": {"checkpointDir": "/tmp/c", "maxSteps": 5}}
    assert worker.env["SYNCREPLICAS_METRICS_PORT"] == "2003"
    assert worker.env["POD_NAME"] == "j-worker-1"
    assert worker.env["GREETING"] == "pod j-worker-1"
    assert (worker.tf_port, worker.metrics_port) == (1003, 2003)


def test_no_checkpoint_dir_stays_off():
    job = {**JOB, "training": {"checkpointDir": ""}}
    p = pod("chief", 0)
    p["spec"]["containers"][0]["env"][1]["value"] = json.dumps(job)
    (chief,) = plan([p])
    assert json.loads(chief.env["SYNCREPLICAS_JOB"])["training"]["checkpointDir"] == ""


@pytest.mark.parametrize(
    "template_env",
    [
        [],
        [{"name": "SYNCREPLICAS_TERMINATION_LOG", "value": "/dev/termination-log"}],
        [{"name": "SYNCREPLICAS_TERMINATION_LOG", "value": "/shared/log"}],
    ],
)
def test_the_termination_message_is_off_for_every_replica(template_env):
    """The runner's os.environ goes under each replica's env: "" wins over both it and a
    template's path, so no replica writes a file (one shared by all, or the runner's own)."""
    pods = [pod("ps", 0), pod("chief", 0), pod("worker", 0), pod("worker", 1)]
    for p in pods:
        p["spec"]["containers"][0]["env"].extend(template_env)
    assert [p.env[ENV_TERMINATION_LOG] for p in plan(pods)] == ["", "", "", ""]


def test_the_termination_log_variable_is_the_runtimes():
    assert ENV_TERMINATION_LOG == TERMINATION_LOG_ENV


def test_args_are_kept_and_expanded():
    args = ["-m", "x", "$(POD_NAME)", "$$(NO)"]
    (chief,) = plan([pod("chief", 0, command=["/usr/bin/python3.11"], args=args)])
    assert chief.argv == ("/venv/bin/python", "-m", "x", "j-chief-0", "$(NO)")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda p: p["metadata"]["labels"].pop(naming.LABEL_REPLICA_TYPE), "labels"),
        (lambda p: p["spec"]["containers"][0].pop("command"), "has no command"),
        (lambda p: p["spec"]["containers"][0]["env"].pop(0), "must set TF_CONFIG"),
        (lambda p: p["spec"]["containers"][0]["env"].append(
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
         "env TOKEN comes from secretKeyRef"),
        (lambda p: p["spec"]["containers"][0]["env"].__setitem__(
            0, {"name": "TF_CONFIG", "value": "{"}), "not a cluster spec"),
    ],
)
def test_errors_name_pod_and_field(change, fragment):
    p = pod("chief", 0)
    change(p)
    with pytest.raises(LocalPlanError, match=fragment):
        plan([p])


def test_a_cluster_member_without_a_pod_is_an_error():
    ports = {"chief-0": 1}
    with pytest.raises(LocalPlanError, match="lists ps-0, which has no Pod"):
        plan_local_processes([pod("chief", 0)], tf_ports=ports, metrics_ports=ports,
                             checkpoint_dir="/c", python="p")


# --- incarnations: one per start of a process ----------------------------------------------

NOW = 1_750_000_000_000  # a wall clock in milliseconds


@pytest.mark.parametrize(
    ("now_ms", "last", "incarnation"),
    [
        (NOW, None, NOW),  # the first start: the clock
        (NOW, NOW - 5_000, NOW),  # a restart later on: the clock again
        (NOW, NOW, NOW + 1),  # started again within the same millisecond
        (NOW, NOW + 60_000, NOW + 60_001),  # the clock stepped back: still above the last
        (NOW - 1, NOW, NOW + 1),
        (0, None, 1),  # never 0 (the runtime's "not told")
        (-5, None, 1),
        (0, 7, 8),
    ],
)
def test_next_incarnation(now_ms: int, last: int | None, incarnation: int):
    assert next_incarnation(now_ms, last) == incarnation


def test_every_restart_of_a_replica_outranks_the_last_whatever_the_clock():
    clock = [NOW, NOW, NOW - 10_000, NOW + 3, NOW + 3, NOW + 2_000]
    given: list[int] = []
    for now_ms in clock:
        given.append(next_incarnation(now_ms, given[-1] if given else None))
    assert given == [NOW, NOW + 1, NOW + 2, NOW + 3, NOW + 4, NOW + 2_000]


@pytest.mark.parametrize(
    ("inherited", "template_env", "expected"),
    [
        # The incarnation of this start wins over the caller's and the template's.
        ({}, [], {"TF_CPP_MIN_LOG_LEVEL": "2"}),
        ({INCARNATION_ENV: "1"}, [], {"TF_CPP_MIN_LOG_LEVEL": "2"}),
        ({}, [{"name": INCARNATION_ENV, "value": "9"}], {}),
        # The caller's environment goes under the Pod's.
        ({"HOME": "/h", "GREETING": "caller"}, [], {"HOME": "/h", "GREETING": "pod j-chief-0"}),
        ({"TF_CPP_MIN_LOG_LEVEL": "0"}, [], {"TF_CPP_MIN_LOG_LEVEL": "0"}),
        ({}, [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"}], {"TF_CPP_MIN_LOG_LEVEL": "1"}),
        ({"PYTHONUNBUFFERED": "0"}, [], {"PYTHONUNBUFFERED": "1"}),
    ],
)
def test_spawn_env(inherited: dict[str, str], template_env: list[dict[str, str]],
                   expected: dict[str, str]):
    p = pod("chief", 0)
    p["spec"]["containers"][0]["env"].extend(template_env)
    (chief,) = plan([p])
    env = spawn_env(chief, inherited, NOW + 42)
    assert env[INCARNATION_ENV] == str(NOW + 42)
    assert env["PYTHONUNBUFFERED"] == "1"
    assert {k: env[k] for k in expected} == expected
    assert env["TF_CONFIG"] == chief.env["TF_CONFIG"]


def test_the_incarnation_variable_is_the_runtimes():
    assert naming.ENV_INCARNATION == INCARNATION_ENV
