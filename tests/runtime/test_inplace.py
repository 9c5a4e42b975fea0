"""Warm restarts in a container (syncreplicas_runtime.launch.supervisor): the container's process
keeps TensorFlow imported and forks the replica again when it dies, by the rule the
operator passes (restartrules.py), without ending itself.

A worker SIGKILLed (as the OOM killer would) and one that exits on its own (SIGTERM to the
replica alone: 143, retryable) come back under the same first process, each as a new
child that trains again and says its pod's count in ``syncreplicas_process_restarts``; a
SIGTERM to the first process (the kubelet stopping the pod) ends the container with the
replica's code and the count as the termination message's last line; so does one that
comes while the first process still imports, before any replica (a job deleted as it
starts), at once rather than at the end of the pod's grace period. A non-retryable
exit under ExitCode ends the container at once; under OnFailure the budget is spent, then
the container ends with the replica's code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from syncreplicas_runtime.foundation import exitcodes

from tests.runtime.rtutil import eventually, linear_job, runtime_env
from tests.support.groups import children_of, signal_set
from tests.support.tfcluster import metric_value, start_cluster

pytestmark = pytest.mark.slow

PROCESS_RESTARTS = "syncreplicas_process_restarts"



def warm_env(policy: str, limit: int, tmp: Path) -> dict[str, str]:
    return {
        "SYNCREPLICAS_WARM_RESTARTS": policy,
        "SYNCREPLICAS_WARM_RESTART_LIMIT": str(limit),
        "SYNCREPLICAS_WARM_RESTART_STATE": str(tmp / "restarts"),
        "SYNCREPLICAS_TERMINATION_LOG": str(tmp / "termination-log"),
    }


def test_a_killed_or_exiting_replica_comes_back_in_its_container(tmp_path: Path) -> None:
    job = linear_job(training__maxSteps=1_000_000)
    warm = warm_env("OnFailure", 6, tmp_path)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env(),
                       extra_env_per_replica={("worker", 0): warm}) as cluster:  # fmt: skip
        worker = cluster.replica("worker", 0)
        first = worker.pid
        assert first is not None

        def local_step() -> float:
            text = cluster.try_metrics_text("worker", 0) or ""
            return metric_value(text, "syncreplicas_local_step") or 0.0

        def restarts() -> float | None:
            text = cluster.try_metrics_text("worker", 0) or ""
            return metric_value(text, PROCESS_RESTARTS)

        assert eventually(lambda: local_step() >= 5, 120), cluster.logs()
        assert restarts() == 0
        for count, how in ((1, signal.SIGKILL), (2, signal.SIGTERM)):
            (replica,) = children_of(first)
            os.kill(replica, how)
            new = eventually(lambda r=replica: [c for c in children_of(first) if c != r], 10)
            assert new, cluster.log("worker", 0)
            assert eventually(lambda c=count: restarts() == c, 30), cluster.log("worker", 0)
            before = local_step()  # the new process's own count, from 0
            assert eventually(lambda b=before: local_step() >= b + 5, 60), cluster.logs()
            assert worker.popen.poll() is None  # the container's first process never ended
        assert "warm restart 2 of 6 in its container" in cluster.log("worker", 0)
        assert (tmp_path / "restarts").read_text().strip() == "2"
        # The kubelet stops the pod: the replica gets the SIGTERM and its code ends it all.
        os.kill(first, signal.SIGTERM)
        assert cluster.wait_one("worker", 0, 60) == 128 + signal.SIGTERM
    message = (tmp_path / "termination-log").read_text()
    assert message.splitlines()[0].startswith("syncreplicas: EXIT (143): stopped by SIGTERM")
    assert message.splitlines()[-1] == "processRestarts=2"


def run_alone(env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A chief whose model cannot load: it exits MODEL (65) before it needs any peer."""
    job = linear_job(model__entrypoint="tests.runtime.no_such_module:build")
    full = {**os.environ, **runtime_env(), **env,
            "TF_CONFIG": json.dumps({"cluster": {"ps": ["127.0.0.1:1"], "chief": ["127.0.0.1:2"]},
                                     "task": {"type": "chief", "index": 0}}),
            "SYNCREPLICAS_JOB": json.dumps({**job, "workers": 0, "parameterServers": 1}),
            "SYNCREPLICAS_METRICS_PORT": "0"}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "syncreplicas_runtime"], env=full,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_a_non_retryable_exit_under_exit_code_ends_the_container(tmp_path: Path) -> None:
    done = run_alone(warm_env("ExitCode", 6, tmp_path))
    assert done.returncode == exitcodes.MODEL, done.stderr
    assert "warm restart" not in done.stderr
    assert (tmp_path / "termination-log").read_text().splitlines()[-1] == "processRestarts=0"


def test_under_on_failure_the_budget_is_spent_then_the_container_ends(tmp_path: Path) -> None:
    done = run_alone(warm_env("OnFailure", 2, tmp_path))
    assert done.returncode == exitcodes.MODEL, done.stderr
    assert done.stderr.count("warm restart") == 2, done.stderr
    assert "warm restart 2 of 2 in its container in 0.5 s" in done.stderr  # dying at once
    lines = (tmp_path / "termination-log").read_text().splitlines()
    assert lines[0].startswith("syncreplicas: MODEL (65): ")
    assert lines[-1] == "processRestarts=2"


def test_a_sigterm_while_the_first_process_imports_ends_the_container_at_once(
        tmp_path: Path) -> None:  # fmt: skip
    """A worker whose peers never come (it would wait for them for ever), stopped while it
    imports: the container ends with 143 within seconds, each time (the
    stop once reached the forked replica while it still had the first process's handler,
    which dropped it, and the replica ran on until the kubelet's SIGKILL)."""
    job = linear_job()
    env = {**os.environ, **runtime_env(), **warm_env("OnFailure", 6, tmp_path),
           "TF_CONFIG": json.dumps({"cluster": {"ps": ["127.0.0.1:1"], "chief": ["127.0.0.1:2"],
                                                "worker": ["127.0.0.1:3"]},
                                    "task": {"type": "worker", "index": 0}}),
           "SYNCREPLICAS_JOB": json.dumps({**job, "workers": 1, "parameterServers": 1}),
           "SYNCREPLICAS_METRICS_PORT": "0"}  # fmt: skip
    for _ in range(3):
        first = subprocess.Popen([sys.executable, "-m", "syncreplicas_runtime"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Once it catches SIGTERM (its handler is set before the imports; before that, the
        # interpreter's own start, a container's first process would not see the signal).
        caught = eventually(lambda p=first.pid: signal_set(p, "SigCgt", signal.SIGTERM), 60)
        assert caught, "no SIGTERM handler within 60 s"
        first.send_signal(signal.SIGTERM)
        try:
            out, _ = first.communicate(timeout=30)
        finally:
            first.kill()
        assert first.returncode == 128 + signal.SIGTERM, out
        message = (tmp_path / "termination-log").read_text().splitlines()
        assert message[0] == ("syncreplicas: EXIT (143): stopped by SIGTERM before the "
                              "replica started"), (message, out)
