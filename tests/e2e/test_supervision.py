"""The local runner's supervision, policy by policy, with small real processes.

Each replica is a short Python process that follows a script of exit codes (one per
incarnation) and otherwise behaves like the runtime at the end of a job: the chief
finishes after a moment, the others exit 0 once the chief is done. This isolates what the
runner decides (restart, RestartJob, fail, stall) from TensorFlow's start-up time; the
whole path with the real runtime is in test_run.py. Each start also records the
``SYNCREPLICAS_INCARNATION`` it was given, so the tests see what the processes received.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from syncreplicas_operator.core.spec import parse_job
from syncreplicas_operator.local.processes import LocalProcess
from syncreplicas_operator.local.runner import LocalRunner

REPLICA = r"""
import json, os, pathlib, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"
shared = pathlib.Path(os.environ["SUPERVISION_DIR"])
starts = shared / f"{name}.starts"
n = int(starts.read_text()) if starts.exists() else 0
starts.write_text(str(n + 1))
with open(shared / f"{name}.incarnations", "a") as seen:
    seen.write(os.environ["SYNCREPLICAS_INCARNATION"] + "\n")
script = json.loads(os.environ["SUPERVISION_SCRIPT"]).get(name, [])
if n < len(script) and script[n] is not None:
    # Every replica has started once before a scripted exit: under load an interpreter
    # takes seconds to start, and a RestartJob must find each one running, not starting.
    names = json.loads(os.environ["SUPERVISION_NAMES"])
    deadline = time.monotonic() + 60.0
    while not all((shared / f"{other}.starts").exists() for other in names):
        assert time.monotonic() < deadline, "a replica never started"
        time.sleep(0.05)
    time.sleep(0.5)
    sys.exit(script[n])
while True:
    if task["type"] == "chief":
        time.sleep(3.0)  # long enough for a failed worker's restart (1 s later) to join
        (shared / "done").write_text("1")
        sys.exit(0)
    if (shared / "done").exists():
        sys.exit(0)
    time.sleep(0.05)
"""


def job(workers: int, r: int, **spec: Any) -> Any:
    return parse_job({
        "apiVersion": "syncreplicas.io/v1alpha1",
        "kind": "SyncReplicasJob",
        "metadata": {"name": "sup"},
        "spec": {
            "replicasToAggregate": r,
            "workers": workers,
            "parameterServers": 1,
            # Imports in milliseconds: the runner checks the entrypoint before starting.
            "model": {"entrypoint": "json:loads"},
            **spec,
        },
    })


def supervise(tmp_path: Path, parsed: Any, script: dict[str, list[int | None]],
              clock_ms: Callable[[], int] | None = None) -> tuple[int, dict[str, Any], str]:
    shared = tmp_path / "shared"
    shared.mkdir()
    names = [f"ps-{i}" for i in range(parsed.spec.parameter_servers)] + ["chief-0"] + [
        f"worker-{i}" for i in range(parsed.spec.workers)]
    cluster = {"ps": [], "chief": [], "worker": []}
    for name in names:
        role, _, _ = name.partition("-")
        cluster[role].append("127.0.0.1:1")
    processes = []
    for name in names:
        role, _, index = name.partition("-")
        processes.append(LocalProcess(
            name=name, replica_type=role, index=int(index),
            argv=(sys.executable, "-c", REPLICA),
            env={
                "TF_CONFIG": json.dumps({"cluster": cluster,
                                         "task": {"type": role, "index": int(index)}}),
                "SYNCREPLICAS_JOB": "{}",
                "SUPERVISION_DIR": str(shared),
                "SUPERVISION_SCRIPT": json.dumps(script),
                "SUPERVISION_NAMES": json.dumps(names),
            },
            tf_port=1, metrics_port=0,
        ))
    out = io.StringIO()
    runner = LocalRunner(parsed, processes, workdir=tmp_path / "work", plain=True,
                         report_dir=tmp_path / "report", stream=out)
    if clock_ms is not None:
        runner.replicas.clock_ms = clock_ms
    code = runner.run()
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    return code, summary, out.getvalue()


def test_a_failed_worker_is_restarted_and_the_chief_ends_the_job(tmp_path: Path) -> None:
    code, summary, out = supervise(tmp_path, job(2, 2), {"worker-1": [1]})
    assert code == 0, out
    assert summary["outcome"] == "succeeded"
    assert summary["exit_codes"] == {"ps-0": [0], "chief-0": [0], "worker-0": [0],
                                     "worker-1": [1, 0]}
    assert summary["restarts"]["worker-1"] == 1
    assert "worker-1 exited EXIT (1); restarting" in out


def test_restart_job_restarts_every_replica_after_a_chief_failure(tmp_path: Path) -> None:
    code, summary, out = supervise(tmp_path, job(1, 2, chiefRestartPolicy="RestartJob"),
                                   {"chief-0": [75]})
    assert code == 0, out
    assert summary["exit_codes"] == {"ps-0": [143, 0], "chief-0": [75, 0], "worker-0": [143, 0]}
    assert summary["restarts"] == {"ps-0": 1, "chief-0": 1, "worker-0": 1}
    assert "RestartJob" in out


def test_chief_restart_policy_fail(tmp_path: Path) -> None:
    code, summary, _ = supervise(tmp_path, job(1, 2, chiefRestartPolicy="Fail"),
                                   {"chief-0": [75]})
    assert code == 1
    assert summary["outcome"] == "failed"
    assert "chiefRestartPolicy is Fail" in summary["message"]
    assert summary["restarts_total"] == 0


def test_exit_code_policy_fails_on_a_non_retryable_code(tmp_path: Path) -> None:
    code, summary, _ = supervise(tmp_path, job(1, 2, runPolicy={"restartPolicy": "ExitCode"}),
                                 {"worker-0": [65]})
    assert code == 65
    assert summary["message"].startswith("worker-0 exited MODEL (65); the job failed")


@pytest.mark.parametrize(("workers", "outcome", "code"), [(1, "failed", 1), (2, "succeeded", 0)])
def test_losing_a_worker_is_fatal_only_below_r(
    tmp_path: Path, workers: int, outcome: str, code: int
) -> None:
    parsed = job(workers, 2, runPolicy={"restartPolicy": "Never"})
    exit_code, summary, out = supervise(tmp_path, parsed, {"worker-0": [1]})
    assert (exit_code, summary["outcome"]) == (code, outcome), out
    if outcome == "failed":
        assert "only 1 of the 2 replicas" in summary["message"]


def test_backoff_limit_is_spent_across_replicas(tmp_path: Path) -> None:
    parsed = job(1, 2, runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 2})
    code, summary, _ = supervise(tmp_path, parsed, {"chief-0": [1, 1, 1]})
    assert code == 1
    assert summary["exit_codes"]["chief-0"] == [1, 1, 1]
    assert summary["restarts"]["chief-0"] == 2


# --- incarnations ------------------------------------------------------------------------


def incarnations(tmp_path: Path) -> dict[str, list[int]]:
    """Per replica, the SYNCREPLICAS_INCARNATION each of its processes was started with."""
    return {
        path.name.removesuffix(".incarnations"): [int(x) for x in path.read_text().split()]
        for path in sorted((tmp_path / "shared").glob("*.incarnations"))
    }


def logged_incarnations(tmp_path: Path) -> dict[str, list[int]]:
    """The same, as the runner wrote them at the start of each process in its log."""
    return {
        path.stem: [int(x) for x in re.findall(r"^--- syncreplicas run: start of .*"
                                               r"incarnation (\d+)\) ---$",
                                               path.read_text(), re.MULTILINE)]
        for path in sorted((tmp_path / "work" / "logs").glob("*.log"))
    }


def increasing(values: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


def test_a_restarted_replica_gets_a_larger_incarnation(tmp_path: Path) -> None:
    code, _, out = supervise(tmp_path, job(2, 2), {"worker-1": [1]})
    assert code == 0, out
    seen = incarnations(tmp_path)
    assert {name: len(values) for name, values in seen.items()} == {
        "ps-0": 1, "chief-0": 1, "worker-0": 1, "worker-1": 2}
    assert increasing(seen["worker-1"]), seen
    # The restart came a second later: the wall clock in ms, not merely one more.
    assert seen["worker-1"][1] - seen["worker-1"][0] >= 1000, seen
    assert logged_incarnations(tmp_path) == seen


def test_restart_job_gives_every_replica_a_larger_incarnation(tmp_path: Path) -> None:
    code, _, out = supervise(tmp_path, job(1, 2, chiefRestartPolicy="RestartJob"),
                             {"chief-0": [75]})
    assert code == 0, out
    seen = incarnations(tmp_path)
    assert sorted(seen) == ["chief-0", "ps-0", "worker-0"]
    assert all(len(values) == 2 and increasing(values) for values in seen.values()), seen


def test_a_clock_that_stands_still_still_gives_larger_incarnations(tmp_path: Path) -> None:
    """Never lower than one above the replica's last, whatever the wall clock says."""
    code, _, out = supervise(tmp_path, job(1, 2), {"worker-0": [1]}, clock_ms=lambda: 1000)
    assert code == 0, out
    seen = incarnations(tmp_path)
    assert seen["worker-0"] == [1000, 1001]
    assert seen["chief-0"] == seen["ps-0"] == [1000]
