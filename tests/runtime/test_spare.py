"""Spare pods (syncreplicas_runtime.launch.spare): ``python -m syncreplicas_runtime`` with
TensorFlow imported, waiting on the metrics port until handed a replica's identity.

A spare answers /readyz, /healthz and /metrics, refuses a wrong secret (401) and a variable
an assignment may not set (400, naming it) and stays a spare, and stops at SIGTERM with
exit 0 and a termination message that says it was one; wrong spare variables exit 64 at
once. Handed worker 0's environment, with warm restarts, it trains as that worker of a
running job in the same process: its replica is forked and forked again when killed, the
secret is in none of them; a second assignment is not taken; killed whole (a container
restart), it comes back as the worker from its assignment file, without serving as a
spare, and the job reaches its final step. A spare that took a replica over skips the model
check its peers made already; a model error still ends it with MODEL, naming the error.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from syncreplicas_runtime.foundation import exitcodes

from tests.runtime.rtutil import StepDelay, eventually, linear_job, runtime_env
from tests.support.groups import children_of, stop_group
from tests.support.tfcluster import free_port, metric_value, start_cluster

pytestmark = pytest.mark.slow

TOKEN = "5eed" * 16
MAX_STEPS = 250
IDENTITY = ("TF_CONFIG", "SYNCREPLICAS_JOB", "SYNCREPLICAS_INCARNATION",
            "SYNCREPLICAS_WARM_RESTARTS", "SYNCREPLICAS_WARM_RESTART_LIMIT",
            "SYNCREPLICAS_WARM_RESTART_STATE")  # fmt: skip



def spare_env(tmp: Path, port: int, name: str = "spare") -> dict[str, str]:
    """A spare pod's environment: the secret, the file, the port; no replica's variables."""
    env = {k: v for k, v in os.environ.items() if k not in IDENTITY}
    env.update(runtime_env())
    env.update({"PYTHONUNBUFFERED": "1",
                "SYNCREPLICAS_SPARE_TOKEN": TOKEN,
                "SYNCREPLICAS_SPARE_STATE": str(tmp / f"{name}-assignment.json"),
                "SYNCREPLICAS_METRICS_PORT": str(port),
                "SYNCREPLICAS_JOB_NAME": "spares",
                "SYNCREPLICAS_TERMINATION_LOG": str(tmp / f"{name}-termination-log")})  # fmt: skip
    return env


def start_spare(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "syncreplicas_runtime"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str] | None:  # fmt: skip
    """(status, body) of one request; None when nothing listens (or it hung up)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    except (ConnectionError, http.client.RemoteDisconnected):
        return None
    finally:
        conn.close()


def assign(port: int, env: dict[str, str], token: str | None = TOKEN) -> tuple[int, str] | None:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return request(port, "POST", "/spare/assign", json.dumps({"env": env}).encode(), headers)


def ready_spare(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    def ready() -> bool:
        assert proc.poll() is None, log.read_text()
        return request(port, "GET", "/readyz") == (200, "spare\n")

    assert eventually(ready, 90), log.read_text()


def test_bad_spare_variables_exit_64_at_once(tmp_path: Path) -> None:
    env = {**spare_env(tmp_path, free_port()), "SYNCREPLICAS_SPARE_TOKEN": "short"}
    done = subprocess.run([sys.executable, "-m", "syncreplicas_runtime"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == exitcodes.CONFIG, done.stderr
    assert "syncreplicas: CONFIG (64): bad configuration: SYNCREPLICAS_SPARE_TOKEN: " in done.stderr


def test_a_spare_answers_refuses_and_stops_at_sigterm(tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "spare.log"
    proc = start_spare(spare_env(tmp_path, port), log)
    try:
        ready_spare(port, proc, log)
        assert request(port, "GET", "/healthz") == (200, "ok\n")
        assert request(port, "GET", "/spare/assign") == (405, "POST only\n")
        assert request(port, "GET", "/nothing") == (404, "not found\n")
        status, text = request(port, "GET", "/metrics") or (0, "")
        assert status == 200 and metric_value(text, "syncreplicas_spare") == 1
        assert "# HELP syncreplicas_spare A spare pod waiting for a replica's identity" in text
        good = {"TF_CONFIG": "{}", "SYNCREPLICAS_JOB": "{}", "SYNCREPLICAS_INCARNATION": "1"}
        assert assign(port, good, token=None) == (401, "missing or wrong bearer token\n")
        assert assign(port, good, token="0" * 64) == (401, "missing or wrong bearer token\n")
        for name in ("LD_PRELOAD", "PYTHONPATH", "SYNCREPLICAS_SPARE_TOKEN"):
            status, text = assign(port, {**good, name: "/tmp/x"}) or (0, "")
            assert status == 400 and text.startswith(f"body.env.{name}: not allowed"), text
        missing = {k: v for k, v in good.items() if k != "SYNCREPLICAS_INCARNATION"}
        assert assign(port, missing) == (400, "body.env.SYNCREPLICAS_INCARNATION: is missing\n")
        huge = request(port, "POST", "/spare/assign", b"{}",
                       {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(2 << 20)})
        assert huge is None or huge[0] == 413
        assert request(port, "GET", "/readyz") == (200, "spare\n")  # still a spare
        assert not (tmp_path / "spare-assignment.json").exists()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        stop_group(proc, 10)
    message = (tmp_path / "spare-termination-log").read_text()
    assert message == ("syncreplicas: OK (0): spare pod stopped by SIGTERM before it was "
                       "assigned a replica's identity\n")
    assert "syncreplicas: spare ready in " in log.read_text()


def test_a_spare_becomes_a_worker_of_a_running_job_and_stays_it(tmp_path: Path) -> None:
    delay = StepDelay(tmp_path / "delay", 150)  # time to look before training ends
    job = linear_job(training__maxSteps=MAX_STEPS)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env(),
                       start=False) as cluster:  # fmt: skip
        worker = cluster.replica("worker", 0)
        port, log = worker.metrics_port, tmp_path / "spare-0.log"
        env = spare_env(tmp_path, port)
        proc = start_spare(env, log)
        try:
            cluster.start("ps", 0)
            cluster.start("chief", 0)
            ready_spare(port, proc, log)
            incarnation = int(time.time() * 1000)
            identity = {"TF_CONFIG": worker.env["TF_CONFIG"],
                        "SYNCREPLICAS_JOB": worker.env["SYNCREPLICAS_JOB"],
                        "SYNCREPLICAS_INCARNATION": str(incarnation),
                        "SYNCREPLICAS_WARM_RESTARTS": "OnFailure",
                        "SYNCREPLICAS_WARM_RESTART_LIMIT": "6",
                        "SYNCREPLICAS_WARM_RESTART_STATE": str(tmp_path / "restarts"),
                        **delay.env}  # fmt: skip
            assert assign(port, identity) == (200, '{"assigned": "worker-0"}\n')
            assert (again := assign(port, identity)) is None or again[0] == 409, again
            kept = json.loads((tmp_path / "spare-assignment.json").read_text())
            assert kept == {"assigned": "worker-0", "env": identity}

            def trained(steps: int, restarts: int) -> Callable[[], bool]:
                def probe() -> bool:
                    text = cluster.try_metrics_text("worker", 0) or ""
                    return ((metric_value(text, "syncreplicas_local_step") or 0) >= steps
                            and metric_value(text, "syncreplicas_process_restarts") == restarts)

                return probe

            assert eventually(trained(3, 0), 90), cluster.logs() + log.read_text()
            (replica,) = children_of(proc.pid)  # forked: supervised by launch/supervisor.py
            assert TOKEN.encode() not in Path(f"/proc/{replica}/environ").read_bytes()
            assert assign(port, identity) == (409, "already assigned: this process is a "
                                              "replica\n")  # fmt: skip
            os.kill(replica, signal.SIGKILL)
            assert eventually(lambda: [c for c in children_of(proc.pid) if c != replica], 10)
            assert eventually(trained(3, 1), 60), log.read_text()

            # The container restarts: back as worker 0 from the file, never a spare again.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc = start_spare(env, log)
            assert eventually(trained(3, 1), 90), log.read_text()
            assert request(port, "GET", "/readyz") != (200, "spare\n")
            delay.set(0)
            assert cluster.wait_one("chief", 0, 60) == 0, cluster.logs()
            assert proc.wait(timeout=60) == 0, log.read_text()
            assert cluster.wait_one("ps", 0, 60) == 0, cluster.logs()
        finally:
            stop_group(proc, 10)
    text = log.read_text()
    assert text.count("syncreplicas: spare ready in ") == 1, text
    assert text.count(f"syncreplicas: spare assigned: worker-0 (incarnation {incarnation})") == 2
    assert (f"spare assigned: worker-0 (incarnation {incarnation}) again, from "
            f"{tmp_path / 'spare-assignment.json'} (its container restarted)") in text
    assert "warm restart 1 of 6 in its container" in text
    assert f"finished at global step {MAX_STEPS}" in cluster.log("chief", 0)
    message = (tmp_path / "spare-termination-log").read_text().splitlines()
    assert message[0].startswith("syncreplicas: OK (0): finished at global step ")
    assert message[-1] == "processRestarts=1"


def test_a_spare_skips_the_model_check_and_a_model_error_still_exits_model(
    tmp_path: Path,
) -> None:
    job = linear_job(model__entrypoint="tests.runtime.brokenmodel:build")
    with start_cluster(job, workers=0, ps=1, workdir=tmp_path, env=runtime_env(),
                       start=False) as cluster:  # fmt: skip
        ps = cluster.replica("ps", 0)
        port, log = cluster.unique_port(), tmp_path / "spare-ps.log"
        proc = start_spare(spare_env(tmp_path, port), log)
        try:
            ready_spare(port, proc, log)
            identity = {"TF_CONFIG": ps.env["TF_CONFIG"],
                        "SYNCREPLICAS_JOB": ps.env["SYNCREPLICAS_JOB"],
                        "SYNCREPLICAS_INCARNATION": str(int(time.time() * 1000))}  # fmt: skip
            assert assign(port, identity) == (200, '{"assigned": "ps-0"}\n')
            assert proc.wait(timeout=120) == exitcodes.MODEL, log.read_text()
        finally:
            stop_group(proc, 10)
    text = log.read_text()
    # Its server came up before the model was built: the check before it was skipped.
    assert text.index("ps-0: started: ") < text.index("syncreplicas: MODEL (65): model "), text
    assert "must return a mapping" in text and "Traceback" not in text, text
